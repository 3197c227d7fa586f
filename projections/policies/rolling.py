"""Rolling memory (seed 003): one summary covering the oldest N messages, regenerated from itself + new messages.

Without a summary the plan is every message (the last ``max_messages`` when
set). The first summary is asked for once the conversation reaches
``message_threshold`` messages or ``token_threshold`` tokens and covers all
but the ``recent_messages_to_keep`` newest. It is regenerated, hierarchically
(previous summary + the messages since), once
``total - (covered + recent) >= regeneration_threshold``. The plan is the
summary as a system message followed by every message after its coverage;
before it (not in the seed), the summary's structured facts as one
``key_facts`` message, the summary text without its ``Key facts:`` list.
The text holds the facts its share of ``max_summary_length`` has room for;
the summary carries all of them (latest value per key), and a context with
room shows them all.
"""

from __future__ import annotations

from typing import ClassVar

from memfold.core.events import Event, Fact, SummaryProducedPayload, SummaryRequested
from memfold.core.ports import ContextPlan, FoldContext, MessageRecord
from memfold.core.settings import RollingSettings
from memfold.projections.fold import make_request
from memfold.projections.policies import _tool_groups as groups
from memfold.projections.policies._requests import RequestLedger
from memfold.projections.policies._skeleton import SummaryPolicy, key_facts_message, memory_message, settings_of
from memfold.projections.policies.state_codec import FrozenState, replace
from memfold.projections.prompts import without_key_facts


class RollingSummary(FrozenState, kw_only=True):
    """The summary in force: ``text`` standing for messages ``[0, covers_to]`` (the seed's coversMessageCount - 1)."""

    summary_id: str
    request_id: str
    covers_to: int
    text: str  # without its Key facts list when ``facts`` has them (stripped once, not on every read)
    facts: tuple[Fact, ...] = ()  # the current facts it carries

    @property
    def covers_count(self) -> int:
        """The seed's ``coversMessageCount``."""
        return self.covers_to + 1


class RollingState(FrozenState, kw_only=True):
    """Per-conversation state: message and token totals, the summary in force, the request ledger, tool groups."""

    tenant_id: str
    conversation_id: str
    deleted: bool = False
    count: int = 0
    tokens: int = 0
    summary: RollingSummary | None = None
    requests: RequestLedger = RequestLedger()
    # Tool groups after the summary's coverage: where a cut or the max_messages window may fall.
    tool_groups: groups.ToolGroups = ()


class RollingPolicy(SummaryPolicy):
    """Seed 003 as a pure fold. See the module docstring for triggers and the plan; the event side is :class:`SummaryPolicy`."""

    name: ClassVar[str] = "rolling"
    State: ClassVar[type[RollingState]] = RollingState

    def message(self, state: RollingState, item: MessageRecord, ctx: FoldContext) -> RollingState:
        """Count the message and its tokens, note its tool group."""
        return replace(
            state,
            count=item.index + 1,
            tokens=state.tokens + item.tokens,
            tool_groups=groups.note(state.tool_groups, item),
        )

    def produced(self, state: RollingState, payload: SummaryProducedPayload, ctx: FoldContext) -> RollingState:
        """Put the summary in force; tool groups it covers can no longer be cut."""
        facts = tuple(f for f in payload.facts if f.current)
        summary = RollingSummary(
            summary_id=payload.summary_id, request_id=payload.request_id, covers_to=payload.covers_to,
            text=without_key_facts(payload.text) if facts else payload.text, facts=facts,
        )
        return replace(state, summary=summary, tool_groups=groups.prune(state.tool_groups, payload.covers_to + 1))

    def decide(self, state: RollingState, ctx: FoldContext, cause: MessageRecord | Event) -> list[SummaryRequested]:
        """Return the summary request ``state`` calls for now (at most one), built from ``cause``.

        A pure function of state and settings, so it may run after any item.
        Nothing asked yet: messages >= ``message_threshold`` or tokens >=
        ``token_threshold`` (real counts) asks for ``[0, total - recent - 1]``.
        Afterwards the seed's ``needsRegeneration`` formula decides, with
        ``covered`` = the furthest request made so far (not only the last
        success): so a failed range is never asked for again, and after a
        failure the next attempt waits for ``regeneration_threshold`` new
        messages (not in the seed; it bounds calls while a summarizer is down).
        A regeneration feeds the previous summary (base) plus the originals
        after it. Cuts move back to keep tool groups whole.
        """
        s = _settings(ctx)
        if state.deleted:
            return []
        boundary = groups.align(state.tool_groups, state.count - s.recent_messages_to_keep, state.count)
        cut = boundary - 1
        covered = state.requests.requested_to
        if covered < 0:
            if state.count < s.message_threshold and state.tokens < s.token_threshold:
                return []
        elif state.count - (covered + 1 + s.recent_messages_to_keep) < s.regeneration_threshold:
            return []
        if cut < 0 or cut <= covered:
            return []
        summary = state.summary
        request = make_request(
            ctx,
            cause,
            covers=(0, cut),
            inputs=(summary.covers_to + 1 if summary is not None else 0, cut),
            base_summary_id=summary.summary_id if summary is not None else None,
            kind="text",
            char_cap=s.max_summary_length,
        )
        return [request]

    def plan(self, state: RollingState, ctx: FoldContext) -> ContextPlan:
        """Return the summary message and the verbatim range for the next prompt.

        - deleted: nothing (``fallback="deleted"``);
        - no usable summary: every message, or the last ``max_messages``
          (moved back to keep a tool group whole), ``fallback="takeLast"``
          (or the failure reason when a request failed);
        - otherwise the summary, then every message after its coverage;
          ``fallback`` is the failure reason while an older summary stands in
          for a failed newer one, else None.

        ``notes`` carries ``pending_request`` and the summary's coverage.
        """
        s = _settings(ctx)
        if state.deleted:
            return ContextPlan(verbatim_indices=(), fallback="deleted")
        summary = state.summary
        notes = {
            "pending_request": state.requests.pending_id,
            "summary_id": summary.summary_id if summary is not None else None,
            "covers_count": summary.covers_count if summary is not None else 0,
        }
        fallback = state.requests.failure
        if summary is None:
            start = 0
            if s.max_messages is not None and state.count > s.max_messages:
                start = groups.align(state.tool_groups, state.count - s.max_messages, state.count)
            return ContextPlan(verbatim_from=start, fallback=fallback or "takeLast", notes=notes)
        memory = (memory_message(ctx, summary.text, "summary"),)
        if summary.facts:
            memory = (key_facts_message(ctx, summary.facts), *memory)
        return ContextPlan(memory=memory, verbatim_from=summary.covers_to + 1, fallback=fallback, notes=notes)


def _settings(ctx: FoldContext) -> RollingSettings:
    return settings_of(ctx, RollingSettings, "rolling")
