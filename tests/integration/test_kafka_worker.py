"""Distributed workers (``memfold worker``) on a real broker: parity with embedded mode, SIGKILL, rebalance.

Every test runs workers as subprocesses through the real CLI, on a fresh
topic, with all five policies active, and appends messages one at a time
with the workers idle in between (as the embedded reference does), so the
log and the projections must come out identical to embedded mode's.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from fixtures.kafka_broker import free_port
from support.worker_kit import (
    MEMFOLD,
    Topic,
    WorkerProcess,
    conversation,
    embedded_reference,
    interleaved,
    new_topic,
    ownership_overlaps,
    projection,
    run_with_kills,
    settings_for,
)

from memfold.core.events import MessageAppended, replaced
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.kafka_worker import PartitionWorker
from memfold.streams.ownership import StaticPartitions

pytestmark = pytest.mark.kafka

MESSAGES = conversation("support-4711", 40)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Embedded mode's log and projection for the 40-message conversation (4 partitions)."""
    return embedded_reference(tmp_path_factory.mktemp("embedded"), MESSAGES, 4)


def outcome_counts(events) -> Counter:
    return Counter(e.payload.request_id for e in events if e.type in ("SummaryProduced", "SummaryFailed"))


def assert_same_run(run_events, run_projection, raw, ref_events, ref_projection) -> None:
    """The distributed run logged and projected exactly what embedded mode did, each summary once."""
    assert [(e.event_id, e.seq) for e in run_events] == [(e.event_id, e.seq) for e in ref_events]
    produced = [e.event_id for e in run_events if e.type == "SummaryProduced"]
    assert len(produced) >= 10  # every policy summarized something
    assert all(raw[i] == 1 for i in produced), "a summary was stored twice"
    assert all(n == 1 for n in outcome_counts(run_events).values())
    for table, rows in ref_projection.items():
        assert run_projection[table] == rows, f"table {table} differs from embedded mode"


def test_worker_projects_what_embedded_mode_projects(kafka_bootstrap, tmp_path, reference):
    run = run_with_kills(kafka_bootstrap, tmp_path, MESSAGES, set(), partitions=4)
    assert_same_run(run["events"], run["projection"], run["raw"], *reference)
    assert "Traceback" not in run["log"].read_text()


def test_sigkill_mid_stream_and_restart_loses_and_repeats_nothing(kafka_bootstrap, tmp_path, reference):
    # Three kill points here; tests/support/kill_points.py runs twenty or more.
    run = run_with_kills(kafka_bootstrap, tmp_path, MESSAGES, {7, 19, 31}, partitions=4, seed=11)
    assert_same_run(run["events"], run["projection"], run["raw"], *reference)


def test_two_workers_share_partitions_and_one_takes_over_from_a_killed_one(kafka_bootstrap, tmp_path):
    # Two of the conversations belong to one user: the user projection must survive the rebalance and the kill too.
    messages = interleaved(*(_of_user(conversation(c, 16), u) for c, u in (
        ("support-4711", "dana"), ("travel-2208", "dana"), ("saas-3390", None))))
    ref_events, ref_projection = embedded_reference(tmp_path / "embedded", messages, 8)
    assert ref_projection["user_facts"] and ref_projection["user_notes"]
    settings = settings_for(new_topic(), tmp_path / "reader", 8)
    topic = Topic(kafka_bootstrap, settings)
    logs = {"a": tmp_path / "a.log", "b": tmp_path / "b.log"}
    a = WorkerProcess(kafka_bootstrap, settings.topic, 8, tmp_path / "a", logs["a"])
    b = None
    deaths = {}
    try:
        for i, event in enumerate(messages):
            topic.log.append([event])
            if i == 12:  # a second worker joins: the group rebalances mid-stream
                b = WorkerProcess(kafka_bootstrap, settings.topic, 8, tmp_path / "b", logs["b"])
            if i == 30:  # and the first dies: its partitions go to the second after its session times out
                deaths["a"] = a.kill()
            topic.wait_idle(*[w for w in (a, b) if w is not None and w.alive()])
            if i == 12:
                _wait_for_both_owning(logs)
        events, raw = topic.events(), topic.raw_ids()
        assert b is not None and b.terminate() == 0, b.tail()
    finally:
        for w in (a, b):
            if w is not None:
                w.close()
        topic.close()
    assert ownership_overlaps(logs, deaths) == []
    # b ends up owning every partition: its projection is the whole topic's, as embedded mode has it.
    assert_same_run(events, projection(tmp_path / "b" / "projections.duckdb"), raw, ref_events, ref_projection)


