"""A shard node: a projector (or ``memfold serve`` over Kafka) folding only the partitions it owns.

The engine's runner folds on its own thread; this module only decides what
it owns. With a :class:`~memfold.streams.ownership.StaticPartitions` list
nothing moves. With a :class:`~memfold.streams.ownership.ConsumerGroup` of
projector nodes (group ``memfold-projector.TOPIC`` by default, apart from
the workers' group), a thread polls the group: partitions it gains are
folded from the positions stored with this node's rows (0 for a partition
its file does not hold); partitions it loses stop being folded and read at
once, and their rows and positions are deleted from its file, so a node
holds only the conversations it serves (one that comes back is folded
again from 0, never from rows that went stale meanwhile). No event is lost or applied twice: positions commit with the rows, and a
re-delivered event is a no-op. A node never appends, so two nodes folding
one partition for a moment (a killed node not yet timed out) only do the
same work twice, each in its own file.

Each change is published to the :class:`~memfold.streams.shard_directory.ShardDirectory`
(when one is given), so routers send reads to the new owner.
"""

from __future__ import annotations

import logging
import threading
import time

from memfold.core.errors import MemfoldError
from memfold.engine.runner import Runner
from memfold.streams.ownership import PartitionOwnership
from memfold.streams.shard_directory import ShardDirectory

log = logging.getLogger("memfold.shards")

COMMIT_EVERY_S = 2.0  # advisory group offsets (lag in kafka-consumer-groups.sh), not read back


class ShardNode:
    """Keep ``runner`` folding exactly the partitions ``ownership`` assigns; publish them to ``directory``."""

    def __init__(self, runner: Runner, ownership: PartitionOwnership, directory: ShardDirectory | None = None,
                 *, poll: float = 0.2):
        self.runner = runner
        self.ownership = ownership
        self.directory = directory
        self.poll_s = poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._published: set[int] | None = None
        self._targets: dict[int, int] = {}  # gained partition -> the log's end when gained: served once folded to it
        self._serving: frozenset[int] = frozenset()

    def serving(self) -> set[int]:
        """Return the partitions this node answers reads of: owned, and folded up to the log's end as of their gain.

        A partition just gained (a take-over, a restart) is folded from this
        node's stored position, which may be far behind: until it reaches
        the end the log had when the partition came, its reads are refused
        (the router retries), so a move never serves a stale answer.
        """
        return set(self._serving)

    def step(self) -> set[int]:
        """Poll the ownership once; hand changes to the runner and the directory; return what is owned now."""
        owned = self.ownership.poll(self.poll_s)
        current = set(self.runner.partitions)
        if owned != current:
            gained = owned - current
            if gained:
                ends = self.runner.log.end_positions()
                self._targets.update({p: ends.get(p, 0) for p in gained})
            for p in current - owned:
                self._targets.pop(p, None)
            self.runner.own(owned)  # waits for the batch in progress
            self.runner.notify()
            self._drop(current - owned)
        self._settle(owned)
        if owned != self._published:
            if self.directory is not None:
                self.directory.publish(owned)
            self._published = set(owned)
        return owned

    def _settle(self, owned: set[int]) -> None:
        stored = self.runner.store.position()
        for p, target in list(self._targets.items()):
            # Caught up: at the target, or nothing left to read (a Kafka log's trailing duplicates hold offsets).
            if stored.get(p, 0) >= target or not self.runner.log.read(p, stored.get(p, 0), 1):
                del self._targets[p]
        self._serving = frozenset(p for p in owned if p not in self._targets)

    def revoke(self, partitions: set[int]) -> None:
        """Stop folding and answering ``partitions`` now (a consumer group's revoke callback)."""
        self._serving = self._serving - partitions
        keep = set(self.runner.partitions) - partitions
        self.runner.own(keep)
        self._drop(partitions)
        if self.directory is not None:
            try:
                self.directory.publish(keep)
                self._published = keep
            except MemfoldError as exc:  # the heartbeat publishes it again
                log.warning("could not publish the partitions left after a revoke: %s", exc)

    def _drop(self, partitions: set[int]) -> None:
        """Delete the rows of partitions given up: a node holds only what it serves (regained, they fold from 0).

        Not while closing: leaving the group revokes everything, and a node
        restarted with the same group resumes its partitions from its rows.
        """
        if partitions and not self._stop.is_set():
            dropped = self.runner.store.drop_partitions(partitions)
            log.info("dropped partitions %s (%d rows) from this node's projection", sorted(partitions), dropped)

    def start(self) -> None:
        """Poll the ownership on a daemon thread until :meth:`close`."""
        self.step()
        self._thread = threading.Thread(target=self._loop, name="memfold-shard-node", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                owned = self.step()
                if time.monotonic() - last >= COMMIT_EVERY_S:
                    stored = self.runner.store.position()
                    self.ownership.committed({p: stored[p] for p in owned if p in stored})
                    last = time.monotonic()
            except MemfoldError as exc:
                log.error("shard ownership step failed (will retry): %s", exc)
                self._stop.wait(0.5)

    def close(self) -> None:
        """Stop polling and leave the group (its partitions go to the other nodes at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.ownership.close()
