"""The distributed worker loop (``memfold worker``): the embedded pipeline over the partitions this worker owns.

A worker is the same runner, projector, policies and summarizer pool as
embedded mode, over the Kafka :class:`~memfold.core.ports.EventLog`; the
only addition is :mod:`partition ownership <memfold.streams.ownership>`.
The loop, in one thread:

1. poll the ownership (a consumer group rebalance happens here, between
   fold steps, so no batch of a partition is in flight when it moves);
2. fold one batch per owned partition (the runner reads from the positions
   stored with the projection rows, appends decided requests, commits rows
   + positions in one DuckDB transaction);
3. mirror the committed positions as the group's offsets (advisory).

Summaries run on the pool's threads, off this loop. Why not faust-streaming:
see README "Distributed mode" (faust-streaming #596, #606, #502).
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from typing import Any

from memfold.core.errors import MemfoldError
from memfold.engine.runner import Runner
from memfold.engine.worker import SummarizerWorker
from memfold.streams.ownership import PartitionOwnership

log = logging.getLogger("memfold.worker")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def logging_config(level: str = "INFO") -> dict[str, Any]:
    """Return a dictConfig: plain one-line records on stderr; the Kafka client only when DEBUG."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": LOG_FORMAT}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        # kafka-python logs every failed connection attempt and a busy GIL as errors; the
        # log and the group turn what matters into one LogUnavailableError, logged by us.
        "loggers": {"kafka": {"level": "DEBUG" if level.upper() == "DEBUG" else "CRITICAL"}},
    }


def peak_rss_mb() -> float:
    """Return this process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PartitionWorker:
    """Fold and summarize the partitions ``ownership`` assigns, until :meth:`stop`."""

    def __init__(
        self,
        runner: Runner,
        summarizer: SummarizerWorker,
        ownership: PartitionOwnership,
        *,
        commit_interval: float = 1.0,
        idle_poll: float = 0.05,
    ):
        self.runner = runner
        self.summarizer = summarizer
        self.ownership = ownership
        self.commit_interval = commit_interval
        self.idle_poll = idle_poll
        self._stop = threading.Event()
        self._uncommitted: dict[int, int] = {}
        runner.add_commit_listener(self._note)

    def stop(self) -> None:
        """Ask the loop to end after the step in progress (safe from a signal handler)."""
        self._stop.set()

    def release(self, partitions: set[int]) -> None:
        """Give up ``partitions`` (a rebalance revokes them): record their offsets, stop answering them."""
        self._commit()
        keep = set(self.runner.partitions) - partitions
        self.summarizer.retain(keep)
        self.runner.own(keep)

    def run(self, stop_after: float | None = None) -> None:
        """Run the loop until :meth:`stop` (or ``stop_after`` seconds); errors of one step are retried."""
        deadline = None if stop_after is None else time.monotonic() + stop_after
        busy = False
        last_commit = time.monotonic()
        mirrored: set[int] = set()  # partitions whose stored positions this run has mirrored to the group
        while not self._stop.is_set() and (deadline is None or time.monotonic() < deadline):
            owned = self.ownership.poll(0.01 if busy else self.idle_poll)
            self._mirror(owned - mirrored)
            mirrored = owned
            if owned != set(self.runner.partitions):
                self.summarizer.retain(owned)
                self.runner.own(owned)
            try:
                busy = bool(self.runner.run_once(drain=False))
            except MemfoldError as exc:
                log.error("fold step failed (will retry): %s", exc)
                busy = False
                self._stop.wait(0.5)
            if time.monotonic() - last_commit >= self.commit_interval or not busy:
                self._commit()
                last_commit = time.monotonic()
        self._commit()

    def _mirror(self, gained: set[int]) -> None:
        """Queue the store's positions of newly owned partitions for the next (advisory) commit.

        The previous owner may have committed rows and positions to the store
        and died before its advisory commit: with nothing left to fold, the
        group's offsets would lag the store for good (and a partition left
        idle would show a lag that does not exist).
        """
        if gained:
            stored = self.runner.store.position()
            self._uncommitted.update({p: stored[p] for p in gained if p in stored})

    def _note(self, positions: dict[int, int]) -> None:
        self._uncommitted.update(positions)

    def _commit(self) -> None:
        if self._uncommitted:
            positions, self._uncommitted = self._uncommitted, {}
            if not self.ownership.committed(positions):
                # Offered again at the next commit (newer positions noted meanwhile win): with
                # nothing more to fold on a partition, a dropped commit would never be retried.
                for partition, offset in positions.items():
                    self._uncommitted.setdefault(partition, offset)
