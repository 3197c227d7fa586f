"""Chunked memory (seed 001): one global summary of older turns + the last K raw turns.

A turn starts at a user message and holds everything up to the next one (the
assistant reply, tool calls and tool results, whatever ``model_variant``
answered). The chunk buffer is every message after the summary's coverage.
When a turn completes and tokens(summary + completed turns in the buffer)
exceed ``chunk_summarize_threshold`` with more than K turns, the turns before
the last K are folded into the summary by one request (previous summary as
base, the unsummarized originals as input). At most one request is in flight.
The plan is the summary under a BACKGROUND header plus the last K turns,
trimmed to ``prompt_token_budget``.

Observability (seed §8.3) without logging in the fold, which a replay would
repeat: the summarizer worker logs each summarization it runs (messages and
user turns in, tokens in and out), and the plan's notes carry its budget
decisions (``turns_dropped``, ``summary_truncated_from``/``_to``), which the
engine logs when it reads a context.
"""

from __future__ import annotations

from typing import ClassVar

from memfold.core.events import Event, SummaryProducedPayload, SummaryRequested
from memfold.core.ports import ContextPlan, FoldContext, MemoryMessage, MessageRecord
from memfold.core.settings import ChunkedSettings
from memfold.core.tokens import MESSAGE_OVERHEAD
from memfold.projections.fold import make_request
from memfold.projections.policies._requests import RequestLedger
from memfold.projections.policies._skeleton import SummaryPolicy, memory_message, settings_of
from memfold.projections.policies.state_codec import FrozenState, replace

SUMMARY_HEADER = "BACKGROUND – PRIOR CONVERSATION SUMMARY (use only if relevant):\n"
TRUNCATION_MARK = "…"


class BufferedMessage(FrozenState, kw_only=True):
    """What the chunk buffer keeps of one message: enough to group turns and count tokens, no content."""

    index: int
    role: str
    tokens: int
    model_variant: str | None = None  # recorded for debugging; no decision reads it (seed 001 §6)
    calls_tools: bool = False


Turn = tuple[BufferedMessage, ...]


class ChunkedState(FrozenState, kw_only=True):
    """Per-conversation state: the global summary, its coverage, the chunk buffer, the request ledger."""

    tenant_id: str
    conversation_id: str
    deleted: bool = False
    count: int = 0
    global_summary: str = ""
    summary_id: str | None = None
    summary_tokens: int = 0
    # The seed's last_summarized_message_id, as a message index (-1: nothing summarized).
    last_summarized_index: int = -1
    buffer: tuple[BufferedMessage, ...] = ()
    requests: RequestLedger = RequestLedger()


