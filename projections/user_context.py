"""The user part of a context: a user's memory and what its other conversations said, within a share of the budget.

:func:`user_block` renders, from what the fold precomputed (the user's
current facts and the newest summary of each of its conversations) and the
messages recall found in the user's *other* conversations, at most two
system messages:

1. ``kind="memory:user"``: the user's current facts, each with the
   conversation and date it came from, then the user's summary (one line of
   each other conversation's newest summary, newest conversation first);
2. ``kind="user_recalled"``: the best-ranked messages of the user's other
   conversations, best first, each line marked ``[conversation · date]``.

Facts the current conversation stated itself are left out (its own memory
carries them). Everything is cut to ``room`` tokens: facts first, then the
summary lines, then recalled lines, each whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memfold.engine.ports import ContextMessage, MessageRecord
from memfold.engine.tokens import MESSAGE_OVERHEAD
from memfold.projections.excerpt import EXCERPT_OVER, EXCERPT_TOKENS, excerpt
from memfold.projections.retrieval import query_terms

USER_MEMORY_KIND = "memory:user"
USER_RECALLED_KIND = "user_recalled"
# A summary line of another conversation is cut to about this many characters: breadth over depth.
NOTE_CHARS = 600


@dataclass(frozen=True, slots=True)
class UserMemory:
    """What the fold keeps of a user for reads: its live conversations, current facts and notes (by policy)."""

    conversations: tuple[str, ...]
    facts: tuple[dict[str, Any], ...]
    notes: tuple[dict[str, Any], ...]


def _day(at: Any) -> str:
    return at.date().isoformat() if at is not None else "undated"


def fact_line(f: dict[str, Any]) -> str:
    """Return ``- key: value (conversation c-1, 2026-03-01)``."""
    return f"- {f['key']}: {f['value']} (conversation {f['conversation_id']}, {_day(f.get('stated_at'))})"


def user_block(
    memory: UserMemory,
    recalled: Sequence[tuple[str, MessageRecord]],
    *,
    conversation_id: str,
    policy: str,
    room: int,
    count_tokens: Callable[[str], int],
    query: str | None = None,
) -> list[ContextMessage]:
    """Return the user messages for a context of ``conversation_id``, costing at most ``room`` tokens (pure).

    ``recalled``: (conversation id, message) pairs from the user's other
    conversations, best first. A long recalled message comes as an excerpt
    of its passages holding the query's words.
    """
    out: list[ContextMessage] = []
    facts = [fact_line(f) for f in memory.facts
             if f["policy"] == policy and f["current"] and f["conversation_id"] != conversation_id]
    notes = [n for n in memory.notes if n["policy"] == policy and n["conversation_id"] != conversation_id]
    parts: list[str] = []
    used = MESSAGE_OVERHEAD
    for title, lines in (("What this user told you in other conversations:", facts),
                         ("Summary of this user's other conversations:", [_note_line(n) for n in notes])):
        cost = count_tokens(title) + 1
        kept = []
        for line in lines:
            c = count_tokens(line) + 1
            if used + cost + c > room:
                break
            kept.append(line)
            cost += c
        if kept:
            parts += [title, *kept]
            used += cost
    if parts:
        content = "\n".join(parts)
        out.append(ContextMessage("system", content, USER_MEMORY_KIND, count_tokens(content) + MESSAGE_OVERHEAD))
    left = room - sum(m.tokens for m in out)
    recalled_lines = _recalled_lines(recalled, left, count_tokens, query)
    if recalled_lines:
        content = "\n".join(["From this user's other conversations:", *recalled_lines])
        tokens = count_tokens(content) + MESSAGE_OVERHEAD
        while recalled_lines and tokens > left:  # line counts are estimates of the joined text's
            recalled_lines.pop()
            content = "\n".join(["From this user's other conversations:", *recalled_lines])
            tokens = count_tokens(content) + MESSAGE_OVERHEAD
        if recalled_lines:
            out.append(ContextMessage("system", content, USER_RECALLED_KIND, tokens))
    return out


def _note_line(n: dict[str, Any]) -> str:
    text = " ".join(n["text"].split())
    text = text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS].rsplit(" ", 1)[0] + " …"
    return f"- [conversation {n['conversation_id']}, {_day(n['at'])}] {text}"


def _recalled_lines(
    recalled: Sequence[tuple[str, MessageRecord]], room: int, count_tokens: Callable[[str], int], query: str | None,
) -> list[str]:
    room -= MESSAGE_OVERHEAD + count_tokens("From this user's other conversations:")
    terms = frozenset(query_terms(query or ""))
    lines: list[str] = []
    shown: set[str] = set()
    for conversation_id, m in recalled:
        if room <= 0:
            break
        text = m.content
        if m.tokens > EXCERPT_OVER:
            cut = excerpt(m, terms, count_tokens, shown, size=EXCERPT_TOKENS, dated=False)
            if cut is None:
                continue
            text = cut[0].content
            shown.update(cut[1])
        line = f"[conversation {conversation_id}, {_day(m.occurred_at)}] {m.role}: {' '.join(text.split())}"
        cost = count_tokens(line) + 1
        if cost > room:
            continue
        lines.append(line)
        room -= cost
    return lines


class UserReads:
    """What reads need of users, kept in memory between the batches that change it (a read asks no query then).

    ``owner`` caches each conversation's user; ``memory`` each user's
    :class:`UserMemory`. :meth:`committed` (a projector listener) keeps both
    exact: a batch that changed a user's memory or a conversation's user
    drops what it changed.
    """

    def __init__(self, store: Any, max_users: int = 4096):
        self.store = store
        self.max_users = max_users
        self._owners: dict[tuple[str, str], str | None] = {}
        self._memory: dict[tuple[str, str], UserMemory] = {}

    def owner(self, tenant_id: str, conversation_id: str) -> str | None:
        """Return the user of a conversation (None: no user, or not folded yet)."""
        key = (tenant_id, conversation_id)
        try:
            return self._owners[key]
        except KeyError:
            pass
        user = self.store.user_of(tenant_id, conversation_id)
        if len(self._owners) >= self.max_users * 16:
            self._owners.clear()
        self._owners[key] = user
        return user

    def memory(self, tenant_id: str, user_id: str) -> UserMemory:
        """Return the user's live conversations, facts (every statement, with lineage) and notes."""
        key = (tenant_id, user_id)
        found = self._memory.get(key)
        if found is not None:
            return found
        found = UserMemory(
            conversations=tuple(c["conversation_id"] for c in self.store.user_conversations(tenant_id, user_id)),
            facts=tuple(self.store.user_facts(tenant_id, user_id)),
            notes=tuple(self.store.user_notes(tenant_id, user_id)),
        )
        if len(self._memory) >= self.max_users:
            self._memory.pop(next(iter(self._memory)))
        self._memory[key] = found
        return found

    def committed(self, changes: Any) -> None:
        """Drop what ``changes`` made stale (called once they are durable)."""
        for key, row in changes.conversations.items():
            if key in self._owners and self._owners[key] != row.get("user_id"):
                self._owners[key] = row.get("user_id")
        for key in changes.deleted:
            self._owners.pop(key, None)
        for key in changes.users:
            self._memory.pop(key, None)

    def clear(self) -> None:
        self._owners.clear()
        self._memory.clear()
