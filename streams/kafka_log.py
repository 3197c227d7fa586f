"""The distributed event log: one Kafka topic, key = ``tenant/conversation``, ``seq`` assigned on read.

Kafka has no conditional append, so writers in several processes cannot
allocate a gapless per-conversation ``seq`` safely. Writers therefore store
every event with ``seq=0`` and the log assigns ``seq`` *when reading*, from
the partition's order alone: ``seq = 1 + earlier events of the same
conversation in that partition``. Every reader of the topic computes the same
numbers, so projections built from the Kafka log and from the SQLite log agree.

Duplicates: derived events have deterministic ids and may be re-appended (a
restarted worker, a retried append). ``append`` skips an event whose id it
finds already stored in its partition and returns the stored position, as the
SQLite log does. Two processes racing to append the same id can both store
it; ``read`` then drops every occurrence after the first. A dropped duplicate
still occupies its Kafka offset: ``read`` leaves a hole there (returned
positions are increasing but not always consecutive) and ``end_positions``
stays Kafka's end offset.

To number and de-duplicate, each instance keeps an offset index (the seq of
every offset, the first offset of every event id; see
:mod:`memfold.streams.kafka_index`) in a SQLite file, so a worker's memory
does not grow with history and the de-duplication is exact however far
apart the two copies are. It is built by reading each partition in offset
order from 0 on the first read or append that needs it; later calls only
index what is new. With ``index_path`` (an engine's data dir) it outlives
the process: a restarted node reads only what was appended since.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import kafka.errors as kafka_errors
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from memfold.core.errors import (
    AppendFailedError,
    ConfigError,
    EventDecodeError,
    LogCorruptionError,
    LogUnavailableError,
    ValidationError,
)
from memfold.core.events import Event, decode
from memfold.core.partitioner import partition_for
from memfold.core.positions import LogRecord, Position, check_offsets
from memfold.core.unreadable import UnreadableRecord
from memfold.streams.kafka_index import OffsetIndex

DEFAULT_TOPIC = "memfold.events"
# Unlimited retention, no compaction: the topic is the source of truth, and
# compaction by key would delete all but one event of each conversation.
TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
HEADER_EVENT_ID = "event_id"
HEADER_EVENT_TYPE = "event_type"
HEADER_SCHEMA_VERSION = "schema_version"
_INDEX_CHUNK = 5000  # records per poll while indexing
_POLL_MS = 200
_LINGER_MS = 100  # an upper bound only: append flushes what it sent before returning
# kafka-python backs off up to 30 s between reconnects by default; the Java
# client's 1 s lets a log recover soon after a broker restart.
_RECONNECT_BACKOFF_MAX_MS = 1000


class KafkaEventLog:
    """An :class:`~memfold.core.ports.EventLog` on one Kafka topic.

    Thread safety: appends are serialised per instance; reads share one
    consumer under a lock. Any number of instances, in any number of
    processes, may append to and read the same topic.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        topic: str = DEFAULT_TOPIC,
        partitions: int = 8,
        replication_factor: int = 1,
        timeout: float = 30.0,
        client_id: str = "memfold",
        index_path: str | Path | None = None,
    ):
        """Connect to ``bootstrap`` (``host:port[,host:port]``) and make sure ``topic`` exists.

        ``index_path`` is the SQLite file of the offset index (created when
        missing, checked against the topic when opened); None keeps it in a
        temporary file deleted on :meth:`close`.

        ``timeout`` (seconds) bounds every wait on the cluster: bootstrap,
        requests, metadata, an append's acknowledgement. Raises
        :class:`~memfold.core.errors.LogUnavailableError` when no broker
        answers in time, and :class:`~memfold.core.errors.ConfigError` when
        the topic exists with another partition count or with a retention or
        cleanup policy that would delete events.
        """
        if partitions < 1:
            raise ConfigError(f"an event log needs at least 1 partition, got {partitions}")
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        self._bootstrap = bootstrap
        self._topic = topic
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._timeout = timeout
        self._client_id = client_id
        self._timeout_ms = max(1, int(timeout * 1000))
        self._lock = threading.RLock()  # the consumer and the indexes
        self._append_lock = threading.Lock()
        self._index = OffsetIndex(index_path)
        self._checked: set[int] = set()  # partitions whose index this instance checked against the topic
        self._known_ends: dict[int, int] = {}  # the last end offset Kafka reported, per partition
        self._assigned: int | None = None
        self._cursor: tuple[int, int] | None = None  # (partition, offset) the consumer fetches next
        self._producer: KafkaProducer | None = None
        self._consumer: KafkaConsumer | None = None
        self._closed = False
        try:
            self.ensure_topic()
            self._producer = self._connect("producer", KafkaProducer, **self._producer_config())
            self._consumer = self._connect("consumer", KafkaConsumer, **self._consumer_config())
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ EventLog

    @property
    def partition_count(self) -> int:
        """Return the topic's partition count (checked against the topic when opened)."""
        return self._partitions

    @property
    def topic(self) -> str:
        """Return the topic name."""
        return self._topic

    def partitions(self) -> list[int]:
        """Return the partition numbers from the topic metadata, ascending."""
        with self._lock, self._translate("read the metadata of"):
            found = self._open_consumer().partitions_for_topic(self._topic)
        if not found:
            raise LogUnavailableError(f"no metadata for topic {self._topic!r} on {self._bootstrap}")
        return sorted(found)

    def append(self, events: Sequence[Event]) -> list[Position]:
        """Append ``events`` in order; return each event's position, in input order.

        1. Encode each event with ``seq=0`` (the log numbers on read) and check
           its size against the producer limit; an event too large fails the
           whole batch before anything is sent.
        2. Bring the index of every target partition up to its end and skip
           events whose ``event_id`` is already stored there (their stored
           position is returned) or repeated in the batch (the first one's).
        3. Send the rest, key = ``tenant/conversation``, partition =
           ``partition_for(key, n)`` (what Kafka's murmur2 partitioner picks),
           headers ``event_id``, ``event_type``, ``schema_version``; flush and
           wait for every acknowledgement (``acks=all``, idempotent producer).

        Raises :class:`~memfold.core.errors.LogUnavailableError` when the
        cluster cannot be reached before sending (nothing appended), and
        :class:`~memfold.core.errors.AppendFailedError` whose ``event_ids``
        are the events not acknowledged (the others of the batch may be
        stored; retrying the whole batch is safe, stored ids are skipped).
        """
        if not events:
            return []
        with self._append_lock:
            planned = self._plan(events)
            with self._lock:
                self._check_open()
                ends = self._end_offsets(sorted({p for _, p, _ in planned}))
                wanted: dict[int, set[str]] = {}
                for event, partition, _ in planned:
                    wanted.setdefault(partition, set()).add(event.event_id)
                positions: dict[str, Position] = {}
                for partition, end in ends.items():
                    self._index_until(partition, end)
                    for event_id, offset in self._index.offsets(partition, wanted[partition]).items():
                        positions[event_id] = Position(partition, offset)
            to_send: list[tuple[Event, int, bytes]] = []
            queued: set[str] = set()
            for item in planned:
                event_id = item[0].event_id
                if event_id not in positions and event_id not in queued:
                    queued.add(event_id)
                    to_send.append(item)
            sent = self._send(to_send)
            self._index_acknowledged([(event, sent[event.event_id]) for event, _, _ in to_send])
            positions.update(sent)
        return [positions[event.event_id] for event in events]

    def read(self, partition: int, start: int, limit: int = 1000) -> list[LogRecord]:
        """Return up to ``limit`` records of ``partition`` starting *at* offset ``start``, in offset order.

        Each event carries its read-assigned ``seq``. A duplicate (an
        ``event_id`` seen earlier in the partition) is dropped: its offset is
        a hole in the result, and the read goes on past it, so fewer than
        ``limit`` records mean the end was reached. Reading at or past the end
        returns ``[]``. A record no event decodes from is returned as an
        :class:`~memfold.core.unreadable.UnreadableRecord` at its offset
        (never skipped, never failing the rest of the read); a record in the wrong partition raises
        :class:`~memfold.core.errors.LogCorruptionError`.
        """
        self._check_partition(partition)
        check_offsets(start, limit)
        with self._lock:
            self._check_open()
            end = self._end_for(partition, start)
            if start >= end:
                return []
            self._index_until(partition, start)
            records: list[LogRecord] = []
            offset = start
            while len(records) < limit:
                if offset >= end:  # fewer than limit so far: look again, so a short read means the end now
                    end = self._end_offsets(list(range(self._partitions)))[partition]
                    if offset >= end:
                        break
                stop = min(end, offset + limit - len(records))
                fetched = self._fetch(partition, offset, stop)
                seqs = self._seqs(partition, fetched, offset, stop)
                for record in fetched:
                    seq = seqs.get(record.offset, 0)
                    if seq:
                        records.append(LogRecord(Position(partition, record.offset), self._decode(partition, record, seq)))
                offset = stop
            return records

    def scan(self, partition: int, start: int, types: Collection[str], limit: int = 5000) -> tuple[list[LogRecord], int]:
        """Return the records of ``types`` among the next ``limit`` offsets from ``start``, and the offset after them.

        A record's type is in its headers: the others are passed over
        undecoded. Duplicates are dropped as :meth:`read` drops them.
        """
        self._check_partition(partition)
        check_offsets(start, limit)
        wanted = {t.encode("utf-8") for t in types}
        with self._lock:
            self._check_open()
            end = self._end_for(partition, start)
            if start >= end:
                return [], start
            self._index_until(partition, start)
            stop = min(end, start + limit)
            fetched = self._fetch(partition, start, stop)
            seqs = self._seqs(partition, fetched, start, stop)
            records = []
            for record in fetched:
                seq = seqs.get(record.offset, 0)
                kind = next((v for k, v in record.headers or () if k == HEADER_EVENT_TYPE), None)
                if not seq or (kind is not None and kind not in wanted):
                    continue
                event = self._decode(partition, record, seq)  # a record without the header is decoded to tell
                # An unreadable record without a type header is of no type asked for (it cannot tell).
                if kind is not None or (not isinstance(event, UnreadableRecord) and event.type in types):
                    records.append(LogRecord(Position(partition, record.offset), event))
            return records, stop

    def _end_for(self, partition: int, start: int) -> int:
        """Return ``partition``'s end offset as last known, asked of the broker only once ``start`` reached it.

        Ends only grow, so records below a known end need no round trip.
        """
        end = self._known_ends.get(partition, 0)
        if start >= end:
            end = self._end_offsets(list(range(self._partitions)))[partition]
        return end

    def find(self, event_ids: Sequence[str]) -> dict[str, Position]:
        """Return the position of each of ``event_ids`` already stored (ids not stored are absent).

        Brings the index of every partition up to its end first (reads what
        this instance has not seen yet).
        """
        with self._lock:
            self._check_open()
            for partition, end in self._end_offsets(list(range(self._partitions))).items():
                self._index_until(partition, end)
            found = self._index.find(event_ids)
        return {event_id: Position(partition, offset) for event_id, (partition, offset) in found.items()}

    def end_positions(self) -> dict[int, int]:
        """Return, per partition, Kafka's end offset: the offset the next appended record will get.

        Dropped duplicates count (they occupy offsets), so this is the number
        of records, not always the number of events ``read`` returns.
        """
        with self._lock:
            self._check_open()
            return self._end_offsets(list(range(self._partitions)))

    def ensure_topic(self) -> None:
        """Create the topic if missing (explicit partition count, unlimited retention, no compaction).

        Idempotent, and safe when several processes race to create it. An
        existing topic is checked instead: another partition count, finite
        retention or compaction raise :class:`~memfold.core.errors.ConfigError`.
        """
        admin = self._connect(
            "admin client",
            KafkaAdminClient,
            bootstrap_servers=self._bootstrap,
            client_id=f"{self._client_id}-admin",
            request_timeout_ms=self._timeout_ms,
            bootstrap_timeout_ms=self._timeout_ms,
        )
        try:
            with self._translate("create or check"):
                try:
                    admin.create_topics(
                        {
                            self._topic: {
                                "num_partitions": self._partitions,
                                "replication_factor": self._replication_factor,
                                "configs": dict(TOPIC_CONFIGS),
                            }
                        },
                        timeout_ms=self._timeout_ms,
                        wait_for_metadata=True,
                    )
                except kafka_errors.TopicAlreadyExistsError:
                    pass
                self._check_topic(admin)
        finally:
            admin.close()

    def close(self) -> None:
        """Flush pending sends and close the connections and the offset index. Idempotent."""
        self._closed = True
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        try:
            if producer is not None:
                producer.close(timeout=self._timeout)
        except Exception:  # closing must not hide the error that made the caller close
            pass
        try:
            if consumer is not None:
                consumer.close(autocommit=False, timeout_ms=self._timeout_ms)
        except Exception:
            pass
        with self._lock:
            self._index.close()

    def __enter__(self) -> KafkaEventLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaEventLog({self._bootstrap!r}, topic={self._topic!r}, partitions={self._partitions})"

    # ------------------------------------------------------------------ append internals

    def _plan(self, events: Sequence[Event]) -> list[tuple[Event, int, bytes]]:
        limit = self._producer_config()["max_request_size"]
        planned = []
        for event in events:
            value = record_value(event)
            # Key, headers and record overhead come on top of the value; leave them room.
            if len(value) + 1024 > limit:
                raise AppendFailedError(
                    f"event {event.event_id} ({event.type}) is {len(value)} bytes of JSON, above the Kafka "
                    f"producer limit of {limit} bytes; nothing of this batch of {len(events)} was appended. "
                    "Store large content outside the log or raise max.message.bytes on the topic and broker",
                    event_ids=[e.event_id for e in events],
                )
            planned.append((event, partition_for(event.key, self._partitions), value))
        return planned

    def _send(self, items: list[tuple[Event, int, bytes]]) -> dict[str, Position]:
        if not items:  # everything was stored already: no need for a producer
            return {}
        producer = self._open_producer()
        futures: list[tuple[Event, Any]] = []
        failed: dict[str, BaseException] = {}
        for index, (event, partition, value) in enumerate(items):
            try:
                future = producer.send(
                    self._topic, value=value, key=event.key.encode("utf-8"), partition=partition,
                    headers=record_headers(event),
                )
            except (kafka_errors.KafkaError, OSError) as exc:
                # Stop at the first event that could not be queued: sending the
                # rest would store them out of order relative to it.
                for later, _, _ in items[index:]:
                    failed.setdefault(later.event_id, exc)
                break
            futures.append((event, future))
        positions: dict[str, Position] = {}
        try:
            producer.flush(timeout=self._timeout * 2)
        except (kafka_errors.KafkaError, OSError):
            pass  # each unresolved future is reported below
        for event, future in futures:
            try:
                metadata = future.get(timeout=self._timeout * 2)
            except (kafka_errors.KafkaError, OSError) as exc:
                failed.setdefault(event.event_id, exc)
                continue
            positions[event.event_id] = Position(metadata.partition, metadata.offset)
        if failed:
            # kafka-python puts an idempotent producer in a fatal state after some
            # batch errors (a record the broker refuses as too large is one): drop
            # it, aborting whatever it still holds, and connect a new one next time.
            self._producer = None
            try:
                producer.close(timeout=0)
            except Exception:
                pass
            first_id, first_exc = next(iter(failed.items()))
            raise AppendFailedError(
                f"Kafka did not acknowledge {len(failed)} of {len(items)} event(s) sent to topic "
                f"{self._topic!r} (first: {first_id}: {type(first_exc).__name__}: {first_exc}); treat them as "
                "not stored and retry the append (ids already stored are skipped)",
                event_ids=list(failed),
            ) from first_exc
        return positions

    def _index_acknowledged(self, sent: list[tuple[Event, Position]]) -> None:
        """Index this instance's own acknowledged records without reading them back from the broker.

        Only the run that continues the index without a gap: a record another
        writer stored in between leaves the rest to be read from the partition
        when next needed, in offset order as always.
        """
        by_partition: dict[int, list[tuple[int, str, str]]] = {}
        for event, position in sent:
            by_partition.setdefault(position.partition, []).append((position.offset, event.key, event.event_id))
        with self._lock:
            for partition, records in by_partition.items():
                if partition not in self._checked:
                    continue
                run: list[tuple[int, str, str]] = []
                expected = self._index.next_offset(partition)
                for record in sorted(records):
                    if record[0] != expected:
                        break
                    run.append(record)
                    expected += 1
                if run:
                    self._index.extend(partition, run, expected)

    # ------------------------------------------------------------------ reading and indexing

    def _index_until(self, partition: int, target: int) -> None:
        """Index ``partition`` up to (not including) offset ``target``; ``target`` <= the end offset."""
        if partition not in self._checked:
            self._check_index(partition)
        while (start := self._index.next_offset(partition)) < target:
            stop = min(target, start + _INDEX_CHUNK)
            fetched = self._fetch(partition, start, stop)
            self._index.extend(partition, [(r.offset, *self._identity(partition, r)) for r in fetched], stop)

    def _seqs(self, partition: int, fetched: list[Any], start: int, stop: int) -> dict[int, int]:
        """Return ``offset -> seq`` for ``fetched``, the records of ``start <= offset < stop``, indexing new ones."""
        indexed = self._index.next_offset(partition)
        seqs = self._index.seqs(partition, start, min(stop, indexed)) if start < indexed else {}
        if stop > indexed:
            new = [(r.offset, *self._identity(partition, r)) for r in fetched if r.offset >= indexed]
            assigned = self._index.extend(partition, new, stop)
            seqs.update(assigned)
            if len(assigned) < len(new):  # another process sharing the index file indexed some meanwhile
                seqs.update(self._index.seqs(partition, indexed, stop))
        return seqs

    def _check_index(self, partition: int) -> None:
        """Check the stored index of ``partition`` against the topic (once per instance); rebuild it if it is another topic's.

        The partition must start at offset 0 (seq cannot be assigned
        otherwise). An index that goes past the end of the partition, or
        whose last indexed record is not the topic's, was built from a topic
        since deleted and recreated under the same name.
        """
        first = self._beginning_offset(partition)
        if first > 0:
            raise LogCorruptionError(
                f"topic {self._topic!r} partition {partition} starts at offset {first}, not 0: events were "
                "deleted (retention or a manual delete); seq cannot be assigned. Restore the topic, keep "
                "retention.ms=-1"
            )
        indexed = self._index.next_offset(partition)
        if indexed > 0:
            end = self._end_offsets([partition])[partition]
            last_id = self._index.last_id(partition)
            fetched = self._fetch(partition, indexed - 1, indexed) if indexed <= end and last_id else []
            if not fetched or self._identity(partition, fetched[0])[1] != last_id:
                self._index.reset(partition)
        self._checked.add(partition)

    def _identity(self, partition: int, record: Any) -> tuple[str, str]:
        """Return ``(key, event_id)`` of a record of ``partition``; a record the partitioner would not put there is corruption."""
        key, event_id = _identity(record)
        if partition_for(key, self._partitions) != partition:
            raise LogCorruptionError(
                f"topic {self._topic!r} offset {partition}:{record.offset} holds key {key!r}, which belongs in "
                f"partition {partition_for(key, self._partitions)}: a producer bypassed the murmur2 partitioner "
                "and per-conversation order is broken"
            )
        return key, event_id

    def _decode(self, partition: int, record: Any, seq: int) -> Event | UnreadableRecord:
        """Decode ``record`` as the event it stores, carrying the read-assigned ``seq``.

        A record no event decodes from is returned as an
        :class:`~memfold.core.unreadable.UnreadableRecord` naming what its
        key and headers say; a record whose key or id contradicts its event
        raises :class:`~memfold.core.errors.LogCorruptionError`.
        """
        event_type = next((v.decode("utf-8", "replace") for k, v in record.headers or () if k == HEADER_EVENT_TYPE), None)
        key, event_id = _identity(record)
        try:
            event = decode(record.value, event_type=event_type)
        except (EventDecodeError, TypeError, ValueError) as exc:  # whatever the bytes hold: one record, not the read
            tenant_id, _, conversation_id = key.partition("/")
            return UnreadableRecord(Position(partition, record.offset), str(exc), event_id=event_id,
                                    stored_type=event_type, tenant_id=tenant_id or None,
                                    conversation_id=conversation_id or None)
        if event.key != key or event.event_id != event_id:
            raise LogCorruptionError(
                f"topic {self._topic!r} offset {partition}:{record.offset}: the record key/headers "
                f"({key!r}, {event_id!r}) do not match its event ({event.key!r}, {event.event_id!r})"
            )
        return event if event.seq == seq else event.with_seq(seq)

    def _fetch(self, partition: int, start: int, stop: int) -> list[Any]:
        """Return the records of ``partition`` with ``start <= offset < stop``; ``stop`` <= the end offset."""
        consumer = self._open_consumer()
        tp = TopicPartition(self._topic, partition)
        with self._translate("read"):
            if self._assigned != partition:
                consumer.assign([tp])
                self._assigned = partition
                self._cursor = None
            if self._cursor != (partition, start):
                consumer.seek(tp, start)
            records: list[Any] = []
            offset = start
            deadline = time.monotonic() + self._timeout
            while offset < stop:
                batch = consumer.poll(timeout_ms=_POLL_MS, max_records=stop - offset).get(tp, [])
                if not batch:
                    if time.monotonic() > deadline:
                        self._cursor = None
                        raise LogUnavailableError(
                            f"no records from topic {self._topic!r} partition {partition} at offset {offset} "
                            f"within {self._timeout}s although the end offset is {stop} or more"
                        )
                    continue
                deadline = time.monotonic() + self._timeout
                for record in batch:
                    if start <= record.offset < stop:
                        records.append(record)
                offset = batch[-1].offset + 1
            self._cursor = (partition, offset)
        return records

    def _end_offsets(self, partitions: list[int]) -> dict[int, int]:
        consumer = self._open_consumer()
        tps = [TopicPartition(self._topic, p) for p in partitions]
        with self._translate("read the end offsets of"):
            ends = consumer.end_offsets(tps, timeout_ms=self._timeout_ms)
        found = {tp.partition: ends[tp] for tp in tps}
        self._known_ends.update(found)
        return found

    def _beginning_offset(self, partition: int) -> int:
        consumer = self._open_consumer()
        tp = TopicPartition(self._topic, partition)
        with self._translate("read the first offset of"):
            return consumer.beginning_offsets([tp], timeout_ms=self._timeout_ms)[tp]

    # ------------------------------------------------------------------ connections and checks

    def _producer_config(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self._bootstrap,
            "client_id": f"{self._client_id}-producer",
            "enable_idempotence": True,
            "acks": "all",
            # Records wait in per-partition batches until append's flush, so a batch of
            # events goes out in a few requests: with linger 0 every record woke the
            # sender thread (a socket write each) and most batches held one record.
            "linger_ms": _LINGER_MS,
            "batch_size": 512 * 1024,
            "max_request_size": 1048576,
            "request_timeout_ms": self._timeout_ms,
            "delivery_timeout_ms": self._timeout_ms + 1000,
            "max_block_ms": self._timeout_ms,
            "bootstrap_timeout_ms": self._timeout_ms,
            "reconnect_backoff_max_ms": _RECONNECT_BACKOFF_MAX_MS,
        }

    def _consumer_config(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self._bootstrap,
            "client_id": f"{self._client_id}-reader",
            "group_id": None,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": 100,
            "request_timeout_ms": max(self._timeout_ms, 1000),
            "bootstrap_timeout_ms": self._timeout_ms,
            "reconnect_backoff_max_ms": _RECONNECT_BACKOFF_MAX_MS,
        }

    def _connect(self, what: str, cls: type, **config: Any) -> Any:
        try:
            return cls(**config)
        except (kafka_errors.KafkaError, OSError) as exc:
            raise LogUnavailableError(
                f"cannot reach Kafka at {self._bootstrap} ({what}) within {self._timeout}s: {exc}; "
                "check the address and that the broker is up (deploy/kafka/local-broker.sh status)"
            ) from exc

    def _open_producer(self) -> KafkaProducer:
        self._check_open()
        if self._producer is None:
            self._producer = self._connect("producer", KafkaProducer, **self._producer_config())
        return self._producer

    def _open_consumer(self) -> KafkaConsumer:
        consumer = self._consumer
        if consumer is None:
            raise LogUnavailableError(f"{self!r} is closed")
        return consumer

    def _check_open(self) -> None:
        if self._closed:
            raise LogUnavailableError(f"{self!r} is closed")

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._partitions:
            raise ValidationError(
                f"partition {partition} does not exist; topic {self._topic!r} has partitions "
                f"0..{self._partitions - 1}",
                field="partition",
            )

    def _check_topic(self, admin: KafkaAdminClient) -> None:
        deadline = time.monotonic() + self._timeout
        while True:
            (described,) = admin.describe_topics([self._topic])
            error = kafka_errors.for_code(described["error_code"])
            partitions = described["partitions"]
            led = all(p["leader_id"] >= 0 for p in partitions)
            if error is kafka_errors.NoError and partitions and led:
                break
            if time.monotonic() > deadline:
                raise LogUnavailableError(
                    f"topic {self._topic!r} on {self._bootstrap} is not ready after {self._timeout}s "
                    f"({error.__name__}, {len(partitions)} partitions, all led: {led})"
                )
            time.sleep(0.1)
        if len(partitions) != self._partitions:
            raise ConfigError(
                f"Kafka topic {self._topic!r} has {len(partitions)} partitions, not {self._partitions}; the "
                f"partition count decides where each conversation lives and is fixed: open it with "
                f"partitions={len(partitions)}, or use another topic"
            )
        resource = ConfigResource(ConfigResourceType.TOPIC, self._topic)
        found = admin.describe_configs([resource], config_filter="all")["topic"][self._topic]
        values = {name: (found.get(name) or {}).get("value") for name in TOPIC_CONFIGS}
        problems = []
        if "compact" in (values["cleanup.policy"] or ""):
            problems.append(f"cleanup.policy={values['cleanup.policy']} (compaction deletes events by key)")
        for name in ("retention.ms", "retention.bytes"):
            if values[name] != "-1":
                problems.append(f"{name}={values[name]} (events would be deleted)")
        if problems:
            raise ConfigError(
                f"Kafka topic {self._topic!r} would lose events: {', '.join(problems)}. The log is the source of "
                "truth: set retention.ms=-1, retention.bytes=-1, cleanup.policy=delete on the topic"
            )

    def _translate(self, what: str) -> _Translate:
        return _Translate(self, what)


