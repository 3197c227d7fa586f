"""The runner: the one loop that folds an event log into a projection store, in every mode.

Embedded mode runs it on a background thread over every partition of the
SQLite log; a distributed worker runs it over the Kafka partitions its
consumer group assigns it (:mod:`memfold.streams.ownership`); a projector
node runs it over every partition without appending; a replay runs it into
its own store. Same projector, same policies, same store: one fold path.

Per owned partition it reads *from the store's position* (so restarts and
take-overs resume where the committed data ends), lets the projector fold
the batch, appends the requests the policies decided to the log, then
commits rows + positions in one transaction. Request ids are deterministic,
so a crash between append and commit re-decides and re-appends the same
events, which the log de-duplicates. Requests are handed to the summarizer
only once their partition is caught up (an outcome further down the log
must not send a request to the model again).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from memfold.core.errors import MemfoldError, PartitionNotOwnedError, ProjectionLagTimeout
from memfold.core.events import SummaryRequested
from memfold.core.partitioner import partition_for
from memfold.core.ports import EventLog, ProjectionStore
from memfold.core.positions import Position
from memfold.projections.projector import Projector

log = logging.getLogger("memfold.runner")


# Young-generation collections while a batch is folded: every decoded event, payload
# and row is a tracked container, so CPython's default (a collection every 700
# allocations) spent about a third of the read path re-scanning them (py-spy).
_BATCH_GC_THRESHOLD = 50_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect the young generation every :data:`_BATCH_GC_THRESHOLD` allocations instead of 700, for the block.

    Nothing escapes collection: cyclic garbage is still found, a little
    later. Process-wide while any runner is inside (counted, so nested and
    concurrent runners restore the caller's thresholds once, at the end).
    """
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_gc_saved[0], _BATCH_GC_THRESHOLD), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


