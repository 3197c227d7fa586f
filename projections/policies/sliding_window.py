"""Seed 002: versioned sliding-window memories (processing → completed | failed) read with gap messages.

A round ends when an assistant message without ``tool_calls`` is saved (an
assistant message that calls tools is mid-round: its results follow). At a
round end with ``last_saved_seq >= summarize_after_seq`` and no memory in
'processing', the policy requests a memory over the window
``(start, end)``: ``end`` = the saved message, ``start`` = ``max(0, end -
rolling_window_size + 1)`` rounded up to even, then moved past any tool group
it would cut. Each memory names the latest *completed* memory at request time
as its base (the version chain) and feeds the summarizer only the messages
after the base (``inputs = [base.end + 1, end]``), with ``window_start`` so
the summarizer drops what fell out of the window: the narrative, and with
``keep_facts = false`` the facts too; by default (not in the seed) the key
facts stay, latest value per key, carried from version to version as the
summary's structured facts. Round ends that come while
a memory is processing ask for nothing; when it completes (or fails) and two
or more rounds ended meanwhile, one request catches up with them at once.

Reading: the latest completed memory becomes ``[Previous context: …]`` and the
gap messages after it (``end + 1`` … newest) stay verbatim; with no completed
memory every message is read raw (fallback ``"no_memory"``). A failed or empty
summary marks its row 'failed' and changes nothing else: the previous
completed memory stays in force. The next round end asks again over a new
range; the same range is never requested twice.

Memory ids are the summary ids of their requests (``fold.summary_id_for``),
so ``base_memory_id`` is also the ``base_summary_id`` the summarizer receives
and the memory text is the ``summaries`` row with that ``summary_id``.
"""

from __future__ import annotations

from datetime import datetime
from functools import singledispatch
from typing import Any, ClassVar, Literal

from memfold.core.events import (
    ConversationDeleted,
    SummaryFailed,
    SummaryProduced,
    SummaryRequested,
)
from memfold.core.ports import ContextPlan, FoldContext, MessageRecord
from memfold.core.settings import SlidingWindowSettings
from memfold.projections.fold import make_request, summary_id_for
from memfold.projections.policies._skeleton import deleted_marker, memory_message, settings_of
from memfold.projections.policies.state_codec import FrozenState, replace, to_builtins

NAME = "sliding_window"
# Memory rows kept in state (besides the one in force): enough for the seed's
# table of recent versions; the whole chain stays in the ``summaries`` projection.
REMEMBERED_MEMORIES = 16
MEMORY_PREFIX = "[Previous context: "
MEMORY_SUFFIX = "]"
EMPTY_SUMMARY_REASON = "empty summary"

Status = Literal["processing", "completed", "failed"]


class MemoryRow(FrozenState, kw_only=True):
    """One row of the seed's ``memory`` table (without the text, which lives in ``summaries``)."""

    memory_id: str
    ordinal: int  # 1, 2, 3… per conversation: the seed's SERIAL memory_id
    request_id: str
    start_sequence: int
    end_sequence: int
    input_from: int
    base_memory_id: str | None = None
    base_ordinal: int | None = None
    status: Status = "processing"
    created_at: datetime
    generation_time_ms: int | None = None
    failure_reason: str | None = None


class ToolSpan(FrozenState, kw_only=True):
    """An assistant message that called tools (``call_index``) through its last answer (``last_index``)."""

    call_index: int
    last_index: int
    calls: tuple[str, ...]
    pending: tuple[str, ...]


class State(FrozenState, kw_only=True):
    """Per-conversation fold state. Per-message data is limited to the tool groups near the window."""

    tenant_id: str
    conversation_id: str
    deleted: bool = False
    last_index: int = -1
    # The latest round end: an assistant message without tool calls, no call left open.
    round_end: int = -1
    prior_round_end: int = -1  # the round end before it: two past a request mean a burst (see decide)
    # The last REMEMBERED_MEMORIES memories (and the one in force, however old):
    # the state stays bounded; every memory ever requested is in ``summaries``.
    memories: tuple[MemoryRow, ...] = ()
    requested: int = 0  # memories requested so far: the next ordinal - 1
    requested_to: int = -1  # highest end_sequence requested so far
    # Text of the memory in force (latest completed); older texts live in ``summaries``.
    memory_text: str | None = None
    tool_spans: tuple[ToolSpan, ...] = ()


