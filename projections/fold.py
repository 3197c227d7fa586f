"""Drive a policy fold one item at a time, and build deterministic derived events.

``step`` is the only way policies are run (projector, tests), so
every runner folds decided requests the same way and replays stay identical;
``fold_event`` is the per-log-event rule around it (which policies see an
event, message indices) that the projector applies in every mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from pydantic import BaseModel

from memfold.core.events import (
    ConversationDeleted,
    ConversationReopened,
    Event,
    MessageAppended,
    MessageRetracted,
    SummaryFailed,
    SummaryFailedPayload,
    SummaryProduced,
    SummaryProducedPayload,
    SummaryRequested,
    SummaryRequestedPayload,
    TopicAssigned,
    TopicCompacted,
    TopicEvicted,
)
from memfold.core.ids import content_hash
from memfold.core.ports import FoldContext, MessageRecord, Policy
from memfold.projections import fold_text

# The version of the fold rules. Bump it when a code change makes the same log fold to different
# projection rows (a policy's state or decisions, the rows the projector writes): a projection
# folded by other rules is then rebuilt when an engine opens it (a read refuses and names
# `memfold rebuild`), so `verify` keeps proving the live projection is what the log folds to.
# 2: sliding_window's catch-up after a burst of rounds (state field prior_round_end).
# 3: topics and rolling keep the key facts of their summaries (Topic.facts, RollingSummary.facts).
# 4: a topic's summary retires the facts rows its topic's previous summary held and it drops;
#    topics keep what the user took back (State.retractions).
# 5: topics' facts rows a user's message takes back are retired by that message (not current after it).
# 6: a deletion zeroes the conversation's counts (a replay, whose messages are shredded, counts none);
#    ConversationReopened starts a forgotten conversation again from fresh states.
# 7: a conversation of a user counts its summaries per policy (conversations.user_summary_counts) and asks
#    for the user's summary (SummaryRequested of scope "user"); user summaries fold into user_summaries.
FOLD_RULES = 7

def text_rules_hash(source: str | None = None) -> str:
    """Return the hash of the fold's text rules: the source of :mod:`memfold.projections.fold_text` (or ``source``)."""
    if source is None:
        source = Path(fold_text.__file__).read_text(encoding="utf-8")
    return content_hash(source.replace("\r\n", "\n"), length=8)


# What a projection records it was folded by (store meta, replay manifests): the structural rules' number
# and the hash of the text rules (:mod:`memfold.projections.fold_text`), so editing either rebuilds.
FOLD_VERSION = f"{FOLD_RULES}+{text_rules_hash()}"


def step(
    policy: Policy, state: BaseModel, item: MessageRecord | Event, ctx: FoldContext
) -> tuple[BaseModel, list[SummaryRequested]]:
    """Fold ``item`` into ``state``, then fold every request the policy decides; return both.

    Pure: the same (state, item, ctx) always gives the same result.
    """
    state = policy.evolve(state, item, ctx)
    requests = policy.decide(state, ctx, item)
    for request in requests:
        state = policy.evolve(state, request, ctx)
    return state, requests


def make_request(
    ctx: FoldContext,
    cause: MessageRecord | Event,
    *,
    covers: tuple[int, int],
    inputs: tuple[int, int],
    base_summary_id: str | None = None,
    window_start: int | None = None,
    input_indices: tuple[int, ...] | None = None,
    topic_id: str | None = None,
    kind: str = "text",
    token_cap: int | None = None,
    char_cap: int | None = None,
) -> SummaryRequested:
    """Return a :class:`SummaryRequested` whose id is a hash of what it asks for.

    The id covers conversation, policy, ranges, base summary and settings hash,
    so deciding the same request twice (replay, restarted worker, duplicate
    delivery) yields the same event, which the log and the folds de-duplicate.
    """
    tenant_id, conversation_id = cause.tenant_id, cause.conversation_id
    request_id = "req-" + content_hash(
        tenant_id,
        conversation_id,
        ctx.policy,
        covers,
        inputs,
        base_summary_id,
        window_start,
        input_indices,
        topic_id,
        ctx.settings_hash,
    )
    payload = SummaryRequestedPayload(
        request_id=request_id,
        policy=ctx.policy,
        settings_hash=ctx.settings_hash,
        covers_from=covers[0],
        covers_to=covers[1],
        input_from=inputs[0],
        input_to=inputs[1],
        base_summary_id=base_summary_id,
        window_start=window_start,
        input_indices=input_indices,
        topic_id=topic_id,
        kind=kind,  # type: ignore[arg-type]
        token_cap=token_cap,
        char_cap=char_cap,
    )
    return SummaryRequested(
        event_id=request_id,
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        occurred_at=cause.occurred_at,
        causation_id=cause.event_id,
        payload=payload,
    )


