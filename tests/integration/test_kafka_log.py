"""KafkaEventLog against a real broker: errors, topic config, partitioning, seq on read, duplicates, sizes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fixtures.kafka_broker import LOCAL_BROKER, LocalBroker, free_port
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from memfold.core.errors import AppendFailedError, ConfigError, LogUnavailableError, ValidationError
from memfold.core.events import Event, MessageAppended, MessagePayload
from memfold.core.partitioner import partition_for
from memfold.core.positions import Position
from memfold.streams.kafka_log import KafkaEventLog

pytestmark = pytest.mark.kafka

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def message(conversation: str, n: int, *, event_id: str | None = None, tenant: str = "acme", size: int = 0) -> Event:
    content = f"turn {n} of {conversation}" + ("x" * size)
    return MessageAppended(
        event_id=event_id or f"e-{n}-{uuid.uuid4().hex}",
        tenant_id=tenant,
        conversation_id=conversation,
        occurred_at=T0 + timedelta(seconds=n),
        payload=MessagePayload(role="user" if n % 2 == 0 else "assistant", content=content),
    )


def new_topic() -> str:
    return f"test.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_log(kafka_bootstrap: str) -> Iterator[Callable[..., KafkaEventLog]]:
    opened: list[KafkaEventLog] = []

    def make(partitions: int = 4, topic: str | None = None, **kw) -> KafkaEventLog:
        log = KafkaEventLog(kafka_bootstrap, topic=topic or new_topic(), partitions=partitions, timeout=20, **kw)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


@pytest.fixture
def admin(kafka_bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    yield client
    client.close()


def read_all(log: KafkaEventLog, partition: int, limit: int = 1000):
    return log.read(partition, 0, limit)


# --------------------------------------------------------------------------- connecting and the topic


def test_unreachable_broker_raises_log_unavailable():
    port = free_port()  # nothing listens there
    with pytest.raises(LogUnavailableError, match=f"127.0.0.1:{port}") as info:
        KafkaEventLog(f"127.0.0.1:{port}", topic=new_topic(), timeout=1.5)
    assert info.value.__cause__ is not None  # translated from the kafka error, which never escapes bare


def test_topic_is_created_with_explicit_partitions_and_unlimited_retention(make_log, admin):
    log = make_log(partitions=6)
    (described,) = admin.describe_topics([log.topic])
    assert len(described["partitions"]) == 6
    assert log.partitions() == list(range(6))
    assert log.partition_count == 6
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, log.topic)], config_filter="all")
    values = {name: entry["value"] for name, entry in configs["topic"][log.topic].items()}
    assert values["retention.ms"] == "-1"
    assert values["retention.bytes"] == "-1"
    assert values["cleanup.policy"] == "delete"
    assert log.end_positions() == dict.fromkeys(range(6), 0)


def test_reopening_a_topic_keeps_it_and_another_partition_count_is_a_config_error(make_log):
    log = make_log(partitions=4)
    positions = log.append([message("c", 0)])
    again = make_log(partitions=4, topic=log.topic)
    assert again.end_positions()[positions[0].partition] == 1
    with pytest.raises(ConfigError, match="has 4 partitions, not 8"):
        make_log(partitions=8, topic=log.topic)


def test_a_topic_that_deletes_events_is_a_config_error(admin, kafka_bootstrap):
    topic = new_topic()
    admin.create_topics(
        {topic: {"num_partitions": 2, "replication_factor": 1, "configs": {"retention.ms": "604800000"}}},
        wait_for_metadata=True,
    )
    with pytest.raises(ConfigError, match="retention.ms=604800000"):
        KafkaEventLog(kafka_bootstrap, topic=topic, partitions=2, timeout=20)


def test_closed_log_refuses_calls(make_log):
    log = make_log()
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogUnavailableError, match="closed"):
        log.append([message("c", 0)])
    with pytest.raises(LogUnavailableError, match="closed"):
        log.read(0, 0)


def test_read_validates_its_arguments(make_log):
    log = make_log(partitions=2)
    with pytest.raises(ValidationError):
        log.read(2, 0)
    with pytest.raises(ValidationError):
        log.read(0, -1)
    with pytest.raises(ValidationError):
        log.read(0, 0, 0)


# --------------------------------------------------------------------------- partitioning

KEYS = [
    "default/c",
    "acme/conv-0",
    "acme/conv-17",
    "tenant-with-a-long-name/conversation-0123456789abcdef",
    "ünïcødé/会話-1",
    "a/" + "x" * 300,
] + [f"t{t}/conversation-{c}" for t in range(3) for c in range(40)]


def test_log_places_events_where_kafka_python_default_partitioner_would(make_log, kafka_bootstrap):
    log = make_log(partitions=7)
    events = [message(key.split("/", 1)[1], 0, tenant=key.split("/", 1)[0]) for key in KEYS]
    positions = log.append(events)
    assert [p.partition for p in positions] == [partition_for(e.key, 7) for e in events]

    # The same keys through kafka-python's own partitioner (no explicit partition) land alike.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        futures = [producer.send(log.topic, key=e.key.encode(), value=b"{}") for e in events]
        producer.flush()
        assert [f.get(timeout=20).partition for f in futures] == [p.partition for p in positions]
    finally:
        producer.close()


def test_partition_for_matches_the_java_client_partitioner(tmp_path):
    # Kafka's own BuiltInPartitioner.partitionForKey, from the jars the local broker runs.
    subprocess.run(["bash", str(LOCAL_BROKER), "fetch"], check=True, capture_output=True, timeout=900)
    libs = next((REPO / "deploy" / "kafka" / ".cache").glob("kafka-*/libs"))
    source = tmp_path / "Partition.java"
    source.write_text(
        textwrap.dedent(
            """
            import java.nio.charset.StandardCharsets;
            import java.nio.file.*;
            import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
            public class Partition {
                public static void main(String[] args) throws Exception {
                    for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
                        byte[] key = line.getBytes(StandardCharsets.UTF_8);
                        StringBuilder out = new StringBuilder();
                        for (int n = 1; n <= 64; n++) out.append(BuiltInPartitioner.partitionForKey(key, n)).append(' ');
                        System.out.println(out.toString().trim());
                    }
                }
            }
            """
        )
    )
    keys = tmp_path / "keys.txt"
    keys.write_text("\n".join(KEYS) + "\n", encoding="utf-8")
    done = subprocess.run(
        ["java", "-cp", f"{libs}/*", str(source), str(keys)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    java = [list(map(int, line.split())) for line in done.stdout.splitlines()]
    python = [[partition_for(key, n) for n in range(1, 65)] for key in KEYS]
    assert java == python


# --------------------------------------------------------------------------- seq on read

APPENDER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timezone
    from memfold.core.events import MessageAppended, MessagePayload
    from memfold.streams.kafka_log import KafkaEventLog

    bootstrap, topic, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    log = KafkaEventLog(bootstrap, topic=topic, partitions=3, timeout=20)
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()  # start together
    for n in range(count):
        events = [
            MessageAppended(event_id=f"{name}-{n}", tenant_id="acme", conversation_id="shared",
                            occurred_at=datetime.now(timezone.utc),
                            payload=MessagePayload(role="user", content=f"{name} {n}")),
            MessageAppended(event_id=f"{name}-own-{n}", tenant_id="acme", conversation_id=f"own-{name}",
                            occurred_at=datetime.now(timezone.utc),
                            payload=MessagePayload(role="user", content=f"{name} own {n}")),
        ]
        log.append(events)
    log.close()
    """
)


