"""JSONL ingest against a real SQLite log: bad lines cost only themselves, re-runs store nothing twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.client_engine import stored  # the `engine` fixture comes from the same module (tests/conftest.py)

from memfold.cli.ingest import ingest_file, line_key
from memfold.core.errors import AppendFailedError, EventConflictError, InputFileError, ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


def msg(content: str, conversation: str = "c1", **extra) -> str:
    return json.dumps({"conversation_id": conversation, "role": "user", "content": content, **extra})


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    return path


# The malformed lines that used to end in a traceback (and lose the batch), or be changed silently.
MALFORMED = {
    "tool call id number": msg("x", role="assistant", tool_calls=[{"id": 1}]).replace('"role": "user", ', ""),
    "tool calls 42": '{"conversation_id": "c1", "role": "assistant", "content": "", "tool_calls": 42}',
    "tool calls true": '{"conversation_id": "c1", "role": "assistant", "content": "x", "tool_calls": true}',
    "arguments object": '{"conversation_id": "c1", "role": "assistant", "content": "x", '
                        '"tool_calls": [{"id": "t", "name": "f", "arguments": {"a": 1}}]}',
    "lone surrogate content": '{"conversation_id": "c1", "role": "user", "content": "a\\ud800b"}',
    "lone surrogate metadata": '{"conversation_id": "c1", "role": "user", "content": "a", "metadata": {"k": "\\udc00"}}',
    "deep metadata": '{"conversation_id": "c1", "role": "user", "content": "a", "metadata": '
                     + "[" * 100_000 + "]" * 100_000 + "}",
    "deep metadata objects": '{"conversation_id": "c1", "role": "user", "content": "a", "metadata": '
                             + '{"a":' * 50 + "1" + "}" * 50 + "}",
    "infinity": '{"conversation_id": "c1", "role": "user", "content": "a", "metadata": {"v": Infinity}}',
    "nan importance": '{"conversation_id": "c1", "role": "user", "content": "a", "importance": NaN}',
    "huge float": '{"conversation_id": "c1", "role": "user", "content": "a", "metadata": {"v": 1e999}}',
    "bool importance": '{"conversation_id": "c1", "role": "user", "content": "a", "importance": true}',
    "year 1": '{"conversation_id": "c1", "role": "user", "content": "a", "ts": "0001-01-01T00:00:00Z"}',
    "year 9999": '{"conversation_id": "c1", "role": "user", "content": "a", "ts": "9999-01-01T00:00:00Z"}',
    "negative epoch": '{"conversation_id": "c1", "role": "user", "content": "a", "ts": -86400}',
    "metadata not object": '{"conversation_id": "c1", "role": "user", "content": "a", "metadata": [["a", 1]]}',
    "invalid utf-8": b'{"conversation_id": "c1", "role": "user", "content": "\xff\xfe"}'.decode("latin-1"),
    "not an object": "[1, 2, 3]",
    "truncated": '{"conversation_id": "c1", "role": "us',
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_bad_line_between_two_good_ones_costs_only_itself(engine, tmp_path, case):
    path = tmp_path / "in.jsonl"
    bad = MALFORMED[case]
    data = (msg("first") + "\n").encode() + bad.encode("latin-1" if case == "invalid utf-8" else "utf-8",
                                                          "surrogatepass") + ("\n" + msg("last") + "\n").encode()
    path.write_bytes(data)
    report = ingest_file(engine, path, progress=False)
    assert [r.line for r in report.rejected] == [2], report.rejected
    assert report.accepted == 2 and report.exit_code == 2
    assert [e.payload.content for e in stored(engine)] == ["first", "last"]


def test_a_surrogate_deep_in_a_big_file_loses_nothing_and_rerun_stores_nothing(engine, tmp_path):
    lines = [msg(f"message {i}", conversation=f"c{i % 7}") for i in range(5000)]
    lines[2999] = '{"conversation_id": "c1", "role": "user", "content": "bad \\ud800"}'
    path = write(tmp_path / "big.jsonl", lines)
    report = ingest_file(engine, path, progress=False, batch_size=700)
    assert report.accepted == 4999 and report.duplicates == 0
    assert [(r.line, r.field) for r in report.rejected] == [(3000, "content")]
    again = ingest_file(engine, path, progress=False, batch_size=700)
    assert (again.accepted, again.duplicates, len(again.rejected)) == (0, 4999, 1)
    contents = [e.payload.content for e in stored(engine)]
    assert len(contents) == len(set(contents)) == 4999


def test_saying_ok_twice_keeps_both_and_a_new_source_is_new_input(engine, tmp_path):
    path = write(tmp_path / "a.jsonl", [msg("ok"), msg("ok")])
    assert ingest_file(engine, path, progress=False).accepted == 2
    assert ingest_file(engine, path, progress=False).duplicates == 2
    other = write(tmp_path / "b.jsonl", [msg("ok")])
    assert ingest_file(engine, other, progress=False).accepted == 1
    assert ingest_file(engine, other, progress=False, source="a.jsonl").duplicates == 1  # same key, same line 1
    assert [e.payload.content for e in stored(engine)] == ["ok"] * 3


def test_a_fixed_line_is_stored_on_the_rerun_and_nothing_else_twice(engine, tmp_path):
    lines = [msg("one"), '{"conversation_id": "c1", "role": "robot", "content": "two"}', msg("three")]
    path = write(tmp_path / "in.jsonl", lines)
    assert ingest_file(engine, path, progress=False).accepted == 2
    lines[1] = msg("two")
    write(path, lines)
    report = ingest_file(engine, path, progress=False)
    assert (report.accepted, report.duplicates, report.rejected) == (1, 2, [])
    assert sorted(e.payload.content for e in stored(engine)) == ["one", "three", "two"]


def test_client_event_ids_duplicate_or_conflict(engine, tmp_path):
    path = write(tmp_path / "in.jsonl", [
        msg("hello", event_id="e1"),
        msg("hello", event_id="e1"),          # same id, same content: a duplicate
        msg("changed", event_id="e1"),        # same id, other content: a conflict
        msg("world", event_id="e2"),
    ])
    report = ingest_file(engine, path, progress=False)
    assert (report.accepted, report.duplicates, report.conflicts) == (2, 1, 1)
    assert [(r.line, r.field) for r in report.rejected] == [(3, "event_id")]
    assert "already stored with different content" in report.rejected[0].reason
    later = write(tmp_path / "later.jsonl", [msg("hello", event_id="e1"), msg("other", event_id="e2")])
    report = ingest_file(engine, later, progress=False)
    assert (report.accepted, report.duplicates, report.conflicts) == (0, 1, 1)
    assert [e.payload.content for e in stored(engine)] == ["hello", "world"]


def test_append_api_is_idempotent_by_event_id_and_reports_conflicts(engine):
    first = engine.append_message("c1", "user", "hi", event_id="m-1")
    assert engine.append_message("c1", "user", "hi", event_id="m-1") == first
    with pytest.raises(EventConflictError) as info:
        engine.append_message("c1", "user", "bye", event_id="m-1")
    assert info.value.field == "event_id" and info.value.line is None
    with pytest.raises(EventConflictError) as info:
        engine.append_many([{"conversation_id": "c1", "role": "user", "content": "x", "event_id": "m-2"},
                            {"conversation_id": "c1", "role": "user", "content": "y", "event_id": "m-2"}])
    assert info.value.line == 2
    assert [e.payload.content for e in stored(engine)] == ["hi"]


def test_single_append_error_has_no_line_number(engine):
    with pytest.raises(ValidationError) as info:
        engine.append_message("c1", "wizard", "hi")
    assert info.value.line is None and not str(info.value).startswith("line")


def test_strict_stops_at_the_first_bad_line_and_writes_nothing_after_it(engine, tmp_path):
    lines = [msg(f"m{i}") for i in range(10)]
    lines[4] = "{broken"
    path = write(tmp_path / "in.jsonl", lines)
    report = ingest_file(engine, path, progress=False, strict=True, batch_size=3)
    assert [r.line for r in report.rejected] == [5] and "--strict" in report.stopped
    assert [e.payload.content for e in stored(engine)] == ["m0", "m1", "m2", "m3"]
    assert report.exit_code == 2


class FailingLog:
    """The real log, failing every append after ``allowed`` batches (a broker or disk outage)."""

    def __init__(self, log, allowed: int):
        self._log, self.allowed = log, allowed

    def append(self, events):
        if self.allowed <= 0:
            raise AppendFailedError("the log is down", event_ids=[e.event_id for e in events])
        self.allowed -= 1
        return self._log.append(events)

    def __getattr__(self, name):
        return getattr(self._log, name)


def test_a_failing_log_stops_the_ingest_and_resume_continues_where_the_log_says(engine, tmp_path):
    lines = [msg(f"m{i}") for i in range(20)]
    lines[2] = "not json"
    path = write(tmp_path / "in.jsonl", lines)
    real = engine.log
    engine.log = FailingLog(real, allowed=2)
    report = ingest_file(engine, path, progress=False, batch_size=5)
    engine.log = real
    assert report.log_failed and report.exit_code == 1 and "--resume" in report.stopped
    assert report.accepted == 10  # two whole batches (lines 1-11 but line 3), the rest untouched
    resumed = ingest_file(engine, path, progress=False, batch_size=5, resume=True)
    assert resumed.resumed_after == 11 and resumed.accepted == 9 and resumed.duplicates == 10
    assert [r.line for r in resumed.rejected] == [3] and resumed.exit_code == 2  # reported again
    assert sorted(e.payload.content for e in stored(engine)) == sorted(f"m{i}" for i in range(20) if i != 2)


def line_event_id(engine, source: str, line: str, occurrence: int = 1) -> str:
    obj = json.loads(line)
    key = line_key(source, line.encode(), occurrence)
    return engine.keyed_event_id(obj["conversation_id"], key, tenant_id=obj.get("tenant_id", "default"))


def test_resume_stores_the_lines_a_cut_batch_left_out(engine, tmp_path):
    # A Kafka batch cut by a crash may keep some of its lines and not others (no atomic batches there).
    lines = [msg(f"m{i}", conversation=f"c{i % 3}") for i in range(12)]
    path = write(tmp_path / "in.jsonl", lines)
    partial = [engine.validate(json.loads(lines[n - 1]), event_id=line_event_id(engine, path.name, lines[n - 1]))
               for n in (1, 2, 3, 4, 6, 9)]
    engine.append_events(partial)
    resumed = ingest_file(engine, path, progress=False, resume=True)
    assert (resumed.resumed_after, resumed.duplicates, resumed.accepted) == (9, 6, 6)
    assert sorted(e.payload.content for e in stored(engine)) == sorted(f"m{i}" for i in range(12))


def test_deleting_a_rejected_line_and_rerunning_stores_nothing_twice(engine, tmp_path):
    lines = [msg(f"m{i}") for i in range(10)]
    lines.insert(2, '{"conversation_id": "c1", "role": "robot", "content": "bad"}')
    lines.insert(6, msg("ok"))
    lines.append(msg("ok"))
    path = write(tmp_path / "in.jsonl", lines)
    first = ingest_file(engine, path, progress=False)
    assert (first.accepted, [r.line for r in first.rejected]) == (12, [3])
    del lines[2]  # the user takes the bad line out: every later line moves up one
    write(path, lines)
    again = ingest_file(engine, path, progress=False)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 12, [])
    contents = [e.payload.content for e in stored(engine)]
    assert sorted(contents) == sorted([f"m{i}" for i in range(10)] + ["ok", "ok"])


def test_an_ingest_id_is_keyed_and_carries_no_content(engine, tmp_path):
    line = msg("my card PIN is 4831")
    path = write(tmp_path / "in.jsonl", [line])
    assert ingest_file(engine, path, progress=False).accepted == 1
    [event] = stored(engine)
    assert event.event_id == line_event_id(engine, "in.jsonl", line)
    # Not a function of the line alone: the same line in another data dir (another key) gets another id.
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "other"), role="client") as other:
        assert ingest_file(other, path, progress=False).accepted == 1
        [elsewhere] = stored(other)
    assert elsewhere.event_id != event.event_id
    assert "4831" not in event.event_id and len(event.event_id) == 32


def test_an_event_the_log_cannot_store_costs_only_its_line(engine, tmp_path):
    path = write(tmp_path / "in.jsonl", [msg("a"), msg("poison"), msg("c")])
    real_append = engine.append_events

    def append_events(events):  # a bug downstream of validation, on one message
        if any(e.payload.content == "poison" for e in events):
            raise RuntimeError("cannot store this one")
        return real_append(events)

    engine.append_events = append_events
    report = ingest_file(engine, path, progress=False)
    assert report.accepted == 2 and [r.line for r in report.rejected] == [2]
    assert "RuntimeError" in report.rejected[0].reason


def test_unreadable_inputs_are_input_file_errors(engine, tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        ingest_file(engine, tmp_path / "missing.jsonl", progress=False)
    with pytest.raises(InputFileError, match="is a directory"):
        ingest_file(engine, tmp_path, progress=False)


def test_an_overlong_line_is_rejected_unread(engine, tmp_path):
    engine.settings = engine.settings.model_copy(update={"max_message_chars": 10})
    path = write(tmp_path / "in.jsonl", [msg("a"), msg("x" * 3_000_000), msg("b")])
    report = ingest_file(engine, path, progress=False)
    assert [r.line for r in report.rejected] == [2] and "bytes; the limit is" in report.rejected[0].reason
    assert report.accepted == 2


def test_a_line_naming_a_forgotten_conversation_is_rejected_with_the_reason(tmp_path):
    path = write(tmp_path / "in.jsonl", [msg("my card PIN is 4831", conversation="gone"), msg("hello", conversation="kept")])
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data")) as eng:
        assert ingest_file(eng, path, progress=False).accepted == 2
        eng.wait_idle(timeout=120)
        eng.forget("gone")
        report = ingest_file(eng, path, progress=False)
    assert (report.accepted, report.duplicates, report.exit_code) == (0, 1, 2)
    [rejection] = report.rejected
    assert (rejection.line, rejection.field) == (1, "conversation_id")
    assert "was forgotten" in rejection.reason and "reopen" in rejection.reason
