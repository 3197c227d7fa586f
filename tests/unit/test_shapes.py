"""Shapes: OpenAI chat, Anthropic Messages and Responses items in and out of memfold's canonical messages (pure)."""

from __future__ import annotations

import json

import pytest
from fixtures.shaped_conversation import ANTHROPIC, INPUTS, OPENAI, RESPONSES
from openai.types.chat import ChatCompletionMessage

from memfold.core.errors import ValidationError
from memfold.core.ports import ContextMessage
from memfold.core.shapes import FORMATS, canonical_openai, messages_from, shaped
from memfold.core.validation import validate_message

CONV = {"conversation_id": "c1"}

# One conversation with parallel tool calls, in each input shape (shared with the SDK tests).


def _validated(messages: list[dict]) -> list:
    return [validate_message({**CONV, **m}, max_chars=10_000, max_tokens=10_000, count_tokens=len, line=i + 1)
            for i, m in enumerate(messages)]


def _context(messages: list[dict]) -> list[ContextMessage]:
    """The context memfold would assemble from these messages, all verbatim (what the store gives back)."""
    return [ContextMessage(e.payload.role, e.payload.content, "verbatim", 1, index=i, tool_calls=e.payload.tool_calls,
                           tool_call_id=e.payload.tool_call_id, name=e.payload.name)
            for i, e in enumerate(_validated(messages))]


def _essence(messages: list[dict]) -> list[tuple]:
    """What must survive a round trip: roles, texts, tool calls (arguments as JSON values), the ids they pair on."""
    out = []
    for e in _validated(messages):
        p = e.payload
        calls = tuple((c.id, c.name, json.loads(c.arguments)) for c in p.tool_calls)
        out.append((p.role, p.content, calls, p.tool_call_id))
    return out


def test_every_input_shape_gives_the_same_canonical_conversation():
    expected = _essence(messages_from("openai", OPENAI))
    assert expected[1] == ("assistant", "Checking both.",
                           (("call_1", "weather", {"city": "Paris"}), ("call_2", "weather", {"city": "Rome"})), None)
    for fmt in ("anthropic", "responses"):
        assert _essence(messages_from(fmt, INPUTS[fmt])) == expected, fmt


@pytest.mark.parametrize("source", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("target", ["openai", "anthropic", "responses", "compact"])
def test_round_trip_loses_nothing(source, target):
    canonical = messages_from(source, INPUTS[source])
    out = shaped(target, _context(canonical))
    if target == "compact":
        back = messages_from("openai", [{k: v for k, v in m.items() if k not in ("kind", "tokens", "index")}
                                        for m in out.messages])
    else:
        back = messages_from(target, out.messages)
        if out.system:
            back.insert(0, {"role": "system", "content": out.system})
    assert _essence(back) == _essence(canonical)


def test_sdk_assistant_message_is_accepted_as_returned():
    sdk = ChatCompletionMessage.model_validate({
        "role": "assistant", "content": None, "refusal": None, "annotations": [],
        "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
    }).model_dump()
    assert {"refusal", "audio", "function_call", "annotations"} <= set(sdk)  # what the SDK really dumps
    event = _validated([sdk])[0]
    assert event.payload.tool_calls[0].model_dump() == {"id": "call_9", "name": "lookup", "arguments": "{}"}
    assert event.payload.content == ""


def test_list_content_of_text_parts_is_joined():
    m = canonical_openai({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert m["content"] == "a\nb"


@pytest.mark.parametrize(("message", "field", "hint"), [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "content[0].type", "text only"),
    ({"role": "assistant", "content": None, "refusal": "I can't"}, "refusal", "content"),
    ({"role": "assistant", "content": "hi", "audio": {"id": "a1"}}, "audio", "transcript"),
    ({"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}, "function_call",
     "tool_calls"),
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]},
     "tool_calls[0].type", "function"),
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"},
                                                           "extra": 1}]}, "tool_calls[0].extra", "unknown key"),
    ({"role": "function", "name": "f", "content": "x"}, "role", "tool_call_id"),
])
def test_what_cannot_be_stored_is_refused_by_name(message, field, hint):
    with pytest.raises(ValidationError) as err:
        _validated([message])
    assert err.value.field == field and err.value.line == 1
    assert hint in str(err.value)


