"""The parts of a policy fold every seed shares, written once.

Every policy folds with a module-level ``functools.singledispatch`` over item
types and ignores everything after ``ConversationDeleted``. The three that
keep one summary in force (hierarchical, rolling, chunked) also share the
whole event side of their fold, which :class:`SummaryPolicy` implements:
re-delivered messages, the request ledger (adopt a request, apply only the
answer awaited, an empty or failed answer leaves the summary in force), and
the deletion marker. A subclass says only what a message adds to its state
and what a usable summary changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import singledispatch
from typing import Any, ClassVar, TypeVar

from memfold.core.errors import ConfigError
from memfold.core.events import (
    ConversationDeleted,
    Fact,
    SummaryFailed,
    SummaryProduced,
    SummaryProducedPayload,
    SummaryRequested,
)
from memfold.core.ports import FoldContext, MemoryMessage, MessageRecord
from memfold.core.tokens import MESSAGE_OVERHEAD
from memfold.projections.policies._requests import RequestLedger
from memfold.projections.policies.state_codec import replace
from memfold.projections.prompts import render_facts_dated

S = TypeVar("S")
P = TypeVar("P")


def deleted_marker(state: S) -> S:
    """Return the state a conversation has once deleted: its ids and ``deleted=True``, nothing else."""
    return type(state)(tenant_id=state.tenant_id, conversation_id=state.conversation_id, deleted=True)


def settings_of(ctx: FoldContext, cls: type[P], policy: str) -> P:
    """Return ``ctx.settings`` when it is a ``cls``; raise :class:`ConfigError` naming ``policy`` otherwise."""
    if not isinstance(ctx.settings, cls):
        raise ConfigError(f"the {policy} policy needs {cls.__name__}, got {type(ctx.settings).__name__}")
    return ctx.settings


def memory_message(ctx: FoldContext, content: str, kind: str) -> MemoryMessage:
    """Return a memory system message costing its real prompt tokens (content + per-message overhead)."""
    return MemoryMessage(content=content, kind=kind, tokens=ctx.count_tokens(content) + MESSAGE_OVERHEAD)


def key_facts_message(ctx: FoldContext, facts: Sequence[Fact]) -> MemoryMessage:
    """Return the key facts a text memory carries as one ``key_facts`` message (``- key: value`` under dates).

    Not in the seeds, whose text memories list what facts their share of the
    text holds: the context trims this message a fact at a time, after the
    memory's text and by the query (``projections.context.FACT_KINDS``), so
    a summary's structured facts reach the context when the budget has room
    for more than the text's share. A superseded fact shows as ``(was: ...)``.
    """
    return memory_message(ctx, render_facts_dated(facts), "key_facts")


class SummaryPolicy:
    """Base of a policy whose state has ``deleted``, ``count`` (messages folded) and ``requests`` (a ledger).

    Subclasses set ``name`` and ``State`` and implement :meth:`message` and
    :meth:`produced`; :meth:`adopted` and :meth:`usable` have defaults.
    """

    name: ClassVar[str]
    State: ClassVar[type[Any]]

    def initial(self, tenant_id: str, conversation_id: str) -> Any:
        """Return the state of a conversation with no messages."""
        return self.State(tenant_id=tenant_id, conversation_id=conversation_id)

    def evolve(self, state: Any, item: Any, ctx: FoldContext) -> Any:
        """Return ``state`` with ``item`` (a :class:`MessageRecord` or an event) folded in.

        Idempotent: a message whose index was already folded, a request that
        covers no more than one already adopted, and an answer to anything but
        the pending request (a duplicate, a superseded request's late result)
        leave the state unchanged. A summary :meth:`usable` rejects counts as
        failed ("summary_empty"); a failed or empty one leaves the previous
        summary in force. After ``ConversationDeleted`` the state is a deleted
        marker and nothing changes it.
        """
        if state.deleted:
            return state
        return _apply(item, self, state, ctx)

    # ----------------------------------------------------------------- what subclasses say

    def message(self, state: Any, item: MessageRecord, ctx: FoldContext) -> Any:
        """Return ``state`` after the new message ``item`` (its index is ``state.count``)."""
        raise NotImplementedError

    def adopted(self, state: Any, ctx: FoldContext) -> Any:
        """Return ``state`` after its ledger adopted a new request (``state.requests`` already updated)."""
        return state

    def usable(self, payload: SummaryProducedPayload) -> bool:
        """True when a produced summary has something to put in force (default: a non-blank text)."""
        return bool(payload.text.strip())

    def produced(self, state: Any, payload: SummaryProducedPayload, ctx: FoldContext) -> Any:
        """Return ``state`` with the awaited, usable summary in force (the ledger already marked it succeeded)."""
        raise NotImplementedError


@singledispatch
def _apply(item: Any, policy: SummaryPolicy, state: Any, ctx: FoldContext) -> Any:
    return state  # ClockTicked, SettingsChanged, topic events, anything new: nothing to do


@_apply.register
def _message(item: MessageRecord, policy: SummaryPolicy, state: Any, ctx: FoldContext) -> Any:
    if item.index < state.count:
        return state  # re-delivered
    return policy.message(state, item, ctx)


@_apply.register
def _requested(item: SummaryRequested, policy: SummaryPolicy, state: Any, ctx: FoldContext) -> Any:
    ledger = state.requests.adopt(item, ctx)
    if ledger is state.requests:
        return state
    return policy.adopted(replace(state, requests=ledger), ctx)


@_apply.register
def _produced(item: SummaryProduced, policy: SummaryPolicy, state: Any, ctx: FoldContext) -> Any:
    requests: RequestLedger = state.requests
    if not requests.awaits(item.payload.request_id):
        return state
    if not policy.usable(item.payload):
        return replace(state, requests=requests.failed("summary_empty"))
    return policy.produced(replace(state, requests=requests.succeeded()), item.payload, ctx)


@_apply.register
def _failed(item: SummaryFailed, policy: SummaryPolicy, state: Any, ctx: FoldContext) -> Any:
    if not state.requests.awaits(item.payload.request_id):
        return state
    return replace(state, requests=state.requests.failed("summary_failed"))


@_apply.register
def _deleted(item: ConversationDeleted, policy: SummaryPolicy, state: Any, ctx: FoldContext) -> Any:
    return deleted_marker(state)
