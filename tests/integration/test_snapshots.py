"""Parquet snapshots of the projection: read by plain duckdb in another process while the engine ingests.

The engine refreshes its snapshot every 0.2 s (setting ``snapshot.every_seconds``)
during an ingest; a reader process (tests/support/snapshot_reader.py, no
memfold import) queries ``current`` in a loop and checks every snapshot
against its manifest and against itself. Never an error, never a torn read,
and it never waits for the engine: it reads files, not the DuckDB file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
from support.waiting import wait_until

from memfold.cli.main import main
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.snapshots import current_path, write_snapshot

READER = Path(__file__).resolve().parents[1] / "support" / "snapshot_reader.py"
T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
MESSAGES = 20_000  # the 100,000 run in benchmarks/export_import.py; this size keeps the test under a minute
CONVERSATIONS = 60


def _batch(start: int, size: int) -> list[dict]:
    out = []
    for i in range(start, start + size):
        c = i % CONVERSATIONS
        out.append({"tenant_id": f"t{c % 4}", "conversation_id": f"c{c}", "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message {i}: invoice #{10_000 + i} for carol{c}@example.com is due",
                    "occurred_at": (T0 + timedelta(minutes=7 * i)).isoformat()})
    return out


def test_a_reader_process_queries_snapshots_during_an_ingest_without_errors_or_torn_reads(tmp_path):
    root = tmp_path / "snapshots"
    stop, result = tmp_path / "stop", tmp_path / "reader.json"
    reader = subprocess.Popen([sys.executable, str(READER), str(root), str(stop), str(result)])
    settings = Settings.load(None, data_dir=tmp_path / "data",
                             snapshot={"every_seconds": 0.2, "dir": root, "keep_seconds": 2.0, "node": "solo"})
    try:
        with MemoryEngine(settings) as engine:
            for start in range(0, MESSAGES, 500):
                engine.append_many(_batch(start, 500))
            engine.wait_idle(timeout=300)
            summaries = engine.sql("SELECT count(*) FROM summaries")[1][0][0]
            # The next refresh holds it all.
            wait_until(lambda: (_rows(root).get("messages"), _rows(root).get("summaries")) == (MESSAGES, summaries),
                       timeout=60)
            assert engine.snapshots.written >= 2
    finally:
        stop.touch()
        reader.wait(60)
    seen = json.loads(result.read_text())
    assert seen["errors"] == [] and seen["torn"] == []
    assert len(seen["snapshots"]) >= 2 and seen["rounds"] >= len(seen["snapshots"])
    final = current_path(root)
    manifest = json.loads((final / "manifest.json").read_text())
    assert manifest["node"] == "solo" and manifest["rows"]["summaries"] == summaries > 0
    # Retired snapshots are removed keep_seconds after the swap; the previous one always stays for late readers.
    assert 2 <= len(list(root.glob("snap-*"))) < manifest["snapshot"]


def _rows(root: Path) -> dict[str, int]:
    found = current_path(root)
    return json.loads((found / "manifest.json").read_text())["rows"] if found is not None else {}


def test_snapshot_command_and_sql_over_a_snapshot(tmp_path, capsys):
    data = tmp_path / "data"
    with MemoryEngine(Settings.load(None, data_dir=data)) as engine:
        engine.append_many(_batch(0, 300))
        engine.wait_idle()
        expected = engine.sql("SELECT tenant_id, count(*) FROM messages GROUP BY ALL ORDER BY 1")[1]
    assert main(["--data-dir", str(data), "snapshot", str(tmp_path / "snaps")]) == 0
    assert "snapshot 1 at" in capsys.readouterr().out
    # Another snapshot, while the first stays readable by whoever resolved it.
    assert main(["--data-dir", str(data), "snapshot", str(tmp_path / "snaps"), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["snapshot"] == 2 and written["rows"]["messages"] == 300
    assert (tmp_path / "snaps" / "snap-000001" / "manifest.json").is_file()
    assert main(["sql", "--snapshot", str(tmp_path / "snaps"), "--json",
                 "SELECT tenant_id, count(*) AS n FROM messages GROUP BY ALL ORDER BY 1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(r["tenant_id"], r["n"]) for r in got] == expected
    assert main(["sql", "--snapshot", str(tmp_path / "snaps"), "DELETE FROM messages"]) == 1
    assert "read-only" in capsys.readouterr().err
    # Partitioned by tenant and day, as files any tool reads.
    days = {p.name for p in (tmp_path / "snaps" / "current" / "messages" / "tenant_id=t0").iterdir()}
    assert days == {f"date={d}" for d, in duckdb.sql(
        f"SELECT DISTINCT CAST(occurred_at AS DATE)::VARCHAR FROM read_parquet('{tmp_path}/snaps/current/messages/**/*.parquet') "
        "WHERE tenant_id = 't0'").fetchall()}


def test_a_failed_snapshot_leaves_current_as_it_was(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data")) as engine:
        engine.append_many(_batch(0, 50))
        engine.wait_idle()
        first = write_snapshot(engine.store, tmp_path / "snaps")

        class Broken:
            def write_parquet(self, directory, tables):
                Path(directory, "messages").mkdir(parents=True)
                raise OSError(28, "No space left on device")

        try:
            write_snapshot(Broken(), tmp_path / "snaps")
        except OSError:
            pass
        else:
            raise AssertionError("the failing snapshot did not raise")
    assert current_path(tmp_path / "snaps") == first.path.resolve()
    assert [p.name for p in (tmp_path / "snaps").iterdir() if not p.name.startswith("snap-")] == ["current"]


def test_forget_leaves_no_byte_of_the_conversation_in_the_snapshots(tmp_path):
    marker = "okapi-vermilion-5521"
    data = tmp_path / "data"
    with MemoryEngine(Settings.load(None, data_dir=data, snapshot={"every_seconds": 0.1})) as engine:
        engine.append_many(_batch(0, 40))
        engine.append_message("secret", "user", f"the vault code is {marker}", tenant_id="t1")
        engine.wait_idle()
        root = engine.settings.snapshot_dir()
        wait_until(lambda: _rows(root).get("messages") == 41, timeout=30)
        assert any(marker.encode() in f.read_bytes() for f in root.rglob("*.parquet"))
        engine.forget("secret", tenant_id="t1")
        leftovers = [f for f in root.rglob("*") if f.is_file() and marker.encode() in f.read_bytes()]
        assert leftovers == []
        assert _rows(root)["messages"] == 40  # a fresh snapshot took the old ones' place
        assert [p.name for p in root.iterdir() if p.name.startswith("snap-")] == [current_path(root).name]