# --------------------------------------------------------------------------- pure helpers


def window_range(end: int, size: int, spans: tuple[ToolSpan, ...] = ()) -> tuple[int, int]:
    """Return the seed's ``(start, end)`` for ``last_saved_seq = end``, never starting inside a tool group.

    ``start = max(0, end - size + 1)`` rounded up to even (a user/assistant
    pair is not split); if that index falls after a tool-calling assistant
    message and at or before its last tool result, start moves just past the
    group, so the window keeps the group whole or not at all.
    """
    start = max(0, end - size + 1)
    if start % 2:
        start += 1
    moved = True
    while moved:
        moved = False
        for span in spans:
            if span.call_index < start <= span.last_index:
                start = span.last_index + 1
                moved = True
    return min(start, end), end


def latest_completed(state: State) -> MemoryRow | None:
    """Return the completed memory with the highest ``end_sequence`` (the one reads use), or None."""
    return latest_completed_of(state.memories)


def latest_completed_of(rows: tuple[MemoryRow, ...]) -> MemoryRow | None:
    """Return the completed row of ``rows`` with the highest ``end_sequence``, or None."""
    best: MemoryRow | None = None
    for row in rows:
        if row.status == "completed" and (best is None or row.end_sequence > best.end_sequence):
            best = row
    return best


def processing(state: State) -> MemoryRow | None:
    """Return the memory still being summarized, or None (at most one per conversation)."""
    return next((row for row in state.memories if row.status == "processing"), None)


def memory_rows(state: State) -> list[dict[str, Any]]:
    """Return the seed's ``memory`` table for this conversation, oldest first, as JSON-ready dicts.

    The last :data:`REMEMBERED_MEMORIES` memories and the one in force (the
    ``summaries`` projection keeps every version with its lineage).
    ``memory_id`` is the deterministic summary id (join ``summaries.summary_id``
    for the text); ``ordinal`` is the seed's 1, 2, 3… numbering; ``in_force``
    marks the memory reads use. A deleted conversation has no rows.
    """
    if state.deleted:
        return []
    current = latest_completed(state)
    out = []
    for row in state.memories:
        d = to_builtins(row)
        d["in_force"] = current is not None and row.memory_id == current.memory_id
        out.append(d)
    return out


# --------------------------------------------------------------------------- evolve


@singledispatch
def _apply(item: Any, state: State, ctx: FoldContext) -> State:
    return state  # ClockTicked, SettingsChanged, topic events, anything new: nothing to do


@_apply.register
def _message(item: MessageRecord, state: State, ctx: FoldContext) -> State:
    if item.index <= state.last_index:
        return state  # re-delivered message
    settings: SlidingWindowSettings = ctx.settings  # type: ignore[assignment]
    spans = list(state.tool_spans)
    if item.role == "user":
        # A new round: calls left unanswered will never be answered, stop waiting for them.
        spans = [replace(s, pending=()) if s.pending else s for s in spans]
    elif item.role == "tool" and item.tool_call_id:
        for i, span in enumerate(spans):
            if item.tool_call_id in span.calls:
                spans[i] = replace(
                    span,
                    last_index=max(span.last_index, item.index),
                    pending=tuple(c for c in span.pending if c != item.tool_call_id),
                )
                break
    if item.role == "assistant" and item.tool_calls:
        ids = tuple(tc.id for tc in item.tool_calls)
        spans.append(ToolSpan(call_index=item.index, last_index=item.index, calls=ids, pending=ids))
    round_end, prior_round_end = state.round_end, state.prior_round_end
    if item.role == "assistant" and not item.tool_calls and not any(s.pending for s in spans):
        round_end, prior_round_end = item.index, round_end
    # Only groups that can still reach the start of a window ending at the
    # latest round end (or a later one) matter.
    horizon = round_end - settings.rolling_window_size - 2
    spans = [s for s in spans if s.pending or s.last_index >= horizon]
    return replace(
        state, last_index=item.index, round_end=round_end, prior_round_end=prior_round_end, tool_spans=tuple(spans)
    )