def test_seq_is_assigned_on_read_gapless_under_two_concurrent_appender_processes(make_log, kafka_bootstrap):
    log = make_log(partitions=3)
    count = 40
    children = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, kafka_bootstrap, log.topic, name, str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for name in ("a", "b")
    ]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.wait(timeout=120) == 0, child.stderr.read()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()

    shared = partition_for("acme/shared", 3)
    records = [r for r in read_all(log, shared) if r.event.conversation_id == "shared"]
    assert [r.event.seq for r in records] == list(range(1, 2 * count + 1))
    # Each writer's own order survives the interleaving.
    for name in ("a", "b"):
        mine = [r.event.event_id for r in records if r.event.event_id.startswith(f"{name}-")]
        assert mine == [f"{name}-{n}" for n in range(count)]
    for name in ("a", "b"):
        own = [r for r in read_all(log, partition_for(f"acme/own-{name}", 3)) if r.event.conversation_id == f"own-{name}"]
        assert [r.event.seq for r in own] == list(range(1, count + 1))

    # A cold reader starting in the middle numbers exactly as the warm one did.
    cold = make_log(partitions=3, topic=log.topic)
    middle = records[len(records) // 2].position.offset
    again = cold.read(shared, middle, 10)
    expected = {r.position.offset: r.event.seq for r in read_all(log, shared)}
    assert again and [r.event.seq for r in again] == [expected[r.position.offset] for r in again]


def test_appended_seq_is_ignored_and_stored_as_zero(make_log, kafka_bootstrap):
    log = make_log(partitions=2)
    event = message("c", 0).with_seq(41)
    (position,) = log.append([event])
    assert log.read(position.partition, position.offset)[0].event.seq == 1
    raw = _raw_values(kafka_bootstrap, log.topic, position.partition)
    assert json.loads(raw[0])["seq"] == 0


def _raw_values(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        while len(values) < end:
            for batch in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in batch)
        return values
    finally:
        consumer.close()


# --------------------------------------------------------------------------- duplicates


def _produce_raw_duplicate(bootstrap: str, topic: str, event: Event, partitions: int) -> None:
    """Store ``event`` again exactly as a racing KafkaEventLog in another process would."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    try:
        producer.send(
            topic,
            key=event.key.encode(),
            value=event.with_seq(0).encode().encode(),
            partition=partition_for(event.key, partitions),
            headers=[("event_id", event.event_id.encode()), ("event_type", event.type.encode()),
                     ("schema_version", b"1")],
        ).get(timeout=20)
    finally:
        producer.close()


def test_a_duplicate_event_id_is_dropped_on_read_and_leaves_a_hole(make_log, kafka_bootstrap):
    log = make_log(partitions=1)
    first = [message("c", n, event_id=f"e{n}") for n in range(3)]
    assert log.append(first) == [Position(0, 0), Position(0, 1), Position(0, 2)]
    _produce_raw_duplicate(kafka_bootstrap, log.topic, first[1], 1)  # offset 3: a racing re-append
    (after,) = log.append([message("c", 3, event_id="e3")])
    assert after == Position(0, 4)

    assert log.end_positions() == {0: 5}  # Kafka's end: the duplicate occupies offset 3
    records = log.read(0, 0)
    assert [r.position.offset for r in records] == [0, 1, 2, 4]
    assert [(r.event.event_id, r.event.seq) for r in records] == [("e0", 1), ("e1", 2), ("e2", 3), ("e3", 4)]
    # A read that starts at the hole continues past it; a limit counts returned events only.
    assert [r.position.offset for r in log.read(0, 3, 1)] == [4]
    assert [r.position.offset for r in log.read(0, 2, 2)] == [2, 4]
    # A cold instance drops the same offset and numbers the same way.
    cold = make_log(partitions=1, topic=log.topic)
    assert [(r.position.offset, r.event.seq) for r in cold.read(0, 3)] == [(4, 4)]


def test_trailing_duplicate_reads_as_empty(make_log, kafka_bootstrap):
    log = make_log(partitions=1)
    event = message("c", 0, event_id="only")
    log.append([event])
    _produce_raw_duplicate(kafka_bootstrap, log.topic, event, 1)
    assert log.end_positions() == {0: 2}
    assert log.read(0, 1) == []
    assert [r.position.offset for r in log.read(0, 0)] == [0]


def _produce_without_headers(bootstrap: str, topic: str, event: Event, partitions: int) -> None:
    """Store ``event`` as a producer that sets no headers would: the type is only in the body."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        producer.send(topic, key=event.key.encode(), value=event.with_seq(0).encode().encode(),
                      partition=partition_for(event.key, partitions)).get(timeout=20)
    finally:
        producer.close()


