"""Seed 004: topics by embedding similarity, half-life decay by access count, compaction restored on access.

Assignment. Each user message is embedded (the embedding recorded on the
message, else the pure local ``ctx.embed``) and compared by cosine similarity
with every live topic's embedding. Above ``similarity_threshold`` it joins the
most similar topic (earliest on a tie): ``access_count += 1``. Otherwise it
opens a new topic titled with its first ``title_chars`` characters, whose
embedding stays the first message's (a running mean would drift toward
whatever the topic wandered into and make matching depend on message order
within the topic). Assistant and system messages join the active topic; a
``tool`` message joins the topic of the assistant message that called it, so
a tool call and its results are always in one topic. Every message that joins
a topic refreshes its ``last_active_at`` (the LRU timer).

Compaction. When the active topic holds more than ``max_messages_per_topic``
active messages it asks for a summary (kind "text", ``input_indices`` = its
active messages except the recent ``recent_message_keep``, moved back so no
tool group is split, base = its previous summary, at most
``summary_token_cap`` tokens). A topic the user has left is compacted whole,
whatever its size (not in the seed, which compacts only past the limit: it
follows the seed's "hot topics stay decompressed, cold topics compressed",
and gives every topic a summary of what was said in it; with
``memory_token_cap = 0`` nothing reads those summaries, so only the seed's
rule applies). The messages move to
the compressed store only when the summary arrives: a failed or empty summary
hides nothing, and the same input set is not requested again. The compressed
store follows the seed's format (JSON → gzip → base64, gzip ``mtime=0`` so it
is deterministic) but holds message *references* (index, role, timestamp,
tool-call ids), not contents: contents live in the ``messages`` projection,
which is what crypto-shredding will erase, so a copy here would outlive it.

Restore on access. A user message that matches a topic other than the active
one, and that topic has compressed messages, restores them (decompress, merge,
sort chronologically = by index, clear the store). Messages that continue the
active topic do not: a hot topic stays as compacted as it is.

Decay. ``priority = importance × 0.5^(inactive_seconds / half_life)`` with
``half_life = base × 2^(access_count // access_threshold_for_lt)``, capped at
``max_half_life_seconds``; ``now`` is the latest message timestamp or
``ClockTicked.now`` seen, so decay replays identically. When more than
``max_topics`` topics are live, every topic below ``eviction_priority`` is
evicted except the active one; an evicted topic stays as a small tombstone row.

Reading. The active topic's summary (``"Topic summary: …"``) and its active
messages verbatim, as in the seed; before them, one memory message with the
summaries of earlier topics, each under its dates, chosen by priority (the
decay below) up to ``memory_token_cap`` tokens and listed in the order the
topics began. First of all, one facts message: the key facts every live
topic's summary lists (its structured facts, else its ``Key facts:``
lines), the latest stated value per key with the value another topic
stated before it (:func:`topic_facts`, a ``key_facts`` message); the topic
texts then leave their key facts out. So a
context carries the facts of every live topic, and the sentences of every
topic it has room for, not just the one in progress. Not in the seed: an
earlier topic's key facts had been lost with its text once the memory cap
had no room for it.

Audit. ``decide`` also returns ``TopicAssigned`` (each user message),
``TopicCompacted`` and ``TopicEvicted`` events with deterministic ids; folding
them back (at once, or later from the log) is a no-op.
"""

from __future__ import annotations

from datetime import datetime
from functools import singledispatch
from typing import Any, ClassVar

from memfold.core.errors import ConfigError
from memfold.core.events import (
    EVENT_CLASSES,
    ClockTicked,
    ConversationDeleted,
    Event,
    SummaryFailed,
    SummaryProduced,
    SummaryRequested,
    TopicAssigned,
    TopicCompacted,
    TopicEvicted,
)
from memfold.core.ids import content_hash
from memfold.core.ports import ContextPlan, FoldContext, MemoryMessage, MessageRecord
from memfold.core.settings import TopicsSettings
from memfold.projections.fold import make_request
from memfold.projections.fold_text import retracted_stems
from memfold.projections.policies._skeleton import deleted_marker, key_facts_message, memory_message, settings_of
from memfold.projections.policies._topic_memory import (
    DAY,
    MessageRef,
    PendingAudit,
    State,
    Topic,
    compaction_cut,
    compress_refs,
    cosine,
    decompress_refs,
    find_topic,
    get_topic_stats,
    half_life_seconds,
    memory_type,
    priority,
    stated_times,
    topic_facts,
    topic_history,
    topic_rows,
)
from memfold.projections.policies.state_codec import replace
from memfold.projections.prompts import parse_key_facts, without_key_facts

