"""A small replicated table on a compacted single-partition Kafka topic: the latest value per key, on every node.

What several processes of one deployment must share and that is not an
event of a conversation lives here: the partition map of shard nodes
(:mod:`memfold.streams.shard_directory`) and the service's API keys
(:mod:`memfold.service.keys`). One partition gives one total order of
writes; ``cleanup.policy=compact`` keeps the newest record of each key, so
a reader starting later reads the table, not its whole history.

Values are JSON objects. Reading is incremental: :meth:`CompactedTopic.read_new`
returns the records written since the last call (this instance's own
included), so a caller folds them into its own view.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import NewTopic

from memfold.core.errors import LogUnavailableError

TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.01",
                 "min.compaction.lag.ms": "0"}


class CompactedTopic:
    """Write and read one compacted single-partition topic (created when missing). Thread-safe."""

    def __init__(self, bootstrap: str, topic: str, *, timeout: float = 15.0, client_id: str = "memfold-table"):
        self.topic = topic
        self._tp = TopicPartition(topic, 0)
        self._lock = threading.Lock()
        self._next = 0
        self._timeout = timeout
        ms = int(timeout * 1000)
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ms, client_id=client_id)
            try:
                admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=1,
                                              topic_configs=dict(TOPIC_CONFIGS))], timeout_ms=ms)
            except kafka_errors.TopicAlreadyExistsError:
                pass
            finally:
                admin.close()
            self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                           client_id=client_id, request_timeout_ms=ms, max_block_ms=ms,
                                           reconnect_backoff_max_ms=1000)
            self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                           client_id=client_id, request_timeout_ms=max(ms, 11000),
                                           fetch_max_wait_ms=50, reconnect_backoff_max_ms=1000)
            self._consumer.assign([self._tp])
        except (kafka_errors.KafkaError, OSError) as exc:
            raise LogUnavailableError(f"cannot open the compacted topic {topic!r} on {bootstrap}: {exc}; "
                                      "check the address and that the broker is up") from exc

    def write(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Write ``(key, value)`` records and wait until the broker acknowledged every one (``acks=all``)."""
        try:
            futures = [self._producer.send(self.topic, key=k.encode("utf-8"), value=json.dumps(v).encode("utf-8"),
                                           partition=0) for k, v in records]
            self._producer.flush(timeout=self._timeout)
            for future in futures:
                future.get(timeout=self._timeout)
        except (kafka_errors.KafkaError, OSError) as exc:
            raise LogUnavailableError(f"cannot write to the compacted topic {self.topic!r}: {exc}") from exc

    def read_new(self) -> list[tuple[str, dict[str, Any]]]:
        """Return the records written since the previous call (all of the table's on the first), in order.

        A record whose value is not a JSON object is skipped: the table is
        memfold's, but a stray producer must not stop every node reading it.
        """
        out: list[tuple[str, dict[str, Any]]] = []
        with self._lock:
            try:
                end = self._consumer.end_offsets([self._tp])[self._tp]
                if self._next >= end:
                    return out
                self._consumer.seek(self._tp, self._next)
                deadline = time.monotonic() + self._timeout
                while self._next < end:
                    if time.monotonic() > deadline:
                        raise LogUnavailableError(f"the compacted topic {self.topic!r} did not deliver offsets "
                                                  f"{self._next}..{end} within {self._timeout}s; is the broker up?")
                    for batch in self._consumer.poll(timeout_ms=200).values():
                        for record in batch:
                            try:
                                value = json.loads(record.value)
                            except (TypeError, ValueError):
                                continue
                            if record.key is not None and isinstance(value, dict):
                                out.append((record.key.decode("utf-8", "replace"), value))
                    # Past the records read and any offsets compaction removed.
                    self._next = self._consumer.position(self._tp)
            except (kafka_errors.KafkaError, OSError) as exc:
                raise LogUnavailableError(f"cannot read the compacted topic {self.topic!r}: {exc}") from exc
        return out

    def close(self) -> None:
        """Close the producer and the consumer."""
        for client in (self._producer, self._consumer):
            try:
                client.close()
            except Exception:  # closing must not hide the error that made the caller close
                pass