def _of_user(messages: list[MessageAppended], user: str | None) -> list[MessageAppended]:
    return [replaced(m, payload=replaced(m.payload, user_id=user)) for m in messages] if user else messages


def _wait_for_both_owning(logs: dict[str, Path]) -> None:
    deadline = time.monotonic() + 60
    while "assigned [" not in logs["b"].read_text() or "revoked [" not in logs["a"].read_text():
        assert time.monotonic() < deadline, "the second worker never got partitions"
        time.sleep(0.1)


def test_an_unreachable_broker_ends_the_worker_with_one_clear_line(tmp_path):
    import os

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


def test_static_partition_lists_split_the_topic(kafka_bootstrap, tmp_path):
    """Two workers with fixed, disjoint partition lists fold the whole topic between them, no group needed."""
    settings = settings_for(new_topic(), tmp_path / "reader", 4)
    topic = Topic(kafka_bootstrap, settings)
    a = WorkerProcess(kafka_bootstrap, settings.topic, 4, tmp_path / "a", tmp_path / "a.log", "--partitions", "0,1")
    b = WorkerProcess(kafka_bootstrap, settings.topic, 4, tmp_path / "b", tmp_path / "b.log", "--partitions", "2,3")
    messages = interleaved(*(conversation(c, 6) for c in ("support-4711", "travel-2208", "saas-3390")))
    try:
        topic.log.append(messages)
        deadline = time.monotonic() + 60
        # Each conversation asks for a summary by its 6th message: wait until every one has, and all are answered
        # (a worker slow to start on a loaded machine would otherwise still be folding when it is stopped).
        while not _all_answered(topic, {m.conversation_id for m in messages}):
            assert a.alive() and b.alive() and time.monotonic() < deadline, a.tail() + b.tail()
            time.sleep(0.1)
        assert a.terminate() == 0 and b.terminate() == 0
    finally:
        a.close()
        b.close()
        topic.close()
    convs = {
        name: {r[1] for r in projection(tmp_path / name / "projections.duckdb")["conversations"]} for name in ("a", "b")
    }
    assert convs["a"].isdisjoint(convs["b"])
    assert convs["a"] | convs["b"] == {m.conversation_id for m in messages if isinstance(m, MessageAppended)}


def _all_answered(topic: Topic, conversations: set[str]) -> bool:
    """True when every conversation asked for a summary, every request is answered, and 3 or more were produced."""
    events = topic.events()
    answered = {e.payload.request_id for e in events if e.type in ("SummaryProduced", "SummaryFailed")}
    requests = [e for e in events if e.type == "SummaryRequested"]
    return (
        {e.conversation_id for e in requests} == conversations
        and all(e.event_id in answered for e in requests)
        and sum(e.type == "SummaryProduced" for e in events) >= 3
    )


class _RecordingPartitions(StaticPartitions):
    """Every partition, recording the positions the worker reports as committed."""

    def __init__(self, partition_count: int):
        super().__init__(range(partition_count), partition_count)
        self.reported: dict[int, int] = {}

    def committed(self, positions: dict[int, int]) -> bool:
        self.reported.update(positions)
        return True


class _FailingFirst(_RecordingPartitions):
    """Like the recording ownership, but its first ``failures`` commits fail (a rebalance in progress)."""

    def __init__(self, partition_count: int, failures: int):
        super().__init__(partition_count)
        self.failures = failures

    def committed(self, positions: dict[int, int]) -> bool:
        if self.failures:
            self.failures -= 1
            return False
        return super().committed(positions)


