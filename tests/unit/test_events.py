"""Events: lossless JSON round trips for every type, upcasting on read, decode errors, JSON schemas."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar, Literal

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core import events as ev
from memfold.core.errors import EventDecodeError, UnknownEventTypeError, UpcastError
from memfold.core.events import (
    EVENT_CLASSES,
    Event,
    MessageAppended,
    MessagePayload,
    UpcasterRegistry,
    decode,
    decode_dict,
    json_schemas,
)

# --------------------------------------------------------------------------- strategies

names = st.text(min_size=1, max_size=40)
short = st.text(max_size=40)
hashes = st.text(alphabet="0123456789abcdef", min_size=1, max_size=32)
finite = st.floats(allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0.0, max_value=1.0)
small_ints = st.integers(min_value=0, max_value=10_000)
timestamps = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | finite | short,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short, inner, max_size=3),
    max_leaves=8,
)
metadata = st.dictionaries(short, json_values, max_size=4)
encrypted = st.builds(ev.EncryptedContent, key_id=names, algorithm=names, nonce_b64=short, ciphertext_b64=short)
facts = st.builds(
    ev.Fact, key=names, value=short, category=st.sampled_from(["ENTITY", "DECISION", "CONDITION", "STATE", "NUMERIC", "GENERAL"]),
    stated_at=st.none() | timestamps, stated_in=st.none() | small_ints, superseded_by=st.none() | short,
)


def opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Return ``strategy`` or None."""
    return st.none() | strategy



def _message_payload() -> st.SearchStrategy[MessagePayload]:
    # content, or sealed content only (what crypto-shredding writes), or both
    return st.one_of(st.tuples(short, opt(encrypted)), st.tuples(st.none(), encrypted)).flatmap(
        lambda pair: st.builds(
            MessagePayload,
            role=st.sampled_from(ev.ROLES), content=st.just(pair[0]), encrypted=st.just(pair[1]),
            name=opt(names), model_variant=opt(names), metadata=metadata, importance=opt(unit),
            tool_calls=st.lists(st.builds(ev.ToolCall, id=names, name=names, arguments=short), max_size=2).map(tuple),
            tool_call_id=opt(names), embedding=opt(st.lists(finite, max_size=6).map(tuple)),
            tokens=st.dictionaries(names, st.integers(min_value=0, max_value=10**6), max_size=2),
        )
    )


PAYLOADS: dict[str, st.SearchStrategy[Any]] = {
    "MessageAppended": _message_payload(),
    "ConversationDeleted": st.builds(ev.ConversationDeletedPayload, reason=opt(short)),
    "ConversationReopened": st.builds(ev.ConversationReopenedPayload, reason=opt(short)),
    "SettingsChanged": st.builds(ev.SettingsChangedPayload, policy=opt(names), settings=metadata, settings_hash=opt(hashes)),
    "ClockTicked": st.builds(ev.ClockTickedPayload, now=timestamps),
    "SummaryRequested": st.builds(
        ev.SummaryRequestedPayload, request_id=hashes, policy=names, settings_hash=hashes, covers_from=small_ints,
        covers_to=small_ints, input_from=small_ints, input_to=small_ints, base_summary_id=opt(hashes),
        window_start=opt(small_ints), input_indices=opt(st.lists(small_ints, max_size=5).map(tuple)),
        topic_id=opt(names), kind=st.sampled_from(["facts", "text"]), token_cap=opt(small_ints), char_cap=opt(small_ints),
    ),
    "SummaryProduced": st.builds(
        ev.SummaryProducedPayload, summary_id=hashes, request_id=hashes, policy=names, settings_hash=hashes,
        covers_from=small_ints, covers_to=small_ints, base_summary_id=opt(hashes), topic_id=opt(names), text=short,
        facts=st.lists(facts, max_size=4).map(tuple), encrypted=opt(encrypted), summarizer=names, model=names,
        prompt_hash=hashes, tokens_in=small_ints, tokens_out=small_ints, latency_ms=small_ints, cached=st.booleans(),
    ),
    "SummaryFailed": st.builds(
        ev.SummaryFailedPayload, request_id=hashes, policy=names, settings_hash=hashes, reason=short, error_type=names,
        retryable=st.booleans(), summarizer=short, model=short, latency_ms=small_ints,
    ),
    "TopicAssigned": st.builds(
        ev.TopicAssignedPayload, settings_hash=hashes, topic_id=names, message_index=small_ints,
        similarity=opt(finite), created=st.booleans(), title=opt(short),
    ),
    "TopicCompacted": st.builds(
        ev.TopicCompactedPayload, settings_hash=hashes, topic_id=names, compacted_through=small_ints, kept_recent=small_ints
    ),
    "TopicEvicted": st.builds(ev.TopicEvictedPayload, settings_hash=hashes, topic_id=names, priority=finite),
    "MessageRetracted": st.builds(ev.MessageRetractedPayload, retracted_event_id=names, reason=opt(short)),
}


