"""The topics policy's state (seed 004) and what derives from it: compressed store, similarity, decay, stats, rows."""

from __future__ import annotations

import base64
import gzip
import math
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from memfold.core.events import Fact
from memfold.core.settings import TopicsSettings
from memfold.projections.fold_text import retracts, without_bare_copies
from memfold.projections.policies.state_codec import FrozenState

DAY = 86400.0


class MessageRef(FrozenState, kw_only=True):
    """A message as a topic keeps it: a reference (the content lives in the ``messages`` projection).

    Fields are in alphabetical order so that its JSON has sorted keys: the
    compressed store is encoded straight from the structs.
    """

    answers: str | None = None  # the tool_call id a tool message answers
    calls: tuple[str, ...] = ()  # tool_call ids an assistant message asked for
    index: int
    role: str
    timestamp: float  # unix seconds, as the seed's MessageEntry


_REFS_ENCODER = msgspec.json.Encoder()
_REFS_DECODER = msgspec.json.Decoder(list[MessageRef])


def compress_refs(refs: list[MessageRef] | tuple[MessageRef, ...]) -> str:
    """Return ``refs`` as the seed's compressed string: JSON (sorted keys) → gzip (mtime 0) → base64."""
    data = _REFS_ENCODER.encode(list(refs))
    return base64.b64encode(gzip.compress(data, compresslevel=9, mtime=0)).decode("ascii")


def decompress_refs(blob: str | None) -> list[MessageRef]:
    """Return the references stored by :func:`compress_refs` (empty for None)."""
    if not blob:
        return []
    return _REFS_DECODER.decode(gzip.decompress(base64.b64decode(blob)))