__all__ = [
    "DAY", "MessageRef", "PendingAudit", "State", "Topic", "TopicsPolicy", "compaction_cut", "compress_refs",
    "cosine", "decompress_refs", "find_topic", "get_topic_stats", "half_life_seconds", "memory_type", "priority",
    "topic_facts", "topic_history", "topic_rows",
]

NAME = "topics"
SUMMARY_PREFIX = "Topic summary: "
EARLIER_TOPICS_HEADER = "Earlier topics of this conversation:"
# Request ids remembered to recognise one coming back from the log; a topic has
# at most one open request, so a short memory is plenty.
_RECENT_REQUESTS = 64
# Retractions a conversation's state keeps (the oldest go first): a bound, since state must stay small.
MAX_RETRACTIONS = 64


# --------------------------------------------------------------------------- helpers


def _topic_id(item: MessageRecord) -> str:
    return "topic-" + content_hash(item.tenant_id, item.conversation_id, item.index, item.content, length=20)


def _ref(item: MessageRecord) -> MessageRef:
    return MessageRef(
        index=item.index,
        role=item.role,
        timestamp=item.occurred_at.timestamp(),
        calls=tuple(tc.id for tc in item.tool_calls),
        answers=item.tool_call_id if item.role == "tool" else None,
    )


def _replace(state: State, i: int, topic: Topic, **update: Any) -> State:
    topics = list(state.topics)
    topics[i] = topic
    return replace(state, topics=tuple(topics), **update)


def _audit(state: State, type_: str, event_id: str, cause: Any, ctx: FoldContext, **payload: Any) -> State:
    entry = PendingAudit(
        type=type_,  # type: ignore[arg-type]
        event_id=event_id,
        occurred_at=cause.occurred_at,
        causation_id=cause.event_id,
        payload={"policy": NAME, "settings_hash": ctx.settings_hash, **payload},
    )
    return replace(state, outbox=(*state.outbox, entry))


# --------------------------------------------------------------------------- evolve


@singledispatch
def _apply(item: Any, state: State, ctx: FoldContext) -> State:
    return state  # SettingsChanged and anything new: nothing to do


def _embedding(item: MessageRecord, ctx: FoldContext) -> tuple[float, ...]:
    if item.embedding is not None:
        return tuple(item.embedding)
    if ctx.embed is None:
        raise ConfigError(
            "the topics policy needs an embedder: give the FoldContext an embed function "
            "(the local hash embedder) or record an embedding on every user message"
        )
    return tuple(ctx.embed(item.content))


def _user_message(item: MessageRecord, state: State, ctx: FoldContext) -> State:
    s: TopicsSettings = ctx.settings  # type: ignore[assignment]
    vector = _embedding(item, ctx)
    best_i, best_sim = None, -2.0
    for i, t in enumerate(state.topics):
        if t.evicted or t.embedding is None:
            continue
        sim = cosine(vector, t.embedding)
        if sim > best_sim:
            best_i, best_sim = i, sim
    ref = _ref(item)
    if best_i is not None and best_sim > s.similarity_threshold:
        topic = state.topics[best_i]
        messages = topic.messages
        update: dict[str, Any] = {}
        if topic.compressed and topic.topic_id != state.active_topic_id:
            # Restore on access: back in full until the next compaction.
            merged = sorted((*messages, *decompress_refs(topic.compressed)), key=lambda r: r.index)
            messages = tuple(merged)
            update.update(compressed=None, compressed_count=0)
        if item.importance is not None:
            update["importance"] = item.importance
        topic = replace(
            topic,
            **update,
            messages=(*messages, ref),
            message_count=topic.message_count + 1,
            access_count=topic.access_count + 1,
            last_active_at=max(topic.last_active_at, item.occurred_at),
        )
        state = _replace(state, best_i, topic)
        created = False
    else:
        topic = Topic(
            topic_id=_topic_id(item),
            title=item.content[: s.title_chars],
            created_at=item.occurred_at,
            last_active_at=item.occurred_at,
            importance=item.importance if item.importance is not None else s.default_importance,
            embedding=vector,
            messages=(*state.unassigned, ref),
            message_count=len(state.unassigned) + 1,
        )
        state = replace(state, topics=(*state.topics, topic), unassigned=())
        created = True
    state = replace(state, active_topic_id=topic.topic_id, open_calls={})
    return _audit(
        state,
        "TopicAssigned",
        "tas-" + content_hash(item.tenant_id, item.conversation_id, item.event_id, topic.topic_id, ctx.settings_hash),
        item,
        ctx,
        topic_id=topic.topic_id,
        message_index=item.index,
        similarity=None if best_i is None else best_sim,
        created=created,
        title=topic.title if created else None,
    )


