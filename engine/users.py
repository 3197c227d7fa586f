"""The user scope of the engine: who owns a conversation, and the reads, search, audit and erasure of a user's memory.

A user's memory is folded by the projector (``user_facts`` and ``user_notes``,
:mod:`memfold.projections.user_memory`); this module holds what the facade
does with it. :class:`MemoryEngine` methods delegate here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from memfold.core.errors import UnknownUserError, UserConflictError, ValidationError
from memfold.core.events import MessageAppended
from memfold.core.ports import ContextMessage
from memfold.projections.user_context import user_block
from memfold.projections.user_memory import fold_user_facts, stated_before

if TYPE_CHECKING:
    from memfold.engine.engine import MemoryEngine

# Hits per other conversation ranked for a context, and in all: a user's 50 conversations
# each bring their best few, merged by BM25 score.
RECALL_PER_CONVERSATION = 6
RECALL_LIMIT = 40


def check_user_id(user_id: Any) -> str:
    """Return ``user_id`` if it is a valid user id, else raise :class:`ValidationError` (the append rule)."""
    if not isinstance(user_id, str) or not user_id.strip() or "/" in user_id or len(user_id) > 200:
        raise ValidationError("user_id must be a non-empty string of at most 200 characters without '/'",
                              field="user_id")
    return user_id


def check_owners(engine: MemoryEngine, events: Sequence[MessageAppended], lines: Sequence[int] | None = None) -> None:
    """Raise :class:`UserConflictError` when a message names another user than its conversation's.

    The conversation's user is the first named: earlier in the batch, by an
    append of this process not folded yet, or in the projection. A message
    naming no user is always accepted (it belongs to the conversation's
    user, if any). A client role with no projection knows only what it
    appended itself; a conflict that slips past (two writers at once) is
    settled by the fold: the first user named keeps the conversation.
    """
    named: dict[tuple[str, str], str] = {}
    for i, event in enumerate(events):
        user = event.payload.user_id
        if user is None:
            continue
        key = (event.tenant_id, event.conversation_id)
        owner = named.get(key) or engine.appended_users.get(key)
        if owner is None:
            owner = engine.projector.users.owner(*key) if engine.store is not None else \
                engine.owners(*key) if engine.owners is not None else None
        if owner is not None and owner != user:
            raise UserConflictError(
                f"conversation {event.conversation_id!r} belongs to user {owner!r}; this message names {user!r}. "
                "A conversation belongs to one user: append it to a conversation of that user",
                field="user_id", line=lines[i] if lines is not None else i + 1 if len(events) > 1 else None,
                user_id=user, owner=owner,
            )
        named.setdefault(key, user)


def appended(engine: MemoryEngine, events: Sequence[MessageAppended]) -> None:
    """Remember the users named by ``events``, now in the log (until the projection holds them)."""
    for event in events:
        if event.payload.user_id is not None:
            engine.appended_users.setdefault((event.tenant_id, event.conversation_id), event.payload.user_id)


class UserPart(msgspec.Struct):
    """The user part of one context read: what the user's memory and recall hold, rendered to a room on demand."""

    memory: Any
    recalled: list[tuple[str, Any]]
    conversation_id: str
    policy: str
    room: int
    query: str | None
    count_tokens: Any

    def render(self, room: int | None = None) -> list[ContextMessage]:
        """Return the user messages within ``room`` tokens (default: the share :func:`user_part` gave)."""
        return user_block(self.memory, self.recalled, conversation_id=self.conversation_id, policy=self.policy,
                          room=self.room if room is None else room, count_tokens=self.count_tokens, query=self.query)