@_apply.register
def _requested(item: SummaryRequested, state: State, ctx: FoldContext) -> State:
    p = item.payload
    if p.policy != NAME or p.settings_hash != ctx.settings_hash:
        return state
    if p.covers_to <= state.requested_to:
        return state  # the request this fold decided, back from the log (or an older one)
    if processing(state) is not None:
        return state  # never two in flight; this one was not decided by this state
    base = next((r for r in state.memories if r.memory_id == p.base_summary_id), None) if p.base_summary_id else None
    row = MemoryRow(
        memory_id=summary_id_for(p.request_id),
        ordinal=state.requested + 1,
        request_id=p.request_id,
        start_sequence=p.covers_from,
        end_sequence=p.covers_to,
        input_from=p.input_from,
        base_memory_id=p.base_summary_id,
        base_ordinal=base.ordinal if base else None,
        created_at=item.occurred_at,
    )
    return replace(
        state, memories=_trim((*state.memories, row)), requested=state.requested + 1, requested_to=p.covers_to
    )


def _trim(rows: tuple[MemoryRow, ...]) -> tuple[MemoryRow, ...]:
    """Keep the last :data:`REMEMBERED_MEMORIES` rows, and the one in force even when it is older."""
    if len(rows) <= REMEMBERED_MEMORIES:
        return rows
    kept = rows[-REMEMBERED_MEMORIES:]
    in_force = latest_completed_of(rows)
    if in_force is not None and in_force not in kept:
        kept = (in_force, *kept)
    return kept


def _resolve(state: State, request_id: str, **update: Any) -> tuple[State, MemoryRow | None]:
    rows = list(state.memories)
    for i, row in enumerate(rows):
        if row.request_id == request_id:
            if row.status != "processing":
                return state, None  # already resolved: a duplicate answer
            rows[i] = replace(row, **update)
            return replace(state, memories=tuple(rows)), rows[i]
    return state, None


@_apply.register
def _produced(item: SummaryProduced, state: State, ctx: FoldContext) -> State:
    p = item.payload
    if p.policy != NAME:
        return state
    if not p.text.strip():
        new, _ = _resolve(state, p.request_id, status="failed", failure_reason=EMPTY_SUMMARY_REASON)
        return new
    before = latest_completed(state)
    new, row = _resolve(state, p.request_id, status="completed", generation_time_ms=p.latency_ms)
    if row is None:
        return state
    if before is None or row.end_sequence > before.end_sequence:
        new = replace(new, memory_text=p.text)
    return new


@_apply.register
def _failed(item: SummaryFailed, state: State, ctx: FoldContext) -> State:
    p = item.payload
    if p.policy != NAME:
        return state
    new, _ = _resolve(state, p.request_id, status="failed", failure_reason=p.reason)
    return new


@_apply.register
def _deleted(item: ConversationDeleted, state: State, ctx: FoldContext) -> State:
    return deleted_marker(state)


# --------------------------------------------------------------------------- the policy