def test_scan_drops_duplicates_and_decodes_a_record_without_its_type_header(make_log, kafka_bootstrap):
    from memfold.core.events import SettingsChanged, SettingsChangedPayload

    log = make_log(partitions=1)
    change = SettingsChanged(event_id="set-1", tenant_id="_memfold", conversation_id="settings",
                             occurred_at=datetime(2026, 3, 1, tzinfo=UTC),
                             payload=SettingsChangedPayload(policy="rolling", settings={"a": 1}, settings_hash="h"))
    log.append([message("c", 0, event_id="m0"), change])
    _produce_raw_duplicate(kafka_bootstrap, log.topic, change, 1)  # offset 2: the same event again
    later = change.model_copy(update={"event_id": "set-2"})
    _produce_without_headers(kafka_bootstrap, log.topic, later, 1)  # offset 3: no event_type header
    _produce_without_headers(kafka_bootstrap, log.topic, message("c", 1, event_id="m1"), 1)  # offset 4
    records, after = log.scan(0, 0, {"SettingsChanged"})
    assert after == 5
    assert [(r.position.offset, r.event.event_id) for r in records] == [(1, "set-1"), (3, "set-2")]
    assert [r.event.event_id for r in records] == \
        [r.event.event_id for r in log.read(0, 0) if r.event.type == "SettingsChanged"]


