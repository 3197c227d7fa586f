"""Export/import and snapshots on a real Kafka broker: an import through the Kafka log, a fleet query over two nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from support.waiting import wait_until
from support.worker_kit import WorkerProcess

from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.snapshots import current_path

pytestmark = pytest.mark.kafka

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
T0 = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)


def _lines(count: int, conversations: int) -> list[dict]:
    return [{"tenant_id": f"t{(i % conversations) % 3}", "conversation_id": f"c{i % conversations}",
             "role": "user" if i % 2 == 0 else "assistant", "event_id": f"line-{i}",
             "content": f"turn {i}: parcel #{5000 + i % conversations} leaves on 2026-06-{1 + i % 20:02d}",
             "occurred_at": (T0 + timedelta(minutes=3 * i)).isoformat()} for i in range(count)]


def _cli(*args: str, check: bool = True, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")} | env_extra
    proc = subprocess.run([MEMFOLD, *args], capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_an_embedded_export_imports_into_a_kafka_deployment(kafka_bootstrap, tmp_path):
    src = tmp_path / "src"
    rows = _lines(400, 8)
    with MemoryEngine(Settings.load(None, data_dir=src)) as engine:
        engine.append_many(rows)
        engine.wait_idle()
        contexts = {(r["tenant_id"], r["conversation_id"]): [m.as_dict() for m in engine.context(
            r["conversation_id"], tenant_id=r["tenant_id"])] for r in rows[:8]}
    _cli("--data-dir", str(src), "export", str(tmp_path / "export"), "--plaintext")
    topic = f"memfold.test.{uuid.uuid4().hex[:10]}"
    url = f"kafka://{kafka_bootstrap}"
    node = tmp_path / "node"
    out = _cli("import", str(tmp_path / "export"), "--log", url, "--data-dir", str(node), MEMFOLD_TOPIC=topic).stdout
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert f"imported {manifest['events']} events (0 already present)" in out and "verified" in out
    again = _cli("import", str(tmp_path / "export"), "--log", url, "--data-dir", str(node), "--no-verify",
                 MEMFOLD_TOPIC=topic).stdout
    assert f"imported 0 events ({manifest['events']} already present)" in again
    # And back out of Kafka: the same events, ids, times and content as the embedded source exported.
    _cli("--data-dir", str(node), "export", str(tmp_path / "again"), "--plaintext")
    columns = ["event_id", "type", "tenant_id", "conversation_id", "seq", "occurred_at", "causation_id", "payload"]
    first, second = (sorted(tuple(r.values()) for r in pq.read_table(d / "events.parquet", columns=columns).to_pylist())
                     for d in (tmp_path / "export", tmp_path / "again"))
    assert first == second and len(first) == manifest["events"]
    for (tenant, conv), expected in contexts.items():  # the Kafka node folds what the embedded source folded
        read = ("context", conv, "--tenant", tenant, "--json")
        got = _cli("--data-dir", str(node), *read).stdout
        assert got == _cli("--data-dir", str(src), *read).stdout  # byte for byte
        assert [m["content"] for m in json.loads(got)["messages"]] == [m["content"] for m in expected]


def test_two_nodes_snapshots_answer_one_fleet_wide_query(kafka_bootstrap, tmp_path):
    topic = f"memfold.test.{uuid.uuid4().hex[:10]}"
    url = f"kafka://{kafka_bootstrap}"
    rows = _lines(1200, 24)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _cli("ingest", str(jsonl), "--quiet", "--log", url, "--data-dir", str(tmp_path / "client"), MEMFOLD_TOPIC=topic,
         MEMFOLD_POLICIES=",".join(POLICY_NAMES))
    nodes = []
    for name, partitions in (("a", "0,1,2,3"), ("b", "4,5,6,7")):
        config = tmp_path / f"{name}.toml"
        config.write_text(f'[snapshot]\nevery_seconds = 0.3\nnode = "{name}"\ndir = "{tmp_path / name / "snapshots"}"\n')
        nodes.append(WorkerProcess(kafka_bootstrap, topic, 8, tmp_path / name, tmp_path / f"{name}.log",
                                   "--partitions", partitions, "--config", str(config)))
    roots = [tmp_path / n / "snapshots" for n in ("a", "b")]

    def held() -> int:
        return sum(json.loads((current_path(r) / "manifest.json").read_text())["rows"]["messages"]
                   for r in roots if current_path(r) is not None)

    try:
        wait_until(lambda: held() == len(rows), timeout=120)
    finally:
        for worker in nodes:
            worker.terminate()
    shares = [json.loads((current_path(r) / "manifest.json").read_text()) for r in roots]
    assert [s["node"] for s in shares] == ["a", "b"] and all(s["rows"]["messages"] > 0 for s in shares)
    assert {int(p) for p in shares[0]["positions"]}.isdisjoint(int(p) for p in shares[1]["positions"])
    globs = ", ".join(f"'{r}/current/messages/**/*.parquet'" for r in roots)
    fleet = duckdb.sql(f"""
        SELECT tenant_id, count(*) AS messages, count(DISTINCT conversation_id) AS conversations,
               count(DISTINCT split_part(filename, '/snapshots/', 1)) AS nodes
        FROM read_parquet([{globs}], filename = true) GROUP BY tenant_id ORDER BY tenant_id""").fetchall()
    expected = {}
    for r in rows:
        n, convs = expected.get(r["tenant_id"], (0, set()))
        expected[r["tenant_id"]] = (n + 1, convs | {r["conversation_id"]})
    assert [(t, m, c) for t, m, c, _ in fleet] == [(t, n, len(c)) for t, (n, c) in sorted(expected.items())]
    assert any(nodes_seen == 2 for *_, nodes_seen in fleet)  # a tenant's conversations live on both nodes
    print("fleet query:", fleet)