class SlidingWindowPolicy:
    """Seed 002 as a pure fold: see the module docstring for triggers, ranges and reads."""

    name: ClassVar[str] = NAME
    State: ClassVar[type[State]] = State
    holds_topics: ClassVar[bool] = False

    def initial(self, tenant_id: str, conversation_id: str) -> State:
        """Return the state of a conversation with no messages."""
        return State(tenant_id=tenant_id, conversation_id=conversation_id)

    def evolve(self, state: State, item: Any, ctx: FoldContext) -> State:
        """Fold one message or event. Re-delivered messages, requests and answers are no-ops.

        After ``ConversationDeleted`` every item is ignored. Raises
        :class:`ConfigError` when ``ctx.settings`` are not sliding_window's.
        """
        settings_of(ctx, SlidingWindowSettings, NAME)
        if state.deleted:
            return state
        return _apply(item, state, ctx)

    def decide(self, state: State, ctx: FoldContext, cause: Any) -> list[SummaryRequested]:
        """Return the memory request a round end or a catch-up calls for (at most one), else nothing.

        A round end: ``cause`` is the newest message, an assistant message
        without tool calls, with no tool call still open. A catch-up: ``cause``
        resolved one of this policy's memories, and two or more rounds ended
        since the last request (or the latest round end is
        ``rolling_window_size`` or more messages past the latest completed
        memory). One round ending while a memory is processing waits for the
        next round end, as in the seed's timeline (a live chat brings it
        soon); several mean the messages came in a burst (an import, a batch
        of turns, a replay), after which nothing may come for a long time and
        the rounds would stay a verbatim gap. Either way the window ends at
        that round end, and the request
        is made only when ``end >= summarize_after_seq``, no memory is in
        'processing', and no memory was requested up to ``end`` yet (so a
        re-delivered message or a failed range is never asked for again).
        """
        if state.deleted:
            return []
        settings: SlidingWindowSettings = ctx.settings  # type: ignore[assignment]
        if isinstance(cause, MessageRecord):
            if cause.index != state.last_index or cause.index != state.round_end:
                return []
        elif isinstance(cause, (SummaryProduced, SummaryFailed)) and (
            cause.payload.policy == NAME and cause.payload.settings_hash == ctx.settings_hash
        ):
            base = latest_completed(state)
            behind = state.round_end - (base.end_sequence if base else -1) >= settings.rolling_window_size
            if not behind and state.prior_round_end <= state.requested_to:
                return []
        else:
            return []
        end = state.round_end
        if end < settings.summarize_after_seq or processing(state) is not None:
            return []
        if state.requested_to >= end:
            return []
        start, end = window_range(end, settings.rolling_window_size, state.tool_spans)
        base = latest_completed(state)
        # Seed 002 feeds every message after the base; a memory that keeps no facts needs none before the
        # window (a catch-up after an import would feed the whole conversation for nothing).
        if base is None:
            inputs = (start, end)
        elif settings.keep_facts:
            inputs = (base.end_sequence + 1, end)
        else:
            inputs = (max(base.end_sequence + 1, start), end)
        return [
            make_request(
                ctx,
                cause,
                covers=(start, end),
                inputs=inputs,
                base_summary_id=base.memory_id if base else None,
                window_start=start,
                kind="text",
            )
        ]

    def plan(self, state: State, ctx: FoldContext) -> ContextPlan:
        """Return the latest completed memory + gap messages, or every message raw when none is completed."""
        if state.deleted:
            return ContextPlan(verbatim_indices=(), fallback="deleted")
        pending = processing(state)
        notes: dict[str, Any] = {"processing_memory_id": pending.memory_id if pending else None}
        current = latest_completed(state)
        if current is None or state.memory_text is None:
            return ContextPlan(verbatim_from=0, fallback="no_memory", notes=notes)
        content = f"{MEMORY_PREFIX}{state.memory_text}{MEMORY_SUFFIX}"
        memory = memory_message(ctx, content, "summary")
        notes.update(
            memory_id=current.memory_id,
            ordinal=current.ordinal,
            start_sequence=current.start_sequence,
            end_sequence=current.end_sequence,
        )
        return ContextPlan(memory=(memory,), verbatim_from=current.end_sequence + 1, notes=notes)

    def rows(self, state: State) -> dict[str, list[dict[str, Any]]]:
        """Return the policy's tables for the projector: ``{"memory": memory_rows(state)}``."""
        return {"memory": memory_rows(state)}

    def retractions(self, state: State) -> tuple[tuple[str, int], ...]:
        """Return ``()``: a fact the user takes back leaves with the next summary, which retires its row."""
        return ()


POLICY = SlidingWindowPolicy()
