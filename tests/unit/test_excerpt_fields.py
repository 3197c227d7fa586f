"""An excerpt cuts a message's text only: its speaker's name and its tool fields stay."""

from __future__ import annotations

from datetime import UTC, datetime

from memfold.core.events import ToolCall
from memfold.core.ports import MessageRecord
from memfold.core.tokens import counter
from memfold.projections.excerpt import EXCERPT_OVER, excerpt

COUNT = counter().count
LONG = " ".join(f"Reading {k}: the pressure near the harbour was {1000 + k} hectopascals with wind from the north."
                for k in range(40))


def record(role: str, **fields) -> MessageRecord:
    return MessageRecord(tenant_id="t", conversation_id="c", index=7, seq=8, event_id="e7", role=role, content=LONG,
                         tokens=counter().count_message(LONG), occurred_at=datetime(2024, 3, 1, tzinfo=UTC), **fields)


def test_an_excerpt_keeps_name_tool_calls_and_the_call_it_answers():
    cases = [
        record("user", name="alice"),
        record("assistant", name="planner", tool_calls=(ToolCall(id="call_9", name="barometer", arguments="{}"),)),
        record("tool", tool_call_id="call_9"),
    ]
    for m in cases:
        assert m.tokens > EXCERPT_OVER
        cut = excerpt(m, frozenset({"harbour", "1012"}), COUNT, size=60)
        assert cut is not None
        r = cut[0]
        assert r.content.startswith("[2024-03-01] (excerpt)\n") and len(r.content) < len(LONG) / 2
        assert (r.role, r.name, r.tool_calls, r.tool_call_id, r.index) == (m.role, m.name, m.tool_calls,
                                                                           m.tool_call_id, m.index)
    assert cases[0].name == "alice" and excerpt(cases[0], frozenset({"harbour"}), COUNT)[0].as_openai()["name"] == "alice"
    tool = excerpt(cases[2], frozenset({"harbour"}), COUNT)[0].as_openai()
    assert tool["tool_call_id"] == "call_9" and set(tool) == {"role", "content", "tool_call_id"}
