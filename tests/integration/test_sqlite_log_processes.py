"""The SQLite log under real processes: concurrent appenders, SIGKILL, raw writes, a reader beside a writer."""

from __future__ import annotations

import json
import multiprocessing
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import pytest

from memfold.core.events import MessageAppended, MessagePayload
from memfold.core.positions import Position
from memfold.streams.sqlite_log import SQLiteEventLog

PARTITIONS = 4

# The child's preamble: an appender of small batches over five conversations.
_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from datetime import datetime, timedelta, timezone
    from memfold.core.events import ClockTicked, ClockTickedPayload, MessageAppended, MessagePayload
    from memfold.streams.sqlite_log import SQLiteEventLog

    T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)

    def batch(writer, number, size):
        events = []
        for i in range(size):
            envelope = dict(event_id=f"{writer}-{number}-{i}", tenant_id="acme",
                            conversation_id=f"c{(number + i) % 5}", occurred_at=T0 + timedelta(seconds=number))
            if i == 3:  # seq counts every event type
                events.append(ClockTicked(**envelope, payload=ClockTickedPayload(now=T0)))
            else:
                events.append(MessageAppended(**envelope, payload=MessagePayload(role="user", content=f"{writer} {number} {i}")))
        return events

    def report(events, positions):
        print(json.dumps([[e.event_id, p.partition, p.offset] for e, p in zip(events, positions)]), flush=True)
    """
)

APPENDER = _CHILD + textwrap.dedent(
    """
    path, writer, batches, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    pause_at, resume = (int(sys.argv[5]), sys.argv[6]) if len(sys.argv) > 6 else (None, None)
    log = SQLiteEventLog(path, partitions=4)
    while not os.path.exists(go):  # start together with the other process
        time.sleep(0.001)
    for number in range(batches):
        while number == pause_at and not os.path.exists(resume):  # hold mid-run until told to go on
            time.sleep(0.001)
        events = batch(writer, number, 1 + number % 7)
        report(events, log.append(events))
    log.close()
    """
)

ENDLESS_APPENDER = _CHILD + textwrap.dedent(
    """
    log = SQLiteEventLog(sys.argv[1], partitions=4)
    number = 0
    while True:
        events = batch("w", number, 5)
        report(events, log.append(events))
        number += 1
    """
)

READER = textwrap.dedent(
    """
    import json, sys, time
    from memfold.streams.sqlite_log import SQLiteEventLog

    path, expected, halfway, resume = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    log = SQLiteEventLog(path, partitions=4)
    cursor = dict.fromkeys(log.partitions(), 0)
    last_seq = {}
    seen = rounds = partial_rounds = 0
    deadline = time.monotonic() + 120
    while seen < expected:
        if time.monotonic() > deadline:
            sys.exit(f"gave up after seeing {seen} of {expected} events")
        ends = log.end_positions()
        rounds += 1
        partial_rounds += seen > 0
        for partition, start in cursor.items():
            for record in log.read(partition, start, 50):
                assert record.position.partition == partition
                assert record.position.offset == cursor[partition], (record.position, cursor[partition])
                conversation = (record.event.tenant_id, record.event.conversation_id)
                assert record.event.seq == last_seq.get(conversation, 0) + 1, (conversation, record.event.seq)
                last_seq[conversation] = record.event.seq
                cursor[partition] += 1
                seen += 1
            assert cursor[partition] <= log.end_positions()[partition]
        if seen >= halfway:
            open(resume, "a").close()  # the writer waits for this: it is still running while we read
    print(json.dumps({"seen": seen, "rounds": rounds, "partial_rounds": partial_rounds,
                      "last_seq": [[t, c, s] for (t, c), s in sorted(last_seq.items())]}))
    """
)


def spawn(code: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(child: subprocess.Popen[str], timeout: float = 180) -> str:
    out, err = child.communicate(timeout=timeout)
    assert child.returncode == 0, err
    return out


def acknowledged(lines: str) -> dict[str, Position]:
    """Parse the children's reports: event id -> the position append returned for it."""
    positions: dict[str, Position] = {}
    for line in lines.splitlines():
        for event_id, partition, offset in json.loads(line):
            positions[event_id] = Position(partition, offset)
    return positions