def _other_message(item: MessageRecord, state: State) -> State:
    target = state.active_topic_id
    if item.role == "tool" and item.tool_call_id in state.open_calls:
        target = state.open_calls[item.tool_call_id]
    open_calls = dict(state.open_calls)
    if item.role == "tool" and item.tool_call_id:
        open_calls.pop(item.tool_call_id, None)
    i, topic = find_topic(state, target)
    if topic is None or topic.evicted:
        return replace(state, unassigned=(*state.unassigned, _ref(item)), open_calls=open_calls)
    for tc in item.tool_calls:
        open_calls[tc.id] = topic.topic_id
    topic = replace(
        topic,
        messages=(*topic.messages, _ref(item)),
        message_count=topic.message_count + 1,
        last_active_at=max(topic.last_active_at, item.occurred_at),
    )
    return _replace(state, i, topic, open_calls=open_calls)


def _evict(state: State, cause: Any, ctx: FoldContext) -> State:
    """Once more than ``max_topics`` are live, evict every topic below ``eviction_priority`` but the active one.

    All of them go, not just enough to get back to ``max_topics``: the seed
    removes every topic under the threshold, lowest priority first.
    """
    s: TopicsSettings = ctx.settings  # type: ignore[assignment]
    live = [(i, t) for i, t in enumerate(state.topics) if not t.evicted]
    if len(live) <= s.max_topics or state.now is None:
        return state
    now = state.now
    ranked = sorted(live, key=lambda it: (priority(it[1], now, s), it[0]))
    for i, topic in ranked:
        p = priority(topic, now, s)
        if p >= s.eviction_priority:
            break
        if topic.topic_id == state.active_topic_id:
            continue
        tombstone = replace(
            topic,
            embedding=None,
            messages=(),
            compressed=None,
            summary_text=None,
            facts=(),
            processing_request_id=None,
            processing_indices=(),
            evicted_at=now,
            evicted_priority=round(p, 12),
        )
        state = _replace(state, i, tombstone)
        state = _audit(
            state,
            "TopicEvicted",
            "tev-" + content_hash(state.tenant_id, state.conversation_id, topic.topic_id, ctx.settings_hash),
            cause,
            ctx,
            topic_id=topic.topic_id,
            priority=round(p, 12),
        )
    return state


def _advance(state: State, when: datetime) -> State:
    if state.now is None or when > state.now:
        return replace(state, now=when)
    return state


@_apply.register
def _message(item: MessageRecord, state: State, ctx: FoldContext) -> State:
    if item.index <= state.last_index:
        return state  # re-delivered message
    state = replace(_advance(state, item.occurred_at), last_index=item.index)
    if item.role == "user" and (stems := retracted_stems(item.content, item.role)):
        taken_back = (*state.retractions, *((stem, item.index) for stem in stems))
        state = replace(state, retractions=taken_back[-MAX_RETRACTIONS:])
    state = _user_message(item, state, ctx) if item.role == "user" else _other_message(item, state)
    return _evict(state, item, ctx)


@_apply.register
def _tick(item: ClockTicked, state: State, ctx: FoldContext) -> State:
    return _evict(_advance(state, item.payload.now), item, ctx)


@_apply.register
def _requested(item: SummaryRequested, state: State, ctx: FoldContext) -> State:
    p = item.payload
    if p.policy != NAME or p.settings_hash != ctx.settings_hash or p.request_id in state.recent_requests:
        return state
    i, topic = find_topic(state, p.topic_id)
    if topic is None or topic.evicted or topic.processing_request_id is not None:
        return state
    topic = replace(topic, processing_request_id=p.request_id, processing_indices=tuple(p.input_indices or ()))
    recent = (*state.recent_requests, p.request_id)[-_RECENT_REQUESTS:]
    return _replace(state, i, topic, recent_requests=recent)


def _open_request(state: State, request_id: str) -> tuple[int, Topic] | tuple[None, None]:
    for i, t in enumerate(state.topics):
        if t.processing_request_id == request_id:
            return i, t
    return None, None