def cosine(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Return the cosine similarity of two vectors; 0.0 for a zero vector or mismatched dimensions."""
    if len(a) != len(b) or not a:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / (na * nb)


def half_life_seconds(access_count: int, settings: TopicsSettings) -> float:
    """Return the seed's half-life: base, doubled every ``access_threshold_for_lt`` accesses, capped."""
    doublings = min(access_count // settings.access_threshold_for_lt, 64)
    return min(settings.base_half_life_seconds * 2.0**doublings, settings.max_half_life_seconds)


def memory_type(access_count: int, settings: TopicsSettings) -> str:
    """Return "long-term" from ``access_threshold_for_lt`` accesses on, else "short-term"."""
    return "long-term" if access_count >= settings.access_threshold_for_lt else "short-term"


def compaction_cut(refs: tuple[MessageRef, ...], keep: int, open_calls: dict[str, str] | None = None) -> int:
    """Return how many of ``refs`` (oldest first) to compact: all but ``keep``, never splitting a tool group.

    A tool-calling assistant message whose results fall on the kept side, or
    whose calls are still open, moves to the kept side with its results.
    """
    open_calls = open_calls or {}
    answered_at = {r.answers: i for i, r in enumerate(refs) if r.answers}
    cut = max(0, len(refs) - keep)
    changed = True
    while changed and cut > 0:
        changed = False
        for i, ref in enumerate(refs[:cut]):
            if ref.calls and (
                any(c in open_calls for c in ref.calls) or max(answered_at.get(c, -1) for c in ref.calls) >= cut
            ):
                cut, changed = i, True
                break
    return cut


def priority(topic: Topic, now: datetime, settings: TopicsSettings) -> float:
    """Return ``importance × 0.5^(seconds since last_active_at / half_life)`` (age never negative)."""
    inactive = max(0.0, (now - topic.last_active_at).total_seconds())
    return topic.importance * 0.5 ** (inactive / half_life_seconds(topic.access_count, settings))


# --------------------------------------------------------------------------- state


class Topic(FrozenState, kw_only=True):
    """One topic; after eviction a tombstone (no embedding, no messages) kept for the ``topics`` table."""

    topic_id: str
    title: str
    created_at: datetime
    last_active_at: datetime
    importance: float
    embedding: tuple[float, ...] | None = None
    access_count: int = 0
    message_count: int = 0
    messages: tuple[MessageRef, ...] = ()
    compressed: str | None = None  # base64(gzip(JSON [MessageRef…]))
    compressed_count: int = 0
    summary_id: str | None = None
    summary_text: str | None = None  # without its key facts (:func:`topic_facts` shows those), stripped once
    summary_tokens: int = 0  # its tokens, counted once
    facts: tuple[Fact, ...] = ()  # the key facts its summary lists
    processing_request_id: str | None = None
    processing_indices: tuple[int, ...] = ()
    failed_request_id: str | None = None
    evicted_at: datetime | None = None
    evicted_priority: float | None = None

    @property
    def evicted(self) -> bool:
        """True once the topic has been evicted (a tombstone)."""
        return self.evicted_at is not None


class PendingAudit(FrozenState, kw_only=True):
    """A topic event decided by the last evolve and not yet emitted by ``decide``."""

    type: Literal["TopicAssigned", "TopicCompacted", "TopicEvicted"]
    event_id: str
    occurred_at: datetime
    causation_id: str | None = None
    payload: dict[str, Any]


class State(FrozenState, kw_only=True):
    """Per-conversation fold state; per-message data is bounded by topics × active messages."""

    tenant_id: str
    conversation_id: str
    deleted: bool = False
    now: datetime | None = None
    last_index: int = -1
    active_topic_id: str | None = None
    topics: tuple[Topic, ...] = ()  # creation order, evicted ones included
    unassigned: tuple[MessageRef, ...] = ()  # messages before the first user message
    open_calls: dict[str, str] = {}  # tool_call id → topic id, this round
    recent_requests: tuple[str, ...] = ()
    # What the user took back ("please forget my phone number"): (key stem, message index), the last
    # MAX_RETRACTIONS. A topic's summary reads only its own messages, so a retraction said in another
    # topic removes the fact from the context here (topic_facts).
    retractions: tuple[tuple[str, int], ...] = ()
    outbox: tuple[PendingAudit, ...] = ()
    # The settings last folded with, so rows and stats need no context.
    settings: TopicsSettings | None = None


# --------------------------------------------------------------------------- reads and rows


def stated_times(topic: Topic) -> dict[int, datetime]:
    """Return message index -> when it was said, for every message of ``topic`` (active and compressed)."""
    refs = (*topic.messages, *decompress_refs(topic.compressed))
    return {r.index: datetime.fromtimestamp(r.timestamp, UTC) for r in refs}


def topic_facts(state: State) -> tuple[Fact, ...]:
    """Return the key facts of every live topic, one current value per key: the one stated last.

    Later stated wins (``stated_in``; a fact with no message index counts as
    stated before every indexed one, and on a tie the topic begun later wins);
    the value another topic stated last before it comes along marked
    ``superseded_by`` it, so a context reads "- phone: new (was: old)": one
    old value, not every one, since topics that share a generic key ("date",
    "amount") made lines of eight "was:" dates on BEAM. Values a topic's own
    summary replaced are left out (the ``facts`` table keeps that lineage):
    with them BEAM lost 0.45 points at 2,000 tokens. An evicted topic's
    facts go with it, as the rest of its memory does (seed 004's decay), and
    a fact the user took back later, in any topic, goes too. A bare value
    (``date_150``, one nothing named) that another line holds is left out,
    and so are all but the newest ``BARE_KEEP`` bare values of each kind.
    """
    current: dict[str, tuple[tuple[int, int], Fact]] = {}
    values: dict[str, list[Fact]] = {}
    for position, topic in enumerate(state.topics):
        if topic.evicted:
            continue
        for f in topic.facts:
            if not f.current:
                continue  # a value the topic's own summary replaced: the facts table keeps that lineage
            if taken_back(f, state.retractions):
                continue
            values.setdefault(f.key, []).append(f)
            rank = (_rank(f), position)
            if f.key not in current or rank >= current[f.key][0]:
                current[f.key] = (rank, f)
    out: list[Fact] = []
    for key, (_, winner) in current.items():
        older = [f for f in values[key] if f.value != winner.value]
        if older:
            out.append(max(older, key=_rank).model_copy(update={"superseded_by": winner.value}))
        out.append(winner)
    return tuple(without_bare_copies(out))


def taken_back(f: Fact, retractions: tuple[tuple[str, int], ...]) -> bool:
    """True when the user took ``f`` back after stating it (a fact with no message index counts as before).

    ``retractions`` is topics' ``State.retractions``: (key stem, message index) pairs.
    """
    return any(retracts(stem, f.key) and (f.stated_in is None or f.stated_in < index) for stem, index in retractions)


def _rank(f: Fact) -> int:
    return f.stated_in if f.stated_in is not None else -1


def find_topic(state: State, topic_id: str | None) -> tuple[int, Topic] | tuple[None, None]:
    """Return ``(position, topic)`` of ``topic_id`` in ``state.topics`` (evicted ones too), or ``(None, None)``."""
    if topic_id is not None:
        for i, t in enumerate(state.topics):
            if t.topic_id == topic_id:
                return i, t
    return None, None


def _stats(topic: Topic, now: datetime, settings: TopicsSettings) -> dict[str, Any]:
    return {
        "topic_id": topic.topic_id,
        "topic_title": topic.title,
        "active_messages": len(topic.messages),
        "compressed_messages": topic.compressed_count,
        "total_messages": len(topic.messages) + topic.compressed_count,
        "has_summary": topic.summary_text is not None,
        "importance_score": topic.importance,
        "access_count": topic.access_count,
        "memory_type": memory_type(topic.access_count, settings),
        "half_life_days": half_life_seconds(topic.access_count, settings) / DAY,
        "age_seconds": int(max(0.0, (now - topic.created_at).total_seconds())),
        "inactive_seconds": int(max(0.0, (now - topic.last_active_at).total_seconds())),
    }


def get_topic_stats(
    state: State,
    now: datetime | None = None,
    *,
    settings: TopicsSettings | None = None,
    topic_id: str | None = None,
) -> dict[str, Any]:
    """Return the seed's stats of the active topic (or ``topic_id``) at ``now`` (default: the state's now).

    Exactly the seed's fields; an empty dict when there is no such live topic.
    ``settings`` defaults to the ones the state was last folded with.
    """
    settings = settings or state.settings or TopicsSettings()
    _, topic = find_topic(state, topic_id or state.active_topic_id)
    if topic is None or topic.evicted:
        return {}
    return _stats(topic, now or state.now or topic.last_active_at, settings)


def topic_history(state: State, topic_id: str | None = None, *, include_compressed: bool = True) -> list[int]:
    """Return the message indices of a topic (default: the active one), oldest first."""
    _, topic = find_topic(state, topic_id or state.active_topic_id)
    if topic is None:
        return []
    refs = list(topic.messages) + (decompress_refs(topic.compressed) if include_compressed else [])
    return sorted(r.index for r in refs)


def topic_rows(state: State, settings: TopicsSettings | None = None) -> list[dict[str, Any]]:
    """Return the ``topics`` table for this conversation (evicted tombstones included), JSON-ready.

    ``priority`` is computed at the state's ``now``; an evicted topic keeps the
    priority it was evicted with. A deleted conversation has no rows.
    """
    if state.deleted:
        return []
    settings = settings or state.settings or TopicsSettings()
    out = []
    for t in state.topics:
        now = state.now or t.last_active_at
        out.append(
            {
                "topic_id": t.topic_id,
                "title": t.title,
                "message_count": t.message_count,
                "active_count": len(t.messages),
                "compressed_count": t.compressed_count,
                "access_count": t.access_count,
                "importance": t.importance,
                "half_life_days": half_life_seconds(t.access_count, settings) / DAY,
                "memory_type": memory_type(t.access_count, settings),
                "priority": t.evicted_priority if t.evicted else round(priority(t, now, settings), 12),
                "has_summary": t.summary_text is not None,
                "summary_id": t.summary_id,
                "created_at": t.created_at.isoformat(),
                "last_active_at": t.last_active_at.isoformat(),
                "active": t.topic_id == state.active_topic_id,
                "evicted": t.evicted,
                "evicted_at": t.evicted_at.isoformat() if t.evicted_at else None,
            }
        )
    return out