class ChunkedPolicy(SummaryPolicy):
    """Seed 001 as a pure fold. See the module docstring for turns, triggers and the plan; events: :class:`SummaryPolicy`."""

    name: ClassVar[str] = "chunked"
    State: ClassVar[type[ChunkedState]] = ChunkedState

    def message(self, state: ChunkedState, item: MessageRecord, ctx: FoldContext) -> ChunkedState:
        """Count the message and add it to the chunk buffer."""
        entry = BufferedMessage(
            index=item.index,
            role=item.role,
            tokens=item.tokens,
            model_variant=item.model_variant,
            calls_tools=bool(item.tool_calls),
        )
        return replace(state, count=item.index + 1, buffer=state.buffer + (entry,))

    def produced(self, state: ChunkedState, payload: SummaryProducedPayload, ctx: FoldContext) -> ChunkedState:
        """Replace the global summary and advance ``last_summarized_index`` to its coverage."""
        return replace(
            state,
            global_summary=payload.text,
            summary_id=payload.summary_id,
            summary_tokens=ctx.count_tokens(payload.text),
            last_summarized_index=payload.covers_to,
            buffer=tuple(m for m in state.buffer if m.index > payload.covers_to),
        )

    def decide(self, state: ChunkedState, ctx: FoldContext, cause: MessageRecord | Event) -> list[SummaryRequested]:
        """Return the chunk summarization ``state`` calls for now (at most one), built from ``cause``.

        A pure function of state and settings over *completed* turns only (a
        turn in progress is invisible here), so running it after every item
        gives the seed's "after each completed turn" decisions. Summarize when
        nothing is in flight, tokens(summary + completed buffered turns) >
        ``chunk_summarize_threshold``, there are more than K completed turns,
        and the older part reaches past every earlier request (a failed range
        is not asked for again; the next completed turn grows it).
        """
        s = _settings(ctx)
        if state.deleted:
            return []
        turns = completed_turns(state.buffer)
        chunk_tokens = sum(m.tokens for turn in turns for m in turn)
        total = state.summary_tokens + chunk_tokens
        if total <= s.chunk_summarize_threshold or len(turns) <= s.k_raw_turns:
            return []
        older = turns[: -s.k_raw_turns]
        covers_to = older[-1][-1].index
        if covers_to <= state.requests.requested_to:
            return []
        if state.requests.pending_id is not None:
            return []  # the in-flight guard: the next completed turn asks again
        request = make_request(
            ctx,
            cause,
            covers=(0, covers_to),
            inputs=(state.last_summarized_index + 1, covers_to),
            base_summary_id=state.summary_id,
            kind="text",
            token_cap=s.summary_token_cap,
        )
        return [request]

    def plan(self, state: ChunkedState, ctx: FoldContext) -> ContextPlan:
        """Return the summary message and the verbatim tail for the next prompt.

        Normally: the summary under :data:`SUMMARY_HEADER` (when non-empty),
        the last K completed turns, and the turn in progress (the current
        exchange is not memory: it is neither counted against the budget nor
        dropped). Budget (``prompt_token_budget``, over the summary message
        and the completed tail turns, in prompt tokens incl. per-message
        overhead): drop the oldest tail turns down to ``min_tail_turns``, then
        cut the summary to its last characters that fit, as a last resort.

        After a failed or empty summarization (``fallback`` names it) nothing
        the summary does not cover is hidden: the previous summary, then the
        whole chunk buffer; the assembler trims it to the caller's budget.
        Deleted: nothing (``fallback="deleted"``).
        """
        s = _settings(ctx)
        if state.deleted:
            return ContextPlan(verbatim_indices=(), fallback="deleted")
        notes: dict[str, object] = {
            "pending_request": state.requests.pending_id,
            "summary_id": state.summary_id,
            "last_summarized_index": state.last_summarized_index,
        }
        summary = state.global_summary if state.global_summary.strip() else ""
        if state.requests.failure is not None:
            memory = (_memory(ctx, SUMMARY_HEADER + summary),) if summary else ()
            return ContextPlan(
                memory=memory,
                verbatim_from=state.last_summarized_index + 1,
                fallback=state.requests.failure,
                notes=notes,
            )
        turns = split_turns(state.buffer)
        in_progress: Turn = ()
        if turns and not _complete(turns[-1]):
            in_progress = turns.pop()
        tail = turns[-s.k_raw_turns:]
        tail_tokens = [sum(m.tokens for m in turn) for turn in tail]
        memory_tokens = _memory_tokens(ctx, summary)
        dropped = 0
        while len(tail) > s.min_tail_turns and memory_tokens + sum(tail_tokens) > s.prompt_token_budget:
            tail, tail_tokens = tail[1:], tail_tokens[1:]
            dropped += 1
        kept = summary
        if summary and memory_tokens + sum(tail_tokens) > s.prompt_token_budget:
            kept = _keep_tail_end(ctx, summary, s.prompt_token_budget - sum(tail_tokens))
            notes["summary_truncated_from"] = memory_tokens
            notes["summary_truncated_to"] = _memory_tokens(ctx, kept)
        notes["turns_dropped"] = dropped
        notes["tail_turns"] = len(tail)
        first = tail[0] if tail else in_progress
        verbatim_from = first[0].index if first else state.count
        memory = (_memory(ctx, SUMMARY_HEADER + kept),) if kept else ()
        return ContextPlan(memory=memory, verbatim_from=verbatim_from, notes=notes)


def split_turns(buffer: tuple[BufferedMessage, ...]) -> list[Turn]:
    """Return ``buffer`` grouped into turns: a new turn starts at every user message.

    Messages before the first user message (a greeting, a system note) form a
    turn of their own; tool calls and results stay in the turn they occur in.
    """
    turns: list[list[BufferedMessage]] = []
    for m in buffer:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return [tuple(t) for t in turns]


def completed_turns(buffer: tuple[BufferedMessage, ...]) -> list[Turn]:
    """Return the turns of ``buffer`` without a trailing turn in progress.

    Every turn followed by another is complete; the last one is complete once
    it ends with an assistant message that calls no tools (the reply).
    """
    turns = split_turns(buffer)
    if turns and not _complete(turns[-1]):
        turns.pop()
    return turns


def _complete(turn: Turn) -> bool:
    last = turn[-1]
    return last.role == "assistant" and not last.calls_tools


def _settings(ctx: FoldContext) -> ChunkedSettings:
    return settings_of(ctx, ChunkedSettings, "chunked")


def _memory_tokens(ctx: FoldContext, summary: str) -> int:
    return ctx.count_tokens(SUMMARY_HEADER + summary) + MESSAGE_OVERHEAD if summary else 0


def _memory(ctx: FoldContext, content: str) -> MemoryMessage:
    return memory_message(ctx, content, "summary")


def _keep_tail_end(ctx: FoldContext, summary: str, allowance: int) -> str:
    """Return the longest tail of ``summary`` (marked with ``…``) whose message fits ``allowance`` tokens, or ""."""

    def fits(n: int) -> bool:
        return _memory_tokens(ctx, TRUNCATION_MARK + summary[len(summary) - n:]) <= allowance

    lo, hi = 0, len(summary)
    if not fits(1):
        return ""
    lo = 1
    while lo < hi:  # invariant: fits(lo); token counts grow with length, near enough for a search
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return TRUNCATION_MARK + summary[len(summary) - lo:]
