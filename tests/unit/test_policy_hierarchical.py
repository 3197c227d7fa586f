"""Seed 000 (hierarchical memory) as a pure fold: triggers, plan layers, fallbacks; the fold laws are tests/contract/policy_contract.py."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

import pytest
from support.policy_kit import (
    COUNT,
    Messages,
    ScriptedSummarizer,
    context_builder,
    fold_runner,
    requests_of,
    scripted_reply,
)

from memfold.core.events import (
    ClockTicked,
    ClockTickedPayload,
    Fact,
    SettingsChanged,
    SettingsChangedPayload,
    SummaryRequested,
    ToolCall,
)
from memfold.core.ports import MessageRecord
from memfold.core.settings import HierarchicalSettings
from memfold.projections import fold
from memfold.projections.policies.hierarchical import HierarchicalPolicy

POLICY = HierarchicalPolicy()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
FACTS = (
    Fact(key="order_id", value="#1234", category="ENTITY"),
    Fact(key="status", value="approved", category="STATE"),
    Fact(key="amount", value="$50", category="NUMERIC"),
)
NARRATIVE = "Customer requested order cancellation and agreed to refund terms"


# --------------------------------------------------------------------------- helpers


msg = Messages(T0, lambda i, role: f"{role} says message {i}")
chat = msg.chat
ctx_for = context_builder("hierarchical", HierarchicalSettings)


def answer(request: SummaryRequested, how: str | None):
    return scripted_reply(
        request,
        how,
        text=f"{NARRATIVE} (messages 1-{request.payload.covers_to + 1})",
        empty_text="  ",
        facts=() if how == "empty" else FACTS,
    )


Scripted = partial(ScriptedSummarizer, answer)
_run = fold_runner(POLICY, ctx_for, Scripted)


def run(items, ctx=None, worker=None, state=None):
    worker = worker or Scripted()
    state, derived = _run(items, ctx, worker, state)
    return state, derived, worker


# --------------------------------------------------------------------------- seed knobs and triggers


def test_settings_defaults_are_the_seed_defaults():
    s = HierarchicalSettings()
    assert (s.trigger_message_count, s.recent_message_count, s.max_narrative_tokens) == (20, 10, 500)
    assert s.llm_model == "gemini-2.0-flash"
    assert s.resummarize_every == 10


def test_at_or_below_trigger_count_is_take_last():
    state, derived, _ = run(chat(20))
    assert requests_of(derived) == []
    plan = POLICY.plan(state, ctx_for())
    assert plan.fallback == "takeLast"
    assert plan.memory == () and plan.verbatim_from == 0 and plan.verbatim_indices is None


def test_above_trigger_requests_facts_of_originals_before_the_recent_window():
    state, derived, worker = run(chat(21))
    [req] = requests_of(derived)
    p = req.payload
    assert (p.covers_from, p.covers_to) == (0, 10)  # cut = 21 - 10 - 1
    assert (p.input_from, p.input_to) == (0, 10)
    assert p.kind == "facts" and p.token_cap == 500 and p.base_summary_id is None
    assert p.policy == "hierarchical" and p.status == "processing"
    plan = POLICY.plan(state, ctx_for())
    assert plan.fallback is None
    assert [m.kind for m in plan.memory] == ["facts", "narrative"]
    assert plan.verbatim_from == 11  # the last 10 messages: 11..20


def test_seed_data_flow_thirty_messages():
    """Seed 000 'Data Flow': messages[0..19] summarized, messages[20..29] verbatim."""
    ctx = ctx_for(resummarize_every=1)
    state, derived, _ = run(chat(30), ctx=ctx)
    assert state.summary is not None and state.summary.covers_to == 19
    plan = POLICY.plan(state, ctx)
    facts, narrative = plan.memory
    assert facts.content == "- order_id: #1234\n- status: approved\n- amount: $50"
    assert facts.kind == "facts" and facts.tokens == COUNT.count_message(facts.content)
    assert narrative.kind == "narrative" and narrative.content.startswith(NARRATIVE)
    assert plan.verbatim_from == 20 and plan.fallback is None
    # Every request summarizes the originals from message 0: never a summary of a summary.
    assert all(r.payload.input_from == 0 and r.payload.covers_from == 0 for r in requests_of(derived))


def test_resummarize_every_spaces_requests_and_a_lagging_summary_hides_nothing():
    ctx = ctx_for()
    state, derived, _ = run(chat(30), ctx=ctx)
    assert [r.payload.covers_to for r in requests_of(derived)] == [10]
    plan = POLICY.plan(state, ctx)
    # Summary covers 0..10; 11..19 left the recent window but are not covered: they stay verbatim.
    assert plan.verbatim_from == 11 and plan.notes["stale"] is True
    first_summary = state.summary.summary_id
    state, derived, _ = run([msg(30)], ctx=ctx, state=state)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 20
    assert req.payload.base_summary_id == first_summary  # its facts go to the merge as "Existing facts"
    assert POLICY.plan(state, ctx).verbatim_from == 21


def test_resummarize_every_one_follows_every_message():
    ctx = ctx_for(resummarize_every=1)
    _, derived, _ = run(chat(25), ctx=ctx)
    assert [r.payload.covers_to for r in requests_of(derived)] == [10, 11, 12, 13, 14]


def test_facts_are_the_latest_summarys_merged_list():
    ctx = ctx_for(resummarize_every=1)
    merged = (Fact(key="order_id", value="#1234"), Fact(key="order_status", value="cancelled", category="STATE"))

    def worker(request, state):
        if request.payload.covers_to == 10:
            return answer(request, "ok")
        return fold.produced(request, text="n2", facts=merged, summarizer="s", model="m", prompt_hash="x")

    state, _, _ = run(chat(22), ctx=ctx, worker=worker)
    assert state.summary.facts == merged
    assert POLICY.plan(state, ctx).memory[0].content == "- order_id: #1234\n- order_status: cancelled"


def test_narrative_only_or_facts_only_summary_gives_one_memory_message():
    ctx = ctx_for()

    def only_narrative(r, s):
        return fold.produced(r, text="just a story", summarizer="s", model="m", prompt_hash="x")

    state, _, _ = run(chat(21), ctx=ctx, worker=only_narrative)
    assert [m.kind for m in POLICY.plan(state, ctx).memory] == ["narrative"]

    def only_facts(r, s):
        return fold.produced(r, text="", facts=FACTS[:1], summarizer="s", model="m", prompt_hash="x")

    state, _, _ = run(chat(21), ctx=ctx, worker=only_facts)
    plan = POLICY.plan(state, ctx)
    assert [m.kind for m in plan.memory] == ["facts"] and plan.fallback is None


# --------------------------------------------------------------------------- Safety Mechanisms table


def test_failure_without_previous_summary_falls_back_to_take_last():
    ctx = ctx_for()
    state, derived, _ = run(chat(21), ctx=ctx, worker=Scripted("fail"))
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_failed" and plan.memory == () and plan.verbatim_from == 0
    assert plan.notes["mode"] == "takeLast"
    [req] = requests_of(derived)
    assert state.requests.failed_ids == (req.payload.request_id,)


def test_failed_range_is_not_requested_again_until_new_messages_leave_the_window():
    ctx = ctx_for()
    state, derived, _ = run(chat(21), ctx=ctx, worker=Scripted("fail"))
    [req] = requests_of(derived)
    # The failure event re-delivered, the request re-delivered, a clock tick: nothing new is asked.
    for item in (fold.failed(req, reason="again", error_type="X"), req, _tick()):
        after, more = fold.step(POLICY, state, item, ctx)
        assert after == state and more == []
    state, derived, _ = run(chat(9, start=21), ctx=ctx, state=state)
    assert requests_of(derived) == []
    state, derived, _ = run([msg(30)], ctx=ctx, state=state)
    [retry] = requests_of(derived)
    assert retry.payload.covers_to == 20 and retry.payload.request_id != req.payload.request_id
    assert POLICY.plan(state, ctx).fallback is None


def test_empty_summary_falls_back_to_take_last():
    ctx = ctx_for()
    state, _, _ = run(chat(21), ctx=ctx, worker=Scripted("empty"))
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_empty" and plan.memory == () and plan.verbatim_from == 0
    assert state.summary is None


def test_failure_with_previous_summary_keeps_it_and_the_uncovered_messages():
    ctx = ctx_for()
    state, _, _ = run(chat(31), ctx=ctx, worker=Scripted("ok", "fail"))
    assert state.summary.covers_to == 10
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_failed" and plan.notes["mode"] == "hierarchical"
    assert [m.kind for m in plan.memory] == ["facts", "narrative"]
    assert plan.verbatim_from == 11


def test_empty_summary_with_previous_summary_keeps_it():
    ctx = ctx_for()
    state, _, _ = run(chat(31), ctx=ctx, worker=Scripted("ok", "empty"))
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_empty" and len(plan.memory) == 2 and plan.verbatim_from == 11


def test_recent_window_larger_than_total_returns_all_messages_and_skips_summarization():
    ctx = ctx_for(recent_message_count=30)
    state, derived, _ = run(chat(25), ctx=ctx)
    assert requests_of(derived) == []
    plan = POLICY.plan(state, ctx)
    assert plan.verbatim_from == 0 and plan.memory == () and plan.fallback == "recent_covers_all"


def test_newer_request_supersedes_a_pending_one_and_its_late_result_is_ignored():
    ctx = ctx_for()
    state, derived, _ = run(chat(31), ctx=ctx, worker=Scripted(None, None))
    first, second = requests_of(derived)
    assert state.requests.pending_id == second.payload.request_id
    assert state.requests.superseded_ids == (first.payload.request_id,)
    late = answer(first, "ok")
    after, more = fold.step(POLICY, state, late, ctx)
    assert after == state and more == []
    assert POLICY.plan(after, ctx).memory == ()
    state, _ = fold.step(POLICY, state, answer(second, "ok"), ctx)
    assert state.summary.request_id == second.payload.request_id and state.summary.covers_to == 20
    # The superseded request's own log copy arriving late does not bring it back.
    after, more = fold.step(POLICY, state, first, ctx)
    assert after == state and more == []


def test_pending_summary_is_exposed_for_the_lazy_fallback():
    ctx = ctx_for(lazy_timeout_ms=1500)
    state, derived, _ = run(chat(21), ctx=ctx, worker=Scripted(None))
    [req] = requests_of(derived)
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "takeLast" and plan.verbatim_from == 0
    assert plan.notes["pending_request"] == req.payload.request_id
    assert plan.notes["stale"] is True and plan.notes["lazy_timeout_ms"] == 1500


def test_memory_messages_lead_the_plan_and_carry_token_counts():
    ctx = ctx_for()
    state, _, _ = run(chat(21), ctx=ctx)
    for m in POLICY.plan(state, ctx).memory:
        assert m.tokens == COUNT.count_message(m.content) > 0


# --------------------------------------------------------------------------- tool groups


def _tool_chat(n_before: int) -> list[MessageRecord]:
    """``n_before`` plain messages, then an assistant tool call with two results, a reply, and a user message."""
    items = chat(n_before)
    i = n_before
    call = (ToolCall(id="call_a", name="lookup", arguments='{"q": 1}'), ToolCall(id="call_b", name="lookup"))
    items.append(msg(i, "assistant", "", tool_calls=call))
    items.append(msg(i + 1, "tool", '{"order": "#1234"}', tool_call_id="call_a"))
    items.append(msg(i + 2, "tool", '{"status": "approved"}', tool_call_id="call_b"))
    items.append(msg(i + 3, "assistant", "Your order #1234 is approved."))
    items.append(msg(i + 4, "user", "thanks"))
    return items


@pytest.mark.parametrize("n_before", [8, 9, 10])
def test_cut_never_separates_a_tool_call_from_its_results(n_before):
    ctx = ctx_for(trigger_message_count=12, recent_message_count=4)
    items = _tool_chat(n_before)
    call_at = n_before
    state, derived, _ = run(items, ctx=ctx)
    for req in requests_of(derived):
        cut = req.payload.covers_to
        assert not (call_at <= cut < call_at + 2), f"cut {cut} splits the group {call_at}..{call_at + 2}"
    plan = POLICY.plan(state, ctx)
    assert not (call_at < plan.verbatim_from <= call_at + 2)


def test_cut_moves_back_to_the_tool_call_head():
    ctx = ctx_for(trigger_message_count=14, recent_message_count=4)
    # 10 plain messages (0..9), call at 10, results 11..12, reply 13, user 14: count 15, boundary 11.
    state, derived, _ = run(_tool_chat(10), ctx=ctx)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 9  # boundary 11 is inside the group: moved back to the call at 10
    assert POLICY.plan(state, ctx).verbatim_from == 10


def test_a_trailing_tool_group_waits_for_its_results():
    ctx = ctx_for(trigger_message_count=3, recent_message_count=0)
    items = chat(4) + [msg(4, "assistant", "", tool_calls=(ToolCall(id="c", name="f"),))]
    state, derived, _ = run(items, ctx=ctx)
    assert [r.payload.covers_to for r in requests_of(derived)] == [3]  # not 4: the call's result may still come


# --------------------------------------------------------------------------- idempotency and persistence


def test_a_settings_change_decides_under_the_new_settings_at_once():
    ctx = ctx_for()
    state, _, _ = run(chat(15), ctx=ctx)
    changed = SettingsChanged(
        event_id="s1", conversation_id="c1", tenant_id="t1", occurred_at=T0,
        payload=SettingsChangedPayload(policy="hierarchical", settings={"trigger_message_count": 10}),
    )
    after, more = fold.step(POLICY, state, changed, ctx_for(trigger_message_count=10))
    assert [r.payload.covers_to for r in more] == [4]  # decided under the new settings at once


def _tick():
    return ClockTicked(
        event_id="tick", conversation_id="c1", tenant_id="t1", occurred_at=T0, payload=ClockTickedPayload(now=T0)
    )