def test_a_commit_listener_added_before_the_worker_still_hears_every_commit(kafka_bootstrap, tmp_path):
    """A hook installed on the runner before the worker (the service's context cache does so) still sees each commit."""
    settings = Settings.load(None, data_dir=tmp_path / "worker", log=f"kafka://{kafka_bootstrap}", topic=new_topic(),
                             partitions=2)
    client = MemoryEngine(settings.model_copy(update={"data_dir": tmp_path / "client"}), role="client")
    engine = MemoryEngine(settings, role="worker")
    earlier: dict[int, int] = {}
    engine.runner.add_commit_listener(earlier.update)
    ownership = _RecordingPartitions(2)
    loop = PartitionWorker(engine.runner, engine.worker, ownership, commit_interval=0.0)
    thread = threading.Thread(target=loop.run, name="test-worker", daemon=True)
    thread.start()
    try:
        last = [client.append_message(f"c{i}", "user", f"message {i} for the hook test") for i in range(6)][-1]
        engine.runner.wait_for(last, timeout=120)
        loop.stop()
        thread.join(60)
        ends = {p: e for p, e in engine.store.position().items() if e}
    finally:
        loop.stop()
        thread.join(60)
        engine.close()
        client.close()
    assert ends, "nothing was folded"
    assert earlier == ends  # the earlier hook saw every commit
    assert {p: ownership.reported[p] for p in ends} == ends  # and so did the worker's own


def test_a_restarted_worker_mirrors_the_stored_positions_with_nothing_left_to_fold(kafka_bootstrap, tmp_path):
    """A worker killed after its store commit but before its advisory one left the group's offsets behind.

    The next owner has nothing to fold, so no fold step reports positions:
    it must mirror the store's positions of the partitions it gains, or the
    group shows a lag that does not exist for good (a flaky SIGKILL test caught it).
    A commit the group refuses is offered again, for the same reason.
    """
    settings = Settings.load(None, data_dir=tmp_path / "worker", log=f"kafka://{kafka_bootstrap}", topic=new_topic(),
                             partitions=2)
    client = MemoryEngine(settings.model_copy(update={"data_dir": tmp_path / "client"}), role="client")
    engine = MemoryEngine(settings, role="worker")
    try:
        first = PartitionWorker(engine.runner, engine.worker, StaticPartitions(range(2), 2), commit_interval=0.0)
        thread = threading.Thread(target=first.run, name="test-worker", daemon=True)
        thread.start()
        last = [client.append_message(f"c{i}", "user", f"message {i} before the restart") for i in range(6)][-1]
        engine.runner.wait_for(last, timeout=120)
        first.stop()
        thread.join(60)
        ends = {p: e for p, e in engine.store.position().items() if e}
        ownership = _RecordingPartitions(2)  # the restarted owner: nothing reported to the group yet
        PartitionWorker(engine.runner, engine.worker, ownership, commit_interval=0.0).run(stop_after=1.0)
        # And when the group refuses the first commits (a rebalance), the positions are offered again.
        refused = _FailingFirst(2, failures=3)
        PartitionWorker(engine.runner, engine.worker, refused, commit_interval=0.0).run(stop_after=3.0)
    finally:
        engine.close()
        client.close()
    assert ends, "nothing was folded"
    assert {p: ownership.reported.get(p) for p in ends} == ends
    assert refused.failures == 0 and {p: refused.reported.get(p) for p in ends} == ends


BUSY_POLL = 0.001  # a worker with a backlog polls its group between fold steps, 10 ms at most


def _poll_until(group, want: set[int], seconds: float, step: float = BUSY_POLL) -> set[int]:
    """Poll ``group`` in ``step``s until it owns ``want`` or ``seconds`` passed; return what it owns."""
    deadline = time.monotonic() + seconds
    owned: set[int] = set()
    while owned != want and time.monotonic() < deadline:
        owned = group.poll(step)
    return owned


