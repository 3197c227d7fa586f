"""A record no event decodes from, written into the real SQLite log file as a bug would, stops nothing.

The log reads it as an ``UnreadableRecord``; the projector records it in
``poison_events`` with its position (one transaction) and moves on; reads of
other conversations, appends, ingest, verify and rebuild keep working.
"""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from memfold.cli.ingest import ingest_file
from memfold.core.partitioner import partition_for
from memfold.core.settings import Settings
from memfold.core.unreadable import UnreadableRecord
from memfold.engine.engine import MemoryEngine

BAD_BODIES = {
    # What an older version stored before tool calls were validated: an id that is a number.
    "bad tool call": lambda tenant, conversation: json.dumps({
        "event_id": "poison-1", "type": "MessageAppended", "schema_version": 1, "tenant_id": tenant,
        "conversation_id": conversation, "seq": 0, "occurred_at": "2026-03-01T09:00:00Z", "causation_id": None,
        "payload": {"role": "assistant", "content": "calling", "tool_calls": [{"id": 5, "name": "f", "arguments": "{}"}]},
    }),
    "torn bytes": lambda tenant, conversation: '{"event_id": "poison-2", "type": "MessageAppended", "payl',
}


def _plant(log_path, tenant: str, conversation: str, partitions: int) -> list[tuple[int, int]]:
    """INSERT bad rows at the head of the conversation's partition, bypassing the append guard; return their positions."""
    partition = partition_for(f"{tenant}/{conversation}", partitions)
    con = sqlite3.connect(log_path, timeout=30, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        offset = con.execute("SELECT next_offset FROM partition_heads WHERE partition_no = ?", (partition,)).fetchone()[0]
        seq = con.execute("SELECT last_seq FROM conversation_heads WHERE tenant_id = ? AND conversation_id = ?",
                          (tenant, conversation)).fetchone()[0]
        planted = []
        for i, body in enumerate(BAD_BODIES.values()):
            con.execute(
                "INSERT INTO events (partition_no, offset_no, event_id, type, tenant_id, conversation_id, seq, body)"
                " VALUES (?, ?, ?, 'MessageAppended', ?, ?, ?, ?)",
                (partition, offset + i, f"poison-{i + 1}", tenant, conversation, seq + i + 1, body(tenant, conversation)),
            )
            planted.append((partition, offset + i))
        con.execute("UPDATE partition_heads SET next_offset = ? WHERE partition_no = ?", (offset + len(BAD_BODIES), partition))
        con.execute("UPDATE conversation_heads SET last_seq = ? WHERE tenant_id = ? AND conversation_id = ?",
                    (seq + len(BAD_BODIES), tenant, conversation))
        con.execute("COMMIT")
    finally:
        con.close()
    return planted


@pytest.fixture()
def engine(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data")) as eng:
        yield eng


def test_an_unreadable_record_is_set_aside_and_everything_else_keeps_working(engine, tmp_path, caplog):
    for i in range(4):
        engine.append_message("sick", "user", f"sick {i}")
        engine.append_message("healthy", "user", f"healthy {i}")
    engine.wait_idle(timeout=120)
    caplog.set_level(logging.WARNING)
    planted = _plant(engine.settings.data_dir / "events.sqlite", "default", "sick", engine.log.partition_count)

    # 1. The log's read returns the bad rows in place, and the records around them as usual.
    partition, first = planted[0]
    records = engine.log.read(partition, 0, 1000)
    bad = [r for r in records if isinstance(r.event, UnreadableRecord)]
    assert [(r.position.partition, r.position.offset) for r in bad] == planted
    assert all(r.event.conversation_id == "sick" and r.event.position == r.position for r in bad)
    assert "poison-1" in {r.event.event_id for r in bad} and all(r.event.error for r in bad)

    # 2. The projector moves past them: later appends of the same conversation fold, in one wait.
    engine.append_message("sick", "user", "after the poison")
    engine.wait_idle(timeout=120)
    rows = engine.store.poison_events()
    assert [(r["partition"], r["offset"], r["conversation_id"], r["event_id"]) for r in rows] == [
        (p, o, "sick", f"poison-{i + 1}") for i, (p, o) in enumerate(planted)]
    assert "tool_calls.0.id" in rows[0]["error"] and "not valid JSON" in rows[1]["error"]
    assert engine.store.position()[partition] > planted[-1][1]
    warnings = [r for r in caplog.records if "cannot be read and was skipped" in r.getMessage()]
    assert len(warnings) == len(planted)

    # 3. Reads, appends, ingest, verify and rebuild all work.
    assert [m.content for m in engine.history("healthy")] == [f"healthy {i}" for i in range(4)]
    assert [m.content for m in engine.history("sick")] == [*(f"sick {i}" for i in range(4)), "after the poison"]
    path = tmp_path / "more.jsonl"
    path.write_text("".join(json.dumps({"conversation_id": c, "role": "user", "content": f"ingested {c}"}) + "\n"
                            for c in ("sick", "healthy", "new")))
    report = ingest_file(engine, path, progress=False)
    assert (report.accepted, report.rejected) == (3, [])
    engine.wait_idle(timeout=120)
    assert engine.history("new")[-1].content == "ingested new"
    assert engine.verify() == []
    engine.rebuild(timeout=300)
    assert [(r["partition"], r["offset"]) for r in engine.store.poison_events()] == planted
    assert [m.content for m in engine.history("sick")][-1] == "ingested sick"
    assert engine.verify() == []
