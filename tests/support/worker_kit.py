"""Shared parts of the distributed-worker tests and the kill-point script: inputs, worker processes, comparisons.

Every run appends messages one at a time and waits until the workers are
idle in between, as the embedded reference does, so a run's log (and so its
projection) does not depend on timing: any difference is a bug.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from memfold.core.events import Event, MessageAppended, MessagePayload, SummaryRequested, ToolCall
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine
from memfold.streams.kafka_log import KafkaEventLog

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
SAMPLE = Path(__file__).resolve().parents[2] / "cli" / "data" / "sample.jsonl"
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
WAIT_S = 120  # an upper bound for "the workers are idle" on a loaded machine; never reached when all is well
# Columns that measure a run (durations), locate it in one log (offsets) or say how an answer was
# obtained (a worker killed after caching a summary but before appending it answers from the cache
# on restart: same content, cached=true), not what was projected.
RUN_COLUMNS = {"latency_ms", "generation_time_ms", "offset", "cached"}


def conversation(conversation_id: str, count: int) -> list[MessageAppended]:
    """Return ``count`` messages of a bundled sample conversation as events with fixed ids and timestamps."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["conversation_id"] == conversation_id][:count]
    assert len(rows) == count, f"the sample has fewer than {count} messages in {conversation_id}"
    return [
        MessageAppended(
            event_id=f"m-{conversation_id}-{i}", tenant_id=r.get("tenant_id") or "default",
            conversation_id=conversation_id, occurred_at=T0 + timedelta(minutes=i),
            payload=MessagePayload(
                role=r["role"], content=r.get("content") or "", metadata=r.get("metadata") or {},
                tool_calls=tuple(ToolCall(**tc) for tc in r.get("tool_calls") or ()),
                tool_call_id=r.get("tool_call_id"), name=r.get("name"),
            ),
        )
        for i, r in enumerate(rows)
    ]


def interleaved(*conversations: list[MessageAppended]) -> list[MessageAppended]:
    """Return the messages of several conversations, round robin."""
    out: list[MessageAppended] = []
    for i in range(max(len(c) for c in conversations)):
        out.extend(c[i] for c in conversations if i < len(c))
    return out


def settings_for(topic: str, data_dir: Path, partitions: int) -> Settings:
    return Settings.load(None, topic=topic, partitions=partitions, policies=POLICY_NAMES, data_dir=data_dir)


def new_topic() -> str:
    return f"memfold.worker.{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- comparing runs


