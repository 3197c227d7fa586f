"""Hierarchical memory (seed 000): structured facts + a narrative over old messages, the recent N verbatim.

Below the trigger the conversation is read as is (``takeLast``). Above it the
plan is three layers: a facts system message (``- key: value`` lines), a
narrative system message, and every message the summary does not cover, which
is at least the recent window. Summaries are always made from the original
messages ``[0, cut]`` (never a summary of a summary); the current summary is
passed as the request's base only so its facts can be merged.
"""

from __future__ import annotations

from typing import ClassVar

from memfold.core.events import Event, Fact, SummaryProducedPayload, SummaryRequested
from memfold.core.ports import ContextPlan, FoldContext, MemoryMessage, MessageRecord
from memfold.core.settings import HierarchicalSettings
from memfold.projections.fold import make_request
from memfold.projections.policies import _tool_groups as groups
from memfold.projections.policies._requests import RequestLedger
from memfold.projections.policies._skeleton import SummaryPolicy, memory_message, settings_of
from memfold.projections.policies.state_codec import FrozenState, replace
from memfold.projections.prompts import render_facts_dated


class HierarchicalSummary(FrozenState, kw_only=True):
    """The summary in force: facts + narrative standing for messages ``[0, covers_to]``."""

    summary_id: str
    request_id: str
    covers_to: int
    facts: tuple[Fact, ...] = ()
    narrative: str = ""


class HierarchicalState(FrozenState, kw_only=True):
    """Per-conversation state: message count, the summary in force, the request ledger, open tool groups."""

    tenant_id: str
    conversation_id: str
    deleted: bool = False
    count: int = 0
    summary: HierarchicalSummary | None = None
    requests: RequestLedger = RequestLedger()
    # Tool groups after the last requested cut: where the next cut may fall.
    tool_groups: groups.ToolGroups = ()


class HierarchicalPolicy(SummaryPolicy):
    """Seed 000 as a pure fold. See the module docstring for the plan's shape; the event side is :class:`SummaryPolicy`."""

    name: ClassVar[str] = "hierarchical"
    State: ClassVar[type[HierarchicalState]] = HierarchicalState

    def message(self, state: HierarchicalState, item: MessageRecord, ctx: FoldContext) -> HierarchicalState:
        """Count the message and note its tool group."""
        return replace(state, count=item.index + 1, tool_groups=groups.note(state.tool_groups, item))

    def adopted(self, state: HierarchicalState, ctx: FoldContext) -> HierarchicalState:
        """Forget tool groups the adopted request's cut has passed: later cuts fall after it."""
        return replace(state, tool_groups=groups.prune(state.tool_groups, state.requests.requested_to + 1))

    def usable(self, payload: SummaryProducedPayload) -> bool:
        """Facts alone, or a narrative alone, make a usable summary."""
        return bool(payload.facts) or bool(payload.text.strip())

    def produced(self, state: HierarchicalState, payload: SummaryProducedPayload, ctx: FoldContext) -> HierarchicalState:
        """Put the facts and narrative in force."""
        summary = HierarchicalSummary(
            summary_id=payload.summary_id,
            request_id=payload.request_id,
            covers_to=payload.covers_to,
            facts=payload.facts,
            narrative=payload.text,
        )
        return replace(state, summary=summary)

    def decide(
        self, state: HierarchicalState, ctx: FoldContext, cause: MessageRecord | Event
    ) -> list[SummaryRequested]:
        """Return the summary request ``state`` calls for now (at most one), built from ``cause``.

        A pure function of state and settings, so it may run after any item:
        above ``trigger_message_count`` and with messages older than the
        recent window, ask for facts + narrative of the originals ``[0, cut]``
        (cut = count - recent - 1, moved back to keep a tool group whole). The
        first request goes out at once; later ones once ``resummarize_every``
        messages have left the recent window since the last request's cut.
        That spacing is not in the seed: it bounds summarizer calls to one per
        ``resummarize_every`` messages (also after a failure, so a failed
        range is never asked for again), and costs nothing in recall because
        the messages a lagging summary does not cover stay verbatim.
        """
        s = _settings(ctx)
        cut = self._next_cut(state, s)
        if cut is None:
            return []
        base = state.summary.summary_id if state.summary is not None else None
        request = make_request(
            ctx,
            cause,
            covers=(0, cut),
            inputs=(0, cut),
            base_summary_id=base,
            kind="facts",
            token_cap=s.max_narrative_tokens,
        )
        return [request]

    def plan(self, state: HierarchicalState, ctx: FoldContext) -> ContextPlan:
        """Return the memory messages and the verbatim range for the next prompt.

        - deleted: nothing (``fallback="deleted"``);
        - count <= trigger: every message, no memory (``"takeLast"``);
        - recent window >= count: every message (``"recent_covers_all"``);
        - no usable summary yet: every message (``"takeLast"``, or the failure
          reason ``"summary_failed"`` / ``"summary_empty"``);
        - otherwise facts + narrative, then every message after the summary's
          coverage (``fallback`` = the failure reason while an older summary
          stands in for a failed newer one, else None).

        ``notes`` carries ``mode`` ("takeLast" when no memory is in force,
        whatever the reason, else "hierarchical"), ``pending_request`` (the
        id in flight or None), ``stale`` (the summary lags the recent window
        or is missing) and ``lazy_timeout_ms``: the engine may wait that long
        for a pending summary; the policy never waits.
        """
        s = _settings(ctx)
        if state.deleted:
            return ContextPlan(verbatim_indices=(), fallback="deleted")
        summary = state.summary
        window_start = state.count - s.recent_message_count
        layered = state.count > s.trigger_message_count and window_start > 0
        in_force = summary is not None and layered
        notes = {
            "mode": "hierarchical" if in_force else "takeLast",
            "pending_request": state.requests.pending_id,
            "stale": layered and (summary is None or summary.covers_to + 1 < window_start),
            "lazy_timeout_ms": s.lazy_timeout_ms,
            "summary_id": summary.summary_id if summary is not None else None,
            "covers_to": summary.covers_to if summary is not None else None,
        }
        if state.count <= s.trigger_message_count:
            return ContextPlan(verbatim_from=0, fallback="takeLast", notes=notes)
        if s.recent_message_count >= state.count:
            return ContextPlan(verbatim_from=0, fallback="recent_covers_all", notes=notes)
        if summary is None:
            return ContextPlan(verbatim_from=0, fallback=state.requests.failure or "takeLast", notes=notes)
        memory: list[MemoryMessage] = []
        if summary.facts:
            memory.append(memory_message(ctx, render_facts_dated(summary.facts), "facts"))
        if summary.narrative.strip():
            memory.append(memory_message(ctx, summary.narrative, "narrative"))
        return ContextPlan(
            memory=tuple(memory),
            verbatim_from=summary.covers_to + 1,
            fallback=state.requests.failure,
            notes=notes,
        )

    @staticmethod
    def _next_cut(state: HierarchicalState, s: HierarchicalSettings) -> int | None:
        if state.deleted or state.count <= s.trigger_message_count:
            return None
        if s.recent_message_count >= state.count:
            return None  # the seed's "recent > total": everything is recent, nothing to summarize
        boundary = groups.align(state.tool_groups, state.count - s.recent_message_count, state.count)
        cut = boundary - 1
        asked = state.requests.requested_to
        if cut < 0 or cut <= asked:
            return None
        if asked >= 0 and cut - asked < s.resummarize_every:
            return None
        return cut


def _settings(ctx: FoldContext) -> HierarchicalSettings:
    return settings_of(ctx, HierarchicalSettings, "hierarchical")