def test_flat_alias_stays_accepted():
    flat = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}]}
    assert _validated([flat])[0].payload.tool_calls[0].name == "f"


def test_anthropic_item_split_keeps_order_and_numbers_event_ids():
    out = messages_from("anthropic", [{**ANTHROPIC[2], "event_id": "e7", "conversation_id": "c1"}])
    assert [(m["role"], m["event_id"], m["conversation_id"]) for m in out] == [
        ("tool", "e7", "c1"), ("tool", "e7#1", "c1"), ("user", "e7#2", "c1")]


@pytest.mark.parametrize(("fmt", "item", "field"), [
    ("anthropic", {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}, "content[0].type"),
    ("anthropic", {"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]},
     "content[0].type"),
    ("anthropic", {"role": "user", "content": [{"type": "image", "source": {}}]}, "content[0].type"),
    ("responses", {"type": "reasoning", "summary": []}, "type"),
    ("responses", {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}, "content[0].type"),
])
def test_other_shapes_refuse_what_they_cannot_store(fmt, item, field):
    with pytest.raises(ValidationError) as err:
        messages_from(fmt, [{"role": "user", "content": "first"}, item])
    assert err.value.field == field and err.value.line == 2


def test_function_call_output_is_named_after_its_call():
    out = messages_from("responses", RESPONSES)
    assert [m.get("name") for m in out if m["role"] == "tool"] == ["weather", "weather"]


def test_openai_output_has_only_openai_keys_and_annotations_beside():
    ctx = _context([{"role": "user", "content": "hi", "name": "ann"},
                    *messages_from("openai", OPENAI[1:3])])
    ctx[2] = ContextMessage("tool", "sunny", "verbatim", 1, index=2, tool_call_id="call_1", name="weather")
    out = shaped("openai", ctx, conversation_id="c1")
    assert out.messages[0] == {"role": "user", "content": "hi", "name": "ann"}
    assert out.messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    assert out.memfold[2] == {"kind": "verbatim", "tokens": 1, "index": 2, "occurred_at": None,
                              "conversation": "c1", "name": "weather"}
    assert len(out.memfold) == len(out.messages)


def test_split_assistant_turns_are_merged_for_chat_and_annotated_as_parts():
    items = [RESPONSES[0], {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}]
    lines = [m for item in items for m in messages_from("responses", [item])]  # ingest converts line by line
    lines.insert(2, messages_from("responses", [{"type": "function_call", "call_id": "b", "name": "g",
                                                 "arguments": "{}"}])[0])
    out = shaped("openai", _context(lines))
    assert [c["id"] for c in out.messages[1]["tool_calls"]] == ["a", "b"]
    assert out.memfold[1]["tokens"] == 2 and [p["index"] for p in out.memfold[1]["parts"]] == [1, 2]


def test_anthropic_system_is_separate():
    ctx = [ContextMessage("system", "Be brief.", "system_prompt", 4), ContextMessage("system", "Facts: x", "memory:facts", 5),
           ContextMessage("user", "hi", "current", 2, index=0)]
    out = shaped("anthropic", ctx)
    assert out.system == "Be brief.\n\nFacts: x"
    assert out.messages == [{"role": "user", "content": "hi"}]
    assert [n["kind"] for n in out.system_memfold] == ["system_prompt", "memory:facts"]
    assert set(out.as_dict()) == {"format", "messages", "system", "system_memfold", "memfold"}


def test_unknown_format_is_refused():
    for call in (lambda: shaped("gemini", []), lambda: messages_from("compact", [])):
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == "format"
    assert FORMATS == ("openai", "anthropic", "responses", "compact")