def read_everything(path: Path):
    with SQLiteEventLog(path, partitions=PARTITIONS) as log:
        records = []
        for partition in log.partitions():
            start = 0
            while batch := log.read(partition, start, 500):
                records += batch
                start = batch[-1].position.offset + 1
        return records, log.end_positions()


def assert_gapless(records) -> dict[tuple[str, str], list]:
    """Assert offsets per partition and seq per conversation run 0.. / 1.. without gaps; return the groups."""
    offsets: dict[int, list[int]] = defaultdict(list)
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for record in records:
        offsets[record.position.partition].append(record.position.offset)
        groups[(record.event.tenant_id, record.event.conversation_id)].append(record)
    for partition_offsets in offsets.values():
        assert partition_offsets == list(range(len(partition_offsets)))
    for group in groups.values():
        assert [r.event.seq for r in group] == list(range(1, len(group) + 1))
    return groups


def integrity(path: Path) -> str:
    raw = sqlite3.connect(path)
    try:
        return raw.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        raw.close()


# --------------------------------------------------------------------------- (1) concurrent appenders


def test_two_processes_appending_to_the_same_conversations_keep_seq_gapless(tmp_path: Path) -> None:
    path, go = tmp_path / "events.sqlite", tmp_path / "go"
    batches = 120
    writers = [spawn(APPENDER, path, name, batches, go) for name in ("a", "b")]  # both create the file at once
    go.touch()
    reports = {name: acknowledged(finish(child)) for name, child in zip("ab", writers)}

    records, ends = read_everything(path)
    per_writer = sum(1 + n % 7 for n in range(batches))
    assert len(records) == 2 * per_writer == sum(ends.values())
    assert len({r.event.event_id for r in records}) == len(records)  # no duplicates
    groups = assert_gapless(records)
    assert len(groups) == 5
    stored_at = {r.event.event_id: r.position for r in records}
    for report in reports.values():  # every returned position holds the event it was returned for
        assert report.items() <= stored_at.items()
    for group in groups.values():  # each writer's events keep that writer's order
        for name in "ab":
            ids = [r.event.event_id for r in group if r.event.event_id.startswith(f"{name}-")]
            assert ids == sorted(ids, key=lambda i: tuple(int(x) for x in i.split("-")[1:]))
    assert integrity(path) == "ok"


OPENER = textwrap.dedent(
    """
    import os, sys, time
    from memfold.streams.sqlite_log import SQLiteEventLog
    path, go, ready = sys.argv[1], sys.argv[2], sys.argv[3]
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.0005)
    SQLiteEventLog(path, partitions=4).close()
    """
)


