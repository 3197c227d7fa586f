"""The summary cache's key: stable across memfold versions, so stored caches (and replays served from them) stay valid."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from memfold.core.events import Fact, ToolCall
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.projections.summary_cache import cache_key, key_material

T = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
REQUEST = SummaryInput(
    policy="sliding_window", kind="text",
    messages=(
        MessageRecord("acme", "c1", 0, 1, "e0", "user", "Order #4417 is late.", 9, T,
                      metadata={"channel": "web", "tags": ["a", 1]}),
        MessageRecord("acme", "c1", 1, 2, "e1", "assistant", "", 4, T,
                      tool_calls=(ToolCall(id="t1", name="lookup", arguments='{"order": "4417"}'),)),
        MessageRecord("acme", "c1", 2, 3, "e2", "tool", '{"status": "shipped"}', 8, T, tool_call_id="t1",
                      embedding=(0.25, -1.0)),
    ),
    existing_summary="Earlier: the user asked about an order.",
    existing_facts=(Fact(key="order_id", value="#4417", category="ENTITY", stated_at=T, stated_in=0),),
    window_start=0, keep_facts=True,
)


def test_the_key_of_a_request_is_the_one_earlier_versions_stored():
    # Computed by memfold at 414785e (before the key's encoding was made faster): a change here
    # would turn every stored cache entry into a miss, and every cached replay into model calls.
    assert cache_key("offline", "offline-salience-30", "p" * 64, REQUEST) == (
        "d20e78851d8560e5971d66edb8a0eda45814d16280c1248a2f69c543e4f00357"
    )


def test_every_field_of_the_request_is_in_the_key():
    base = cache_key("offline", "m", "h", REQUEST)
    first, second, third = REQUEST.messages
    variants = [
        replace(REQUEST, existing_summary="Other."),
        replace(REQUEST, window_start=1),
        replace(REQUEST, messages=(first, second)),
        replace(REQUEST, messages=(replace(first, metadata={"channel": "app", "tags": ["a", 1]}), second, third)),
        replace(REQUEST, messages=(first, second, replace(third, embedding=(0.5, -1.0)))),
        replace(REQUEST, messages=(first, replace(second, occurred_at=T.replace(minute=31)), third)),
    ]
    assert all(cache_key("offline", "m", "h", v) != base for v in variants)


# ----------------------------------------------------------------------------- the key's bytes
# The key hashed canonical_json of this conversion before it was encoded with msgspec: any input
# must give the same bytes, or stored cache entries become misses.


def _reference_plain(value):
    import dataclasses

    import msgspec
    from pydantic import BaseModel

    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, msgspec.Struct):
        return {name: _reference_plain(getattr(value, name)) for name in value.__struct_fields__}
    if dataclasses.is_dataclass(value):
        return {f.name: _reference_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_reference_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _reference_plain(v) for k, v in value.items()}
    return value


def _reference_material(request: SummaryInput) -> bytes:
    from memfold.core.ids import canonical_json

    content = _reference_plain(request)
    if not request.keep_facts:
        del content["keep_facts"]
    return canonical_json({"summarizer": "s", "model": "m", "prompt_hash": "h", "prompt_id": request.prompt_id,
                           "prompt_version": request.prompt_version, "input": content}).encode("utf-8")


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
    | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.1, 1e-05, 1e16, -0.0, 2.5e-310]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def requests(draw):
    n = draw(st.integers(0, 4))
    messages = tuple(
        MessageRecord(draw(TEXT), draw(TEXT), i, draw(st.integers(0, 2**63 - 1)), draw(TEXT),
                      draw(st.sampled_from(["user", "assistant", "tool"])), draw(TEXT), draw(st.integers(0, 10**6)),
                      T.replace(microsecond=draw(st.integers(0, 999_999))),
                      importance=draw(st.none() | st.floats(allow_nan=False)),
                      embedding=draw(st.none() | st.tuples(st.floats(width=32), st.floats(width=32))),
                      metadata=draw(st.dictionaries(TEXT, JSON, max_size=3)),
                      tool_calls=draw(st.lists(st.builds(ToolCall, id=TEXT, name=TEXT, arguments=TEXT), max_size=2)
                                      .map(tuple)))
        for i in range(n)
    )
    facts = tuple(draw(st.lists(st.builds(Fact, key=TEXT, value=TEXT, stated_in=st.none() | st.integers(0, 99),
                                          stated_at=st.none() | st.just(T)), max_size=3)))
    return SummaryInput(policy=draw(TEXT), kind="text", messages=messages, existing_summary=draw(st.none() | TEXT),
                        existing_facts=facts, window_start=draw(st.none() | st.integers(0, 50)),
                        keep_facts=draw(st.booleans()), token_cap=draw(st.none() | st.integers(1, 5000)),
                        prompt_id=draw(st.none() | TEXT), prompt_version=draw(st.none() | TEXT))


@settings(max_examples=400, deadline=None)
@given(requests())
def test_the_key_hashes_the_bytes_json_dumps_gave(request):
    assert key_material("s", "m", "h", request) == _reference_material(request)


def test_msgspec_writes_every_character_as_json_dumps_does():
    """The claim the key's encoder stands on, for every code point but the surrogates (which events refuse)."""
    import json

    import msgspec

    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert msgspec.json.encode(text) == json.dumps(text, ensure_ascii=False).encode("utf-8")
    keys = {"b": 1, "a": 2, "é": 3, "Z": 4, "\u00e9\u0301": 5, "\U0001f600": 6}
    assert msgspec.json.Encoder(order="sorted").encode(keys) == \
        json.dumps(keys, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