def test_re_appending_a_stored_event_id_returns_its_position_and_stores_nothing(make_log):
    log = make_log(partitions=2)
    events = [message("c", n, event_id=f"e{n}") for n in range(3)]
    positions = log.append(events)
    ends = log.end_positions()
    again = make_log(partitions=2, topic=log.topic)  # another instance, cold index
    assert again.append([events[2], events[0]]) == [positions[2], positions[0]]
    assert again.end_positions() == ends
    # Inside one batch the first occurrence wins.
    fresh = message("c", 9, event_id="e9")
    first, second = log.append([fresh, fresh])
    assert first == second
    assert log.end_positions()[first.partition] == ends[first.partition] + 1


def test_a_duplicate_far_back_is_still_dropped_and_memory_holds_no_per_event_index(make_log, kafka_bootstrap, tmp_path):
    """The index lives in a file: however much history, an old id is found and memory holds one head per conversation."""
    index_path = tmp_path / "index.sqlite"
    log = make_log(partitions=1, index_path=index_path)
    oldest = message("c0", 0, event_id="oldest")
    assert log.append([oldest]) == [Position(0, 0)]
    cached = []
    for batch in range(3):
        log.append([message(f"c{n % 5}", n, event_id=f"b{batch}-{n}") for n in range(400)])
        assert len(log.read(0, 0, 5000)) == 1 + 400 * (batch + 1)
        cached.append(log._index.cached_keys())
    assert cached == [5, 5, 5]  # flat: one last seq per conversation, whatever the number of events
    end = log.end_positions()[0]
    assert log.append([oldest]) == [Position(0, 0)] and log.end_positions()[0] == end  # not stored again
    _produce_raw_duplicate(kafka_bootstrap, log.topic, oldest, 1)  # a racing writer stored it anyway, 1,201 offsets on
    log.append([message("c0", 9999, event_id="after")])
    tail = log.read(0, end)
    assert [(r.position.offset, r.event.event_id, r.event.seq) for r in tail] == [(end + 1, "after", 242)]
    log.close()
    # A restart continues from the file (nothing to re-read) and numbers alike; so does a cold instance without one.
    for again in (make_log(partitions=1, topic=log.topic, index_path=index_path), make_log(partitions=1, topic=log.topic)):
        assert [(r.position.offset, r.event.seq) for r in again.read(0, end)] == [(end + 1, 242)]
        assert again.append([oldest]) == [Position(0, 0)]
    reopened = make_log(partitions=1, topic=log.topic, index_path=index_path)
    assert reopened._index.next_offset(0) == end + 2


