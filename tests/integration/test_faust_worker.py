"""The faust worker (``memfold worker``) on a real broker: parity with embedded mode, kill -9, table state across restarts.

Every test runs the worker as a subprocess through the real CLI, on a fresh
topic, with all five policies active. "The worker is idle" is observed, not
slept for: its consumer group has committed every offset the topic holds
(an event's derived appends happen before its offset is committed) and
every request on the topic has its outcome (:meth:`Topic.idle`).
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
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaError
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import MemberToRemove
from kafka.structs import OffsetAndMetadata

from fixtures.kafka_broker import free_port

from memfold.engine.engine import MemoryEngine
from memfold.engine.events import Event, MessageAppended, MessagePayload, SummaryRequested, ToolCall
from memfold.engine.partitioner import partition_for
from memfold.engine.settings import POLICY_NAMES, Settings
from memfold.streams.faust_app import TABLE_NAME, app_id, default_instance_id
from memfold.streams.kafka_log import KafkaEventLog

pytestmark = pytest.mark.kafka

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
SAMPLE = Path(__file__).resolve().parents[2] / "engine" / "data" / "sample.jsonl"
PARTITIONS = 4
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)
WAIT_S = 90  # an upper bound for "the worker is idle" on a loaded machine; never reached when all is well


# --------------------------------------------------------------------------- inputs


def conversation(conversation_id: str, count: int, *, prefix: str = "m") -> list[MessageAppended]:
    """Return ``count`` messages of a bundled sample conversation as events with fixed ids and timestamps."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["conversation_id"] == conversation_id][:count]
    assert len(rows) == count, f"the sample has fewer than {count} messages in {conversation_id}"
    return [
        MessageAppended(
            event_id=f"{prefix}-{conversation_id}-{i}", tenant_id=r.get("tenant_id") or "default",
            conversation_id=conversation_id, occurred_at=T0 + timedelta(minutes=i),
            payload=MessagePayload(
                role=r["role"], content=r.get("content") or "", metadata=r.get("metadata") or {},
                tool_calls=tuple(ToolCall(**tc) for tc in r.get("tool_calls") or ()),
                tool_call_id=r.get("tool_call_id"), name=r.get("name"),
            ),
        )
        for i, r in enumerate(rows)
    ]


def settings_for(topic: str, data_dir: Path, **extra: Any) -> Settings:
    return Settings.load(None, topic=topic, partitions=PARTITIONS, policies=POLICY_NAMES, data_dir=data_dir, **extra)


def new_topic() -> str:
    return f"memfold.worker.{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- the worker process


