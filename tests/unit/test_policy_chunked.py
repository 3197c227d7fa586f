"""Seed 001 (chunked summary) as a pure fold: turns, threshold, in-flight guard, prompt budget; the fold laws are tests/contract/policy_contract.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial

from support.policy_kit import (
    COUNT,
    ScriptedSummarizer,
    context_builder,
    fold_runner,
    record,
    requests_of,
    scripted_reply,
)

from memfold.core.events import SummaryRequested, ToolCall
from memfold.core.ports import MessageRecord
from memfold.core.settings import ChunkedSettings
from memfold.projections import fold
from memfold.projections.policies.chunked import SUMMARY_HEADER, ChunkedPolicy

POLICY = ChunkedPolicy()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SUMMARY_TEXT = "The student works on Bach partita bowing; goal: clean string crossings."


# --------------------------------------------------------------------------- helpers


def msg(i: int, role: str, tokens: int, **kw) -> MessageRecord:
    """A message costing exactly ``tokens`` prompt tokens (content + 4 overhead)."""
    m = record(i, role, " tok" * (tokens - 4), at=T0 + timedelta(seconds=i), **kw)
    assert m.tokens == tokens
    return m


def turns(n: int, tokens: int = 1000, start: int = 0, variants=("arco",)) -> list[MessageRecord]:
    """``n`` user+assistant turns of ``tokens`` each (half per message), from message index ``start``."""
    out = []
    for t in range(n):
        i = start + 2 * t
        out.append(msg(i, "user", tokens // 2))
        out.append(msg(i + 1, "assistant", tokens - tokens // 2, model_variant=variants[t % len(variants)]))
    return out


ctx_for = context_builder("chunked", ChunkedSettings)


def answer(request: SummaryRequested, how: str | None, text: str = SUMMARY_TEXT):
    return scripted_reply(request, how, text=text, fail_reason="nano timed out")


class Scripted(ScriptedSummarizer):
    """A fake summarizer worker answering from a script; "ok" answers are ``text``."""

    def __init__(self, *script: str | None, default: str | None = "ok", text: str = SUMMARY_TEXT):
        super().__init__(partial(answer, text=text), *script, default=default)


run = fold_runner(POLICY, ctx_for, Scripted)


# --------------------------------------------------------------------------- knobs and triggers


def test_settings_defaults_are_the_seed_knobs():
    s = ChunkedSettings()
    assert (s.k_raw_turns, s.summary_token_cap, s.prompt_token_budget, s.chunk_summarize_threshold) == (
        3,
        500,
        3000,
        6000,
    )
    assert s.min_tail_turns == 1 and s.summarizer_model == "gpt-5.1-nano"
    assert s.prompt_id == "pmpt_6917ebe9367c819396fe4840cf0f0e050c18a965a3366120"


def test_short_chat_keeps_an_empty_summary_and_a_sliding_window_of_k_turns():
    ctx = ctx_for()
    state, derived = run(turns(5, tokens=200), ctx=ctx)
    assert requests_of(derived) == [] and state.global_summary == ""
    plan = POLICY.plan(state, ctx)
    assert plan.memory == () and plan.verbatim_from == 4 and plan.fallback is None  # turns 3..5


def test_threshold_is_exclusive_and_older_part_goes_to_the_summary():
    ctx = ctx_for()
    state, derived = run(turns(6), ctx=ctx)  # 6000 tokens: not above the threshold
    assert requests_of(derived) == []
    state, derived = run(turns(1, start=12), ctx=ctx, state=state)  # 7000 > 6000, 7 turns > K
    [req] = requests_of(derived)
    p = req.payload
    assert (p.covers_from, p.covers_to) == (0, 7)  # olderPart = turns 1..4 (messages 0..7)
    assert (p.input_from, p.input_to) == (0, 7)
    assert p.base_summary_id is None and p.kind == "text" and p.token_cap == 500 and p.policy == "chunked"
    assert state.global_summary == SUMMARY_TEXT and state.last_summarized_index == 7
    assert [m.index for m in state.buffer] == list(range(8, 14))
    assert state.summary_tokens == COUNT.count(SUMMARY_TEXT)


def test_second_chunk_builds_on_the_summary_and_starts_after_it():
    ctx = ctx_for()
    state, derived = run(turns(10), ctx=ctx)
    first, second = requests_of(derived)
    # After S1: buffer = turns 5..; at turn 10: summary + 6000 tokens > 6000.
    p = second.payload
    assert (p.covers_from, p.covers_to) == (0, 13) and (p.input_from, p.input_to) == (8, 13)
    assert p.base_summary_id == fold.summary_id_for(first.payload.request_id)
    assert state.last_summarized_index == 13


def test_needs_more_than_k_turns():
    ctx = ctx_for()
    state, derived = run(turns(3, tokens=2500), ctx=ctx)  # 7500 > 6000 but only K turns: olderPart empty
    assert requests_of(derived) == []
    state, derived = run(turns(1, tokens=100, start=6), ctx=ctx, state=state)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 1  # turn 1 only


def test_k_knob_changes_the_split():
    ctx = ctx_for(k_raw_turns=5)
    _, derived = run(turns(7), ctx=ctx)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 3  # 7 turns, keep 5: turns 1..2


def test_in_flight_guard_allows_one_request_at_a_time():
    ctx = ctx_for()
    state, derived = run(turns(12), ctx=ctx, worker=Scripted(None))
    [req] = requests_of(derived)  # 12 turns: over the threshold at every turn from 7 on, asked once
    assert state.requests.pending_id == req.payload.request_id
    # The answer arrives: the buffer is still over the threshold, so the next chunk is asked for at once.
    state, more = fold.step(POLICY, state, answer(req, "ok"), ctx)
    [nxt] = more
    assert nxt.payload.input_from == 8 and nxt.payload.covers_to == 17  # turns 5..9 (12 turns, keep 3)
    assert state.requests.pending_id == nxt.payload.request_id


def test_multi_model_turns_are_treated_identically():
    ctx = ctx_for()
    mixed_items = turns(12, variants=("arco", "deep-dive", "arco-pro"))
    plain, derived_plain = run(turns(12), ctx=ctx)
    mixed, derived_mixed = run(mixed_items, ctx=ctx)
    assert len(requests_of(derived_plain)) == 2
    assert derived_plain == derived_mixed
    assert POLICY.plan(plain, ctx) == POLICY.plan(mixed, ctx)
    # The variant is recorded (for debugging) but read by no decision.
    assert [m.model_variant for m in mixed.buffer] == [mixed_items[m.index].model_variant for m in mixed.buffer]
    assert {m.model_variant for m in mixed.buffer if m.role == "assistant"} == {"arco", "deep-dive", "arco-pro"}


# --------------------------------------------------------------------------- tool use


def test_a_turn_with_tool_calls_completes_at_the_final_reply_and_stays_whole():
    ctx = ctx_for()
    state, derived = run(turns(6) + [msg(12, "user", 10)], ctx=ctx)
    call = msg(13, "assistant", 50, tool_calls=(ToolCall(id="x", name="search"),))
    state, derived = run([call, msg(14, "tool", 2000, tool_call_id="x")], ctx=ctx, state=state)
    assert requests_of(derived) == []  # turn 7 is in progress (result in, no reply yet): not counted
    plan = POLICY.plan(state, ctx)
    # The exchange in progress is not memory: the last K completed turns (4..6) + turn 7 so far.
    assert plan.verbatim_from == 6 and plan.notes["tail_turns"] == 3
    state, derived = run([msg(15, "assistant", 40)], ctx=ctx, state=state)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 7  # turns 1..4; turn 7 (12..15) stays whole in the tail


def test_tool_groups_in_an_older_turn_are_summarized_whole():
    ctx = ctx_for()
    items = [
        msg(0, "user", 500),
        msg(1, "assistant", 100, tool_calls=(ToolCall(id="a", name="f"), ToolCall(id="b", name="g"))),
        msg(2, "tool", 200, tool_call_id="a"),
        msg(3, "tool", 200, tool_call_id="b"),
        msg(4, "assistant", 500),
        *turns(6, start=5),
    ]
    _, derived = run(items, ctx=ctx)
    [req] = requests_of(derived)
    # 1500 + 5 x 1000 > 6000 at turn 6: olderPart = turns 1..3 (messages 0..8), the group 1..3 inside it.
    assert req.payload.covers_to == 8
    for r in requests_of(derived):
        nxt = r.payload.covers_to + 1
        assert nxt >= len(items) or items[nxt].role == "user"


# --------------------------------------------------------------------------- plan and budget


def test_plan_is_summary_under_background_header_then_last_k_turns():
    ctx = ctx_for()
    state, _ = run(turns(7, tokens=900), ctx=ctx, worker=Scripted(text=SUMMARY_TEXT))
    # 7 turns x 900 = 6300 > 6000: turns 1..4 summarized; tail = turns 5..7 (2700 tokens) + summary fits 3000.
    plan = POLICY.plan(state, ctx)
    [memory] = plan.memory
    assert memory.content == SUMMARY_HEADER + SUMMARY_TEXT and memory.kind == "summary"
    assert memory.content.startswith("BACKGROUND – PRIOR CONVERSATION SUMMARY (use only if relevant):\n")
    assert memory.tokens == COUNT.count_message(memory.content)
    assert plan.verbatim_from == 8 and plan.fallback is None and plan.notes["turns_dropped"] == 0


def test_budget_drops_oldest_tail_turns_first():
    ctx = ctx_for()
    state, _ = run(turns(7), ctx=ctx)  # tail turns 5..7 = 3000 tokens + summary > 3000
    plan = POLICY.plan(state, ctx)
    assert plan.verbatim_from == 10 and plan.notes["turns_dropped"] == 1 and plan.notes["tail_turns"] == 2
    assert plan.memory[0].content == SUMMARY_HEADER + SUMMARY_TEXT  # the summary is not cut
    assert "summary_truncated_from" not in plan.notes


def test_budget_truncates_the_summary_as_a_last_resort():
    long_summary = " ".join(f"fact{i} recorded" for i in range(300)) + " END-OF-SUMMARY"
    ctx = ctx_for(prompt_token_budget=1300)
    state, _ = run(turns(7), ctx=ctx, worker=Scripted(text=long_summary))
    plan = POLICY.plan(state, ctx)
    assert plan.notes["tail_turns"] == 1 and plan.verbatim_from == 12  # min_tail_turns = 1
    [memory] = plan.memory
    assert memory.content.startswith(SUMMARY_HEADER + "…") and memory.content.endswith("END-OF-SUMMARY")
    assert memory.tokens <= 300 and memory.tokens + 1000 <= 1300
    assert memory.tokens >= 290  # nearly all of the allowance is used
    assert plan.notes["summary_truncated_from"] > plan.notes["summary_truncated_to"] == memory.tokens


def test_budget_with_no_room_left_drops_the_summary_but_keeps_min_tail_turns():
    ctx = ctx_for(prompt_token_budget=900, min_tail_turns=1)
    state, _ = run(turns(7), ctx=ctx)
    plan = POLICY.plan(state, ctx)
    assert plan.memory == () and plan.verbatim_from == 12


def test_min_tail_turns_knob():
    ctx = ctx_for(prompt_token_budget=1000, min_tail_turns=2)
    state, _ = run(turns(7), ctx=ctx)
    plan = POLICY.plan(state, ctx)
    assert plan.notes["tail_turns"] == 2 and plan.verbatim_from == 10 and plan.memory == ()


def test_turn_in_progress_is_verbatim_and_not_counted_as_a_tail_turn():
    ctx = ctx_for()
    state, _ = run(turns(5, tokens=200) + [msg(10, "user", 30)], ctx=ctx)
    plan = POLICY.plan(state, ctx)
    assert plan.verbatim_from == 4 and plan.notes["tail_turns"] == 3  # turns 3..5 + the current user message


# --------------------------------------------------------------------------- fallbacks


def test_failure_is_not_retried_for_the_same_range_and_hides_nothing():
    ctx = ctx_for()
    state, derived = run(turns(7), ctx=ctx, worker=Scripted("fail"))
    [req] = requests_of(derived)
    assert state.requests.failed_ids == (req.payload.request_id,) and state.last_summarized_index == -1
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_failed" and plan.memory == () and plan.verbatim_from == 0
    for dup in (req, fold.failed(req, reason="again", error_type="X"), msg(13, "assistant", 500)):
        after, more = fold.step(POLICY, state, dup, ctx)
        assert after == state and more == []
    state, derived = run(turns(1, start=14), ctx=ctx, state=state)
    [retry] = requests_of(derived)
    assert retry.payload.covers_to == 9 and retry.payload.input_from == 0  # olderPart grew by a turn
    assert POLICY.plan(state, ctx).fallback is None


def test_failure_after_a_summary_keeps_it_and_every_uncovered_message():
    ctx = ctx_for()
    state, _ = run(turns(10), ctx=ctx, worker=Scripted("ok", "fail"))
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_failed"
    assert plan.memory[0].content == SUMMARY_HEADER + SUMMARY_TEXT
    assert plan.verbatim_from == 8  # the whole chunk buffer, not only the last K turns


def test_empty_summary_is_not_applied():
    ctx = ctx_for()
    state, _ = run(turns(7), ctx=ctx, worker=Scripted("empty"))
    assert state.global_summary == "" and state.last_summarized_index == -1
    plan = POLICY.plan(state, ctx)
    assert plan.fallback == "summary_empty" and plan.verbatim_from == 0


def test_pending_request_is_in_the_notes():
    ctx = ctx_for()
    state, derived = run(turns(7), ctx=ctx, worker=Scripted(None))
    [req] = requests_of(derived)
    plan = POLICY.plan(state, ctx)
    assert plan.notes["pending_request"] == req.payload.request_id and plan.fallback is None


# --------------------------------------------------------------------------- idempotency, persistence, properties


def test_messages_before_the_first_user_message_form_their_own_turn():
    ctx = ctx_for()
    items = [msg(0, "system", 20), msg(1, "assistant", 30)] + turns(6, start=2)
    _, derived = run(items, ctx=ctx)
    [req] = requests_of(derived)
    assert req.payload.covers_to == 7  # 7 turns (the leading one + 6): olderPart = leading + turns 1..3
