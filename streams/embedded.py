"""The embedded runner: reads the log, projects into DuckDB, appends decided requests, feeds the worker.

One background thread. Per partition it reads *from the store's position*
(so restarts resume where the committed data ends), lets the projector fold
the batch, appends the requests the policies decided to the log, then
commits rows + positions in one transaction (their ids are deterministic, so
a crash between append and commit re-decides and re-appends the same events,
which the log de-duplicates), and hands requests seen in the log to the
summarizer worker once caught up.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from memfold.engine.errors import MemfoldError, ProjectionLagTimeout
from memfold.engine.events import SummaryRequested
from memfold.engine.ports import EventLog
from memfold.engine.positions import Position
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore

log = logging.getLogger("memfold.runner")


class EmbeddedRunner:
    """Keep a DuckDB projection caught up with an event log, in-process."""

    def __init__(
        self,
        event_log: EventLog,
        store: DuckDBProjectionStore,
        projector: Projector,
        *,
        on_requests: Callable[[list[SummaryRequested]], None] = lambda reqs: None,
        batch_size: int = 5000,
        poll_interval: float = 0.05,
        emit_requests: bool = True,
    ):
        self.log = event_log
        self.store = store
        self.projector = projector
        self.on_requests = on_requests
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        # Projector nodes in distributed mode fold requests but never append them:
        # the faust policy agent is the one writer of decided events there.
        self.emit_requests = emit_requests
        self._wake = threading.Event()
        self._progress = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._step_lock = threading.Lock()
        self.last_error: BaseException | None = None
        self._seen: dict[str, SummaryRequested] = {}

    # ----------------------------------------------------------------- stepping

    def run_once(self) -> int:
        """Project every record available now, partition by partition; return how many were applied.

        Safe to call from any thread (serialised); the background loop calls it too.
        """
        total = 0
        with self._step_lock:
            for partition in self.log.partitions():
                while True:
                    start = self.store.position().get(partition, 0)
                    records = self.log.read(partition, start, self.batch_size)
                    if not records:
                        break
                    changes, positions, decided = self.projector.project(records)
                    try:
                        # Log first, then commit (an outbox): a crash in between
                        # re-projects the batch, re-decides the same ids, and the
                        # log de-duplicates them. The reverse order could lose a
                        # request that the committed state already counts as pending.
                        if decided and self.emit_requests:
                            self.log.append(decided)
                        self.store.apply(changes, positions)
                    except BaseException:
                        self.projector.forget()
                        raise
                    self.projector.committed(changes)
                    total += len(changes)
                    for r in records:
                        if isinstance(r.event, SummaryRequested):
                            self._seen[r.event.event_id] = r.event
                    with self._progress:
                        self._progress.notify_all()
                    if len(records) < self.batch_size:
                        break
            if self._seen and self.caught_up():
                self._hand_over()
        return total

    def _hand_over(self) -> None:
        # Only once caught up: a request whose outcome is already further down
        # the log (a replay, a restart) must not reach the model again.
        known = self.store.outcomes(list(self._seen))
        open_ = [r for r in self._seen.values() if known.get(r.event_id) == "processing"]
        self._seen.clear()
        if open_:
            self.on_requests(open_)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the projection loop still (no batch in flight) for the duration of the block."""
        with self._step_lock:
            self._seen.clear()
            yield

    def caught_up(self) -> bool:
        """True when the store has applied everything the log holds right now."""
        ends = self.log.end_positions()
        pos = self.store.position()
        # A Kafka log drops a duplicate event on read but counts its offset in
        # end_positions, so "nothing left to read" also counts as caught up.
        return all(pos.get(p, 0) >= end or not self.log.read(p, pos.get(p, 0), 1) for p, end in ends.items())

    # ----------------------------------------------------------------- background loop

    def start(self) -> None:
        """Start the background projection thread."""
        self._thread = threading.Thread(target=self._loop, name="memfold-projector", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """Wake the loop now (called after a local append) instead of at the next poll."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop after the batch in progress."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop:
            try:
                applied = self.run_once()
                self.last_error = None
            except MemfoldError as exc:
                self.last_error = exc
                log.error("projection step failed (will retry): %s", exc)
                applied = 0
                time.sleep(0.5)
            if not applied:
                self._wake.wait(self.poll_interval)
                self._wake.clear()

    # ----------------------------------------------------------------- waiting

    def wait_for(self, position: Position, timeout: float = 30.0) -> None:
        """Block until the event *at* ``position`` is projected; raise :class:`ProjectionLagTimeout` after ``timeout``."""
        deadline = time.monotonic() + timeout
        self.notify()
        with self._progress:
            while not self.store.has_reached(position):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProjectionLagTimeout(
                        f"projection did not reach {position} within {timeout}s"
                        + (f" (last error: {self.last_error})" if self.last_error else "")
                    )
                self._progress.wait(min(left, 0.1))
