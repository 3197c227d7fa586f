"""Prompt rendering: seed 001's exact chunked input, seed 000's facts prompt, window/rolling prompts, hashes."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from memfold.core.events import Fact, ToolCall
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.projections import prompts
from memfold.projections.prompts import (
    group_turns,
    prompt_hash,
    render,
    render_chunked_input,
    render_facts_prompt,
    render_window_prompt,
)

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def conversation(*items: tuple, start: int = 0) -> tuple[MessageRecord, ...]:
    out = []
    for i, item in enumerate(items, start=start):
        role, content, *extra = item
        out.append(
            MessageRecord(
                tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"e{i}", role=role,
                content=content, tokens=0, occurred_at=T0, **(extra[0] if extra else {}),
            )
        )
    return tuple(out)


def test_chunked_input_is_seed_001_format_exactly_without_summary():
    msgs = conversation(
        ("user", "How do I practice scales?"),
        ("assistant", "Start slowly with a metronome at 60 bpm."),
        ("user", "And arpeggios?"),
        ("assistant", "Same idea: hands separately first."),
    )
    assert render_chunked_input(None, msgs) == (
        "=== EXISTING_SUMMARY ===\n"
        "NONE\n"
        "=== END_EXISTING_SUMMARY ===\n"
        "\n"
        "=== NEW_TURNS ===\n"
        "Turn 1:\n"
        "User: How do I practice scales?\n"
        "Assistant: Start slowly with a metronome at 60 bpm.\n"
        "\n"
        "Turn 2:\n"
        "User: And arpeggios?\n"
        "Assistant: Same idea: hands separately first.\n"
        "=== END_NEW_TURNS ==="
    )


def test_chunked_input_carries_the_existing_summary_verbatim():
    msgs = conversation(("user", "Next lesson?"), ("assistant", "Thursday."))
    text = render_chunked_input("The student plays violin.\nGoal: vibrato.", msgs)
    assert text.startswith(
        "=== EXISTING_SUMMARY ===\nThe student plays violin.\nGoal: vibrato.\n=== END_EXISTING_SUMMARY ===\n\n"
    )
    assert render_chunked_input("   ", msgs).startswith("=== EXISTING_SUMMARY ===\nNONE\n")


def test_tool_messages_belong_to_the_turn_they_are_in():
    msgs = conversation(
        ("user", "Where is order #1234?"),
        ("assistant", "", {"tool_calls": (ToolCall(id="k1", name="track", arguments='{"order": "1234"}'),)}),
        ("tool", '{"status": "in transit"}', {"tool_call_id": "k1"}),
        ("assistant", "It is in transit."),
        ("user", "Thanks"),
        ("assistant", "You're welcome."),
    )
    turns = group_turns(msgs)
    assert [len(t.messages) for t in turns] == [4, 2]
    text = render_chunked_input(None, msgs)
    assert (
        "Turn 1:\nUser: Where is order #1234?\n"
        'Assistant: [tool call track({"order": "1234"})]\n'
        '[tool result track] {"status": "in transit"}\n'
        "It is in transit.\n\nTurn 2:\nUser: Thanks\nAssistant: You're welcome.\n=== END_NEW_TURNS ==="
    ) in text


def test_messages_before_the_first_user_message_form_a_turn_without_user_line():
    msgs = conversation(("assistant", "Hi! How can I help?"), ("user", "Refund please"), ("assistant", "Sure."))
    text = render_chunked_input(None, msgs)
    assert "Turn 1:\nAssistant: Hi! How can I help?\n\nTurn 2:\nUser: Refund please\nAssistant: Sure." in text


def test_facts_prompt_matches_seed_000_layout():
    msgs = conversation(
        ("user", "I'd like to cancel order #1234"),
        ("assistant", "I can help with that. Your order totals $50..."),
    )
    text = render_facts_prompt(msgs, (Fact(key="order_id", value="#1234", category="ENTITY"),))
    assert text == (
        "You are a conversation summarizer. Extract structured facts and a brief\n"
        "narrative summary from the conversation below.\n"
        "\n"
        "Return JSON:\n"
        "{\n"
        '  "facts": [\n'
        '    {"key": "...", "value": "...", "category": "ENTITY|DECISION|CONDITION|STATE|NUMERIC|GENERAL"}\n'
        "  ],\n"
        '  "narrative": "2-3 sentence summary of conversation flow and tone"\n'
        "}\n"
        "\n"
        "## Existing facts (merge, update, or remove as needed):\n"
        "- order_id: #1234\n"
        "\n"
        "## Conversation:\n"
        "[user]: I'd like to cancel order #1234\n"
        "[assistant]: I can help with that. Your order totals $50..."
    )


def test_facts_prompt_states_the_narrative_cap_and_no_existing_facts():
    text = render_facts_prompt(conversation(("user", "hi")), (), token_cap=500)
    assert "Keep the narrative under 500 tokens." in text
    assert "## Existing facts (merge, update, or remove as needed):\n(none)\n" in text


def test_window_prompt_numbers_messages_and_says_to_drop_before_window_start():
    msgs = conversation(("user", "new question"), ("assistant", "new answer"), start=14)
    text = render_window_prompt("old memory", msgs, window_start=2, char_cap=2000)
    assert "drop content before window start" in text
    assert "The window now starts at message 2" in text
    assert "## Previous summary:\nold memory" in text
    assert "[14][user]: new question\n[15][assistant]: new answer" in text
    assert "2000 characters" in text


def test_a_window_prompt_that_keeps_facts_says_so():
    msgs = conversation(("user", "new question"), ("assistant", "new answer"), start=14)
    text = render_window_prompt("old memory", msgs, window_start=2, keep_facts=True)
    assert "drop the narrative of messages numbered below 2" in text
    assert "keep every key fact of the previous summary" in text and "[14][user]: new question" in text
    kept = render(SummaryInput(policy="sliding_window", kind="text", messages=msgs, window_start=2, keep_facts=True))
    plain = render(SummaryInput(policy="sliding_window", kind="text", messages=msgs, window_start=2))
    assert (kept.template, plain.template) == ("sliding_window_facts", "sliding_window") and kept.hash != plain.hash


def test_render_picks_the_template_from_the_request():
    msgs = conversation(("user", "hello"))
    facts = render(SummaryInput(policy="hierarchical", kind="facts", messages=msgs))
    chunked = render(SummaryInput(policy="chunked", kind="text", messages=msgs, prompt_format="chunked", token_cap=500))
    window = render(SummaryInput(policy="sliding_window", kind="text", messages=msgs, window_start=0))
    rolling = render(SummaryInput(policy="rolling", kind="text", messages=msgs, existing_summary="S1"))
    assert [p.template for p in (facts, chunked, window, rolling)] == ["facts", "chunked", "sliding_window", "rolling"]
    assert chunked.user.startswith("=== EXISTING_SUMMARY ===") and "500 tokens" in chunked.system
    assert "## Previous summary:\nS1" in rolling.user
    assert len({p.hash for p in (facts, chunked, window, rolling)}) == 4


def test_prompt_hash_is_sha256_of_template_and_version():
    h = prompt_hash("facts")
    # Stored summaries carry this hash, so its framing is pinned: each part then a unit separator.
    framed = prompts.FACTS_TEMPLATE.encode() + b"\x1f" + prompts.PROMPT_VERSION.encode() + b"\x1f"
    assert h == hashlib.sha256(framed).hexdigest()
    # An absent extra part (None) hashes as NUL, not as nothing: ("a", None) and ("a",) differ.
    assert prompt_hash("facts", prompts.PROMPT_VERSION, None) == hashlib.sha256(framed + b"\x00\x1f").hexdigest() != h
    assert prompt_hash("facts", "2") != h
    assert prompt_hash("rolling") != h
    assert prompt_hash("chunked", "1", "pmpt_a", "3") != prompt_hash("chunked", "1", "pmpt_a", "4")
    # The hash follows the template's text, not its name.
    assert prompt_hash(prompts.FACTS_TEMPLATE) == h


def test_dated_facts_name_earlier_short_values_once_and_not_the_current_one():
    day = datetime(2024, 3, 2, 9, 0, tzinfo=UTC)
    old_rule = "Refunds within 14 days provided that the item is returned unused and in its box"
    facts = [
        Fact(key="phone", value="+1 720-555-0100", category="ENTITY", stated_at=day, superseded_by="+1 415-555-0153"),
        Fact(key="phone", value="+1 415-555-0153", category="ENTITY", stated_at=day, superseded_by="+1 720-555-0100"),
        Fact(key="phone", value="+1 720-555-0100", category="ENTITY", stated_at=day),
        Fact(key="amount", value="$5", category="NUMERIC", stated_at=day, superseded_by="$7"),
        Fact(key="amount", value="$7", category="NUMERIC", stated_at=day),
        Fact(key="refund_condition", value=old_rule, category="CONDITION", stated_at=day, superseded_by="Within 30 days"),
        Fact(key="refund_condition", value="Within 30 days", category="CONDITION", stated_at=day),
    ]
    assert prompts.render_facts_dated(facts).split("\n") == [
        "[2024-03-02]",
        "- phone: +1 720-555-0100 (was: +1 415-555-0153)",  # the value came back: only the one in between
        "- amount: $7 (was: $5)",
        "- refund_condition: Within 30 days",  # an earlier sentence is not repeated
    ]
