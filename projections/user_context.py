"""The user part of a context: a user's memory and what its other conversations said, within a share of the budget.

:func:`user_block` renders, from what the fold precomputed (the user's
current facts, the user's summary and the newest summary of each of its
conversations) and the messages recall found in the user's *other*
conversations, at most two system messages:

1. ``kind="memory:user"``: the user's current facts, each with the
   conversation and date it came from, then the user's summary (the
   summarizer's summary across the user's conversations; until there is one,
   or when it is empty, one line of each other conversation's newest
   summary, newest conversation first);
2. ``kind="user_recalled"``: the best-ranked messages of the user's other
   conversations, best first, each line marked ``[conversation · date]``.

Facts the current conversation stated itself are left out (its own memory
carries them). Everything is cut to ``room`` tokens: facts first, then the
summary lines, then recalled lines, each whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from memfold.core.ports import ContextMessage, MessageRecord
from memfold.core.tokens import MESSAGE_OVERHEAD
from memfold.projections.excerpt import EXCERPT_OVER, EXCERPT_TOKENS, excerpt
from memfold.projections.retrieval import query_terms

USER_MEMORY_KIND = "memory:user"
USER_RECALLED_KIND = "user_recalled"
# A summary line of another conversation is cut to about this many characters: breadth over depth.
NOTE_CHARS = 600
# The user summary takes at most this share of the user part's room: the rest is for facts and for the
# messages recall finds for the question. BEAM, tuning half (chats 1-10), answer recall at 2,000 / 4,000
# tokens: no cap 71.6 / 83.6%, 20% 75.7 / 84.3%, 10% 76.4 / 85.1% (8,000: 89.4% each).
NOTE_SHARE = 0.1


class Line(msgspec.Struct, frozen=True):
    """One line of the user's memory message, rendered and counted once (when the user's memory is loaded)."""

    policy: str
    conversation_id: str
    text: str
    tokens: int  # of ``text`` and its newline


class UserMemory(msgspec.Struct, frozen=True):
    """What the fold keeps of a user for reads: its live conversations, current facts and notes, as counted lines."""

    conversations: tuple[str, ...]
    facts: tuple[Line, ...]  # current facts, by policy and key
    notes: tuple[Line, ...]  # each conversation's newest summary, newest conversation first
    summary: tuple[Line, ...] = ()  # the user's summary, per policy: its text's lines (conversation_id "")


def user_memory(
    conversations: Sequence[str], facts: Sequence[dict[str, Any]], notes: Sequence[dict[str, Any]],
    count_tokens: Callable[[str], int], summaries: Sequence[dict[str, Any]] = (),
) -> UserMemory:
    """Return the :class:`UserMemory` of store rows (``user_facts``, ``user_notes``, ``user_summaries``): every
    line rendered and counted."""
    def line(row: dict[str, Any], text: str, conversation_id: str | None = None) -> Line:
        cid = row["conversation_id"] if conversation_id is None else conversation_id
        return Line(row["policy"], cid, text, count_tokens(text) + 1)

    return UserMemory(
        tuple(conversations),
        tuple(line(f, fact_line(f)) for f in facts if f["current"]),
        tuple(line(n, _note_line(n)) for n in notes),
        # Not tied to one conversation (it stands for all of them, the one being read too): conversation "".
        tuple(line(u, text, "") for u in summaries for text in summary_lines(u.get("text"))),
    )


def summary_lines(text: str | None) -> list[str]:
    """Return the non-blank lines of a user summary's text, whitespace folded."""
    return [" ".join(t.split()) for t in (text or "").splitlines() if t.strip()]


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
    parts: list[str] = []
    used = MESSAGE_OVERHEAD
    # The user's summary when one was made (and said something) for this policy, else the notes.
    own = [line for line in memory.summary if line.policy == policy]
    summary = ("Summary of this user's conversations:", own) if own else \
        ("Summary of this user's other conversations:", memory.notes)
    for title, lines, cap in (("What this user told you in other conversations:", memory.facts, room),
                              (*summary, int(room * NOTE_SHARE))):
        cost = count_tokens(title) + 1
        kept = []
        for line in lines:
            if line.policy != policy or line.conversation_id == conversation_id:
                continue
            if used + cost + line.tokens > room or cost + line.tokens > cap:
                break
            kept.append(line.text)
            cost += line.tokens
        if kept:
            parts += [title, *kept]
            used += cost
    if parts:
        message = _fitted(parts, room, USER_MEMORY_KIND, count_tokens)
        if message is not None:
            out.append(message)
    left = room - sum(m.tokens for m in out)
    recalled_lines = _recalled_lines(recalled, left, count_tokens, query)
    if recalled_lines:
        message = _fitted(["From this user's other conversations:", *recalled_lines], left, USER_RECALLED_KIND,
                          count_tokens)
        if message is not None:
            out.append(message)
    return out


