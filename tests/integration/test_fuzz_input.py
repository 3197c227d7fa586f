"""Property-based fuzz of the input boundary: JSONL ingest and the engine's append API, on a real SQLite log.

Properties: no exception but memfold's own ever escapes; every line is
either stored exactly once or reported with its line number (never both,
never neither); every line made valid by construction is stored; a second
ingest of the same file stores nothing. ``MEMFOLD_FUZZ_EXAMPLES`` raises the
number of examples for a long run (the default keeps ``make test`` short).
"""

from __future__ import annotations

import itertools
import json
import os
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfold.cli.ingest import ingest_file, line_event_ids
from memfold.core.errors import ValidationError
from memfold.core.settings import Settings
from memfold.core.validation import MESSAGE_KEYS
from memfold.engine.engine import MemoryEngine

EXAMPLES = int(os.environ.get("MEMFOLD_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
_sources = itertools.count()
TALLY = {"examples": 0, "lines": 0, "stored": 0, "rejected": 0, "api_calls": 0, "api_rejected": 0}

surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
nasty_text = st.text(st.one_of(st.characters(), surrogate), max_size=12)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), nasty_text
)
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(nasty_text, kids, max_size=3),
                           max_leaves=12)
times = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2099, 12, 30)).map(
    lambda d: d.replace(tzinfo=UTC).isoformat()
)
good_metadata = st.dictionaries(
    st.text(max_size=8),
    st.recursive(st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False)
                 | st.text(max_size=10), lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                 max_leaves=8),
    max_size=4,
)
valid_messages = st.fixed_dictionaries(
    {
        "conversation_id": st.sampled_from(["c1", "c2", "support-7"]),
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.text(min_size=1, max_size=60).filter(str.strip),
    },
    optional={
        "tenant_id": st.sampled_from(["acme", "globex"]),
        "ts": times,
        "metadata": good_metadata,
        "importance": st.floats(0, 1),
        "model_variant": st.text(min_size=1, max_size=10),
    },
)


@st.composite
def mutated(draw) -> dict:
    """A valid message with one key set to any JSON value, or one key removed (event_id left alone)."""
    message = dict(draw(valid_messages))
    key = draw(st.sampled_from([k for k in MESSAGE_KEYS if k != "event_id"] + ["junk", "\ud800"]))
    if draw(st.booleans()) and key in message:
        del message[key]
    else:
        message[key] = draw(json_values)
    return message


def _dump(message) -> bytes:
    return json.dumps(message, ensure_ascii=True).encode()  # ensure_ascii writes surrogates as \\udXXX escapes


@st.composite
def raw_lines(draw) -> tuple[bool, bytes]:
    """(valid by construction, a line as bytes): valid, a mutated message, cut or corrupted JSON, deep nesting, noise."""
    kind = draw(st.sampled_from(["valid", "valid", "mutated", "mutated", "cut", "bytes", "deep", "noise"]))
    if kind == "valid":
        return True, _dump(draw(valid_messages))
    if kind == "mutated":
        return False, _dump(draw(mutated()))
    if kind == "cut":
        text = _dump(draw(valid_messages))
        return False, text[: draw(st.integers(1, max(1, len(text) - 1)))]
    if kind == "bytes":
        text = bytearray(_dump(draw(valid_messages)))
        at = draw(st.integers(0, len(text) - 1))
        text[at : at + 1] = draw(st.binary(min_size=1, max_size=3)).replace(b"\n", b"x").replace(b"\r", b"x")
        return False, bytes(text)
    if kind == "deep":
        depth = draw(st.sampled_from([40, 5_000, 200_000]))
        return False, b'{"conversation_id": "c1", "role": "user", "content": "x", "metadata": ' + b"[" * depth + b"]" * depth + b"}"
    return False, draw(st.binary(max_size=40)).replace(b"\n", b" ").replace(b"\r", b" ")


@pytest.fixture(scope="module", autouse=True)
def tally():
    yield TALLY
    print(f"\nfuzz: {TALLY}")  # figures for a long run (pytest -s)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    settings_ = Settings.load(None, data_dir=tmp_path_factory.mktemp("fuzz") / "data", max_message_chars=500)
    with MemoryEngine(settings_, role="client") as eng:
        yield eng


def _stored_count(engine) -> int:
    return sum(engine.log.end_positions().values())


@FUZZ
@given(lines=st.lists(raw_lines(), min_size=1, max_size=25), batch_size=st.integers(1, 10))
def test_fuzzed_jsonl_every_line_stored_once_or_reported(engine, tmp_path_factory, lines, batch_size):
    valid_lines = {n for n, (valid, _) in enumerate(lines, start=1) if valid}
    lines = [line for _, line in lines]
    source = f"fuzz-{next(_sources)}"
    path = tmp_path_factory.mktemp("in") / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    before = _stored_count(engine)

    report = ingest_file(engine, path, progress=False, batch_size=batch_size, source=source)

    ids = line_event_ids(engine, path, source=source)  # the lines that are messages; the others must be reported
    found = engine.log.find(list(ids.values()))
    rejected = [r.line for r in report.rejected]
    assert len(rejected) == len(set(rejected))
    assert {n for n, line in enumerate(lines, start=1) if line.strip()} - ids.keys() <= set(rejected)
    for n, event_id in ids.items():
        assert (event_id in found) != (n in rejected), f"line {n}: stored={event_id in found} rejected={n in rejected}"
    assert valid_lines <= {n for n, event_id in ids.items() if event_id in found}
    assert report.accepted == len(found) == _stored_count(engine) - before
    assert report.duplicates == 0 and not report.log_failed
    TALLY["examples"] += 1
    TALLY["lines"] += len(lines)
    TALLY["stored"] += report.accepted
    TALLY["rejected"] += len(rejected)

    again = ingest_file(engine, path, progress=False, batch_size=batch_size, source=source)
    assert (again.accepted, again.duplicates) == (0, report.accepted)
    assert [r.line for r in again.rejected] == rejected
    assert _stored_count(engine) - before == report.accepted


python_values = st.one_of(
    json_values, st.just(object()), st.binary(max_size=4), st.tuples(scalars), st.sets(st.integers(), max_size=2),
    st.datetimes(), st.decimals(allow_nan=True), st.complex_numbers(),
)


@st.composite
def api_messages(draw) -> dict:
    message = dict(draw(valid_messages))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from([*MESSAGE_KEYS, "junk"]))
        message[key] = draw(python_values)
    return message


@FUZZ
@given(message=api_messages())
def test_fuzzed_append_api_stores_or_raises_a_validation_error(engine, message):
    good = {"conversation_id": "api", "role": "user", "content": "fine"}
    before = _stored_count(engine)
    TALLY["api_calls"] += 1
    try:
        positions = engine.append_many([good, message])
    except ValidationError as exc:
        TALLY["api_rejected"] += 1
        assert exc.line == 2 and str(exc).startswith("line 2: ")
        assert _stored_count(engine) == before  # all or nothing
        return
    assert len(positions) == 2
    assert before < _stored_count(engine) <= before + 2  # a repeated client event_id is stored once
    for record in engine.log.read(positions[1].partition, positions[1].offset, 1):
        record.event.encode()