@_apply.register
def _produced(item: SummaryProduced, state: State, ctx: FoldContext) -> State:
    p = item.payload
    if p.policy != NAME:
        return state
    i, topic = _open_request(state, p.request_id)
    if topic is None:
        return state  # a duplicate, or the answer for a topic evicted meanwhile
    closed = {"processing_request_id": None, "processing_indices": ()}
    if not p.text.strip():
        return _replace(state, i, replace(topic, **closed, failed_request_id=p.request_id))
    moving = set(topic.processing_indices)
    old = [r for r in topic.messages if r.index in moving]
    kept = tuple(r for r in topic.messages if r.index not in moving)
    stored = sorted((*decompress_refs(topic.compressed), *old), key=lambda r: r.index)
    facts = p.facts or tuple(parse_key_facts(p.text, stated_times(topic)))
    text = without_key_facts(p.text)  # the key facts are in ``facts``; the full text in ``summaries``
    topic = replace(
        topic,
        **closed,
        messages=kept,
        compressed=compress_refs(stored) if stored else None,
        compressed_count=len(stored),
        summary_id=p.summary_id,
        summary_text=text,
        summary_tokens=ctx.count_tokens(text),
        facts=facts,
        failed_request_id=None,
    )
    state = _replace(state, i, topic)
    return _audit(
        state,
        "TopicCompacted",
        "tcp-" + content_hash(p.summary_id, ctx.settings_hash),
        item,
        ctx,
        topic_id=topic.topic_id,
        compacted_through=max((r.index for r in old), default=-1),
        kept_recent=len(kept),
    )


@_apply.register
def _failed(item: SummaryFailed, state: State, ctx: FoldContext) -> State:
    if item.payload.policy != NAME:
        return state
    i, topic = _open_request(state, item.payload.request_id)
    if topic is None:
        return state
    topic = replace(topic, processing_request_id=None, processing_indices=(), failed_request_id=item.payload.request_id)
    return _replace(state, i, topic)


def _emitted(item: Event, state: State, ctx: FoldContext) -> State:
    if not any(a.event_id == item.event_id for a in state.outbox):
        return state  # back from the log: already folded when decided
    return replace(state, outbox=tuple(a for a in state.outbox if a.event_id != item.event_id))


for _cls in (TopicAssigned, TopicCompacted, TopicEvicted):
    _apply.register(_cls, _emitted)


@_apply.register
def _deleted(item: ConversationDeleted, state: State, ctx: FoldContext) -> State:
    return deleted_marker(state)


# --------------------------------------------------------------------------- reads


def _dates(topic: Topic) -> str:
    first, last = topic.created_at.date().isoformat(), topic.last_active_at.date().isoformat()
    return f"[{first}]" if first == last else f"[{first} to {last}]"


def _earlier_topics(state: State, s: TopicsSettings, ctx: FoldContext) -> list[tuple[Topic, str]]:
    """Return ``(topic, block)`` for the earlier topics the memory carries, in the order the topics began.

    Highest priority first (older first on a tie) while the blocks' tokens
    stay within ``memory_token_cap``; a block too big for what is left is
    skipped, so a smaller one after it may still fit.
    """
    if s.memory_token_cap <= 0:
        return []
    candidates = [
        (i, t) for i, t in enumerate(state.topics)
        if not t.evicted and t.summary_text is not None and t.topic_id != state.active_topic_id
    ]
    if not candidates:
        return []
    room = s.memory_token_cap - ctx.count_tokens(EARLIER_TOPICS_HEADER)
    chosen: list[tuple[int, Topic, str]] = []
    for i, t in sorted(candidates, key=lambda it: (-priority(it[1], state.now or it[1].last_active_at, s), it[0])):
        head = _dates(t)
        cost = ctx.count_tokens(head) + 2 + t.summary_tokens  # "\n\n" between blocks, " " after the dates
        if cost <= room:
            chosen.append((i, t, f"{head} {t.summary_text}"))
            room -= cost
    return [(t, block) for _, t, block in sorted(chosen, key=lambda c: c[0])]


# --------------------------------------------------------------------------- the policy