class _Translate:
    """Turn kafka exceptions into :class:`LogUnavailableError` naming the topic and what was attempted."""

    def __init__(self, log: KafkaEventLog, what: str):
        self._log = log
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is not None and isinstance(exc, (kafka_errors.KafkaError, OSError)):
            self._log._cursor = None
            raise LogUnavailableError(
                f"cannot {self._what} Kafka topic {self._log.topic!r} at {self._log._bootstrap}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return False


def record_value(event: Event) -> bytes:
    """Return the value of the record that stores ``event``: its JSON with ``seq`` 0 (the log numbers on read)."""
    return (event if event.seq == 0 else event.with_seq(0)).encode().encode("utf-8")


def record_headers(event: Event) -> list[tuple[str, bytes]]:
    """Return the headers of the record that stores ``event`` (readers identify it without decoding)."""
    return [
        (HEADER_EVENT_ID, event.event_id.encode("utf-8")),
        (HEADER_EVENT_TYPE, event.type.encode("utf-8")),
        (HEADER_SCHEMA_VERSION, str(event.schema_version).encode("ascii")),
    ]


def _identity(record: Any) -> tuple[str, str]:
    """Return ``(conversation key, event_id)`` of a record, from its key and headers when present."""
    event_id = None
    for name, value in record.headers or ():
        if name == HEADER_EVENT_ID:
            event_id = value.decode("utf-8")
            break
    key = record.key.decode("utf-8") if record.key is not None else None
    if event_id is None or key is None:  # written by another producer: fall back to the body
        try:
            body = json.loads(record.value)
            event_id = event_id or body["event_id"]
            key = key or f"{body.get('tenant_id', 'default')}/{body['conversation_id']}"
        except (ValueError, TypeError, KeyError) as exc:
            raise EventDecodeError(
                f"record at offset {record.offset} has no event_id header and its value is not an event: {exc}"
            ) from exc
    return key, event_id
