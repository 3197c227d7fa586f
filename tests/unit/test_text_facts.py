"""The key facts a model's text summary lists, read back as structured facts (the OpenAI summarizer's text path)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from memfold.core.events import Fact
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.projections.openai_summarizer import text_facts
from memfold.projections.prompts import parse_key_facts

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def said(index: int) -> MessageRecord:
    return MessageRecord(tenant_id="t", conversation_id="c", index=index, seq=index + 1, event_id=f"e{index}",
                         role="user", content="x", tokens=1, occurred_at=T0)


def test_a_markdown_heading_numbered_items_and_the_end_of_the_list():
    text = ("Summary first.\n## Key facts\n1. Booking ref: NPEGGH (message 4)\n2) 2nd thing: skipped\n"
            "3. refund condition: only within 14 days, unused\n- booking ref: QRS123\nThe narrative goes on.\n- late: not a fact")
    facts = parse_key_facts(text, {4: T0})
    assert [(f.key, f.value, f.category, f.stated_in) for f in facts] == [
        ("refund_condition", "only within 14 days, unused", "CONDITION", None),
        ("booking_ref", "QRS123", "ENTITY", None),  # listed twice: the last value
    ]


def test_no_heading_no_facts_and_a_value_is_clipped():
    assert parse_key_facts("- order: #1234\nSummary.") == []
    [f] = parse_key_facts("Key facts:\n- note: " + "word " * 100)
    assert f.value.endswith("…") and len(f.value) <= 160


def test_only_a_window_that_keeps_facts_carries_the_ones_it_was_given():
    given = (Fact(key="phone", value="+1 720-555-0100"),)
    request = SummaryInput(policy="sliding_window", kind="text", messages=(said(7),), existing_facts=given, window_start=7)
    assert text_facts("Key facts:\n- email: a@b.example (msg 7)", request) == (
        Fact(key="email", value="a@b.example", category="ENTITY", stated_at=T0, stated_in=7),)
    kept = text_facts("Key facts:\n- email: a@b.example (msg 7)", msgspec.structs.replace(request, keep_facts=True))
    assert [f.key for f in kept] == ["phone", "email"]
