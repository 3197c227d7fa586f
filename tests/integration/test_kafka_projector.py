"""Projector nodes on a real Kafka broker: bulk-ingest parity with embedded mode, kill mid-batch, broker restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fixtures.kafka_broker import LocalBroker
from support.worker_kit import SAMPLE, Topic, WorkerProcess, projection, settings_for

from memfold.core.errors import AppendFailedError, LogUnavailableError
from memfold.core.events import MessageAppended, MessagePayload
from memfold.core.settings import POLICY_NAMES
from memfold.projections.store import DuckDBProjectionStore
from memfold.streams.kafka_log import KafkaEventLog

pytestmark = pytest.mark.kafka

CHILD = Path(__file__).resolve().parents[1] / "support" / "project_child.py"
MEMFOLD = str(Path(sys.executable).with_name("memfold"))
T0 = datetime(2026, 4, 1, 8, 0, tzinfo=UTC)


def _topic() -> str:
    return f"memfold.test.{uuid.uuid4().hex[:10]}"


def _messages(conversations: int, per: int, prefix: str = "m") -> list[MessageAppended]:
    out = []
    for n in range(per):
        for c in range(conversations):
            role = "user" if n % 2 == 0 else "assistant"
            out.append(
                MessageAppended(
                    event_id=f"{prefix}-{c}-{n}", tenant_id="acme", conversation_id=f"k-{c}",
                    occurred_at=T0 + timedelta(minutes=n, seconds=c),
                    payload=MessagePayload(role=role, content=f"{role} {n} of k-{c}: order #{7000 + c} is on its way"),
                )
            )
    return out


def _cli(*args: str, check: bool = True, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    env |= {"MEMFOLD_POLICY": "hierarchical", "MEMFOLD_POLICIES": "hierarchical"} | env_extra  # what the tests expect
    proc = subprocess.run([MEMFOLD, *args], capture_output=True, text=True, timeout=180, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _stopped_by_sigterm(node: Path, url: str, topic: str, env_extra: dict[str, str]) -> Path:
    """Run ``memfold project`` in its status loop until it reports lag 0, SIGTERM it, check it closed cleanly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    env |= {"MEMFOLD_POLICY": "hierarchical", "MEMFOLD_POLICIES": "hierarchical", "MEMFOLD_TOPIC": topic} | env_extra
    proc = subprocess.Popen([MEMFOLD, "project", "--log", url, "--data-dir", str(node), "--status-every", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if line.rstrip().endswith("lag 0 events") or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "projected" in out and out.rstrip().endswith("lag 0"), out
    return node


def _dump(path: Path) -> dict:
    store = DuckDBProjectionStore(path, read_only=True)
    try:
        return store.dump()
    finally:
        store.close()


def test_cli_ingest_through_kafka_projects_what_embedded_ingest_projects_for_every_policy(kafka_bootstrap, tmp_path):
    """Bulk ingest: Kafka + a worker (summaries) + projector nodes give embedded mode's projection, every policy.

    The worker starts once the file is in the topic, so it folds the whole
    batch at once as embedded mode does (a worker already running could fold
    part of it first, and where an answered summary lands among the messages
    would then depend on timing, as for a multi-batch embedded ingest).
    """
    url, topic = f"kafka://{kafka_bootstrap}", _topic()
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if "support-4711" in line][:40]
    # Ids given by the lines: a derived id is keyed by the conversation's data key, and the embedded run below
    # has a key store of its own (the Kafka runs share the key topic), so derived ids would differ by design.
    rows = [{**r, "event_id": f"line-{i}"} for i, r in enumerate(rows)]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    every = {"MEMFOLD_POLICIES": ",".join(POLICY_NAMES)}
    # chunked summarizes after 6,000 tokens by default (these 40 lines hold ~1,100). Fewer, wider topics keep each
    # summarizer batch within the 16 calls the pool answers before appending: where the runner's next decisions
    # land among a bigger batch's outcomes depends on timing, in embedded mode as in distributed mode.
    config = tmp_path / "memfold.toml"
    # And a chunk's answers land in one log append however long each call takes (a loaded machine had split
    # them at the default 50 ms: the runner then decided between the two appends, unlike the embedded run).
    config.write_text("[chunked]\nchunk_summarize_threshold = 600\n[topics]\nsimilarity_threshold = 0.1\n"
                      "[summarizer]\nflush_after_s = 60\n")
    every["MEMFOLD_CONFIG"] = str(config)
    proc = _cli("ingest", str(jsonl), "--quiet", "--log", url, "--data-dir", str(tmp_path / "client"),
                check=False, MEMFOLD_TOPIC=topic, **every)
    assert proc.returncode == 2 and "ingested 40 messages" in proc.stdout and "line 41 rejected" in proc.stderr
    settings = settings_for(topic, tmp_path / "reader", 8)
    kafka = Topic(kafka_bootstrap, settings)
    worker = WorkerProcess(kafka_bootstrap, topic, 8, tmp_path / "worker", tmp_path / "worker.log", "--config", str(config))
    try:
        kafka.wait_idle(worker)
        assert worker.terminate() == 0, worker.tail()
    finally:
        worker.close()
        kafka.close()
    nodes = [tmp_path / "node1", tmp_path / "node2"]  # each replica its own complete DuckDB file
    for node in nodes:
        out = _cli("project", "--log", url, "--data-dir", str(node), "--until-caught-up", MEMFOLD_TOPIC=topic, **every)
        assert "projected" in out.stdout
    # A long-running node (as deployed) stops on SIGTERM: the engine closed, exit 0, its projection complete.
    nodes.append(_stopped_by_sigterm(tmp_path / "node3", url, topic, every))
    embedded = tmp_path / "embedded"
    _cli("--data-dir", str(embedded), "ingest", str(jsonl), "--quiet", check=False, **every)
    reference = projection(embedded / "projections.duckdb")
    completed = {r for r in reference["summaries"] if "completed" in r}
    assert {p for p in POLICY_NAMES if any(p in r for r in completed)} == set(POLICY_NAMES)  # every policy summarized
    for node in (tmp_path / "worker", *nodes):
        got = projection(node / "projections.duckdb")
        for table, rows in reference.items():
            assert got[table] == rows, f"{node.name}: table {table} differs from embedded mode"
    # A node's data dir remembers its log and topic: reads need no --log; each policy's context is embedded mode's.
    for policy in POLICY_NAMES:
        read = ("context", "support-4711", "--tenant", "acme", "--policy", policy, "--json")
        assert _cli("--data-dir", str(nodes[0]), *read, **every).stdout == _cli("--data-dir", str(embedded), *read, **every).stdout, policy


def test_projector_node_killed_mid_transaction_restarts_to_the_same_projection(kafka_bootstrap, tmp_path):
    topic = _topic()
    log = KafkaEventLog(kafka_bootstrap, topic=topic, partitions=4)
    events = _messages(8, 60)
    for i in range(0, len(events), 200):
        log.append(events[i : i + 200])
    log.close()
    url = f"kafka://{kafka_bootstrap}"

    def child(store: Path, batch: int, crash_at: int) -> int:
        return subprocess.run([sys.executable, str(CHILD), url, str(store), str(batch), str(crash_at), topic],
                              capture_output=True, text=True, timeout=180).returncode

    assert child(tmp_path / "ref.duckdb", 10_000, -1) == 0
    expected = _dump(tmp_path / "ref.duckdb")
    assert len(expected["messages"]) == len(events)
    crashed = tmp_path / "crash.duckdb"
    for crash_at in (0, 1, 2):
        assert child(crashed, 40, crash_at) == -9
    assert child(crashed, 40, -1) == 0
    got = _dump(crashed)
    assert got == expected
    ids = [row for row in got["messages"]]
    assert len(ids) == len(set(ids)) == len(events)  # every accepted message exactly once


@pytest.mark.slow
def test_broker_restart_during_ingestion_loses_and_duplicates_nothing(tmp_path):
    broker = LocalBroker(tmp_path / "broker")
    try:
        bootstrap = broker.start()
        topic = _topic()
        log = KafkaEventLog(bootstrap, topic=topic, partitions=4, timeout=3)
        events = _messages(6, 40, prefix="r")
        batches = [events[i : i + 30] for i in range(0, len(events), 30)]
        accepted: set[str] = set()
        failed: list[list[MessageAppended]] = []
        for n, batch in enumerate(batches):
            if n == len(batches) // 2:
                broker.stop()
            try:
                log.append(batch)
                accepted.update(e.event_id for e in batch)
            except (AppendFailedError, LogUnavailableError) as exc:
                assert str(exc), "the failure must be reported plainly"
                failed.append(batch)
            if n == len(batches) // 2 + 2:
                broker.start()
        assert failed, "appends while the broker was down must be reported as failed"
        for batch in failed:  # the client retries what was not acknowledged, with the same event ids
            log.append(batch)
            accepted.update(e.event_id for e in batch)
        log.close()
        store = tmp_path / "node.duckdb"
        rc = subprocess.run([sys.executable, str(CHILD), f"kafka://{bootstrap}", str(store), "100", "-1", topic],
                            capture_output=True, text=True, timeout=180)
        assert rc.returncode == 0, rc.stderr
        projection = DuckDBProjectionStore(store, read_only=True)
        try:
            ids = [r[0] for r in projection.query("SELECT event_id FROM messages")[1]]
            per_conv = projection.query(
                "SELECT conversation_id, list(seq ORDER BY idx), list(idx ORDER BY idx) FROM messages GROUP BY 1"
            )[1]
        finally:
            projection.close()
        assert sorted(ids) == sorted(accepted) == sorted(e.event_id for e in events)
        for _conv, seqs, idxs in per_conv:
            assert idxs == list(range(len(idxs)))
            assert seqs == list(range(1, len(seqs) + 1))
    finally:
        broker.stop()