def projection(path: Path) -> dict[str, list[tuple]]:
    """Return every projection table of a DuckDB file, run columns dropped, rows in a canonical order."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for table in ("events", "conversations", "messages", "summaries", "facts", "policy_state", "policy_rows",
                      "user_facts", "user_notes", "user_summaries"):
            cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in RUN_COLUMNS]
            rows = con.execute(f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in cols)} FROM {table}").fetchall()
            # Summary payloads and some policy states record the summarizer's latency.
            rows = [tuple(_no_run_json(v) if c in JSON_COLUMNS else v for c, v in zip(cols, r)) for r in rows]
            out[table] = sorted(rows, key=lambda r: tuple("" if v is None else str(v) for v in r))
        return out
    finally:
        con.close()


JSON_COLUMNS = {"payload", "state", "row"}


def _no_run_json(text: str) -> str:
    return json.dumps(_no_run_fields(json.loads(text)), sort_keys=True)


def _no_run_fields(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_run_fields(v) for k, v in value.items() if k not in RUN_COLUMNS}
    if isinstance(value, list):
        return [_no_run_fields(v) for v in value]
    return value


def embedded_reference(data_dir: Path, messages: list[MessageAppended], partitions: int) -> tuple[list[Event], dict]:
    """Run ``messages`` through embedded mode, one at a time, idle in between; return its log and projection."""
    settings = settings_for("unused", data_dir, partitions)
    with MemoryEngine(settings) as engine:
        for event in messages:
            engine.append_events([event])
            engine.wait_idle()
        events = [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 1_000_000)]
    return events, projection(settings.projection_path())


# --------------------------------------------------------------------------- the worker process


class WorkerProcess:
    """``memfold worker`` as a subprocess; its output goes to a file quoted in failures."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, data_dir: Path, log_path: Path, *extra: str):
        self.log_path = log_path
        self.data_dir = data_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
        env.update(MEMFOLD_TOPIC=topic, MEMFOLD_PARTITIONS=str(partitions), MEMFOLD_POLICIES=",".join(POLICY_NAMES))
        self._log_file = open(log_path, "a")
        self.proc = subprocess.Popen(
            [MEMFOLD, "worker", "--log", f"kafka://{bootstrap}", "--data-dir", str(data_dir),
             "--commit-interval", "0.1", "--session-timeout", "6", *extra],
            stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
        )

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> float:
        """SIGKILL the worker; return the time it died (wall clock, as the workers log it)."""
        self.proc.kill()
        assert self.proc.wait(30) == -signal.SIGKILL
        self._log_file.close()
        return time.time()

    def terminate(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        finally:
            self._log_file.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log_file.close()


class Topic:
    """Read side of a test topic: events (as every reader sees them), raw records, the worker group's offsets."""

    def __init__(self, bootstrap: str, settings: Settings):
        self.settings = settings
        self.bootstrap = bootstrap
        self.log = KafkaEventLog(bootstrap, topic=settings.topic, partitions=settings.partitions, timeout=20)
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        self.group = f"memfold-worker.{settings.topic}"

    def close(self) -> None:
        self.log.close()
        self.admin.close()

    def events(self) -> list[Event]:
        """Return every event in (partition, offset) order, duplicates dropped, seq assigned."""
        return [r.event for p in self.log.partitions() for r in self.log.read(p, 0, 1_000_000)]

    def count(self, event_type: str) -> int:
        return sum(e.type == event_type for e in self.events())

    def idle(self) -> bool:
        """True when the workers have folded everything on the topic and answered every request.

        1. the group's committed offsets (the workers' store positions) reach
           every partition's end (derived appends happen before the commit);
        2. every request on the topic has its outcome;
        3. the topic did not grow meanwhile.
        """
        ends = self.log.end_positions()
        try:
            offsets = self.admin.list_group_offsets({self.group: None}).get(self.group, {})
        except KafkaError:  # the group coordinator is still starting (fresh broker): not idle yet
            return False
        committed = {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == self.settings.topic}
        if any(committed.get(p, 0) < end for p, end in ends.items()):
            return False
        events = self.events()
        answered = {e.payload.request_id for e in events if e.type in ("SummaryProduced", "SummaryFailed")}
        if any(isinstance(e, SummaryRequested) and e.event_id not in answered for e in events):
            return False
        return self.log.end_positions() == ends

    def wait_idle(self, *workers: WorkerProcess) -> None:
        deadline = time.monotonic() + WAIT_S
        while not self.idle():
            for w in workers:
                if not w.alive():
                    raise AssertionError(f"a worker exited with {w.proc.returncode}:\n{w.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"workers not idle after {WAIT_S}s; last log:\n{workers[-1].tail()}")
            time.sleep(0.05)

    def raw_ids(self) -> Counter:
        """Count the stored records per event id, duplicates included."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None)
        try:
            tps = [TopicPartition(self.settings.topic, p) for p in range(self.settings.partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)
            ids: Counter = Counter()
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                for batch in consumer.poll(timeout_ms=500).values():
                    ids.update(json.loads(r.value)["event_id"] for r in batch)
            return ids
        finally:
            consumer.close()


def ownership_overlaps(logs: dict[str, Path], deaths: dict[str, float]) -> list[str]:
    """Return every moment two workers owned one partition, from their "assigned"/"revoked" log lines.

    ``deaths`` gives the wall-clock time each SIGKILLed worker (by name) died:
    a dead worker owns nothing after it.
    """
    line = re.compile(r"^(\S+ \S+) INFO memfold.ownership: consumer group \S+: (assigned|revoked) \[([\d, ]*)\]")
    spans: dict[int, list[tuple[float, float, str]]] = {}
    for name, path in logs.items():
        since: dict[int, float] = {}
        for text in path.read_text().splitlines():
            m = line.match(text)
            if not m:
                continue
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            parts = [int(p) for p in m.group(3).split(",") if p.strip()]
            for p in parts:
                if m.group(2) == "assigned":
                    since[p] = at
                elif p in since:
                    spans.setdefault(p, []).append((since.pop(p), at, name))
        for p, start in since.items():
            spans.setdefault(p, []).append((start, deaths.get(name, float("inf")), name))
    overlaps = []
    for p, owned in spans.items():
        owned.sort()
        for (_s1, e1, n1), (s2, _e2, n2) in zip(owned, owned[1:]):
            if s2 < e1 and n1 != n2:
                overlaps.append(f"partition {p}: {n1} until {e1:.3f}, {n2} from {s2:.3f}")
    return overlaps


def run_with_kills(
    bootstrap: str, root: Path, messages: list[MessageAppended], kill_after: set[int], *, partitions: int, seed: int = 0
) -> dict[str, Any]:
    """Run ``messages`` through one worker, SIGKILLing and restarting it after each index in ``kill_after``.

    The kill lands a random 0-300 ms after that message's append (mid fold,
    mid summary or idle). Returns the log, raw record counts and the
    worker's final projection, for comparison with a clean run.
    """
    import random

    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    settings = settings_for(new_topic(), root / "reader", partitions)
    topic = Topic(bootstrap, settings)
    data_dir = root / "worker"
    log_path = root / "worker.log"
    worker = WorkerProcess(bootstrap, settings.topic, partitions, data_dir, log_path)
    try:
        for i, event in enumerate(messages):
            topic.log.append([event])
            if i in kill_after:
                time.sleep(rnd.uniform(0, 0.3))
                worker.kill()
                worker = WorkerProcess(bootstrap, settings.topic, partitions, data_dir, log_path)
            topic.wait_idle(worker)
        events, raw = topic.events(), topic.raw_ids()
        assert worker.terminate() == 0, worker.tail()
    finally:
        worker.close()
        topic.close()
    return {"events": events, "raw": raw, "projection": projection(data_dir / "projections.duckdb"), "log": log_path}