class WorkerProcess:
    """``memfold worker`` as a subprocess; its stderr goes to a file quoted in failures."""

    def __init__(self, bootstrap: str, topic: str, data_dir: Path, log_path: Path):
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
        env.update(MEMFOLD_TOPIC=topic, MEMFOLD_PARTITIONS=str(PARTITIONS), MEMFOLD_POLICIES=",".join(POLICY_NAMES))
        self._log_file = open(log_path, "a")
        self.proc = subprocess.Popen(
            [MEMFOLD, "worker", "--log", f"kafka://{bootstrap}", "--data-dir", str(data_dir), "--commit-interval", "0.1"],
            stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
        )

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the worker exited with {self.proc.returncode}:\n{self.tail()}", pytrace=False)

    def kill(self) -> None:
        self.proc.kill()
        assert self.proc.wait(30) == -signal.SIGKILL

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
        self.log = KafkaEventLog(bootstrap, topic=settings.topic, partitions=PARTITIONS, timeout=20)
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        self.group = app_id(settings)

    def close(self) -> None:
        self.log.close()
        self.admin.close()

    def events(self) -> list[Event]:
        """Return every event in (partition, offset) order, duplicates dropped, seq assigned."""
        return [r.event for p in self.log.partitions() for r in self.log.read(p, 0, 1_000_000)]

    def count(self, event_type: str) -> int:
        return sum(e.type == event_type for e in self.events())

    def idle(self) -> bool:
        """True when the worker has folded everything on the topic and answered every request.

        1. the group has committed every offset the topic holds (the fold
           agent is done with them, and so with what they made it append);
        2. every request on the topic has its outcome (the summarizer runs
           beside the fold agent, not inside its commits);
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

    def wait(self, worker: WorkerProcess, condition, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            worker.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"gave up waiting for {what} after {WAIT_S}s; worker log:\n{worker.tail()}", pytrace=False)
            time.sleep(0.05)

    def wait_idle(self, worker: WorkerProcess) -> None:
        self.wait(worker, self.idle, "the worker to process everything on the topic")

    def raw_ids(self) -> Counter:
        """Count the stored records per event id, duplicates included."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None)
        try:
            return Counter(json.loads(value)["event_id"] for _, value in _records(consumer, self.settings.topic))
        finally:
            consumer.close()

    def fold_table(self) -> dict[str, Any]:
        """Return the worker's fold table as its changelog holds it (latest value per key)."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None)
        try:
            return {json.loads(k): json.loads(v) for k, v in _records(consumer, f"{self.group}-{TABLE_NAME}-changelog")}
        finally:
            consumer.close()


def _records(consumer: KafkaConsumer, topic: str) -> Iterator[tuple[bytes, bytes]]:
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    done = {tp for tp in tps if ends[tp] == 0}
    while len(done) < len(tps):
        for tp, batch in consumer.poll(timeout_ms=500).items():
            for record in batch:
                yield record.key, record.value
            if consumer.position(tp) >= ends[tp]:
                done.add(tp)


@pytest.fixture
def worker_factory(kafka_bootstrap: str, tmp_path: Path):
    started: list[WorkerProcess] = []

    def start(topic: str, data_dir: Path) -> WorkerProcess:
        worker = WorkerProcess(kafka_bootstrap, topic, data_dir, tmp_path / "worker.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


# --------------------------------------------------------------------------- comparing runs


def _no_latency(value: Any) -> Any:
    """Drop measured durations (latency_ms, generation_time_ms): the only fields two runs may differ in."""
    if isinstance(value, dict):
        return {k: _no_latency(v) for k, v in value.items() if k not in ("latency_ms", "generation_time_ms")}
    if isinstance(value, list):
        return [_no_latency(v) for v in value]
    return value


def derived_by_policy(events: list[Event]) -> dict[tuple[str, str], list[tuple]]:
    """Return, per (conversation, policy), its derived events in log order: every field but seq and latencies."""
    out: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for e in events:
        if isinstance(e, MessageAppended):
            continue
        body = _no_latency(json.loads(e.model_dump_json(exclude={"seq"})))
        out[(e.key, body["payload"].get("policy", ""))].append((e.event_id, json.dumps(body, sort_keys=True)))
    return dict(out)


def summaries(events: list[Event]) -> list[tuple]:
    """Return every produced summary: id, policy, covered range, base, text, facts."""
    return sorted(
        (p.summary_id, p.policy, p.covers_from, p.covers_to, p.base_summary_id, p.text, p.facts)
        for e in events if e.type == "SummaryProduced" for p in [e.payload]
    )


def project(bootstrap: str, settings: Settings) -> tuple[dict, MemoryEngine]:
    """Fold the topic into a fresh projector-node replica; return its policy states and the engine (open)."""
    engine = MemoryEngine(settings.model_copy(update={"log": f"kafka://{bootstrap}"}), role="projector", start=False)
    while engine.runner.run_once() or not engine.runner.caught_up():
        pass
    cols, rows = engine.sql("SELECT policy, tenant_id, conversation_id, state FROM policy_state")
    states = {f"state|{p}|{t}/{c}": json.loads(s) for p, t, c, s in rows}
    return states, engine


@pytest.fixture(scope="module")
def embedded_reference(tmp_path_factory) -> list[Event]:
    """The events embedded mode logs for the 40-message conversation, appended one at a time, idle in between."""
    data_dir = tmp_path_factory.mktemp("embedded")
    with MemoryEngine(settings_for("unused", data_dir)) as engine:
        for event in conversation("support-4711", 40):
            engine.append_events([event])
            engine.wait_idle()
        return [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 1_000_000)]


def run_live(topic: Topic, worker: WorkerProcess, messages: list[MessageAppended]) -> None:
    """Append ``messages`` one at a time, waiting after each until the worker is idle (as the embedded run does)."""
    for event in messages:
        topic.log.append([event])
        topic.wait_idle(worker)


# --------------------------------------------------------------------------- tests


def test_worker_produces_what_embedded_mode_produces(kafka_bootstrap, tmp_path, worker_factory, embedded_reference):
    settings = settings_for(new_topic(), tmp_path / "reader")
    topic = Topic(kafka_bootstrap, settings)
    try:
        worker = worker_factory(settings.topic, tmp_path / "worker")
        run_live(topic, worker, conversation("support-4711", 40))
        kafka_events = topic.events()
        assert worker.terminate() == 0, worker.tail()
    finally:
        topic.close()

    expected = embedded_reference
    assert summaries(kafka_events) == summaries(expected)
    assert len(summaries(expected)) >= 10  # every policy summarized something in 40 messages
    assert derived_by_policy(kafka_events) == derived_by_policy(expected)
    # Same events, same order per conversation: seq numbers match too.
    assert [(e.event_id, e.seq) for e in kafka_events] == [(e.event_id, e.seq) for e in expected]
    assert "Traceback" not in worker.tail(10_000)


def test_kill_9_mid_stream_then_restart_leaves_one_outcome_per_request(kafka_bootstrap, tmp_path, worker_factory):
    settings = settings_for(new_topic(), tmp_path / "reader")
    topic = Topic(kafka_bootstrap, settings)
    data_dir = tmp_path / "worker"
    first, second = [], []
    for conv in ("support-4711", "travel-2208", "saas-3390"):
        msgs = conversation(conv, 60)
        first += msgs[:30]
        second += msgs[30:]
    try:
        topic.log.append(first)  # in one batch: the worker folds as fast as it can
        worker = worker_factory(settings.topic, data_dir)
        topic.wait(worker, lambda: topic.count("SummaryProduced") >= 1, "a first summary")
        worker.kill()
        topic.log.append(second)  # arrives while no worker runs
        worker = worker_factory(settings.topic, data_dir)
        topic.wait(worker, lambda: topic.count("SummaryProduced") >= 8, "more summaries")
        worker.kill()  # a second time, while it catches up
        worker = worker_factory(settings.topic, data_dir)
        topic.wait_idle(worker)
        events = topic.events()
        raw = topic.raw_ids()
        table = topic.fold_table()
        assert worker.terminate() == 0, worker.tail()
    finally:
        topic.close()

    requests = [e for e in events if isinstance(e, SummaryRequested)]
    outcomes = Counter(e.payload.request_id for e in events if e.type in ("SummaryProduced", "SummaryFailed"))
    assert requests and len(outcomes) == len(requests)
    assert all(outcomes[r.event_id] == 1 for r in requests), "a request has no outcome or several"
    assert len({e.event_id for e in events}) == len(events)

    states, engine = project(kafka_bootstrap, settings)
    try:
        _, dupes = engine.sql("SELECT summary_id, count(*) FROM summaries WHERE summary_id IS NOT NULL "
                              "GROUP BY summary_id HAVING count(*) > 1")
        _, open_ = engine.sql("SELECT request_id FROM summaries WHERE status = 'processing'")
        _, produced = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed'")
        _, projected = engine.sql("SELECT count(*) FROM events")
    finally:
        engine.close()
    assert projected[0][0] == len(events)
    assert dupes == [] and open_ == []
    assert produced[0][0] == sum(e.type == "SummaryProduced" for e in events) > 0
    # What the killed and restarted policy agent keeps is exactly what a projector node folds from the topic.
    table_states = {k: json.loads(v["state"]) for k, v in table.items() if k.startswith("state|")}
    assert table_states == states
    assert sum(k.startswith("conv|") for k in table) == 3
    # Kafka may hold a repeat of an event whose append was cut by the kill; readers drop it.
    print(f"{len(events)} events, {sum(raw.values()) - len(raw)} stored repeats, {len(requests)} requests")


def test_table_state_survives_a_restart(kafka_bootstrap, tmp_path, worker_factory, embedded_reference):
    settings = settings_for(new_topic(), tmp_path / "reader")
    topic = Topic(kafka_bootstrap, settings)
    data_dir = tmp_path / "worker"
    messages = conversation("support-4711", 40)
    try:
        worker = worker_factory(settings.topic, data_dir)
        run_live(topic, worker, messages[:20])
        before = len(topic.events())
        requests_before = topic.count("SummaryRequested")
        assert worker.terminate() == 0, worker.tail()
        worker = worker_factory(settings.topic, data_dir)
        run_live(topic, worker, messages[20:])
        events = topic.events()
        raw = topic.raw_ids()
        assert worker.terminate() == 0, worker.tail()
    finally:
        topic.close()

    # Deciding from scratch after the restart would number messages from 0 again and request other ranges.
    assert derived_by_policy(events) == derived_by_policy(embedded_reference)
    assert requests_before > 0 and topic_requests(events) == topic_requests(embedded_reference)
    assert all(n == 1 for n in raw.values())  # nothing re-appended
    # The restarted worker folded only what came after the restart, and appended only what that decided.
    stats = re.findall(r"worker stopped \(exit 0\) after [\d.]+s: folded (\d+) events .*?appended (\d+) events",
                       worker.log_path.read_text())
    assert len(stats) == 2
    folded_after, appended_after = map(int, stats[1])
    assert folded_after == len(events) - before
    assert appended_after == len([e for e in events[before:] if not isinstance(e, MessageAppended)])


def topic_requests(events: list[Event]) -> list[str]:
    return [e.event_id for e in events if isinstance(e, SummaryRequested)]


def test_events_faust_never_delivers_are_folded_from_the_log(kafka_bootstrap, tmp_path, worker_factory):
    """faust can resume past events it never handed to the agent (#596, #606); the table's position catches it."""
    settings = settings_for(new_topic(), tmp_path / "reader")
    topic = Topic(kafka_bootstrap, settings)
    data_dir = tmp_path / "worker"
    messages = conversation("support-4711", 40)
    partition = partition_for(messages[0].key, PARTITIONS)
    try:
        worker = worker_factory(settings.topic, data_dir)
        run_live(topic, worker, messages[:20])
        assert worker.terminate() == 0, worker.tail()
        # The stopped worker's static membership would hold the group: remove it, then commit past ten messages.
        topic.admin.remove_group_members(topic.group, [MemberToRemove(group_instance_id=default_instance_id(data_dir))])
        topic.log.append(messages[20:30])
        skip_to = topic.log.end_positions()[partition]
        errors = topic.admin.alter_group_offsets(
            topic.group, {TopicPartition(settings.topic, partition): OffsetAndMetadata(skip_to, "", -1)}
        )
        assert all(e.__name__ == "NoError" for e in errors.values()), errors
        topic.log.append(messages[30:])
        worker = worker_factory(settings.topic, data_dir)
        topic.wait_idle(worker)
        events = topic.events()
        table = topic.fold_table()
        assert worker.terminate() == 0, worker.tail()
    finally:
        topic.close()

    assert "faust skipped" in worker.tail(10_000)
    assert table[f"conv|{messages[0].key}"]["message_count"] == 40
    states, engine = project(kafka_bootstrap, settings)
    engine.close()
    assert {k: json.loads(v["state"]) for k, v in table.items() if k.startswith("state|")} == states
    answered = {e.payload.request_id for e in events if e.type in ("SummaryProduced", "SummaryFailed")}
    assert {e.event_id for e in events if isinstance(e, SummaryRequested)} <= answered


def test_an_unreachable_broker_ends_the_worker_with_one_clear_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    done = subprocess.run(
        [MEMFOLD, "worker", "--log", f"kafka://127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "w"),
         "--connect-timeout", "2"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "ERROR" in ln]
    assert "cannot start the worker" in line and "cannot reach Kafka" in line