def event_of(event_type: str) -> st.SearchStrategy[Event]:
    """Return a strategy for events of ``event_type`` with arbitrary envelope and payload."""
    return st.builds(
        EVENT_CLASSES[event_type],
        event_id=names, tenant_id=names.filter(lambda t: "/" not in t), conversation_id=names, seq=st.integers(min_value=0, max_value=2**40),
        occurred_at=timestamps, causation_id=opt(names), payload=PAYLOADS[event_type],
    )


any_event = st.sampled_from(sorted(EVENT_CLASSES)).flatmap(event_of)


def sample_message(**overrides: Any) -> MessageAppended:
    fields: dict[str, Any] = dict(
        event_id="e-1", tenant_id="acme", conversation_id="c-1", seq=3,
        occurred_at=datetime(2026, 3, 1, 9, 0, tzinfo=UTC),
        payload=MessagePayload(role="user", content="where is order #1234?"),
    )
    fields.update(overrides)
    return MessageAppended(**fields)


def v1_text(event: MessageAppended) -> str:
    """``event`` as memfold wrote messages before users existed (schema v1: no ``user_id``)."""
    raw = json.loads(event.encode())
    raw["schema_version"] = 1
    del raw["payload"]["user_id"]
    return json.dumps(raw)


# --------------------------------------------------------------------------- round trips


def test_there_is_a_strategy_for_every_event_type() -> None:
    assert PAYLOADS.keys() == EVENT_CLASSES.keys()


