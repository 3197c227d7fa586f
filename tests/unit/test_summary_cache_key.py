"""The summary cache's key: stable across memfold versions, so stored caches (and replays served from them) stay valid."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from memfold.engine.events import Fact, ToolCall
from memfold.engine.ports import MessageRecord, SummaryInput
from memfold.projections.summary_cache import cache_key

T = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
REQUEST = SummaryInput(
    policy="sliding_window", kind="text",
    messages=(
        MessageRecord("acme", "c1", 0, 1, "e0", "user", "Order #4417 is late.", 9, T,
                      metadata={"channel": "web", "tags": ["a", 1]}),
        MessageRecord("acme", "c1", 1, 2, "e1", "assistant", "", 4, T,
                      tool_calls=(ToolCall(id="t1", name="lookup", arguments='{"order": "4417"}'),)),
        MessageRecord("acme", "c1", 2, 3, "e2", "tool", '{"status": "shipped"}', 8, T, tool_call_id="t1",
                      embedding=(0.25, -1.0)),
    ),
    existing_summary="Earlier: the user asked about an order.",
    existing_facts=(Fact(key="order_id", value="#4417", category="ENTITY", stated_at=T, stated_in=0),),
    window_start=0, keep_facts=True,
)


def test_the_key_of_a_request_is_the_one_earlier_versions_stored():
    # Computed by memfold at 414785e (before the key's encoding was made faster): a change here
    # would turn every stored cache entry into a miss, and every cached replay into model calls.
    assert cache_key("offline", "offline-salience-30", "p" * 64, REQUEST) == (
        "d20e78851d8560e5971d66edb8a0eda45814d16280c1248a2f69c543e4f00357"
    )


def test_every_field_of_the_request_is_in_the_key():
    base = cache_key("offline", "m", "h", REQUEST)
    first, second, third = REQUEST.messages
    variants = [
        replace(REQUEST, existing_summary="Other."),
        replace(REQUEST, window_start=1),
        replace(REQUEST, messages=(first, second)),
        replace(REQUEST, messages=(replace(first, metadata={"channel": "app", "tags": ["a", 1]}), second, third)),
        replace(REQUEST, messages=(first, second, replace(third, embedding=(0.5, -1.0)))),
        replace(REQUEST, messages=(first, replace(second, occurred_at=T.replace(minute=31)), third)),
    ]
    assert all(cache_key("offline", "m", "h", v) != base for v in variants)
