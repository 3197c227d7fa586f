"""Who serves which partitions: every node's URL and owned partitions on a compacted topic (``TOPIC.nodes``).

Each ``memfold serve`` node over Kafka (and each shard node) writes one
record under its node id: ``{"node", "url", "partitions"}`` (``partitions``
null for a full replica), again every ``heartbeat`` seconds and at once when
its ownership changes; ``{"left": true}`` when it stops. Every node reads
the topic every ``heartbeat`` seconds and keeps the newest record of each
node. A node it has not heard from for ``ttl`` seconds (killed, or cut off)
is left out. When two live nodes claim one partition (a move: the new owner
has published, the old one has not yet), the claim written last wins; the
router retries on a refusal anyway, so a wrong guess costs a retry, never a
stale answer.

Liveness is measured on the reader's own clock (when a record *arrived*),
so clocks of different nodes never need to agree.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from memfold.core.errors import LogUnavailableError
from memfold.streams.compacted_topic import CompactedTopic

log = logging.getLogger("memfold.shards")

HEARTBEAT_S = 1.0
TTL_S = 6.0


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """A node as last heard of: ``partitions`` None for a full replica; ``order`` grows with each record read."""

    node: str
    url: str
    partitions: frozenset[int] | None
    order: int
    seen: float  # time.monotonic() when its newest record was read here
    extra: dict = field(default_factory=dict)  # what the node adds to its record (a service: the load per API key)

    def owns(self, partition: int) -> bool:
        return self.partitions is None or partition in self.partitions


class ShardDirectory:
    """This node's view of the serving nodes, and its own record on the topic (see the module docstring)."""

    def __init__(self, table: CompactedTopic, node_id: str, url: str | None, *, heartbeat: float = HEARTBEAT_S,
                 ttl: float = TTL_S):
        """``extra`` (settable later) returns more fields for this node's record at each heartbeat."""
        self.extra: Callable[[], dict] | None = None
        self.table = table
        self.node_id = node_id
        self.url = url
        self.heartbeat = heartbeat
        self.ttl = ttl
        self._lock = threading.Lock()
        self._entries: dict[str, NodeEntry] = {}
        self._order = 0
        self._mine: list[int] | None | bool = False  # False: nothing published yet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publish(self, partitions: set[int] | None) -> None:
        """Announce that this node serves ``partitions`` (None: all of them) from now on; written at once."""
        self._mine = None if partitions is None else sorted(partitions)
        self._write_mine()
        self.refresh()

    def _write_mine(self) -> None:
        if self._mine is not False and self.url is not None:
            extra = self.extra() if self.extra is not None else {}
            self.table.write([(self.node_id, {**extra, "node": self.node_id, "url": self.url, "partitions": self._mine})])

    def refresh(self) -> None:
        """Read what the nodes wrote since the last refresh."""
        records = self.table.read_new()
        now = time.monotonic()
        with self._lock:
            for key, value in records:
                self._order += 1
                if value.get("left"):
                    self._entries.pop(key, None)
                    continue
                url, parts = value.get("url"), value.get("partitions")
                if not isinstance(url, str):
                    continue
                extra = {k: v for k, v in value.items() if k not in ("node", "url", "partitions")}
                self._entries[key] = NodeEntry(key, url, None if parts is None else frozenset(int(p) for p in parts),
                                               self._order, now, extra)

    def live(self) -> list[NodeEntry]:
        """Return the nodes heard from within ``ttl`` seconds, this one included once it published."""
        now = time.monotonic()
        with self._lock:
            return [e for e in self._entries.values() if now - e.seen <= self.ttl]

    def owner(self, partition: int, *, besides: str | None = None) -> NodeEntry | None:
        """Return the live node that claimed ``partition`` last (not ``besides``), or None when none claims it."""
        claims = [e for e in self.live() if e.owns(partition) and e.node != besides]
        return max(claims, key=lambda e: e.order, default=None)

    def start(self) -> None:
        """Publish this node's record and read the others' every ``heartbeat`` seconds, on a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="memfold-shards", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                self._write_mine()
                self.refresh()
            except LogUnavailableError as exc:  # the broker restarts: the next beat tries again
                log.warning("node directory %s: %s", self.table.topic, exc)

    def close(self) -> None:
        """Say this node left (its partitions are routed elsewhere at once), stop the thread, close the topic."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            if self._mine is not False:
                self.table.write([(self.node_id, {"node": self.node_id, "left": True})])
        except LogUnavailableError as exc:
            log.warning("node directory %s: could not say this node left: %s", self.table.topic, exc)
        self.table.close()