def user_part(
    engine: MemoryEngine, user_id: str, conversation_id: str, tenant_id: str, policy: str, budget: int,
    own_fixed: int, query: str | None,
) -> UserPart | None:
    """Return the user part of a context, or None when it has no room.

    Its room: ``context.user_share`` of ``budget``, and never what the
    conversation's fixed part (system prompt, its memory, the current
    message: ``own_fixed``) needs. What the conversation's own context then
    leaves unused may be given to it too (:meth:`MemoryEngine.context`).
    """
    room = min(int(budget * engine.settings.context.user_share), budget - own_fixed)
    if not engine.projector.users.holds(tenant_id, conversation_id):
        room = budget - own_fixed  # a conversation not started yet has nothing of its own to keep room for
    if room <= 0:
        return None
    memory = engine.projector.users.memory(tenant_id, user_id)
    # Enough hits to fill the whole budget (what the conversation leaves unused may come to the user part).
    limit = max(RECALL_LIMIT, budget // 100)
    recalled = recall(engine, tenant_id, memory.conversations, conversation_id, query,
                      per_conversation=max(RECALL_PER_CONVERSATION, limit // 4), limit=limit) if query else []
    return UserPart(memory, recalled, conversation_id, policy, room, query, engine._count_cached)


def recall(
    engine: MemoryEngine, tenant_id: str, conversations: Sequence[str], conversation_id: str | None, query: str,
    per_conversation: int = RECALL_PER_CONVERSATION, limit: int = RECALL_LIMIT,
) -> list[tuple[str, Any]]:
    """Return (conversation id, message) of the messages best matching ``query`` in ``conversations``, best first.

    BM25 per conversation (the recall index each conversation keeps), merged
    by score; ties go to the later conversation id and message.
    ``conversation_id`` (the one being read) is left out.
    """
    search = engine.projector.search
    keys = [(tenant_id, other) for other in conversations if other != conversation_id]
    hits = [(h.score, key[1], h.idx) for key, h in search.rank_many(keys, query, per_conversation)]
    hits.sort(key=lambda h: (-h[0], h[1], h[2]))
    hits = hits[:limit]
    wanted: dict[str, list[int]] = {}
    for _, other, idx in hits:
        wanted.setdefault(other, []).append(idx)
    found = {(other, m.index): m for other, idxs in wanted.items()
             for m in search.messages_at((tenant_id, other), sorted(idxs))}
    return [(other, found[(other, idx)]) for _, other, idx in hits if (other, idx) in found]


def with_user_part(messages: list[ContextMessage], mine: list[ContextMessage]) -> list[ContextMessage]:
    """Return ``messages`` with the user messages ``mine`` placed right after the conversation's own memory."""
    if not mine:
        return messages
    at = 0
    while at < len(messages) and (messages[at].kind == "system_prompt" or messages[at].kind.startswith("memory:")):
        at += 1
    return [*messages[:at], *mine, *messages[at:]]


def conversations_of(engine: MemoryEngine, user_id: str, tenant_id: str) -> list[dict[str, Any]]:
    """Return the user's live conversations or raise :class:`UnknownUserError`."""
    rows = engine.store.user_conversations(tenant_id, user_id)
    if not rows:
        raise UnknownUserError(f"no conversation of tenant {tenant_id!r} belongs to user {user_id!r}",
                               field="user_id")
    return rows


def memory(engine: MemoryEngine, user_id: str, tenant_id: str, policy: str, as_of: datetime | None) -> dict[str, Any]:
    """Return the user's memory: conversations, current facts (with origin), every statement, the notes
    (``summary``: each conversation's newest summary) and the user's own summary (``user_summary``, or None).

    ``as_of`` (a timezone-aware datetime): the facts as they stood then,
    folded from the statements made by then, and the newest user summary
    made by then (the notes are today's and are left out: they have no history).
    """
    conversations = conversations_of(engine, user_id, tenant_id)
    if as_of is None:
        statements = engine.store.user_facts(tenant_id, user_id, policy)
        notes = engine.store.user_notes(tenant_id, user_id, policy)
    else:
        if not isinstance(as_of, datetime) or as_of.tzinfo is None:
            raise ValidationError("as_of must be a timezone-aware datetime", field="as_of")
        stated = [f for f in stated_before(engine.store.stated_facts(tenant_id, user_id), as_of) if f.policy == policy]
        statements = fold_user_facts(tenant_id, user_id, stated)
        conversations = [c for c in conversations if c["first_at"] is not None and c["first_at"] <= as_of]
        notes = []
    found = engine.store.user_summaries(tenant_id, user_id, policy, as_of=as_of)
    return {
        "user_id": user_id, "tenant_id": tenant_id, "policy": policy,
        "as_of": as_of.isoformat() if as_of is not None else None,
        "conversations": conversations,
        "facts": [_fact(f) for f in statements if f["current"]],
        "statements": [_fact(f) for f in statements],
        "summary": [{"conversation_id": n["conversation_id"], "summary_id": n["summary_id"], "text": n["text"],
                     "at": n["at"]} for n in notes],
        "user_summary": _user_summary(found[0]) if found else None,
    }


def _user_summary(u: dict[str, Any]) -> dict[str, Any]:
    return {"summary_id": u["summary_id"], "text": u["text"], "conversation_id": u["conversation_id"],
            "covers": list(u["covers"] or ()), "covers_summaries": list(u["covers_summaries"] or ()),
            "produced_at": u["produced_at"], "summarizer": u["summarizer"], "model": u["model"]}


def audit(engine: MemoryEngine, user_id: str, tenant_id: str) -> dict[str, Any]:
    """Return how the user's memory evolved: which conversation taught each fact, when, and what replaced it."""
    conversations = conversations_of(engine, user_id, tenant_id)
    rows = engine.store.user_facts(tenant_id, user_id)
    by_id = {r["fact_id"]: r for r in rows}
    facts = []
    for r in rows:
        later = by_id.get(r["superseded_by"]) if r["superseded_by"] else None
        facts.append({**_fact(r), "policy": r["policy"],
                      "superseded_by_value": later["value"] if later is not None else None})
    return {"user_id": user_id, "tenant_id": tenant_id, "conversations": conversations, "facts": facts}


def search(engine: MemoryEngine, user_id: str, query: str, tenant_id: str, limit: int) -> list[dict[str, Any]]:
    """Return the messages of the user's conversations best matching ``query``, best first (BM25 merged by score)."""
    conversations = [c["conversation_id"] for c in conversations_of(engine, user_id, tenant_id)]
    return search_conversations(engine, conversations, query, tenant_id, limit)


def search_conversations(
    engine: MemoryEngine, conversations: Sequence[str], query: str, tenant_id: str, limit: int,
) -> list[dict[str, Any]]:
    """Return the messages of ``conversations`` best matching ``query``: BM25 per conversation, merged by score.

    Ties go to the earlier conversation id and message index. Each hit:
    conversation_id, index, role, content, occurred_at, score.
    """
    search = engine.projector.search
    ranked: dict[str, list[Any]] = {}
    for key, h in search.rank_many([(tenant_id, c) for c in conversations], query, limit):
        ranked.setdefault(key[1], []).append(h)
    scored = []
    for other, hits in ranked.items():
        found = {m.index: m for m in search.messages_at((tenant_id, other), sorted(h.idx for h in hits))}
        scored += [(h.score, other, found[h.idx]) for h in hits if h.idx in found]
    scored.sort(key=lambda h: (-h[0], h[1], h[2].index))
    return [{"conversation_id": c, "index": m.index, "role": m.role, "content": m.content,
             "occurred_at": m.occurred_at, "score": round(score, 4)} for score, c, m in scored[:limit]]


def _fact(r: dict[str, Any]) -> dict[str, Any]:
    return {"key": r["key"], "value": r["value"], "category": r["category"], "conversation_id": r["conversation_id"],
            "stated_in": r["stated_in"], "stated_at": r["stated_at"], "fact_id": r["fact_id"],
            "current": r["current"], "superseded_by": r["superseded_by"], "superseded_in": r["superseded_in"]}
