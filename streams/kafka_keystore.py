"""A key store every node of a Kafka deployment shares: data keys in a compacted Kafka topic.

``keystore = "kafka://HOST:PORT/TOPIC"`` names it. The topic has one
partition (one total order of key events) and ``cleanup.policy=compact``.
A record's key is the data key's id; its value is JSON ``{"scope", "key"}``
(the key base64-encoded) when created and ``{"scope", "destroyed_at"}``
when destroyed. Destroying writes that marker under the same record key,
so once the log cleaner compacts the segment only the marker is left:
the key bytes are gone from the broker, and a node that reads a destroyed
id learns it was erased (not "never held", which is an error).

Until the cleaner has compacted the segment holding the key, its bytes
stay on the broker's disk (and in any copy of the topic); see README
"Erasure" for the topic configs that bound how long. Each node keeps the
keys it has read in memory and reads the topic again before answering an
unknown id and at most ``refresh`` seconds after its last read otherwise,
so a key destroyed by another node stops unsealing there within that time.
Sealing follows the same bound: a node refuses new content of a conversation
another node forgot at most ``refresh`` seconds after the forget (content
appended within that window is shredded with the rest), until one of them
reopens it (a fresh key on the topic).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import NewTopic

from memfold.core.errors import KeyStoreError, LogUnavailableError
from memfold.core.ports import KEY_BYTES

# Compaction bounds how long a destroyed key's bytes stay on the broker: a segment is rolled after
# segment.ms and compacted once 1% of it is superseded; markers are never null, so none expire.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.01",
                 "delete.retention.ms": "86400000", "min.compaction.lag.ms": "0"}


class KeyTopicUnavailableError(KeyStoreError, LogUnavailableError):
    """The key topic's broker cannot be reached: as unavailable as the log itself (a 503, retried), nothing sealed."""