def test_processes_opening_a_fresh_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Switching a fresh file to WAL takes a lock without the busy handler: each opener must wait its turn, not fail."""
    for round_ in range(8):
        root = tmp_path / f"round-{round_}"
        root.mkdir()
        go = root / "go"
        openers = [spawn(OPENER, root / "events.sqlite", go, root / f"ready-{i}") for i in range(4)]
        while len(list(root.glob("ready-*"))) < len(openers):
            assert all(child.poll() is None for child in openers), [child.communicate() for child in openers]
            time.sleep(0.01)
        go.touch()
        for child in openers:
            finish(child, timeout=60)
        assert sqlite3.connect(root / "events.sqlite").execute("PRAGMA journal_mode").fetchone() == ("wal",)


# --------------------------------------------------------------------------- (2) durability


def test_every_acknowledged_event_survives_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite"
    child = spawn(ENDLESS_APPENDER, path)
    lines = []
    try:
        assert child.stdout is not None
        while len(lines) < 40:
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else "child exited"
            lines.append(line)
    finally:
        child.send_signal(signal.SIGKILL)  # most likely in the middle of the next append
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    acked = acknowledged("".join(lines))

    assert integrity(path) == "ok"
    records, ends = read_everything(path)
    stored_at = {r.event.event_id: r.position for r in records}
    assert acked.items() <= stored_at.items()
    assert_gapless(records)
    batches = defaultdict(int)  # a batch is all or nothing, even when killed
    for event_id in stored_at:
        batches[event_id.rsplit("-", 1)[0]] += 1
    assert set(batches.values()) == {5}
    assert len(records) == sum(ends.values())
    with SQLiteEventLog(path, partitions=PARTITIONS) as log:  # and the log goes on where it stopped
        (position,) = log.append([MessageAppended(
            event_id="after-restart", tenant_id="acme", conversation_id="c0", occurred_at=records[0].event.occurred_at,
            payload=MessagePayload(role="user", content="still here"),
        )])
        assert position.offset == ends[position.partition]


# --------------------------------------------------------------------------- (3) append-only


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET body = '{}' WHERE offset_no = 0",
        "UPDATE events SET seq = seq + 1",
        "DELETE FROM events WHERE offset_no = 0",
        "DELETE FROM events",
    ],
)
def test_the_events_table_refuses_update_and_delete(tmp_path: Path, statement: str) -> None:
    path = tmp_path / "events.sqlite"
    with SQLiteEventLog(path, partitions=1) as log:
        log.append([MessageAppended(
            event_id=f"e{i}", conversation_id="c1", occurred_at="2026-03-01T00:00:00Z",
            payload=MessagePayload(role="user", content=f"m{i}"),
        ) for i in range(3)])
    raw = sqlite3.connect(path)
    try:
        before = raw.execute("SELECT * FROM events ORDER BY id").fetchall()
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute(statement)
        raw.rollback()
        assert raw.execute("SELECT * FROM events ORDER BY id").fetchall() == before
    finally:
        raw.close()


# --------------------------------------------------------------------------- (4) reader beside a writer


def test_a_reader_process_sees_a_gapless_prefix_while_another_appends(tmp_path: Path) -> None:
    path, go = tmp_path / "events.sqlite", tmp_path / "go"
    SQLiteEventLog(path, partitions=PARTITIONS).close()
    batches, pause_at, resume = 150, 75, tmp_path / "resume"
    expected = sum(1 + n % 7 for n in range(batches))
    halfway = sum(1 + n % 7 for n in range(pause_at))
    reader = spawn(READER, path, expected, halfway, resume)
    writer = spawn(APPENDER, path, "w", batches, go, pause_at, resume)
    go.touch()
    finish(writer)
    summary = json.loads(finish(reader))
    assert summary["seen"] == expected
    assert summary["partial_rounds"] > 0  # it read a prefix while the writer still had half to append
    records, _ = read_everything(path)
    final = {(r.event.tenant_id, r.event.conversation_id): r.event.seq for r in records}
    assert {(t, c): s for t, c, s in summary["last_seq"]} == final


# --------------------------------------------------------------------------- fork


def _append_in_child(log: SQLiteEventLog, tag: str) -> None:
    log.append([MessageAppended(
        event_id=f"{tag}-{i}", conversation_id="c1", occurred_at="2026-03-01T00:00:00Z",
        payload=MessagePayload(role="user", content=tag),
    ) for i in range(20)])


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_uses_its_own_connection(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite"
    with SQLiteEventLog(path, partitions=PARTITIONS) as log:
        _append_in_child(log, "parent-before")  # the parent has an open connection when it forks
        child = multiprocessing.get_context("fork").Process(target=_append_in_child, args=(log, "child"))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0
        _append_in_child(log, "parent-after")  # the parent's connection still works
    records, _ = read_everything(path)
    assert [r.event.event_id.rsplit("-", 1)[0] for r in records] == ["parent-before"] * 20 + ["child"] * 20 + ["parent-after"] * 20
    assert_gapless(records)
    assert integrity(path) == "ok"
