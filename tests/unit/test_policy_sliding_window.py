"""Seed 002 (sliding window memory agent): the seed's tables, fallbacks, tool groups; the fold laws are tests/contract/policy_contract.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.policy_kit import FoldDriver, context_builder, record, requests_of

from memfold.core.events import (
    ClockTicked,
    ClockTickedPayload,
    SummaryRequested,
    ToolCall,
)
from memfold.core.ports import MessageRecord
from memfold.core.settings import SlidingWindowSettings
from memfold.projections import fold
from memfold.projections.policies import sliding_window as sw
from memfold.projections.policies.sliding_window import SlidingWindowPolicy, window_range

T0 = datetime(2025, 1, 1, tzinfo=UTC)
POLICY = SlidingWindowPolicy()


make_ctx = context_builder("sliding_window", SlidingWindowSettings)


def msg(index: int, role: str, content: str | None = None, *, calls=(), answers=None, conv="c1") -> MessageRecord:
    content = content if content is not None else f"{role} message {index}"
    return record(
        index,
        role,
        content,
        at=T0 + timedelta(minutes=index),
        conversation_id=conv,
        event_id=f"m-{conv}-{index}",
        tool_calls=tuple(ToolCall(id=c, name="lookup") for c in calls),
        tool_call_id=answers,
    )


def alternating(n: int, conv: str = "c1") -> list[MessageRecord]:
    return [msg(i, "user" if i % 2 == 0 else "assistant", conv=conv) for i in range(n)]


class Driver(FoldDriver):
    """Folds items one at a time like the projector, recording the log; answers on demand (None = pending)."""

    policy = POLICY
    latency_ms = 100
    fail_reason = "model down"
    error_type = "SummarizerTimeoutError"

    @property
    def requests(self) -> list[SummaryRequested]:
        return requests_of(self.derived)


def covers(req: SummaryRequested) -> tuple[int, int]:
    return req.payload.covers_from, req.payload.covers_to


# --------------------------------------------------------------------------- the seed's tables


@pytest.mark.parametrize("end,expected", [(5, (0, 5)), (13, (0, 13)), (15, (2, 15)), (19, (6, 19))])
def test_window_calculation_table(end, expected):
    assert window_range(end, 14) == expected


def test_round_start_rounds_up_to_even():
    assert window_range(16, 14) == (4, 16)  # 16-14+1 = 3 → 4
    assert window_range(5, 4) == (2, 5)


def test_data_flow_timeline_and_memory_table_evolution():
    ctx = make_ctx()
    d = Driver(ctx)
    msgs = alternating(20)

    # Rounds 1-3: nothing until seq 5 is saved.
    for m in msgs[:5]:
        assert d.feed(m) == []
    assert d.plan().fallback == "no_memory"
    [r1] = d.feed(msgs[5])  # round 3 ends
    assert covers(r1) == (0, 5)
    assert r1.payload.base_summary_id is None
    assert (r1.payload.input_from, r1.payload.input_to, r1.payload.window_start) == (0, 5, 0)
    assert sw.processing(d.state).ordinal == 1

    # Round 4 starts: memory 1 still processing → raw messages 0-6.
    d.feed(msgs[6])
    p = d.plan()
    assert (p.fallback, p.verbatim_from, p.memory, p.verbatim_indices) == ("no_memory", 0, (), None)
    assert d.feed(msgs[7]) == []  # round 4 ends: id=1 still processing → skip
    d.produce(r1, "M1", latency_ms=1200)

    # Round 5 starts: memory 1 + gap 6-8.
    d.feed(msgs[8])
    p = d.plan()
    assert p.fallback is None
    assert [m.content for m in p.memory] == ["[Previous context: M1]"]
    assert p.memory[0].kind == "summary" and p.memory[0].tokens > 0
    assert p.verbatim_from == 6 and p.notes["ordinal"] == 1
    [r2] = d.feed(msgs[9])  # round 5 ends
    assert covers(r2) == (0, 9)
    assert r2.payload.base_summary_id == fold.summary_id_for(r1.payload.request_id)
    assert (r2.payload.input_from, r2.payload.input_to) == (6, 9)  # incremental from base.end + 1

    # Rounds 6-7: memory 2 finishes during round 6, so the round-6 end is skipped.
    d.feed(msgs[10])
    assert d.feed(msgs[11]) == []
    d.produce(r2, "M2", latency_ms=900)
    d.feed(msgs[12])
    [r3] = d.feed(msgs[13])
    assert covers(r3) == (0, 13) and r3.payload.input_from == 10
    d.produce(r3, "M3", latency_ms=800)

    # Round 8 ends (seq 15): the window starts sliding.
    d.feed(msgs[14])
    [r4] = d.feed(msgs[15])
    assert covers(r4) == (2, 15)
    assert (r4.payload.window_start, r4.payload.input_from) == (2, 14)
    d.feed(msgs[16])
    assert d.feed(msgs[17]) == []
    d.produce(r4, "M4", latency_ms=700)
    d.feed(msgs[18])
    assert d.plan().verbatim_from == 16
    [r5] = d.feed(msgs[19])
    assert covers(r5) == (6, 19) and r5.payload.window_start == 6
    d.produce(r5, "M5", latency_ms=600)

    rows = sw.memory_rows(d.state)
    assert [(r["ordinal"], r["start_sequence"], r["end_sequence"], r["base_ordinal"], r["status"]) for r in rows] == [
        (1, 0, 5, None, "completed"),
        (2, 0, 9, 1, "completed"),
        (3, 0, 13, 2, "completed"),
        (4, 2, 15, 3, "completed"),
        (5, 6, 19, 4, "completed"),
    ]
    ids = [r["memory_id"] for r in rows]
    assert [r["base_memory_id"] for r in rows] == [None, *ids[:-1]]
    assert [r["generation_time_ms"] for r in rows] == [1200, 900, 800, 700, 600]
    assert [r["in_force"] for r in rows] == [False, False, False, False, True]
    assert all(r["memory_id"] == fold.summary_id_for(r["request_id"]) for r in rows)
    assert POLICY.rows(d.state) == {"memory": rows}
    assert d.plan().memory[0].content == "[Previous context: M5]" and d.plan().verbatim_from == 20


def test_at_most_one_processing_per_conversation():
    d = Driver(make_ctx())
    for m in alternating(40):
        d.feed(m)
    assert len(d.requests) == 1  # never answered → never a second one
    assert sum(r["status"] == "processing" for r in sw.memory_rows(d.state)) == 1


def test_decides_only_on_round_ends():
    d = Driver(make_ctx(summarize_after_seq=0))
    assert d.feed(msg(0, "user")) == []
    [r] = d.feed(msg(1, "assistant"))
    assert covers(r) == (0, 1)


# --------------------------------------------------------------------------- failures and fallbacks


def test_first_memory_failed_reads_raw_and_asks_again_next_round():
    d = Driver(make_ctx())
    msgs = alternating(10)
    for m in msgs[:6]:
        d.feed(m)
    [r1] = d.requests
    d.fail(r1)
    assert sw.memory_rows(d.state)[0]["status"] == "failed"
    assert sw.memory_rows(d.state)[0]["failure_reason"] == "model down"
    d.feed(msgs[6])
    assert d.plan().fallback == "no_memory" and d.plan().verbatim_from == 0
    [r2] = d.feed(msgs[7])
    assert covers(r2) == (0, 7) and r2.payload.base_summary_id is None


def test_failed_or_empty_summary_keeps_previous_memory_in_force():
    d = Driver(make_ctx())
    msgs = alternating(14)
    for m in msgs[:6]:
        d.feed(m)
    d.produce(d.requests[-1], "M1")
    d.feed(msgs[6])
    [r2] = d.feed(msgs[7])
    d.produce(r2, "   ")  # empty: never hides messages
    row2 = sw.memory_rows(d.state)[1]
    assert (row2["status"], row2["failure_reason"], row2["generation_time_ms"]) == ("failed", "empty summary", None)
    d.feed(msgs[8])
    p = d.plan()
    assert p.memory[0].content == "[Previous context: M1]" and p.verbatim_from == 6
    [r3] = d.feed(msgs[9])
    assert r3.payload.base_summary_id == sw.memory_rows(d.state)[0]["memory_id"]  # the last *completed* one
    assert (r3.payload.input_from, r3.payload.input_to) == (6, 9)
    d.fail(r3)
    assert d.plan().verbatim_from == 6


def test_failed_range_is_never_requested_again():
    d = Driver(make_ctx())
    msgs = alternating(6)
    for m in msgs:
        d.feed(m)
    [r1] = d.requests
    d.fail(r1)
    before = d.state
    assert d.feed(msgs[5]) == []  # the same round end delivered again
    assert POLICY.decide(d.state, d.ctx, msgs[5]) == []
    assert d.state == before


# --------------------------------------------------------------------------- catch-up after a bulk ingest


def test_a_completed_memory_with_a_backlog_beyond_the_window_asks_again_at_once():
    d = Driver(make_ctx())
    for m in alternating(400):  # a bulk ingest: every round end arrives while memory 1 is processing
        d.feed(m)
    [r1] = d.requests
    assert covers(r1) == (0, 5)
    [r2] = d.produce(r1, "M1")  # no new message needed
    assert covers(r2) == (386, 399) and r2.payload.window_start == 386
    assert r2.payload.base_summary_id == fold.summary_id_for(r1.payload.request_id)
    # Seed 002's input: every message after the base, so the facts of the backlog are read (keep_facts);
    # the narrative is the window's.
    assert (r2.payload.input_from, r2.payload.input_to) == (6, 399)
    assert d.produce(r2, "M2") == []  # caught up
    p = d.plan()
    assert p.memory[0].content == "[Previous context: M2]" and p.verbatim_from == 400
    assert [r["base_ordinal"] for r in sw.memory_rows(d.state)] == [None, 1]


def test_a_memory_that_keeps_no_facts_is_fed_only_the_window_after_a_backlog():
    d = Driver(make_ctx(keep_facts=False))
    for m in alternating(400):
        d.feed(m)
    [r1] = d.requests
    [r2] = d.produce(r1, "M1")
    assert covers(r2) == (386, 399) and (r2.payload.input_from, r2.payload.input_to) == (386, 399)


def test_a_failed_memory_with_a_backlog_asks_for_the_latest_window_without_a_base():
    d = Driver(make_ctx())
    for m in alternating(100):
        d.feed(m)
    [r1] = d.requests
    [r2] = d.fail(r1)
    assert covers(r2) == (86, 99) and r2.payload.base_summary_id is None
    assert d.fail(r2) == []  # that range failed too: wait for the next round end
    assert d.plan().fallback == "no_memory"
    assert d.feed(msg(100, "user")) == []
    [r3] = d.feed(msg(101, "assistant"))
    assert covers(r3) == (88, 101)


def test_a_burst_of_rounds_within_the_window_is_caught_up_when_the_memory_completes():
    d = Driver(make_ctx())
    msgs = alternating(19)
    for m in msgs:  # round ends 7..17 arrive while memory 1 (0-5) is processing, as a batch of turns does
        d.feed(m)
    [r1] = d.requests
    [r2] = d.produce(r1, "M1")  # 12 messages past memory 1, under the window of 14, but six rounds
    assert covers(r2) == (4, 17) and (r2.payload.input_from, r2.payload.input_to) == (6, 17)
    assert d.produce(r2, "M2") == []  # caught up
    p = d.plan()
    assert p.memory[0].content == "[Previous context: M2]" and p.verbatim_from == 18
    [r3] = d.feed(msgs[18]) + d.feed(msg(19, "assistant"))
    assert covers(r3) == (6, 19) and (r3.payload.input_from, r3.payload.input_to) == (18, 19)


def test_one_round_ended_while_processing_waits_for_the_next_round_end():
    d = Driver(make_ctx())
    msgs = alternating(10)
    for m in msgs[:8]:  # round end 7 arrives while memory 1 (0-5) is processing: the seed skips it
        d.feed(m)
    [r1] = d.requests
    assert d.produce(r1, "M1") == []
    assert d.plan().verbatim_from == 6
    assert d.feed(msgs[8]) == []
    [r2] = d.feed(msgs[9])
    assert covers(r2) == (0, 9) and r2.payload.input_from == 6


def test_a_failed_memory_after_one_round_waits_and_after_a_burst_asks_again():
    d = Driver(make_ctx())
    msgs = alternating(10)
    for m in msgs[:8]:
        d.feed(m)
    [r1] = d.requests
    assert d.fail(r1) == []  # one round since: the next round end asks (the seed's failure rule)
    d2 = Driver(make_ctx())
    for m in alternating(12):
        d2.feed(m)
    [q1] = d2.requests
    [q2] = d2.fail(q1)  # rounds 7, 9 and 11 ended meanwhile
    assert covers(q2) == (0, 11) and q2.payload.base_summary_id is None


def test_catch_up_skips_a_round_still_calling_tools():
    d = Driver(make_ctx())
    items = alternating(30) + [msg(30, "user"), msg(31, "assistant", "", calls=("c9",))]
    for m in items:
        d.feed(m)
    [r1] = d.requests
    [r2] = d.produce(r1, "M1")
    assert covers(r2) == (16, 29)  # the last *finished* round, not the open tool call at 31


def test_state_keeps_the_recent_memories_and_the_one_in_force_only():
    d = Driver(make_ctx())
    for m in alternating(200):  # a live chat whose summarizer keeps up: a memory every round from seq 5
        for r in d.feed(m):
            d.produce(r, f"M{covers(r)}")
    assert len(d.requests) == 98 and len(d.state.memories) == sw.REMEMBERED_MEMORIES
    assert [r.ordinal for r in d.state.memories] == list(range(83, 99))  # ordinals keep counting
    assert d.state.memories[0].base_ordinal == 82  # its base left the state; its number stays
    for m in alternating(240)[200:]:  # then the summarizer fails every request
        for r in d.feed(m):
            d.fail(r)
    rows = sw.memory_rows(d.state)
    assert len(rows) == sw.REMEMBERED_MEMORIES + 1 and rows[0]["in_force"] and rows[0]["ordinal"] == 98
    assert d.plan().memory[0].content == "[Previous context: M(186, 199)]" and d.plan().verbatim_from == 200
    assert d.feed(d.requests[5]) == []  # an old request back from the log is still a no-op


# --------------------------------------------------------------------------- tool groups


def tool_conversation() -> list[MessageRecord]:
    """u0 a1 u2 a3 u4 a5(calls c1) t6(c1) a7 u8 a9 … a19: the window start for 19 (6) is a tool result."""
    out = [msg(i, "user" if i % 2 == 0 else "assistant") for i in range(5)]
    out += [msg(5, "assistant", "", calls=("c1",)), msg(6, "tool", '{"ok": true}', answers="c1"), msg(7, "assistant")]
    out += [msg(i, "user" if i % 2 == 0 else "assistant") for i in range(8, 20)]
    return out


def test_window_start_never_splits_a_tool_group():
    d = Driver(make_ctx())
    for m in tool_conversation():
        for r in d.feed(m):
            d.produce(r, f"S{covers(r)}")
    assert covers(d.requests[0]) == (0, 7)  # a5 calls a tool: the round ends at a7
    last = d.requests[-1]
    assert covers(last) == (7, 19) and last.payload.window_start == 7  # not 6, which answers a5's call
    span = sw.ToolSpan(call_index=5, last_index=6, calls=("c1",), pending=())
    assert window_range(19, 14, (span,)) == (7, 19)


def test_no_trigger_while_a_tool_call_is_open():
    d = Driver(make_ctx(summarize_after_seq=0))
    d.feed(msg(0, "user"))
    assert d.feed(msg(1, "assistant", "", calls=("c1", "c2"))) == []
    assert d.feed(msg(2, "tool", "r1", answers="c1")) == []
    assert d.feed(msg(3, "assistant", "not done")) == []  # c2 still open: the round has not ended
    assert d.feed(msg(4, "tool", "r2", answers="c2")) == []
    [r] = d.feed(msg(5, "assistant", "done"))
    assert covers(r) == (0, 5)
    d.produce(r, "S")
    d.feed(msg(6, "user"))
    assert d.plan().verbatim_from == 6  # the gap starts after a closed round


def test_unanswered_calls_are_abandoned_at_the_next_user_message():
    d = Driver(make_ctx(summarize_after_seq=0))
    d.feed(msg(0, "user"))
    d.feed(msg(1, "assistant", "", calls=("lost",)))
    assert d.feed(msg(2, "assistant", "gave up")) == []
    d.feed(msg(3, "user"))
    [r] = d.feed(msg(4, "assistant"))
    assert covers(r) == (0, 4)


def test_tool_spans_stay_bounded():
    d = Driver(make_ctx(rolling_window_size=4))
    i = 0
    for k in range(50):
        d.feed(msg(i, "user"))
        d.feed(msg(i + 1, "assistant", "", calls=(f"c{k}",)))
        d.feed(msg(i + 2, "tool", "r", answers=f"c{k}"))
        for r in d.feed(msg(i + 3, "assistant")):
            d.produce(r, "S")
        i += 4
    assert len(d.state.tool_spans) <= 3


# --------------------------------------------------------------------------- idempotency, deletion, serialization


def test_clock_ticks_change_nothing():
    d = Driver(make_ctx())
    for m in alternating(3):
        d.feed(m)
    s = d.state
    d.feed(ClockTicked(event_id="tick", conversation_id="c1", tenant_id="t1", occurred_at=T0, payload=ClockTickedPayload(now=T0)))
    assert d.state == s