def user_summary_request(ctx: FoldContext, cause: SummaryProduced) -> SummaryRequested:
    """Return the request for the user's summary that ``cause`` (a summary of a user's conversation) triggers.

    Asked on the stream of ``cause``'s conversation (its key, its partition,
    its data key seals the answer), caused by ``cause`` (``causation_id``, no
    base summary: it is no version of the conversation's memory), named by
    it: deciding it twice
    (replay, rebuild, another node) gives the same event. It covers no
    message range of its own (-1..-1): its input is the user's memory as of
    its time (``occurred_at``, the cause's), gathered by the worker.
    """
    p = cause.payload
    request_id = "req-" + content_hash(
        cause.tenant_id, cause.conversation_id, ctx.policy, "user", p.summary_id, ctx.settings_hash,
        ctx.user_summary_token_cap,
    )
    payload = SummaryRequestedPayload(
        request_id=request_id, policy=ctx.policy, settings_hash=ctx.settings_hash, covers_from=-1, covers_to=-1,
        input_from=-1, input_to=-1, kind="text",
        token_cap=ctx.user_summary_token_cap, scope="user",
    )
    return SummaryRequested(
        event_id=request_id, tenant_id=cause.tenant_id, conversation_id=cause.conversation_id,
        occurred_at=cause.occurred_at, causation_id=cause.event_id, payload=payload,
    )


def user_summary_due(count: int, every: int) -> bool:
    """True when a conversation's ``count``-th summary of a policy asks for the user's summary (``every`` N-th; 0: never)."""
    return every > 0 and count > 0 and count % every == 0


def summary_id_for(request_id: str) -> str:
    """Return the id of the one summary a request can produce."""
    return "sum-" + content_hash("summary", request_id)


def produced(request: SummaryRequested, **fields: Any) -> SummaryProduced:
    """Return the :class:`SummaryProduced` answering ``request`` (deterministic ids, cause's timestamp)."""
    p = request.payload
    sid = summary_id_for(p.request_id)
    payload = SummaryProducedPayload(
        summary_id=sid,
        request_id=p.request_id,
        policy=p.policy,
        settings_hash=p.settings_hash,
        covers_from=p.covers_from,
        covers_to=p.covers_to,
        base_summary_id=p.base_summary_id,
        topic_id=p.topic_id,
        scope=p.scope,
        **fields,
    )
    return SummaryProduced(
        event_id=sid,
        tenant_id=request.tenant_id,
        conversation_id=request.conversation_id,
        occurred_at=request.occurred_at,
        causation_id=request.event_id,
        payload=payload,
    )


def failed(request: SummaryRequested, *, reason: str, error_type: str, **fields: Any) -> SummaryFailed:
    """Return the :class:`SummaryFailed` answering ``request`` (one failure event per request)."""
    p = request.payload
    payload = SummaryFailedPayload(
        request_id=p.request_id,
        policy=p.policy,
        settings_hash=p.settings_hash,
        reason=reason,
        error_type=error_type,
        scope=p.scope,
        **fields,
    )
    return SummaryFailed(
        event_id="fail-" + content_hash("failed", p.request_id),
        tenant_id=request.tenant_id,
        conversation_id=request.conversation_id,
        occurred_at=request.occurred_at,
        causation_id=request.event_id,
        payload=payload,
    )


def record_from_event(event: Event, index: int, tokens: int) -> MessageRecord:
    """Return the :class:`MessageRecord` of a ``MessageAppended`` event at message ``index``."""
    p = event.payload
    return MessageRecord(
        tenant_id=event.tenant_id,
        conversation_id=event.conversation_id,
        index=index,
        seq=event.seq,
        event_id=event.event_id,
        role=p.role,
        content=p.content or "",
        tokens=tokens,
        occurred_at=event.occurred_at,
        model_variant=p.model_variant,
        name=p.name,
        tool_calls=p.tool_calls,
        tool_call_id=p.tool_call_id,
        importance=p.importance,
        embedding=p.embedding,
        metadata=p.metadata,
    )


def run_sync(
    policy: Policy,
    ctx: FoldContext,
    items: Iterable[MessageRecord | Event],
    answer: Callable[[SummaryRequested, BaseModel], Event | None],
    state: BaseModel | None = None,
) -> tuple[BaseModel, list[Event]]:
    """Fold ``items`` through ``policy``, answering each request at once with ``answer``.

    An in-memory stand-in for log + worker + projector, for tests and the
    quality benchmark: a request is answered before the next item is folded
    (``answer`` returns a SummaryProduced/SummaryFailed event, or None to leave
    it pending). Returns the final state and every derived event, in order.
    """
    derived: list[Event] = []
    pending: list[Event] = []
    for item in items:
        if state is None:
            state = policy.initial(item.tenant_id, item.conversation_id)
        state, requests = step(policy, state, item, ctx)
        pending.extend(requests)
        while pending:
            request = pending.pop(0)
            derived.append(request)
            if not isinstance(request, SummaryRequested):
                continue
            reply = answer(request, state)
            if reply is None:
                continue
            derived.append(reply)
            state, more = step(policy, state, reply, ctx)
            pending.extend(more)
    assert state is not None, "run_sync needs at least one item or an initial state"
    return state, derived


