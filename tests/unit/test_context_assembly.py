"""Context assembly: budget trimming from the oldest verbatim message, protected memory, tool groups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core.events import ToolCall
from memfold.core.ports import ContextPlan, MemoryMessage, MessageRecord
from memfold.core.tokens import counter
from memfold.projections.context import assemble, take_last, tool_groups

COUNT = counter().count
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def msg(index: int, role: str, content: str, **kw) -> MessageRecord:
    return MessageRecord(
        tenant_id="t", conversation_id="c", index=index, seq=index + 1, event_id=f"e{index}", role=role,
        content=content, tokens=counter().count_message(content), occurred_at=T0 + timedelta(seconds=index), **kw,
    )


def chat(n: int) -> list[MessageRecord]:
    return [msg(i, "user" if i % 2 == 0 else "assistant", f"message number {i} with some words") for i in range(n)]


def test_no_budget_keeps_everything_in_order():
    messages = chat(7)
    out = assemble(ContextPlan(), messages, budget=None, system_prompt="Be brief.", count_tokens=COUNT)
    assert [m.kind for m in out] == ["system_prompt"] + ["verbatim"] * 6 + ["current"]
    assert [m.content for m in out[1:]] == [m.content for m in messages]


def test_trims_oldest_verbatim_first_and_keeps_current_user_message():
    messages = chat(11)  # last one (index 10) is a user message: the current turn
    per = messages[0].tokens
    out = assemble(ContextPlan(), messages, budget=per * 4, system_prompt=None, count_tokens=COUNT)
    assert [m.index for m in out] == [7, 8, 9, 10]
    assert out[-1].kind == "current"
    assert sum(m.tokens for m in out) <= per * 4


def test_memory_counts_against_the_budget_and_is_trimmed_only_when_it_alone_does_not_fit():
    messages = chat(11)
    memory = (MemoryMessage("Facts:\n- order_id: #1234", "facts"), MemoryMessage("Customer wants a refund.", "narrative"))
    plan = ContextPlan(memory=memory)
    per = messages[0].tokens
    mem_cost = sum(COUNT(m.content) + 4 for m in memory)
    out = assemble(plan, messages, budget=mem_cost + per * 3, system_prompt=None, count_tokens=COUNT)
    assert [m.kind for m in out[:2]] == ["memory:facts", "memory:narrative"]
    assert [m.index for m in out[2:]] == [8, 9, 10]
    # A budget smaller than the memory alone: memory goes (it never fits), the current turn stays.
    tiny = assemble(plan, messages, budget=5, system_prompt=None, count_tokens=COUNT)
    assert [m.kind for m in tiny] == ["current"]


def test_memory_too_big_loses_the_last_narrative_lines_first_then_the_oldest_facts():
    messages = chat(3)
    facts = "[2024-01-02]\n- car: red\n- city: Oslo\n[2024-02-03]\n- dog: Rex\n[2024-03-04]\n- job: nurse"
    narrative = "The user is moving house.\nThey compared two vans.\nThey booked the cheaper one.\nThen lunch."
    plan = ContextPlan(memory=(MemoryMessage(facts, "facts"), MemoryMessage(narrative, "narrative")))
    current = messages[-1].tokens
    whole = [assemble(plan, messages, budget=10_000, system_prompt=None, count_tokens=COUNT)[i] for i in (0, 1)]
    need = sum(m.tokens for m in whole) + current
    out = assemble(plan, messages[-1:], budget=need - 12, system_prompt=None, count_tokens=COUNT)
    assert sum(m.tokens for m in out) <= need - 12
    assert [m.kind for m in out] == ["memory:facts", "memory:narrative", "current"]
    # The narrative's last lines go first (a digest line restates what facts hold); every fact stays.
    assert out[0].content == facts
    assert narrative.startswith(out[1].content) and out[1].content.split("\n")[0] == "The user is moving house."
    assert out[1].content != narrative
    # Deterministic.
    assert out == assemble(plan, messages[-1:], budget=need - 12, system_prompt=None, count_tokens=COUNT)
    # Once the narrative is down to its head, the oldest facts go.
    head = "The user is moving house."
    tighter = current + COUNT(head) + 4 + whole[0].tokens - 6
    out = assemble(plan, messages[-1:], budget=tighter, system_prompt=None, count_tokens=COUNT)
    kept_facts = out[0].content.split("\n")
    assert out[1].content == head and sum(m.tokens for m in out) <= tighter
    assert "- job: nurse" in kept_facts and "- car: red" not in kept_facts  # the oldest fact went first
    # Each message keeps its head while anything else can go.
    heads = ["[2024-03-04]\n- job: nurse", head]
    room = current + sum(COUNT(h) + 4 for h in heads)
    small = assemble(plan, messages[-1:], budget=room, system_prompt=None, count_tokens=COUNT)
    assert [m.content for m in small[:2]] == heads and sum(m.tokens for m in small) <= room


def test_tool_call_and_results_are_kept_or_dropped_together():
    call = ToolCall(id="call_1", name="lookup_order", arguments='{"order": "#1234"}')
    messages = [
        msg(0, "user", "where is my order #1234?"),
        msg(1, "assistant", "", tool_calls=(call,)),
        msg(2, "tool", '{"status": "shipped", "eta": "2026-01-05"}', tool_call_id="call_1"),
        msg(3, "assistant", "It shipped and arrives on January 5."),
        msg(4, "user", "thanks!"),
    ]
    groups = tool_groups(messages)
    assert [[m.index for m in g] for g in groups] == [[0], [1, 2], [3], [4]]
    costs = {m.index: m.tokens for m in messages}
    # Room for 3, 4 and the tool result but not the call: the whole group goes.
    budget = costs[4] + costs[3] + costs[2]
    out = assemble(ContextPlan(), messages, budget=budget, system_prompt=None, count_tokens=COUNT)
    assert [m.index for m in out] == [3, 4]
    # Room for the whole group: both come back, in order.
    out = assemble(ContextPlan(), messages, budget=budget + costs[1], system_prompt=None, count_tokens=COUNT)
    assert [m.index for m in out] == [1, 2, 3, 4]
    assert out[0].tool_calls == (call,) and out[1].tool_call_id == "call_1"


def test_orphan_tool_result_at_the_cut_is_dropped():
    call = ToolCall(id="c9", name="f")
    messages = [
        msg(5, "tool", "result without its call in view", tool_call_id="c9"),
        msg(6, "assistant", "done"),
        msg(7, "user", "ok"),
    ]
    out = assemble(ContextPlan(), messages, budget=None, system_prompt=None, count_tokens=COUNT)
    assert [m.index for m in out] == [6, 7]
    assert call.id == "c9"


def test_take_last_is_the_plain_baseline():
    messages = chat(30)
    out = take_last(messages, 100, None, COUNT)
    assert out[-1].index == 29
    assert all(m.kind in ("verbatim", "current") for m in out)
    assert sum(m.tokens for m in out) <= 100


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), budget=st.integers(0, 600), tool_at=st.sets(st.integers(0, 39)))
def test_budget_holds_and_no_tool_result_without_its_call(n, budget, tool_at):
    messages: list[MessageRecord] = []
    i = 0
    while i < n:
        if i in tool_at and i + 1 < n:
            call = ToolCall(id=f"call{i}", name="f")
            messages.append(msg(i, "assistant", "", tool_calls=(call,)))
            messages.append(msg(i + 1, "tool", f"result {i}", tool_call_id=f"call{i}"))
            i += 2
        else:
            messages.append(msg(i, "user" if i % 2 == 0 else "assistant", f"text {i}"))
            i += 1
    out = assemble(ContextPlan(), messages, budget=budget, system_prompt=None, count_tokens=COUNT)
    fixed = out[-1].tokens if out and out[-1].kind == "current" else 0
    assert sum(m.tokens for m in out) <= max(budget, fixed)
    indices = [m.index for m in out]
    assert indices == sorted(indices)
    assert indices == list(range(indices[0], indices[-1] + 1)) if indices else True  # a contiguous tail
    seen_calls = set()
    for m in out:
        seen_calls.update(tc.id for tc in m.tool_calls)
        if m.role == "tool":
            assert m.tool_call_id in seen_calls