@pytest.mark.parametrize("event_type", sorted(EVENT_CLASSES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips_through_json(event_type: str, data: st.DataObject) -> None:
    event = data.draw(event_of(event_type))
    text = event.encode()
    decoded = decode(text)
    assert type(decoded) is type(event)
    assert decoded == event
    assert decoded.encode() == text  # the stored text is canonical: encoding again changes nothing
    assert decode(text.encode("utf-8")) == event  # bytes, as Kafka hands them over
    assert decode_dict(json.loads(text)) == event
    assert decode(text, UpcasterRegistry()) == event  # the slow path (upcasting) agrees with the fast one


@settings(max_examples=50, deadline=None)
@given(event=any_event, seq=st.integers(min_value=1, max_value=2**40))
def test_with_seq_changes_only_seq(event: Event, seq: int) -> None:
    copy = event.with_seq(seq)
    assert copy.seq == seq
    assert copy.model_dump(exclude={"seq"}) == event.model_dump(exclude={"seq"})
    assert json.loads(copy.encode())["seq"] == seq


@given(when=timestamps)
def test_timestamps_are_stored_in_utc(when: datetime) -> None:
    event = sample_message(occurred_at=when)
    assert event.occurred_at == when
    assert event.occurred_at.utcoffset() == timedelta(0)
    assert json.loads(event.encode())["occurred_at"].endswith("Z")


def test_a_naive_timestamp_is_taken_as_utc() -> None:
    assert sample_message(occurred_at=datetime(2026, 3, 1, 9, 0)).occurred_at == datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_the_stored_type_is_the_explicit_name_not_the_class_path() -> None:
    for name, cls in EVENT_CLASSES.items():
        assert cls.TYPE == name
        assert cls.model_fields["type"].default == name
    assert json.loads(sample_message().encode())["type"] == "MessageAppended"


def test_the_partition_key_is_tenant_slash_conversation() -> None:
    assert sample_message(tenant_id="acme", conversation_id="c-1").key == "acme/c-1"


def test_events_are_frozen() -> None:
    event = sample_message()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        event.seq = 9  # type: ignore[misc]


# --------------------------------------------------------------------------- upcasting


class _PayloadV2(MessagePayload):
    language: str


class _PayloadV3(_PayloadV2):
    audience: str


class MessageAppendedV2(Event):
    """MessageAppended as a later memfold might define it: v2 adds ``payload.language``."""

    TYPE: ClassVar[str] = "MessageAppended"
    VERSION: ClassVar[int] = 2
    type: Literal["MessageAppended"] = "MessageAppended"
    schema_version: Literal[2] = 2
    payload: _PayloadV2


class MessageAppendedV3(MessageAppendedV2):
    VERSION: ClassVar[int] = 3
    schema_version: Literal[3] = 3  # type: ignore[assignment]
    payload: _PayloadV3


def _with_language(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "payload": {**raw["payload"], "language": "und"}}


def _with_audience(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "payload": {**raw["payload"], "audience": "customer"}}


@pytest.fixture
def current(monkeypatch: pytest.MonkeyPatch):
    """Make the test copy of MessageAppended at ``version`` the current one, for this test only."""

    def use(version: int) -> None:
        cls = {2: MessageAppendedV2, 3: MessageAppendedV3}[version]
        monkeypatch.setitem(ev.EVENT_CLASSES, "MessageAppended", cls)

    return use


def test_a_stored_older_version_is_upcast_on_read_and_not_rewritten(current) -> None:
    current(2)
    registry = UpcasterRegistry()
    calls: list[int] = []

    @registry.register("MessageAppended", 1)
    def v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
        calls.append(raw["schema_version"])
        return _with_language(raw)

    stored = v1_text(sample_message())  # written by v1 code
    event = decode(stored, registry)
    assert isinstance(event, MessageAppendedV2)
    assert event.schema_version == 2
    assert event.payload.language == "und"
    assert event.payload.content == "where is order #1234?"
    assert (event.event_id, event.seq, event.occurred_at) == ("e-1", 3, sample_message().occurred_at)
    assert calls == [1]
    assert json.loads(stored)["schema_version"] == 1  # the stored text is untouched
    assert decode(event.encode(), registry) == event  # a current-version event needs no upcaster
    assert calls == [1]


def test_upcasting_climbs_one_version_at_a_time(current) -> None:
    current(3)
    registry = UpcasterRegistry()
    registry.register("MessageAppended", 1)(_with_language)
    registry.register("MessageAppended", 2)(_with_audience)
    event = decode(v1_text(sample_message()), registry)
    assert isinstance(event, MessageAppendedV3)
    assert (event.payload.language, event.payload.audience) == ("und", "customer")


def test_a_newer_stored_version_raises_upcast_error(current) -> None:
    current(2)
    raw = json.loads(v1_text(sample_message()))
    raw["schema_version"] = 3
    with pytest.raises(UpcastError, match="newer memfold") as failure:
        decode(json.dumps(raw), UpcasterRegistry())
    assert (failure.value.event_type, failure.value.version, failure.value.current) == ("MessageAppended", 3, 2)
    with pytest.raises(UpcastError):  # the real v2 class refuses a v3 event just the same
        raw["schema_version"] = 3
        ev.UPCASTERS.upcast(raw, 2)


def test_a_missing_upcaster_step_raises_upcast_error(current) -> None:
    current(3)
    registry = UpcasterRegistry()
    registry.register("MessageAppended", 1)(_with_language)  # no v2 -> v3
    with pytest.raises(UpcastError, match="no upcaster registered from v2") as failure:
        decode(v1_text(sample_message()), registry)
    assert (failure.value.version, failure.value.current) == (1, 3)


def test_a_failing_upcaster_is_reported_with_the_event_type(current) -> None:
    current(2)
    registry = UpcasterRegistry()

    @registry.register("MessageAppended", 1)
    def broken(raw: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("language")

    with pytest.raises(UpcastError, match="MessageAppended.*upcaster v1 failed"):
        decode(v1_text(sample_message()), registry)


def test_an_upcaster_is_registered_once() -> None:
    registry = UpcasterRegistry()
    registry.register("MessageAppended", 1)(_with_language)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("MessageAppended", 1)(_with_audience)


def test_a_v1_message_is_upcast_to_one_of_no_user() -> None:
    event = decode(v1_text(sample_message()))
    assert isinstance(event, MessageAppended) and event.schema_version == 2
    assert event.payload.user_id is None
    assert event.payload.content == "where is order #1234?"
    with_user = sample_message(payload=MessagePayload(role="user", content="hi", user_id="u-7"))
    assert decode(with_user.encode()).payload.user_id == "u-7"  # the fast path keeps it


def test_a_user_id_is_an_id() -> None:
    for bad in ("", "a/b", "x" * 201):
        with pytest.raises(pydantic.ValidationError):
            MessagePayload(role="user", content="hi", user_id=bad)


def test_a_missing_schema_version_cannot_be_upcast() -> None:
    raw = json.loads(sample_message().encode())
    del raw["schema_version"]
    with pytest.raises(UpcastError, match="schema_version is missing"):
        decode(json.dumps(raw), UpcasterRegistry())


# --------------------------------------------------------------------------- decode errors


def test_an_unknown_type_raises_unknown_event_type_error() -> None:
    raw = json.loads(sample_message().encode())
    raw["type"] = "MessageEdited"
    with pytest.raises(UnknownEventTypeError, match="MessageEdited.*upgrade memfold") as failure:
        decode(json.dumps(raw))
    assert failure.value.event_type == "MessageEdited"
    assert isinstance(failure.value, EventDecodeError)


@pytest.mark.parametrize(
    "data",
    [
        "",
        "{not json",
        b"\xff\xfe\x00",
        "[1, 2]",
        '"MessageAppended"',
        "{}",
        '{"type": 5}',
        '{"type": "MessageAppended", "schema_version": 1}',
        sample_message().encode().replace('"role":"user"', '"role":"robot"'),
        sample_message().encode().replace('"seq":3', '"seq":-1'),
        sample_message().encode().replace('"content":"where is order #1234?"', '"content":null'),
        sample_message().encode()[:-1] + ',"extra":1}',
        sample_message().encode().replace('"tenant_id":"acme"', '"tenant_id":"a/b"'),
        sample_message().encode().replace('"event_id":"e-1"', '"event_id":""'),
        sample_message().encode().replace('"importance":null', '"importance":1.5'),
        sample_message().encode().replace('"occurred_at":"2026-03-01T09:00:00Z"', '"occurred_at":"yesterday"'),
        sample_message().encode().replace('"tokens":{}', '"tokens":{"cl100k_base":-1}'),
    ],
    ids=["empty", "broken", "not-utf8", "array", "string", "no-type", "type-not-str", "no-fields", "bad-role",
         "negative-seq", "no-content", "extra-field", "slash-tenant", "empty-id", "importance-above-1", "bad-time",
         "negative-token-count"],
)
def test_malformed_data_raises_event_decode_error(data: str | bytes) -> None:
    with pytest.raises(EventDecodeError) as failure:
        decode(data)
    assert not isinstance(failure.value, UnknownEventTypeError)
    with pytest.raises(EventDecodeError):  # the type hint (a SQLite column, a Kafka header) takes the same checks
        decode(data, event_type="MessageAppended")


@pytest.mark.parametrize(
    "change",
    [('"seq":3', '"seq":"3"'), ('"occurred_at":"2026-03-01T09:00:00Z"', '"occurred_at":"2026-03-01T14:30:00+05:30"'),
     ('"occurred_at":"2026-03-01T09:00:00Z"', '"occurred_at":"2026-03-01T09:00:00"'), ('"importance":null', '"importance":1')],
    ids=["numeric-string", "offset-time", "naive-time", "int-importance"],
)
def test_the_fast_message_decoder_agrees_with_the_model_on_lax_input(change: tuple[str, str]) -> None:
    """A stored message the msgspec mirror reads differently, or refuses, decodes as pydantic decodes it."""
    text = sample_message().encode().replace(*change)
    fast = decode(text, event_type="MessageAppended")
    assert fast == MessageAppended.model_validate_json(text)
    assert fast.encode() == MessageAppended.model_validate_json(text).encode()


# --------------------------------------------------------------------------- schemas


def test_json_schemas_cover_every_type() -> None:
    schemas = json_schemas()
    assert set(schemas) == set(EVENT_CLASSES)
    envelope = {"event_id", "type", "schema_version", "tenant_id", "conversation_id", "seq", "occurred_at", "causation_id", "payload"}
    for name, schema in schemas.items():
        assert set(schema["properties"]) == envelope, name
        assert schema["properties"]["type"]["const"] == name
        assert schema["properties"]["schema_version"]["const"] == EVENT_CLASSES[name].VERSION
        required = {field for field, info in EVENT_CLASSES[name].model_fields.items() if info.is_required()}
        assert {"event_id", "conversation_id", "occurred_at"} <= required
        assert set(schema["required"]) == required
        payload_ref = schema["properties"]["payload"].get("$ref") or schema["properties"]["payload"]["allOf"][0]["$ref"]
        payload_model = EVENT_CLASSES[name].model_fields["payload"].annotation
        assert payload_ref == f"#/$defs/{payload_model.__name__}"
        json.dumps(schema)  # serializable as published


def test_a_tenant_id_with_a_slash_is_refused_so_partition_keys_stay_unambiguous():
    with pytest.raises(pydantic.ValidationError):
        sample_message(tenant_id="a/b", conversation_id="c")


def test_a_stored_v1_summary_produced_is_upcast_to_dated_facts_without_lineage() -> None:
    v1 = {
        "event_id": "s1", "type": "SummaryProduced", "schema_version": 1, "tenant_id": "t", "conversation_id": "c",
        "seq": 7, "occurred_at": "2024-03-01T12:00:00Z", "causation_id": "r1",
        "payload": {
            "summary_id": "s1", "request_id": "r1", "policy": "hierarchical", "settings_hash": "h", "covers_from": 0,
            "covers_to": 9, "text": "narrative", "facts": [{"key": "order_id", "value": "#1", "category": "ENTITY"}],
            "summarizer": "offline", "model": "m", "prompt_hash": "p",
        },
    }
    stored = json.dumps(v1)
    event = decode(stored)
    assert event.schema_version == 2 == ev.SummaryProduced.VERSION
    (fact,) = event.payload.facts
    assert (fact.key, fact.value, fact.stated_at, fact.stated_in, fact.superseded_by) == ("order_id", "#1", None, None, None)
    assert fact.current
    assert json.loads(stored)["schema_version"] == 1  # the stored text is untouched
    assert decode(event.encode()) == event  # v2 round-trips as is