def test_an_index_file_of_a_recreated_topic_is_rebuilt(make_log, admin, tmp_path):
    index_path = tmp_path / "index.sqlite"
    log = make_log(partitions=1, index_path=index_path)
    topic = log.topic
    log.append([message("c", n, event_id=f"old-{n}") for n in range(5)])
    log.read(0, 0)
    log.close()
    admin.delete_topics([topic])
    deadline = time.monotonic() + 60
    while topic in admin.list_topics():  # the broker deletes asynchronously: recreate once the name is free
        assert time.monotonic() < deadline, "the topic was not deleted"
        time.sleep(0.2)
    log = make_log(partitions=1, topic=topic, index_path=index_path)
    assert log.append([message("c", 0, event_id="new-0")]) == [Position(0, 0)]
    assert [(r.event.event_id, r.event.seq) for r in log.read(0, 0)] == [("new-0", 1)]
    assert log.find(["old-1"]) == {}


# --------------------------------------------------------------------------- failures


def test_event_above_the_producer_limit_fails_the_batch_naming_it(make_log):
    log = make_log(partitions=2)
    small, big = message("c", 0), message("c", 1, size=1_100_000)
    with pytest.raises(AppendFailedError, match=big.event_id) as info:
        log.append([small, big])
    assert set(info.value.event_ids) == {small.event_id, big.event_id}
    assert log.end_positions() == {0: 0, 1: 0}  # nothing of the batch was sent


def test_event_the_broker_refuses_as_too_large_is_reported_not_stored(admin, kafka_bootstrap):
    topic = new_topic()
    admin.create_topics(
        {topic: {"num_partitions": 1, "replication_factor": 1,
                 "configs": {"retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "4096"}}},
        wait_for_metadata=True,
    )
    log = KafkaEventLog(kafka_bootstrap, topic=topic, partitions=1, timeout=20)
    try:
        big = message("c", 0, size=20_000)
        with pytest.raises(AppendFailedError, match="MessageSizeTooLarge|RecordTooLarge") as info:
            log.append([big])
        assert info.value.event_ids == [big.event_id]
        assert isinstance(info.value.__cause__, Exception)
        (ok,) = log.append([message("c", 1)])  # the log stays usable
        assert [r.position for r in log.read(0, 0)] == [ok]
        assert log.read(0, 0)[0].event.seq == 1
    finally:
        log.close()


# --------------------------------------------------------------------------- a broker that goes away


@pytest.mark.slow
def test_broker_down_after_open_is_unavailable_then_the_same_log_recovers(tmp_path):
    # Its own broker: the session broker must stay up for the other tests.
    broker = LocalBroker(tmp_path / "broker")
    try:
        log = KafkaEventLog(broker.start(), topic=new_topic(), partitions=2, timeout=2)
        try:
            first, second = message("c", 0), message("c", 1)
            (stored,) = log.append([first])
            broker.stop()

            with pytest.raises(LogUnavailableError):
                log.append([second])  # nothing sent: the broker was not reachable to check for duplicates
            with pytest.raises(LogUnavailableError):
                log.read(stored.partition, 0)
            with pytest.raises(LogUnavailableError):
                log.end_positions()

            broker.start()  # same data dir and ports
            (after,) = log.append([second])
            records = log.read(stored.partition, 0)
            assert [(r.position, r.event.event_id, r.event.seq) for r in records] == [
                (stored, first.event_id, 1),
                (after, second.event_id, 2),
            ]
        finally:
            log.close()
    finally:
        broker.stop()