# --------------------------------------------------------------------------- one log event, every policy


class ConversationCounters(msgspec.Struct, frozen=True):
    """What folding needs to know about a conversation besides policy state.

    ``message_count`` is the index the next message gets; ``token_count`` the
    running prompt cost of its messages; ``deleted`` stops every fold but the
    deletion itself.
    """

    message_count: int = 0
    token_count: int = 0
    deleted: bool = False


class EventFold(msgspec.Struct, frozen=True):
    """The result of :func:`fold_event`.

    ``message`` is the record a ``MessageAppended`` became (None for other
    events and for a message of a deleted conversation); ``states`` holds the
    new state of every policy that folded the event; ``requests`` what they
    decided, in policy order, to append to the log.
    """

    counters: ConversationCounters
    message: MessageRecord | None = None
    states: dict[str, BaseModel] = msgspec.field(default_factory=dict)
    requests: list[SummaryRequested] = msgspec.field(default_factory=list)


def fold_event(
    event: Event,
    counters: ConversationCounters,
    policies: Mapping[str, tuple[Policy, FoldContext]],
    state_of: Callable[[str], BaseModel],
    *,
    tokens: int = 0,
) -> EventFold:
    """Fold one log event (its ``seq`` assigned) into every policy it concerns; pure.

    The per-event rule the projector applies in every mode (embedded,
    distributed worker, projector node, replay), so they fold identically:

    1. A ``MessageAppended`` becomes the :class:`MessageRecord` at index
       ``counters.message_count`` costing ``tokens`` (content plus
       :data:`~memfold.core.tokens.MESSAGE_OVERHEAD`, counted by the caller).
    2. Summary events fold only into the policy named in their payload, and
       only when the payload's settings hash is that policy's (a user-scope
       summary, the user's summary, into none); topic events
       only into the policy they name; every other event into every policy.
    3. Once a conversation is deleted, nothing but ``ConversationDeleted``
       and ``ConversationReopened`` folds (a message of a deleted
       conversation gets no index). A deletion zeroes the counts: its
       messages are gone (shredded, in a replay: never counted). A reopen of
       a deleted conversation gives every policy its initial state and the
       counts start at zero; a reopen of a live one changes nothing.
    4. A ``MessageRetracted`` folds into no policy: indices and policy state
       stay as they were (the projector marks the message row retracted, and
       reads, summary inputs included, leave it out).

    ``state_of(policy)`` returns the state to fold into; ``policies`` keeps
    its order, which is the order of the returned requests.
    """
    item: MessageRecord | Event = event
    message: MessageRecord | None = None
    owner: str | None = None
    if isinstance(event, MessageAppended):
        if counters.deleted:
            return EventFold(counters)
        message = item = record_from_event(event, counters.message_count, tokens)
        counters = ConversationCounters(counters.message_count + 1, counters.token_count + tokens, False)
    elif isinstance(event, (SummaryRequested, SummaryProduced, SummaryFailed)):
        if event.payload.scope == "user":
            return EventFold(counters)  # the user's summary: folded into the user projection, by no policy
        owner = event.payload.policy
        if owner in policies and event.payload.settings_hash != policies[owner][1].settings_hash:
            owner = "<other settings>"  # recorded under other settings: audit rows only, no fold
    elif isinstance(event, ConversationDeleted):
        counters = ConversationCounters(0, 0, True)
    elif isinstance(event, ConversationReopened):
        if not counters.deleted:
            return EventFold(counters)
        fresh = {name: impl.initial(event.tenant_id, event.conversation_id) for name, (impl, _ctx) in policies.items()}
        return EventFold(ConversationCounters(), None, fresh)
    elif isinstance(event, MessageRetracted):
        return EventFold(counters)
    elif isinstance(event, (TopicAssigned, TopicCompacted, TopicEvicted)):
        owner = event.payload.policy
    if counters.deleted and not isinstance(event, ConversationDeleted):
        return EventFold(counters, message)
    states: dict[str, BaseModel] = {}
    requests: list[SummaryRequested] = []
    for name, (impl, ctx) in policies.items():
        if owner is not None and owner != name:
            continue
        states[name], decided = step(impl, state_of(name), item, ctx)
        requests.extend(decided)
    return EventFold(counters, message, states, requests)