class Runner:
    """Keep a projection store caught up with (some partitions of) an event log.

    ``emit_requests`` False makes a read replica: decided requests are folded
    but never appended (the worker owning the partition appends them).
    ``on_requests`` receives open requests of owned, caught-up partitions;
    ``on_committed`` the positions (partition -> next offset) of each commit,
    as does every listener added with :meth:`add_commit_listener`.
    """

    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        projector: Projector,
        *,
        on_requests: Callable[[list[SummaryRequested]], None] = lambda reqs: None,
        on_committed: Callable[[dict[int, int]], None] = lambda positions: None,
        batch_size: int = 5000,
        poll_interval: float = 0.05,
        emit_requests: bool = True,
        partitions: Iterable[int] | None = None,
    ):
        self.log = event_log
        self.store = store
        self.projector = projector
        self.on_requests = on_requests
        self._commit_listeners: list[Callable[[dict[int, int]], None]] = [on_committed]
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.emit_requests = emit_requests
        self._owned: list[int] = sorted(partitions) if partitions is not None else list(event_log.partitions())
        # Partitions whose open requests (left by an earlier owner or process) are not handed over yet.
        self._rescan: set[int] = set(self._owned)
        self._wake = threading.Event()
        self._progress = threading.Condition()
        # While a batch is being committed: the store's positions before it. Its events are in the store
        # before they are in the projector's memory (hot tail, search index, listeners): not reached yet.
        self._committing_from: dict[int, int] | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._step_lock = threading.Lock()
        self.last_error: BaseException | None = None
        self._seen: dict[str, SummaryRequested] = {}
        self.folded = 0

    def add_commit_listener(self, listener: Callable[[dict[int, int]], None]) -> None:
        """Call ``listener`` with the positions of every later commit (after the ones added before it)."""
        self._commit_listeners.append(listener)

    def committed(self, positions: dict[int, int]) -> None:
        """Tell every commit listener that the store now holds ``positions``."""
        for listener in self._commit_listeners:
            listener(positions)

    # ----------------------------------------------------------------- ownership

    @property
    def partitions(self) -> list[int]:
        """Return the partitions this runner folds, ascending."""
        return list(self._owned)

    def own(self, partitions: Iterable[int]) -> None:
        """Fold exactly ``partitions`` from the next step on (called between steps, e.g. on a rebalance).

        A newly owned partition resumes at the store's position for it, and
        its open requests are handed over once it is caught up. The
        projector's cached conversations of a partition given up are dropped.
        """
        with self._step_lock:
            wanted = sorted(set(partitions))
            gone = set(self._owned) - set(wanted)
            self._rescan |= set(wanted) - set(self._owned)
            self._rescan -= gone
            self._owned = wanted
            if gone:
                self.projector.forget_partitions(gone)
                n = self.log.partition_count
                self._seen = {k: r for k, r in self._seen.items() if partition_for(r.key, n) not in gone}

    # ----------------------------------------------------------------- stepping

    def run_once(self, *, drain: bool = True) -> int:
        """Project the records available now in owned partitions; return how many events were applied.

        Each pass reads one batch from every owned partition (``batch_size``
        records in all, shared between them) and commits what they hold in
        ONE transaction: a partition holding a few new records costs no
        transaction of its own. ``drain`` False makes one pass (a worker's
        loop stays responsive to rebalances); True repeats while a partition
        filled its share. Open requests of a partition are handed to
        ``on_requests`` once it was read to its end: draining, when a read of
        it came back empty; in one pass, when it came back short. Safe to call
        from any thread (serialised); the background loop calls it too.
        """
        total = 0
        with self._step_lock, fewer_collections():
            pending = list(self._owned)
            at_end: set[int] = set()
            while pending:
                share = max(1, self.batch_size // len(pending))
                positions_now = self.store.position()
                records = []
                full = []
                for partition in pending:
                    batch = self.log.read(partition, positions_now.get(partition, 0), share)
                    records.extend(batch)
                    if len(batch) >= share:
                        full.append(partition)
                        at_end.discard(partition)
                    elif not batch or not drain:
                        # Read to its end. Draining, only an EMPTY read says so: a short read
                        # mid-ingest is followed by more, and handing over then starts summaries
                        # that compete with the bulk projection (several times slower at 20,000 messages);
                        # the loop's next step costs one empty read. One pass (a worker's loop
                        # under sustained load) hands over on a short read, or never would.
                        at_end.add(partition)
                if records:
                    total += self._commit(records)
                if not drain or not records:
                    break
                pending = full
            self.folded += total
            if self.emit_requests and at_end and (self._seen or self._rescan):
                self._hand_over(at_end)
        return total

    def _commit(self, records: list) -> int:
        """Fold ``records`` and commit rows + positions; return how many events were applied."""
        changes, positions, decided = self.projector.project(records)
        self._committing_from = self.store.position()
        try:
            self._apply(changes, positions, decided)
            for bad in changes.poison:  # once each: the committed position is past it now
                log.warning(
                    "log record at %s:%s (event %s, conversation %s/%s) cannot be read and was skipped: %s; "
                    "it is listed in the projection's poison_events table",
                    bad["partition"], bad["offset"], bad["event_id"], bad["tenant_id"], bad["conversation_id"],
                    bad["error"],
                )
            self.projector.committed(changes)
            if self.emit_requests:  # a read replica hands nothing to a summarizer
                for r in records:
                    if isinstance(r.event, SummaryRequested):
                        self._seen[r.event.event_id] = r.event
            self.committed(positions)
        finally:
            with self._progress:
                self._committing_from = None
                self._progress.notify_all()
        return len(changes)

    def _apply(self, changes, positions: dict[int, int], decided: list) -> None:
        """Append the batch's decided requests, then write its rows and positions; on failure forget its fold."""
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

    def _reached(self, position: Position) -> bool:
        """True once the event at ``position`` is in the store and its batch has been handed on (call under _progress).

        ``apply`` makes the store's positions say so before the batch reaches
        the projector's memory (hot tail, search index, listeners such as the
        text caches' erasure) and ``on_committed``; a waiter woken by its poll
        in between must not return yet.
        """
        if not self.store.has_reached(position):
            return False
        before = self._committing_from
        return before is None or position.offset < before.get(position.partition, 0)

    def _hand_over(self, caught_up: set[int]) -> None:
        # Only requests of partitions read to their end: a request whose outcome
        # is already further down the log (a replay, a restart) must not reach
        # the model again. Request and outcome share a partition (same key).
        n = self.log.partition_count
        requests = {i: r for i, r in self._seen.items() if partition_for(r.key, n) in caught_up}
        for event_id in requests:
            del self._seen[event_id]
        rescan = sorted(self._rescan & caught_up)
        if rescan:
            for request in self.store.open_request_events(rescan):
                requests.setdefault(request.event_id, request)
            self._rescan -= set(rescan)
        if not requests:
            return
        known = self.store.outcomes(list(requests))
        open_ = [r for r in requests.values() if known.get(r.event_id) == "processing"]
        if open_:
            self.on_requests(open_)

    def handed_over(self) -> bool:
        """True when every open request this runner has read (or must rescan for) is with ``on_requests``."""
        if not self.emit_requests:
            return True  # a read replica hands nothing over
        with self._step_lock:
            return not self._seen and not self._rescan

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the loop still (no batch in flight); open requests are rescanned afterwards."""
        with self._step_lock:
            self._seen.clear()
            yield
            self._rescan = set(self._owned)

    def caught_up(self) -> bool:
        """True when the store has applied everything the log holds right now in owned partitions."""
        # Positions before ends: the runner appends a batch's decided requests to
        # the log before it commits the batch, so ends read after positions
        # include them (read the other way round, both could miss them).
        pos = self.store.position()
        ends = self.log.end_positions()
        # A Kafka log drops a duplicate event on read but counts its offset in
        # end_positions, so "nothing left to read" also counts as caught up.
        return all(
            pos.get(p, 0) >= ends.get(p, 0) or not self.log.read(p, pos.get(p, 0), 1) for p in self._owned
        )

    def lag(self) -> int:
        """Return how many log offsets of owned partitions the store has not applied yet."""
        ends = self.log.end_positions()
        pos = self.store.position()
        return sum(max(0, ends.get(p, 0) - pos.get(p, 0)) for p in self._owned)

    # ----------------------------------------------------------------- background loop

    def start(self) -> None:
        """Start the background projection thread."""
        self._thread = threading.Thread(target=self._loop, name="memfold-runner", daemon=True)
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
        """Block until the event *at* ``position`` is projected; raise :class:`ProjectionLagTimeout` after ``timeout``.

        Raises :class:`PartitionNotOwnedError` at once when this runner does
        not fold the position's partition (a shard node's moved away while
        waiting): its new owner serves its reads only once caught up past it.
        """
        deadline = time.monotonic() + timeout
        self.notify()
        with self._progress:
            while not self._reached(position):
                if position.partition not in self._owned:
                    raise PartitionNotOwnedError(f"partition {position.partition} is not folded here (it moved to "
                                                 "another node, which serves it once caught up)",
                                                 partition=position.partition)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProjectionLagTimeout(
                        f"projection did not reach {position} within {timeout}s"
                        + (f" (last error: {self.last_error})" if self.last_error else "")
                    )
                self._progress.wait(min(left, 0.1))