def test_a_busy_member_owns_every_partition_of_a_new_topic_at_once(kafka_bootstrap, caplog):
    """A member that joins its group polling in short steps owns the whole topic from its first rebalance.

    Left alone, kafka-python joins before it knows the topic's partitions, assigns nothing, and
    rejoins when the metadata arrives; a poll that times out during that second rebalance loses
    its assignment (kafka-python 3.0.12), and the member owns nothing until ``ConsumerGroup``
    notices and joins again. ``ConsumerGroup`` fetches the topic's metadata before the first join,
    so there is no second rebalance to lose. Without that this test fails on its first topics.
    """
    from memfold.streams.kafka_log import KafkaEventLog
    from memfold.streams.ownership import ConsumerGroup

    for _ in range(5):
        topic = new_topic()
        KafkaEventLog(kafka_bootstrap, topic=topic, partitions=4, timeout=20).close()
        group = ConsumerGroup(kafka_bootstrap, topic, f"memfold-worker.{topic}", timeout=20)
        try:
            owned = _poll_until(group, {0, 1, 2, 3}, 15)
            assert owned == {0, 1, 2, 3}, f"owning {sorted(owned)} of a new 4-partition topic after 15 s"
        finally:
            group.close()
    lost = [r.getMessage() for r in caplog.records if "joining again" in r.getMessage()]
    assert lost == [], lost


def test_a_member_that_joined_before_its_topic_had_partitions_owns_them_soon_after(kafka_bootstrap):
    """The broker creates no topic on demand: a worker started before its topic joins its group owning nothing.

    Once the topic appears, the member's metadata shows its partitions and it rejoins to own them (within
    seconds: kafka-python retries the metadata of a subscribed topic it cannot find). It polls in short
    steps: a poll that times out during that rebalance can lose the assignment (kafka-python 3.0.12), and
    ``ConsumerGroup`` then joins again (``STUCK_SYNC_S``). Without that this test fails.
    """
    from memfold.streams.kafka_log import KafkaEventLog
    from memfold.streams.ownership import ConsumerGroup

    topic = new_topic()
    group = ConsumerGroup(kafka_bootstrap, topic, f"memfold-worker.{topic}", timeout=20)
    try:
        assert group.poll(2.0) == set()  # no topic yet: nothing to own
        KafkaEventLog(kafka_bootstrap, topic=topic, partitions=4, timeout=20).close()
        owned = _poll_until(group, {0, 1, 2, 3}, 30)
        assert owned == {0, 1, 2, 3}, f"owning {sorted(owned)} 30s after the topic appeared"
    finally:
        group.close()


def test_a_member_takes_up_partitions_added_to_its_topic_within_seconds(kafka_bootstrap):
    """The group rejoins when a metadata refresh shows other partitions: refreshed every few seconds, not minutes.

    memfold never grows a topic (a conversation's partition is its key's hash modulo the count); growing one
    here is the way to change the leader's metadata after the group formed (kafka-python's default
    refresh age is 5 minutes). The member polls in short steps, as a busy worker does: a poll that times out
    during the rebalance the growth starts can lose the assignment (``STUCK_SYNC_S``). Without the shorter
    age, or without joining again, this test fails.
    """
    from kafka.admin import KafkaAdminClient, NewPartitions

    from memfold.streams.kafka_log import KafkaEventLog
    from memfold.streams.ownership import ConsumerGroup

    topic = new_topic()
    KafkaEventLog(kafka_bootstrap, topic=topic, partitions=2, timeout=20).close()
    group = ConsumerGroup(kafka_bootstrap, topic, f"memfold-worker.{topic}", timeout=20)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        owned = _poll_until(group, {0, 1}, 30, step=0.5)
        assert owned == {0, 1}, f"owning {sorted(owned)} of a 2-partition topic after 30 s"
        admin.create_partitions({topic: NewPartitions(total_count=4)})
        owned = _poll_until(group, {0, 1, 2, 3}, 30)
        assert owned == {0, 1, 2, 3}, f"owning {sorted(owned)} 30 s after the topic grew to 4 partitions"
    finally:
        admin.close()
        group.close()