class TopicsPolicy:
    """Seed 004 as a pure fold: see the module docstring for assignment, compaction, restore and decay."""

    name: ClassVar[str] = NAME
    State: ClassVar[type[State]] = State
    holds_topics: ClassVar[bool] = True  # its summaries hold a topic's facts (the projector tracks which)

    def initial(self, tenant_id: str, conversation_id: str) -> State:
        """Return the state of a conversation with no messages."""
        return State(tenant_id=tenant_id, conversation_id=conversation_id)

    def evolve(self, state: State, item: Any, ctx: FoldContext) -> State:
        """Fold one message or event. Re-delivered messages, requests, answers and topic events are no-ops.

        Raises :class:`ConfigError` for a user message with no recorded
        embedding when ``ctx.embed`` is None, or when ``ctx.settings`` are not
        topics'. After ``ConversationDeleted`` every item is ignored.
        """
        settings_of(ctx, TopicsSettings, NAME)
        if state.deleted:
            return state
        if state.settings != ctx.settings:
            state = replace(state, settings=ctx.settings)
        return _apply(item, state, ctx)

    def decide(self, state: State, ctx: FoldContext, cause: Any) -> list[Event]:
        """Return the pending topic events, then one compaction request per topic that calls for one.

        The active topic calls for one when it has more than
        ``max_messages_per_topic`` active messages and something to compact
        after keeping the recent ones whole; any other live topic as soon as
        it has active messages (all of them are compacted), unless
        ``memory_token_cap`` is 0 (then the seed's rule holds for it too). Never while the
        topic has a request in flight, nor a request already seen (the input
        set that last failed, or one asked before with the same base).
        """
        if state.deleted:
            return []
        out: list[Event] = [
            EVENT_CLASSES[a.type](
                event_id=a.event_id,
                tenant_id=state.tenant_id,
                conversation_id=state.conversation_id,
                occurred_at=a.occurred_at,
                causation_id=a.causation_id,
                payload=a.payload,
            )
            for a in state.outbox
        ]
        s: TopicsSettings = ctx.settings  # type: ignore[assignment]
        for topic in state.topics:
            if topic.evicted or topic.processing_request_id is not None or not topic.messages:
                continue
            if topic.topic_id != state.active_topic_id and s.memory_token_cap > 0:
                cut = compaction_cut(topic.messages, 0)  # left behind: compact it whole
            elif len(topic.messages) > s.max_messages_per_topic:
                cut = compaction_cut(topic.messages, s.recent_message_keep, state.open_calls)
            else:
                continue
            if cut == 0:
                continue
            indices = tuple(r.index for r in topic.messages[:cut])
            request = make_request(
                ctx,
                cause,
                covers=(indices[0], indices[-1]),
                inputs=(indices[0], indices[-1]),
                base_summary_id=topic.summary_id,
                input_indices=indices,
                topic_id=topic.topic_id,
                kind="text",
                token_cap=s.summary_token_cap,
            )
            # A request seen before (failed, or answered when the topic held
            # the same messages) is never asked again: its fold would ignore it.
            rid = request.payload.request_id
            if rid != topic.failed_request_id and rid not in state.recent_requests:
                out.append(request)
        return out

    def plan(self, state: State, ctx: FoldContext) -> ContextPlan:
        """Return the earlier topics' summaries, then the active topic: its summary and its active messages.

        Before the first user message there is no topic: every message is read
        raw (fallback ``"no_topic"``). Earlier topics are the live ones other
        than the active one that have a summary; the ones with the highest
        priority at the state's ``now`` are kept while their blocks fit
        ``memory_token_cap`` (``notes["earlier_topics"]`` lists them).
        """
        if state.deleted:
            return ContextPlan(verbatim_indices=(), fallback="deleted")
        _, topic = find_topic(state, state.active_topic_id)
        if topic is None:
            return ContextPlan(verbatim_from=0, fallback="no_topic")
        s: TopicsSettings = ctx.settings  # type: ignore[assignment]
        memory: list[MemoryMessage] = []
        facts = topic_facts(state)
        if facts:
            memory.append(key_facts_message(ctx, facts))
        earlier = _earlier_topics(state, s, ctx)
        if earlier:
            content = "\n\n".join((EARLIER_TOPICS_HEADER, *(block for _, block in earlier)))
            memory.append(memory_message(ctx, content, "topics"))
        if topic.summary_text is not None:
            content = SUMMARY_PREFIX + topic.summary_text
            memory.append(memory_message(ctx, content, "topic_summary"))
        return ContextPlan(
            memory=tuple(memory),
            verbatim_indices=tuple(sorted(r.index for r in topic.messages)),
            notes={
                "topic_id": topic.topic_id,
                "topic_title": topic.title,
                "compressed_messages": topic.compressed_count,
                "summary_id": topic.summary_id,
                "earlier_topics": [t.topic_id for t, _ in earlier],
                "facts": sum(f.current for f in facts),
            },
        )

    def rows(self, state: State) -> dict[str, list[dict[str, Any]]]:
        """Return the policy's tables for the projector: ``{"topics": topic_rows(state)}``."""
        return {"topics": topic_rows(state)}

    def retractions(self, state: State) -> tuple[tuple[str, int], ...]:
        """Return ``state.retractions``: what the user took back, left out of every topic's memory at once."""
        return state.retractions


POLICY = TopicsPolicy()
