"""SQLiteEventLog: the EventLog contract on real files, plus what only the SQLite log promises."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.event_log_contract import (
    EventLogContract,
    MakeLog,
    by_conversation,
    message,
    one_of_each_type,
    read_all,
    read_partition,
)
from memfold.core.errors import AppendFailedError, ConfigError, LogCorruptionError, LogUnavailableError
from memfold.core.events import MessageAppended, MessagePayload
from memfold.core.positions import Position
from memfold.streams.logs import open_log
from memfold.streams.sqlite_log import SQLiteEventLog, encode_with_seq


@pytest.fixture
def opened() -> Iterator[list[SQLiteEventLog]]:
    logs: list[SQLiteEventLog] = []
    yield logs
    for log in logs:
        log.close()


@pytest.fixture
def open_file(opened: list[SQLiteEventLog]):
    def open_(path: Path, partitions: int = 4, **kw) -> SQLiteEventLog:
        log = SQLiteEventLog(path, partitions=partitions, **kw)
        opened.append(log)
        return log

    return open_


class TestSQLiteEventLog(EventLogContract):
    @pytest.fixture
    def make_log(self, tmp_path: Path, open_file) -> MakeLog:
        counter = itertools.count()
        return lambda partitions=4: open_file(tmp_path / f"log-{next(counter)}.sqlite", partitions)


# --------------------------------------------------------------------------- the file


def test_the_file_is_in_wal_mode_and_append_only(tmp_path: Path, open_file) -> None:
    log = open_file(tmp_path / "events.sqlite")
    log.append([message("acme", "c1", 1)])
    raw = sqlite3.connect(tmp_path / "events.sqlite")
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        triggers = {name for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert triggers == {"events_no_update", "events_no_delete"}
    finally:
        raw.close()


def test_stored_json_carries_the_assigned_seq(tmp_path: Path, open_file) -> None:
    log = open_file(tmp_path / "events.sqlite", partitions=1)
    log.append([message("acme", "c1", i, seq=42) for i in range(3)])
    raw = sqlite3.connect(tmp_path / "events.sqlite")
    try:
        rows = raw.execute("SELECT seq, body FROM events ORDER BY offset_no").fetchall()
    finally:
        raw.close()
    assert [seq for seq, _ in rows] == [1, 2, 3]
    assert [json.loads(body)["seq"] for _, body in rows] == [1, 2, 3]


def test_encoding_with_seq_equals_copying_with_seq() -> None:
    # metadata holding a "seq" key and a caller-set seq must not confuse the splice
    tricky = MessageAppended(
        event_id='id ,"seq":0, x', tenant_id='t,"seq":0,', conversation_id="c", seq=7,
        occurred_at=one_of_each_type("a", "b")[0].occurred_at,
        payload=MessagePayload(role="user", content=',"seq":7,', metadata={"seq": 7, ',"seq":7,': 1}),
    )
    for event in [tricky, *one_of_each_type("acme", "c1"), *(e.with_seq(3) for e in one_of_each_type("a", "b"))]:
        for seq in (1, 12, 10**9):
            assert encode_with_seq(event, seq) == event.with_seq(seq).encode()


def test_the_partition_count_is_fixed_at_creation(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    open_file(path, partitions=4).append([message("acme", "c1", 1)])
    with pytest.raises(ConfigError, match="created with 4 partitions.*partitions=4"):
        SQLiteEventLog(path, partitions=8)
    assert open_file(path, partitions=4).end_positions() == open_file(path, partitions=4).end_positions()


def test_reopening_continues_offsets_and_seq(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    first = open_file(path, partitions=2)
    before = first.append([message("acme", "c1", i) for i in range(3)])
    first.close()
    again = open_file(path, partitions=2)
    after = again.append([message("acme", "c1", i) for i in range(3, 5)])
    assert [p.offset for p in before + after] == [0, 1, 2, 3, 4]
    assert [r.event.seq for r in read_all(again)] == [1, 2, 3, 4, 5]


def test_two_instances_on_one_file_share_seq_and_idempotency(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    a, b = open_file(path), open_file(path)
    a.append([message("acme", "c1", 1)])
    b.append([message("acme", "c1", 2)])
    (again,) = b.append([message("acme", "c1", 1)])  # stored by a: not appended twice
    a.append([message("acme", "c1", 3)])
    records = read_all(b)
    assert [r.event.seq for r in records] == [1, 2, 3]
    assert again == records[0].position


def test_a_failed_batch_stores_nothing_and_the_next_one_continues_gaplessly(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    log = open_file(path, partitions=1)
    log.append([message("acme", "c1", 0)])
    raw = sqlite3.connect(path)
    raw.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.event_id = 'poison'"
        " BEGIN SELECT RAISE(ABORT, 'poisoned insert'); END"
    )
    raw.commit()
    batch = [message("acme", "c1", 1), message("acme", "c1", 2, event_id="poison"), message("acme", "c1", 3)]
    with pytest.raises(AppendFailedError, match="poisoned insert") as failure:
        log.append(batch)
    assert failure.value.event_ids == [e.event_id for e in batch]
    assert isinstance(failure.value.__cause__, sqlite3.Error)
    assert log.end_positions() == {0: 1}
    raw.execute("DROP TRIGGER poison")
    raw.commit()
    raw.close()
    assert [p.offset for p in log.append(batch)] == [1, 2, 3]
    assert [r.event.seq for r in read_all(log)] == [1, 2, 3, 4]


def test_a_write_lock_held_too_long_is_log_unavailable(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    log = open_file(path, partitions=1, busy_timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(LogUnavailableError, match="write lock.*nothing was appended"):
            log.append([message("acme", "c1", 1)])
        assert log.read(0, 0) == []  # readers are not blocked by a writer
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert log.append([message("acme", "c1", 1)]) == [Position(0, 0)]


@pytest.mark.parametrize("make_bad_path", [lambda tmp: tmp, lambda tmp: _write(tmp / "not.sqlite", b"x" * 4096)])
def test_a_path_that_is_no_log_is_log_unavailable(tmp_path: Path, make_bad_path) -> None:
    with pytest.raises(LogUnavailableError, match="cannot open event log"):
        SQLiteEventLog(make_bad_path(tmp_path))


def test_a_missing_row_is_reported_as_corruption(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    log = open_file(path, partitions=1)
    log.append([message("acme", "c1", i) for i in range(3)])
    raw = sqlite3.connect(path)  # what a vandal with the sqlite3 shell could do
    raw.execute("DROP TRIGGER events_no_delete")
    raw.execute("DELETE FROM events WHERE offset_no = 1")
    raw.commit()
    raw.close()
    # Another handle reads the file: the appending one hands its own messages to its next read from memory.
    with pytest.raises(LogCorruptionError, match="expected offset 1, found 2"):
        open_file(path, partitions=1).read(0, 0)


def test_a_closed_log_refuses_calls(tmp_path: Path) -> None:
    log = SQLiteEventLog(tmp_path / "events.sqlite", partitions=1)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogUnavailableError, match="closed"):
        log.append([message("acme", "c1", 1)])
    with pytest.raises(LogUnavailableError, match="closed"):
        log.end_positions()
    kept = SQLiteEventLog(tmp_path / "kept.sqlite", partitions=1)
    kept.keep_appended(10)
    kept.append([message("acme", "c1", 1)])  # held for the next read, which a closed log refuses all the same
    kept.close()
    with pytest.raises(LogUnavailableError, match="closed"):
        kept.read(0, 0, 1)  # one record: the kept one alone would answer it


# --------------------------------------------------------------------------- threads


def test_threads_append_and_read_one_instance_concurrently(tmp_path: Path, open_file) -> None:
    log = open_file(tmp_path / "events.sqlite", partitions=3)
    errors: list[BaseException] = []
    stop = threading.Event()
    observed_ends: list[int] = []

    def writer(w: int) -> None:
        try:
            for batch in range(20):
                log.append([message("acme", f"c{i % 5}", i, event_id=f"w{w}-{batch}-{i}") for i in range(10)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                for partition in log.partitions():
                    offsets = [r.position.offset for r in read_partition(log, partition, page=17)]
                    assert offsets == list(range(len(offsets)))
                observed_ends.append(sum(log.end_positions().values()))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert errors == []
    assert observed_ends == sorted(observed_ends)  # end positions only grow
    groups = by_conversation(read_all(log))
    assert sum(len(v) for v in groups.values()) == 600
    for records in groups.values():
        assert [r.event.seq for r in records] == list(range(1, len(records) + 1))


# --------------------------------------------------------------------------- the URL registry


def test_open_log_maps_sqlite_urls_to_files(tmp_path: Path, opened: list[SQLiteEventLog], monkeypatch) -> None:
    absolute = open_log(f"sqlite:///{tmp_path / 'abs.sqlite'}", partitions=2)  # sqlite:////tmp/... = absolute
    opened.append(absolute)
    assert isinstance(absolute, SQLiteEventLog) and absolute.partition_count == 2
    assert absolute.path == tmp_path / "abs.sqlite"
    monkeypatch.chdir(tmp_path)
    relative = open_log("sqlite:///data/rel.sqlite")
    opened.append(relative)
    assert relative.partition_count == 8
    assert (tmp_path / "data" / "rel.sqlite").exists()


@pytest.mark.parametrize("url", ["memory://", "postgres://db/x", "/just/a/path", "SQLITE+x:///a"])
def test_open_log_names_the_supported_schemes(url: str) -> None:
    with pytest.raises(ConfigError, match="supported schemes: kafka://, sqlite://"):
        open_log(url)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "kafka://"])
def test_open_log_needs_a_file_or_a_broker(url: str) -> None:
    with pytest.raises(ConfigError, match="names no"):
        open_log(url)


def test_opening_a_sqlite_log_does_not_import_kafka(tmp_path: Path) -> None:
    code = (
        "import sys; from memfold.streams.logs import open_log; "
        f"open_log('sqlite:///{tmp_path / 'x.sqlite'}').close(); "
        "print(sorted(m for m in sys.modules if m == 'kafka' or m.startswith(('kafka.', 'memfold.streams.kafka'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- messages handed to the next read


def test_the_next_read_gets_the_appended_messages_as_the_file_holds_them(tmp_path: Path, open_file) -> None:
    path = tmp_path / "events.sqlite"
    writer = open_file(path, partitions=2)
    writer.keep_appended(25)  # the oldest are dropped: those reads go to the file
    batches = [[message("acme", f"c{c}", 10 * b + i, seq=99) for c in range(3) for i in range(4)] for b in range(4)]
    batches[1][0] = batches[1][0].model_copy(update={"payload": batches[1][0].payload.model_copy(
        update={"metadata": {"pair": (1, 2), "inf": float("inf")}})})  # JSON changes these: never handed over
    for batch in batches:
        writer.append(batch)
    writer.append(batches[2][:3])  # stored already: nothing new to hand over
    assert 0 < sum(map(len, writer._recent.values())) <= 25
    fresh = open_file(path, partitions=2)
    for partition in (0, 1):
        handed = [r for start in range(0, 60, 7) for r in writer.read(partition, start, 7)]
        stored = read_partition(fresh, partition)
        assert [r.position for r in handed] == [r.position for r in stored]
        assert [r.event.model_dump() for r in handed] == [r.event.model_dump() for r in stored]
    assert not any(writer._recent.values())  # every message was taken by a read, or dropped when the file was read
    kept = read_all(fresh)
    assert {(r.event.conversation_id, r.event.seq) for r in kept} == {
        (f"c{c}", s) for c in range(3) for s in range(1, 17)}  # the log's seq, never the one given


def test_a_message_read_twice_comes_from_the_file_the_second_time(tmp_path: Path, open_file) -> None:
    log = open_file(tmp_path / "events.sqlite", partitions=1)
    log.keep_appended(100)
    log.append([message("acme", "c1", i) for i in range(5)])
    first = log.read(0, 0, 3)
    assert len(log._recent[0]) == 2
    again = log.read(0, 0)
    assert [r.event.model_dump() for r in again[:3]] == [r.event.model_dump() for r in first]
    assert [r.position.offset for r in again] == [0, 1, 2, 3, 4]


def test_messages_kept_behind_the_next_read_are_dropped(tmp_path: Path, open_file) -> None:
    log = open_file(tmp_path / "events.sqlite", partitions=1)
    log.keep_appended(100)
    log.append([message("acme", "c1", i) for i in range(4)])
    log._recent[0].pop(0)  # as if a read had taken offset 0 from the file before it was kept
    assert [r.position.offset for r in log.read(0, 2)] == [2, 3]
    assert not log._recent[0]  # offset 1, behind the read, was dropped with it


def test_nothing_is_kept_unless_asked(tmp_path: Path, open_file) -> None:
    log = open_file(tmp_path / "events.sqlite", partitions=1)
    log.append([message("acme", "c1", i) for i in range(3)])
    assert not log._recent
    log.keep_appended(10)
    log.append([message("acme", "c1", i) for i in range(3, 6)])
    assert len(log._recent[0]) == 3
    log.keep_appended(0)  # off again: what was kept goes
    assert not log._recent
    assert [r.position.offset for r in log.read(0, 0)] == [0, 1, 2, 3, 4, 5]
