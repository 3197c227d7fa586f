"""Seed 003 (rolling summary) as a pure fold: thresholds, the 20/30/40 worked example, fallbacks; the fold laws are tests/contract/policy_contract.py."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

import pytest
from support.policy_kit import (
    Messages,
    ScriptedSummarizer,
    context_builder,
    fold_runner,
    requests_of,
    scripted_reply,
)

from memfold.core.events import Fact, SummaryRequested, ToolCall
from memfold.core.ports import MessageRecord
from memfold.core.settings import RollingSettings
from memfold.projections import fold
from memfold.projections.policies import state_codec
from memfold.projections.policies.rolling import RollingPolicy, RollingState

POLICY = RollingPolicy()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- helpers


msg = Messages(T0, lambda i, role: f"M{i + 1} from the {role}")
chat = msg.chat
ctx_for = context_builder("rolling", RollingSettings)


def answer(request: SummaryRequested, how: str | None):
    return scripted_reply(request, how, text=f"S covering {request.payload.covers_to + 1} messages")


Scripted = partial(ScriptedSummarizer, answer)
run = fold_runner(POLICY, ctx_for, Scripted)


# --------------------------------------------------------------------------- seed knobs


def test_settings_defaults_are_the_seed_configuration():
    s = RollingSettings()
    assert (s.message_threshold, s.token_threshold, s.recent_messages_to_keep) == (20, 8000, 10)
    assert (s.regeneration_threshold, s.max_summary_length, s.max_messages) == (10, 2000, None)


def test_without_summary_all_messages_are_sent():
    state, derived = run(chat(19))
    assert requests_of(derived) == []
    plan = POLICY.plan(state, ctx_for())
    assert plan.memory == () and plan.verbatim_from == 0 and plan.fallback == "takeLast"


def test_without_summary_max_messages_caps_the_verbatim_messages():
    ctx = ctx_for(max_messages=5)
    state, _ = run(chat(12), ctx=ctx)
    assert POLICY.plan(state, ctx).verbatim_from == 7


# --------------------------------------------------------------------------- the worked example


def test_state_1_twenty_messages_first_summarization():
    ctx = ctx_for()
    state, derived = run(chat(20), ctx=ctx)
    [req] = requests_of(derived)
    p = req.payload
    assert (p.covers_from, p.covers_to) == (0, 9)  # S1 covers 10 messages
    assert (p.input_from, p.input_to) == (0, 9) and p.base_summary_id is None
    assert p.kind == "text" and p.char_cap == 2000 and p.policy == "rolling"
    assert state.summary.covers_count == 10
    plan = POLICY.plan(state, ctx)
    assert [m.content for m in plan.memory] == ["S covering 10 messages"]
    assert plan.memory[0].kind == "summary" and plan.verbatim_from == 10  # [S1] + M11..M20
    assert plan.fallback is None


def test_a_summary_with_facts_shows_them_all_as_key_facts_and_its_text_without_its_list():
    ctx = ctx_for()
    text = "Key facts:\n- order_id: #1234 (msg 0)\nSummary: Order talk."
    facts = (Fact(key="phone", value="+1 720-555-0100", stated_at=T0, stated_in=2, superseded_by="+1 415-555-0153"),
             Fact(key="phone", value="+1 415-555-0153", stated_at=T0, stated_in=5),
             Fact(key="order_id", value="#1234", category="ENTITY", stated_at=T0, stated_in=0))
    with_facts = partial(ScriptedSummarizer, lambda r, how: scripted_reply(r, how, text=text, facts=facts))
    state, _ = fold_runner(POLICY, ctx_for, with_facts)(chat(20), ctx=ctx)
    plan = POLICY.plan(state, ctx)
    assert [m.kind for m in plan.memory] == ["key_facts", "summary"]
    assert plan.memory[0].content == "[2026-01-01]\n- phone: +1 415-555-0153\n- order_id: #1234"  # current ones
    assert plan.memory[1].content == "Summary: Order talk." and plan.verbatim_from == 10
    assert state_codec.decode(RollingState, state_codec.encode(state)) == state


def test_state_2_thirty_messages_regeneration():
    ctx = ctx_for()
    state, derived = run(chat(30), ctx=ctx)
    s1, s2 = requests_of(derived)
    p = s2.payload
    assert (p.covers_from, p.covers_to) == (0, 19)  # S2 covers 20
    assert (p.input_from, p.input_to) == (10, 19)  # S1 + messages 11-20
    assert p.base_summary_id == fold.summary_id_for(s1.payload.request_id)
    plan = POLICY.plan(state, ctx)
    assert plan.memory[0].content == "S covering 20 messages" and plan.verbatim_from == 20  # [S2] + M21..M30


def test_state_3_forty_messages_and_onwards():
    ctx = ctx_for()
    state, derived = run(chat(60), ctx=ctx)
    reqs = requests_of(derived)
    assert [r.payload.covers_to + 1 for r in reqs] == [10, 20, 30, 40, 50]  # S1..S5
    assert [r.payload.input_from for r in reqs] == [0, 10, 20, 30, 40]
    at_40 = reqs[2].payload
    assert (at_40.input_from, at_40.input_to) == (20, 29)  # S2 + messages 21-30
    plan = POLICY.plan(state, ctx)
    assert plan.verbatim_from == 50 and plan.memory[0].content == "S covering 50 messages"


def test_regeneration_formula_boundary():
    ctx = ctx_for()
    state, derived = run(chat(29), ctx=ctx)
    assert len(requests_of(derived)) == 1  # 29 - (10 + 10) = 9 < 10
    state, derived = run([msg(29)], ctx=ctx, state=state)
    assert len(requests_of(derived)) == 1  # 30 - (10 + 10) = 10 >= 10


@pytest.mark.parametrize("threshold,expected", [(20, 20), (15, 15), (25, 25)])
def test_message_threshold_knob(threshold, expected):
    ctx = ctx_for(message_threshold=threshold)
    _, derived = run(chat(40), ctx=ctx)
    first = requests_of(derived)[0]
    assert first.payload.covers_to == expected - 10 - 1


def test_token_threshold_triggers_the_first_summary_with_real_token_counts():
    ctx = ctx_for()
    big = " tok" * 996  # 996 tokens + 4 overhead = 1000 per message
    items = [msg(i, content=big) for i in range(12)]
    assert all(m.tokens == 1000 for m in items)
    state, derived = run(items[:10], ctx=ctx)
    # 8000 tokens are reached at 8 messages, but all 10 are the recent ones: nothing older to summarize.
    assert state.tokens == 10000 and requests_of(derived) == []
    state, derived = run([items[10]], ctx=ctx, state=state)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 0  # 11 messages < 20, but 11000 tokens >= 8000: summarize the oldest one


def test_token_threshold_exact_boundary():
    ctx = ctx_for(recent_messages_to_keep=2)
    items = [msg(i, content=" tok" * 1996) for i in range(4)]  # 2000 tokens each
    state, derived = run(items[:3], ctx=ctx)
    assert state.tokens == 6000 and requests_of(derived) == []
    state, derived = run(items[3:], ctx=ctx, state=state)
    assert state.tokens == 8000
    [req] = requests_of(derived)
    assert req.payload.covers_to == 1


def test_token_threshold_below_does_not_trigger():
    ctx = ctx_for(recent_messages_to_keep=2)
    items = [msg(i, content=" tok" * 1995) for i in range(4)]  # 1999 each: 7996 < 8000
    _, derived = run(items, ctx=ctx)
    assert requests_of(derived) == []


# --------------------------------------------------------------------------- fallbacks


def test_first_summary_failure_keeps_all_messages_and_is_not_retried_for_the_same_range():
    ctx = ctx_for()
    state, derived = run(chat(20), ctx=ctx, worker=Scripted("fail"))
    [req] = requests_of(derived)
    plan = POLICY.plan(state, ctx)
    assert plan.memory == () and plan.verbatim_from == 0 and plan.fallback == "summary_failed"
    assert state.requests.failed_ids == (req.payload.request_id,)
    for item in (req, fold.failed(req, reason="again", error_type="X"), msg(19)):
        after, more = fold.step(POLICY, state, item, ctx)
        assert after == state and more == []
    state, derived = run(chat(10, start=20), ctx=ctx, state=state)
    [retry] = requests_of(derived)
    assert (retry.payload.covers_to, retry.payload.input_from) == (19, 0)
    assert POLICY.plan(state, ctx).fallback is None


def test_regeneration_failure_keeps_previous_summary_and_uncovered_messages():
    ctx = ctx_for()
    state, _ = run(chat(30), ctx=ctx, worker=Scripted("ok", "fail"))
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_failed"
    assert plan.memory[0].content == "S covering 10 messages" and plan.verbatim_from == 10


def test_empty_summary_is_not_used():
    ctx = ctx_for()
    state, _ = run(chat(30), ctx=ctx, worker=Scripted("ok", "empty"))
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_empty" and plan.verbatim_from == 10
    state, _ = run(chat(20), ctx=ctx, worker=Scripted("empty"))
    assert state.summary is None and POLICY.plan(state, ctx).verbatim_from == 0


def test_newer_request_supersedes_a_pending_one():
    ctx = ctx_for()
    state, derived = run(chat(30), ctx=ctx, worker=Scripted(None, None))
    first, second = requests_of(derived)
    assert second.payload.input_from == 0 and second.payload.base_summary_id is None  # no summary to build on
    assert state.requests.superseded_ids == (first.payload.request_id,)
    after, more = fold.step(POLICY, state, answer(first, "ok"), ctx)
    assert after == state and more == []
    state, _ = fold.step(POLICY, state, answer(second, "ok"), ctx)
    assert state.summary.covers_count == 20
    plan = POLICY.plan(state, ctx)
    assert plan.verbatim_from == 20 and plan.notes["pending_request"] is None


def test_pending_request_is_in_the_notes():
    ctx = ctx_for()
    state, derived = run(chat(20), ctx=ctx, worker=Scripted(None))
    [req] = requests_of(derived)
    assert POLICY.plan(state, ctx).notes["pending_request"] == req.payload.request_id


# --------------------------------------------------------------------------- tool groups


def test_cut_moves_back_so_the_tool_call_stays_with_its_results():
    ctx = ctx_for()
    # count 20 at the reply: boundary 10 falls on the first result (call at 9): the cut moves to 8.
    state, derived = run(chat(9) + _group_at(9, 20), ctx=ctx)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 8
    assert POLICY.plan(state, ctx).verbatim_from == 9


def _group_at(call: int, total: int) -> list[MessageRecord]:
    """A call at ``call`` with two results, then plain messages up to ``total`` messages."""
    items = [
        msg(call, "assistant", "", tool_calls=(ToolCall(id="a", name="f"), ToolCall(id="b", name="g"))),
        msg(call + 1, "tool", "result a", tool_call_id="a"),
        msg(call + 2, "tool", "result b", tool_call_id="b"),
    ]
    return items + [msg(i) for i in range(call + 3, total)]


def test_max_messages_window_keeps_the_tool_group_whole():
    ctx = ctx_for(max_messages=3, message_threshold=100, token_threshold=10**6)
    state, _ = run(chat(5) + _group_at(5, 10), ctx=ctx)
    # 10 messages, last 3 would start at 7 (the second result): moved back to the call at 5.
    assert POLICY.plan(state, ctx).verbatim_from == 5
