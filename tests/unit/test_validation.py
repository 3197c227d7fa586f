"""The validation boundary: every bad input is a ValidationError naming its field; good input is kept exactly."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from memfold.core.errors import EmptyContentError, MessageTooLargeError, UnknownRoleError, ValidationError
from memfold.core.validation import MAX_DEPTH, validate_message


def check(message, **kw):
    return validate_message(message, max_chars=1000, max_tokens=500, count_tokens=len, line=kw.pop("line", 7), **kw)


def ok(**fields):
    return {"conversation_id": "c1", "role": "user", "content": "hello", **fields}


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = {"k": value}
    return value


BAD = [
    ("not a dict", ["a", "list"], None),
    ("unknown key", ok(contnet="typo"), "'contnet'"),
    ("no conversation", {"role": "user", "content": "hi"}, "conversation_id"),
    ("blank conversation", ok(conversation_id="  "), "conversation_id"),
    ("numeric conversation", ok(conversation_id=5), "conversation_id"),
    ("long conversation", ok(conversation_id="c" * 401), "conversation_id"),
    ("tenant with slash", ok(tenant_id="a/b"), "tenant_id"),
    ("empty tenant", ok(tenant_id=""), "tenant_id"),
    ("role number", ok(role=3), "role"),
    ("content number", ok(content=42), "content"),
    ("content surrogate", ok(content="x\ud800y"), "content"),
    ("tool_calls int", ok(role="assistant", tool_calls=42), "tool_calls"),
    ("tool_calls bool", ok(role="assistant", tool_calls=True), "tool_calls"),
    ("tool call id number", ok(role="assistant", tool_calls=[{"id": 1}]), "tool_calls[0].id"),
    ("tool call no name", ok(role="assistant", tool_calls=[{"id": "t1"}]), "tool_calls[0].name"),
    ("tool call args object", ok(role="assistant", tool_calls=[{"id": "t", "name": "f", "arguments": {"a": 1}}]),
     "tool_calls[0].arguments"),
    ("tool call extra key", ok(role="assistant", tool_calls=[{"id": "t", "name": "f", "type": "function"}]),
     "tool_calls[0]"),
    ("tool call not object", ok(role="assistant", tool_calls=["f"]), "tool_calls[0]"),
    ("tool without id", ok(role="tool", content="42"), "tool_call_id"),
    ("metadata list", ok(metadata=[1, 2]), "metadata"),
    ("metadata infinity", ok(metadata={"v": math.inf}), "metadata.v"),
    ("metadata nan deep", ok(metadata={"a": [1, {"b": math.nan}]}), "metadata.a[1].b"),
    ("metadata surrogate value", ok(metadata={"a": "\udfff"}), "metadata.a"),
    ("metadata surrogate key", ok(metadata={"\ud800": 1}), "metadata"),
    ("metadata too deep", ok(metadata=nested(MAX_DEPTH + 5)), None),
    ("metadata object value", ok(metadata={"a": object()}), "metadata.a"),
    ("metadata too big", ok(metadata={"a": "x" * 1_100_000}), "metadata"),
    ("importance bool", ok(importance=True), "importance"),
    ("importance string", ok(importance="high"), "importance"),
    ("importance above 1", ok(importance=1.5), "importance"),
    ("importance nan", ok(importance=math.nan), "importance"),
    ("ts year 1", ok(ts="0001-01-01T00:00:00Z"), "ts"),
    ("ts year 9999", ok(ts="9999-12-31T00:00:00Z"), "ts"),
    ("ts negative epoch", ok(ts=-5), "ts"),
    ("ts infinite", ok(ts=math.inf), "ts"),
    ("ts huge epoch", ok(ts=1e30), "ts"),
    ("ts garbage", ok(ts="yesterday"), "ts"),
    ("ts bool", ok(ts=True), "ts"),
    ("ts and occurred_at differ", ok(ts="2026-01-01T00:00:00Z", occurred_at="2026-01-02T00:00:00Z"), "ts"),
    ("created_at differs", ok(ts="2026-01-01T00:00:00Z", created_at="2026-01-02T00:00:00Z"), "created_at"),
    ("event id number", ok(event_id=12), "event_id"),
    ("event id blank", ok(event_id="  "), "event_id"),
    ("event id too long", ok(event_id="e" * 201), "event_id"),
    ("name number", ok(name=1), "name"),
    ("model_variant surrogate", ok(model_variant="\ud800"), "model_variant"),
]


@pytest.mark.parametrize(("case", "message", "field"), BAD, ids=[case for case, _, _ in BAD])
def test_bad_input_is_a_validation_error_naming_line_and_field(case, message, field):
    with pytest.raises(ValidationError) as info:
        check(message)
    assert info.value.line == 7
    assert str(info.value).startswith("line 7: ")
    if field is not None:
        assert info.value.field is not None and field in info.value.field, (info.value.field, str(info.value))


@pytest.mark.parametrize(
    ("message", "error"),
    [(ok(role="robot"), UnknownRoleError), (ok(content="  "), EmptyContentError), (ok(content="x" * 1001), MessageTooLargeError)],
)
def test_specific_error_classes(message, error):
    with pytest.raises(error):
        check(message)


def test_tokens_limit_uses_the_counter():
    with pytest.raises(MessageTooLargeError) as info:
        validate_message(ok(content="x" * 600), max_chars=1000, max_tokens=500, count_tokens=len)
    assert info.value.unit == "tokens" and info.value.line is None


def test_good_input_is_kept_exactly():
    event = check(
        {
            "conversation_id": "c1", "tenant_id": "acme", "role": "assistant", "content": "",
            "tool_calls": [{"id": "t1", "name": "lookup", "arguments": '{"order": 1}'}, {"id": "t2", "name": "f"}],
            "metadata": {"channel": "chat", "n": [1, 2.5, None, True, {"deep": "ünï"}]}, "importance": 0,
            "ts": "2026-03-01T09:30:00+02:00", "event_id": "client-1", "model_variant": "v2", "name": "bot",
        }
    )
    assert event.event_id == "client-1" and event.tenant_id == "acme"
    assert event.occurred_at == datetime(2026, 3, 1, 7, 30, tzinfo=UTC)
    p = event.payload
    assert [tc.arguments for tc in p.tool_calls] == ['{"order": 1}', "{}"]
    assert p.metadata == {"channel": "chat", "n": [1, 2.5, None, True, {"deep": "ünï"}]}
    assert p.importance == 0.0 and p.model_variant == "v2" and p.name == "bot"
    event.encode()  # what passes validation can always be stored


def test_time_forms_and_defaults():
    naive = check(ok(ts="2026-03-01T09:30:00")).occurred_at
    assert naive == datetime(2026, 3, 1, 9, 30, tzinfo=UTC)  # a timestamp without zone is UTC
    assert check(ok(ts=1_772_357_400)).occurred_at == datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    assert check(ok(occurred_at=datetime(2026, 3, 1))).occurred_at.tzinfo is not None
    assert check(ok(ts="2026-03-01T09:30:00Z", occurred_at="2026-03-01T09:30:00Z")).occurred_at.year == 2026
    assert check(ok(), event_id="derived-1").event_id == "derived-1"
    assert check(ok(event_id="mine"), event_id="derived-1").event_id == "mine"
    assert check(ok(tenant_id=None)).tenant_id == "default"


def test_depth_limit_is_exact_and_needs_no_recursion():
    check(ok(metadata=nested(MAX_DEPTH - 1)))
    with pytest.raises(ValidationError, match="nested more than"):
        check(ok(metadata=nested(100_000)))  # iterative walk: no RecursionError


def test_the_token_count_is_recorded_at_append_when_the_encoding_is_named() -> None:
    assert check(ok(content="hello there"), encoding="chars").payload.tokens == {"chars": 11}
    assert check(ok(content="hello there")).payload.tokens == {}  # no encoding named: nothing recorded
    with pytest.raises(MessageTooLargeError):  # the recorded count is the one the size check used
        check(ok(content="x" * 501), encoding="chars")


def test_a_tool_call_instance_meets_the_same_checks_as_an_object():
    from memfold.core.events import ToolCall

    built = ToolCall.model_construct(id=5, name="f", arguments="{}")  # no validation at all
    with pytest.raises(ValidationError) as info:
        check(ok(role="assistant", tool_calls=[built]))
    assert info.value.field == "tool_calls[0].id"
    with pytest.raises(ValidationError) as info:
        check(ok(role="assistant", tool_calls=[ToolCall(id="t" * 10_000, name="f")]))
    assert info.value.field == "tool_calls[0].id" and "the limit is 200" in str(info.value)
    with pytest.raises(ValidationError) as info:
        check(ok(role="assistant", tool_calls=[ToolCall.model_construct(id="t")]))  # name missing
    assert info.value.field == "tool_calls[0].name"
    event = check(ok(role="assistant", tool_calls=[ToolCall(id="t", name="f", arguments='{"a": 1}')]))
    assert event.payload.tool_calls == (ToolCall(id="t", name="f", arguments='{"a": 1}'),)


def test_a_conversation_id_may_hold_a_slash_but_not_the_segment_the_http_api_reads_as_a_message():
    from memfold.core.validation import validate_message

    ok = validate_message({"conversation_id": "team/alice", "role": "user", "content": "hi"}, max_chars=100,
                          max_tokens=100, count_tokens=len)
    assert ok.conversation_id == "team/alice"
    with pytest.raises(ValidationError, match="/messages/") as err:
        validate_message({"conversation_id": "a/messages/b", "role": "user", "content": "hi"}, max_chars=100,
                         max_tokens=100, count_tokens=len)
    assert err.value.field == "conversation_id"