class KafkaKeyStore:
    """Data keys in a compacted single-partition topic (see the module docstring); safe across threads and nodes."""

    def __init__(self, bootstrap: str, topic: str, *, timeout: float = 15.0, refresh: float = 1.0):
        self.topic = topic
        self.refresh = refresh
        self._tp = TopicPartition(topic, 0)
        self._lock = threading.Lock()
        self._keys: dict[str, bytes | None] = {}  # key_id -> key, None once destroyed
        self._scopes: dict[str, str] = {}  # key_id -> scope
        self._by_scope: dict[str, set[str]] = {}  # scope -> its key_ids
        self._active: dict[str, str] = {}  # scope -> the newest live key_id
        self._next = 0
        self._read_at = 0.0
        ms = int(timeout * 1000)
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ms, client_id="memfold-keys")
            try:
                admin.create_topics([_new_topic(topic)], timeout_ms=ms)
            except kafka_errors.TopicAlreadyExistsError:
                pass
            finally:
                admin.close()
            self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                           client_id="memfold-keys", request_timeout_ms=ms, max_block_ms=ms)
            self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                           client_id="memfold-keys", request_timeout_ms=max(ms, 11000))
            self._consumer.assign([self._tp])
            self._timeout_ms = ms
            self._read()
        except (kafka_errors.KafkaError, OSError) as exc:
            raise KeyTopicUnavailableError(f"cannot open the key store topic {topic!r} on {bootstrap}: {exc}") from exc

    # ------------------------------------------------------------------ KeyStore

    def active_keys(self, scopes: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        with self._lock:
            if any(s not in self._active for s in scopes) or time.monotonic() - self._read_at >= self.refresh:
                # Another node may have made a key, or destroyed one: never seal new content with a
                # key destroyed more than ``refresh`` seconds ago (it would be shredded on arrival).
                self._read()
            made = []
            for scope in dict.fromkeys(s for s in scopes if s not in self._active and not self._forgotten(s)):
                made.append(self._new_key(scope))
            if made:
                self._write(made)  # durable (acks=all) before any content is sealed with them
            return {s: (self._active[s], self._keys[self._active[s]]) for s in scopes if s in self._active}

    def status(self, scope: str) -> str:
        with self._lock:
            self._read()
            if scope in self._active:
                return "live"
            return "forgotten" if self._forgotten(scope) else "unknown"

    def reopen(self, scope: str) -> bool:
        with self._lock:
            self._read()
            if not self._forgotten(scope):
                return False
            self._write([self._new_key(scope)])
            return True

    def _forgotten(self, scope: str) -> bool:
        """True when ``scope`` has keys on the topic and none is live."""
        keys = self._by_scope.get(scope, ())
        return bool(keys) and all(self._keys.get(k) is None for k in keys)

    @staticmethod
    def _new_key(scope: str) -> tuple[str, dict]:
        key_id, key = "dk-" + os.urandom(12).hex(), os.urandom(KEY_BYTES)
        return key_id, {"scope": scope, "key": base64.b64encode(key).decode("ascii")}

    def key(self, key_id: str) -> bytes | None:
        with self._lock:
            if key_id not in self._keys or time.monotonic() - self._read_at >= self.refresh:
                self._read()
            if key_id not in self._keys:
                raise KeyStoreError(f"key {key_id} is not in the key store topic {self.topic!r}: is this node "
                                    "pointed at the key store the content was sealed with?")
            return self._keys[key_id]

    def destroy(self, scope: str) -> int:
        with self._lock:
            self._read()
            live = [k for k, s in self._scopes.items() if s == scope and self._keys.get(k) is not None]
            now = datetime.now(UTC).isoformat()
            if live:
                self._write([(k, {"scope": scope, "destroyed_at": now}) for k in live])
            return len(live)

    def record_destroyed(self, key_id: str, scope: str) -> None:
        with self._lock:
            self._read()
            if key_id not in self._keys:
                self._write([(key_id, {"scope": scope, "destroyed_at": datetime.now(UTC).isoformat()})])

    def close(self) -> None:
        for client in (self._producer, self._consumer):
            try:
                client.close()
            except Exception:  # closing must not hide the error that made the caller close
                pass

    # ------------------------------------------------------------------ the topic

    def _write(self, records: list[tuple[str, dict]]) -> None:
        try:
            futures = [self._producer.send(self.topic, key=k.encode(), value=json.dumps(v).encode(), partition=0)
                       for k, v in records]
            self._producer.flush(timeout=self._timeout_ms / 1000)
            for f in futures:
                f.get(timeout=self._timeout_ms / 1000)
        except (kafka_errors.KafkaError, OSError) as exc:
            raise KeyTopicUnavailableError(f"cannot write to the key store topic {self.topic!r}: {exc}") from exc
        self._read()

    def _read(self) -> None:
        """Apply every record of the topic after the last one read (ours included)."""
        try:
            end = self._consumer.end_offsets([self._tp])[self._tp]
            if self._next < end:
                self._consumer.seek(self._tp, self._next)
            deadline = time.monotonic() + self._timeout_ms / 1000
            while self._next < end:
                if time.monotonic() > deadline:
                    raise KeyTopicUnavailableError(f"the key store topic {self.topic!r} did not deliver offsets "
                                        f"{self._next}..{end} in time; is the broker up?")
                for records in self._consumer.poll(timeout_ms=500).values():
                    for r in records:
                        self._apply(r.key.decode(), json.loads(r.value))
                # Past the records read and any offsets compaction removed.
                self._next = self._consumer.position(self._tp)
        except (kafka_errors.KafkaError, OSError) as exc:
            raise KeyTopicUnavailableError(f"cannot read the key store topic {self.topic!r}: {exc}") from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeyStoreError(f"the key store topic {self.topic!r} holds a record that is not a key: {exc}") from exc
        self._read_at = time.monotonic()

    def _apply(self, key_id: str, value: dict) -> None:
        scope = value["scope"]
        self._scopes[key_id] = scope
        self._by_scope.setdefault(scope, set()).add(key_id)
        if value.get("key") is None:
            self._keys[key_id] = None
            if self._active.get(scope) == key_id:
                del self._active[scope]
            return
        if key_id not in self._keys:  # a destroyed id never comes back
            self._keys[key_id] = base64.b64decode(value["key"])
            self._active.setdefault(scope, key_id)  # the first key on the topic wins for new content


def _new_topic(topic: str):
    return NewTopic(name=topic, num_partitions=1, replication_factor=1, topic_configs=dict(TOPIC_CONFIGS))


def open_kafka_keystore(location: str) -> KafkaKeyStore:
    """Open ``kafka://HOST:PORT/TOPIC``."""
    parts = urlsplit(location)
    topic = parts.path.strip("/")
    if not parts.netloc or not topic:
        raise KeyStoreError(f"a Kafka key store is kafka://HOST:PORT/TOPIC, got {location!r}")
    return KafkaKeyStore(parts.netloc, topic)
