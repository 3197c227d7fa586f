"""The one fold path (runner + projector + policies + summarizer pool + DuckDB store) over any EventLog.

:class:`ListLog` is the simplest log there is (Python lists in memory); the
EventLog contract checks that the runner folds every real backend into
exactly the projection it folds this one into.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from support.worker_kit import conversation, interleaved, projection

from memfold.core.events import Event
from memfold.core.partitioner import partition_for
from memfold.core.positions import LogRecord, Position
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.core.tokens import counter
from memfold.engine.builders import fold_contexts
from memfold.engine.runner import Runner
from memfold.engine.worker import SummarizerWorker
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore
from memfold.projections.summarizers import build_summarizer


class ListLog:
    """An in-memory EventLog: per-partition lists, seq per conversation, repeated ids skipped."""

    def __init__(self, partitions: int = 4):
        self.partition_count = partitions
        self._parts: list[list[Event]] = [[] for _ in range(partitions)]
        self._ids: dict[str, Position] = {}
        self._seq: dict[str, int] = {}

    def append(self, events: Sequence[Event]) -> list[Position]:
        out = []
        for event in events:
            if event.event_id not in self._ids:
                partition = partition_for(event.key, self.partition_count)
                self._seq[event.key] = self._seq.get(event.key, 0) + 1
                self._parts[partition].append(event.with_seq(self._seq[event.key]))
                self._ids[event.event_id] = Position(partition, len(self._parts[partition]) - 1)
            out.append(self._ids[event.event_id])
        return out

    def read(self, partition: int, start: int, limit: int = 1000) -> list[LogRecord]:
        return [LogRecord(Position(partition, start + i), e) for i, e in enumerate(self._parts[partition][start : start + limit])]

    def partitions(self) -> list[int]:
        return list(range(self.partition_count))

    def end_positions(self) -> dict[int, int]:
        return {p: len(events) for p, events in enumerate(self._parts)}

    def close(self) -> None:
        pass


SCENARIO = interleaved(conversation("support-4711", 14), conversation("travel-2208", 8))


def fold_through_pipeline(log, root: Path) -> dict[str, list[tuple]]:
    """Append :data:`SCENARIO` one message at a time, the pipeline idle in between; return the projection."""
    settings = Settings.load(None, policies=POLICY_NAMES, partitions=log.partition_count, data_dir=root)
    store = DuckDBProjectionStore(root / "projection.duckdb")
    pool = SummarizerWorker(log, store, store, build_summarizer(settings, cache_conn=store), settings)
    runner = Runner(log, store, Projector(store, fold_contexts(settings), counter()), on_requests=pool.submit)
    pool.start()
    try:
        for event in SCENARIO:
            log.append([event])
            quiet = 0
            deadline = time.monotonic() + 60
            while quiet < 2:  # idle twice in a row: nothing folded, nothing being summarized
                folded = runner.run_once()
                quiet = quiet + 1 if not folded and pool.idle() and runner.caught_up() else 0
                assert time.monotonic() < deadline, "the pipeline did not settle"
                if quiet < 2:
                    time.sleep(0.01)
    finally:
        pool.stop()
        store.close()
    return projection(root / "projection.duckdb")