def _fitted(lines: list[str], room: int, kind: str, count_tokens: Callable[[str], int]) -> ContextMessage | None:
    """Return ``lines`` as one system message of at most ``room`` tokens, its last lines dropped if need be.

    Lines were counted one by one; the joined text is counted exactly here (a
    title left alone is no message: None).
    """
    lines = list(lines)
    while len(lines) > 1:
        content = "\n".join(lines)
        tokens = count_tokens(content) + MESSAGE_OVERHEAD
        if tokens <= room:
            return ContextMessage("system", content, kind, tokens)
        lines.pop()
        if lines[-1].endswith(":") and not lines[-1].startswith(("-", "[")):  # a title left without its lines
            lines.pop()
    return None


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

    def __init__(self, store: Any, count_tokens: Callable[[str], int], max_users: int = 4096):
        self.store = store
        self.count_tokens = count_tokens
        self.max_users = max_users
        self._owners: dict[tuple[str, str], tuple[bool, str | None]] = {}
        self._memory: dict[tuple[str, str], UserMemory] = {}
        # Bumped by each committed batch: a value read from the store while a batch committed is
        # returned but not kept (it may predate the batch), as read_cache.ColdReads does per conversation.
        self._version = 0

    def _owner(self, tenant_id: str, conversation_id: str) -> tuple[bool, str | None]:
        key = (tenant_id, conversation_id)
        found = self._owners.get(key)
        if found is None:
            version = self._version
            found = self.store.conversation_owner(tenant_id, conversation_id)
            if len(self._owners) >= self.max_users * 16:
                self._owners.clear()
            if version == self._version:
                self._owners[key] = found
        return found

    def owner(self, tenant_id: str, conversation_id: str) -> str | None:
        """Return the user of a conversation (None: no user, or not folded yet)."""
        return self._owner(tenant_id, conversation_id)[1]

    def warm(self, tenant_id: str, conversation_id: str) -> bool:
        """True when a read of the conversation's user part asks the store nothing (its user and memory are held)."""
        found = self._owners.get((tenant_id, conversation_id))
        return found is not None and (found[1] is None or (tenant_id, found[1]) in self._memory)

    def holds(self, tenant_id: str, conversation_id: str) -> bool:
        """True when the projection holds the conversation (a read of one not started yet asks the store nothing)."""
        return self._owner(tenant_id, conversation_id)[0]

    def memory(self, tenant_id: str, user_id: str) -> UserMemory:
        """Return the user's live conversations, facts (every statement, with lineage) and notes."""
        key = (tenant_id, user_id)
        found = self._memory.get(key)
        if found is not None:
            return found
        version = self._version
        found = user_memory(
            [c["conversation_id"] for c in self.store.user_conversations(tenant_id, user_id)],
            self.store.user_facts(tenant_id, user_id), self.store.user_notes(tenant_id, user_id), self.count_tokens,
            self.store.user_summaries(tenant_id, user_id),
        )
        if len(self._memory) >= self.max_users:
            self._memory.pop(next(iter(self._memory)))
        if version == self._version:
            self._memory[key] = found
        return found

    def committed(self, changes: Any) -> None:
        """Drop what ``changes`` made stale and learn the users of the conversations they wrote (once durable).

        A conversation just folded here is known without a store query, so
        the read after an append is computed from memory (``warm``).
        """
        self._version += 1
        if len(self._owners) + len(changes.conversations) >= self.max_users * 16:
            self._owners.clear()
        for key, row in changes.conversations.items():
            self._owners[key] = (True, row.get("user_id"))
        for key in changes.deleted:
            self._owners.pop(key, None)
        for key in changes.users:
            self._memory.pop(key, None)

    def clear(self) -> None:
        self._version += 1
        self._owners.clear()
        self._memory.clear()
