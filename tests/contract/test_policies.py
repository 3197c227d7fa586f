"""The Policy contract over all five policies, each with the invariants of its own shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from contract.policy_contract import PolicyCase, PolicyContract, context, messages_of
from memfold.core.events import Event, SummaryRequested
from memfold.core.ports import FoldContext, MessageRecord
from memfold.core.settings import (
    ChunkedSettings,
    HierarchicalSettings,
    RollingSettings,
    SlidingWindowSettings,
    TopicsSettings,
)
from memfold.projections.policies import topics as tp
from memfold.projections.policies.chunked import ChunkedPolicy
from memfold.projections.policies.hierarchical import HierarchicalPolicy
from memfold.projections.policies.rolling import RollingPolicy
from memfold.projections.policies.sliding_window import SlidingWindowPolicy
from memfold.projections.policies.topics import TopicsPolicy

Items = Sequence[MessageRecord | Event]


def _requests(derived: Sequence[Event]) -> list[SummaryRequested]:
    return [e for e in derived if isinstance(e, SummaryRequested)]


def _cuts_keep_tool_groups_whole(policy: Any, items: Items, state: Any, derived: Sequence[Event], ctx: FoldContext):
    """No cut (a request's end, the plan's first verbatim message) falls between a tool call and its results."""
    msgs = messages_of(items)
    cuts = [r.payload.covers_to for r in _requests(derived)] + [policy.plan(state, ctx).verbatim_from - 1]
    for cut in cuts:
        if 0 <= cut + 1 < len(msgs):
            assert msgs[cut + 1].role != "tool", f"a cut after message {cut} separates a tool result from its call"


def rolling_invariants(items: Items, state: Any, derived: Sequence[Event], ctx: FoldContext) -> None:
    _cuts_keep_tool_groups_whole(ROLLING, items, state, derived, ctx)
    for r in _requests(derived):  # a regeneration reads the previous summary plus the messages after it
        assert r.payload.input_from == 0 or r.payload.base_summary_id is not None


def hierarchical_invariants(items: Items, state: Any, derived: Sequence[Event], ctx: FoldContext) -> None:
    _cuts_keep_tool_groups_whole(HIERARCHICAL, items, state, derived, ctx)


def chunked_invariants(items: Items, state: Any, derived: Sequence[Event], ctx: FoldContext) -> None:
    """Cuts fall on turn boundaries only: the message after a chunk, and the first verbatim one, is a user's."""
    msgs = messages_of(items)
    for r in _requests(derived):
        assert msgs[r.payload.covers_to + 1].role == "user"
    plan = CHUNKED.plan(state, ctx)
    assert plan.verbatim_from in (0, len(msgs)) or msgs[plan.verbatim_from].role == "user"


def sliding_window_invariants(items: Items, state: Any, derived: Sequence[Event], ctx: FoldContext) -> None:
    """One memory processing at most; a window never exceeds its size, ends a round and starts outside a tool group."""
    msgs = messages_of(items)
    assert sum(r.status == "processing" for r in state.memories) <= 1
    for r in state.memories:
        assert r.end_sequence - r.start_sequence + 1 <= ctx.settings.rolling_window_size
        assert msgs[r.end_sequence].role == "assistant" and not msgs[r.end_sequence].tool_calls
        assert msgs[r.start_sequence].role != "tool", f"window {r.start_sequence}-{r.end_sequence} starts in a tool group"


def topics_invariants(items: Items, state: Any, derived: Sequence[Event], ctx: FoldContext) -> None:
    """Live topics partition the messages; compaction never separates a tool result from its call."""
    seen: set[int] = set()
    for t in state.topics:
        if t.evicted:
            continue
        compressed = tuple(tp.decompress_refs(t.compressed))
        idx = [r.index for r in t.messages] + [r.index for r in compressed]
        assert not seen & set(idx)
        seen |= set(idx)
        for r in t.messages:
            if r.answers:
                call = next((x for x in t.messages + compressed if r.answers in x.calls), None)
                assert call is not None and call not in compressed, "a tool result is separated from its call"
    plan = TOPICS.plan(state, ctx)
    assert plan.verbatim_indices is None or list(plan.verbatim_indices) == sorted(plan.verbatim_indices)


ROLLING, HIERARCHICAL, CHUNKED = RollingPolicy(), HierarchicalPolicy(), ChunkedPolicy()
SLIDING_WINDOW, TOPICS = SlidingWindowPolicy(), TopicsPolicy()

CASES = (
    PolicyCase("rolling", ROLLING, (
        context("rolling", RollingSettings(message_threshold=8, token_threshold=1500, recent_messages_to_keep=3,
                                           regeneration_threshold=3)),
        context("rolling", RollingSettings(message_threshold=4, token_threshold=600, recent_messages_to_keep=0,
                                           regeneration_threshold=1)),
    ), rolling_invariants),
    PolicyCase("hierarchical", HIERARCHICAL, tuple(
        context("hierarchical", HierarchicalSettings(trigger_message_count=6, recent_message_count=3,
                                                     resummarize_every=every))
        for every in (1, 2, 4)
    ), hierarchical_invariants),
    PolicyCase("chunked", CHUNKED, (
        context("chunked", ChunkedSettings(chunk_summarize_threshold=600, k_raw_turns=2, prompt_token_budget=100000)),
        context("chunked", ChunkedSettings(chunk_summarize_threshold=200, k_raw_turns=1, prompt_token_budget=100000)),
    ), chunked_invariants),
    PolicyCase("sliding_window", SLIDING_WINDOW, tuple(
        context("sliding_window", SlidingWindowSettings(rolling_window_size=size, summarize_after_seq=after))
        for size, after in ((6, 3), (2, 0), (14, 5), (4, 8))
    ), sliding_window_invariants),
    PolicyCase("topics", TOPICS, tuple(
        context("topics", TopicsSettings(max_messages_per_topic=m, recent_message_keep=k, max_topics=n))
        for m, k, n in ((4, 1, 3), (2, 0, 2), (8, 3, 6))
    ), topics_invariants, in_view=lambda state, request: request.payload.topic_id == state.active_topic_id),
)


@pytest.fixture(params=CASES, ids=str, scope="module")
def case(request) -> PolicyCase:
    return request.param


class TestPolicies(PolicyContract):
    pass


def test_every_policy_is_under_the_contract():
    from memfold.core.settings import POLICY_NAMES

    assert sorted(c.name for c in CASES) == sorted(POLICY_NAMES)
