"""A replay group: a replay's source fold split over several processes by partition, merged into its namespace.

A replay folds every event of the log; one process does that at the speed
of one core. :func:`fold_in_parts` splits the partitions with work between
``processes`` child processes (largest first, each to the least loaded
child), each folding its partitions into a projection file of its own
(``parts/K.duckdb`` in the namespace) and appending the summary requests it
decides to the namespace's side log (SQLite takes appends from several
processes; the children's partitions are disjoint, so each side-log
partition is written by one of them, in the order one process would have).
The parent then merges the parts into the namespace's projection in one
transaction and the replay goes on as a single-process one does: folding
the side log, answering the open requests through the live summary cache.
The result is the single-process replay's, row for row (tested).

Works on both logs: the SQLite file (read by every child) and a Kafka topic
(each child reads its partitions from the broker). A child killed midway
leaves its part file with the positions it committed: running the replay
again resumes each part where it stopped.
"""

from __future__ import annotations

import multiprocessing
import queue as queues
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memfold.core.errors import ProjectionError
from memfold.core.runtime import tune_gc
from memfold.core.settings import Settings
from memfold.core.tokens import counter as token_counter
from memfold.engine.builders import fold_contexts
from memfold.engine.namespaces import ReplayFold, ReplayStats
from memfold.projections.store import DuckDBProjectionStore
from memfold.streams.logs import open_log
from memfold.streams.sealed_log import SealedLog, sealed
from memfold.streams.sqlite_log import SQLiteEventLog

PARTS = "parts"


@dataclass(frozen=True)
class PartJob:
    """What one child folds: its partitions' targets, into ``store_path``, requests to ``side_path``."""

    settings: Settings
    targets: dict[int, int]
    store_path: str
    side_path: str
    emit: tuple[str, ...]
    conversations: tuple[str, ...] | None
    batch_size: int


def split(goal: Mapping[int, int], start: Mapping[int, int], processes: int) -> list[dict[int, int]]:
    """Return up to ``processes`` disjoint targets covering the partitions with work, balanced by offsets to fold."""
    work = sorted(((end - start.get(p, 0), p, end) for p, end in goal.items() if end > start.get(p, 0)), reverse=True)
    loads = [0] * max(1, min(processes, len(work)))
    parts: list[dict[int, int]] = [{} for _ in loads]
    for size, partition, end in work:
        k = loads.index(min(loads))
        parts[k][partition] = end
        loads[k] += size
    return [p for p in parts if p]


def fold_in_parts(engine, space, settings: Settings, store, goal: Mapping[int, int], *, emit: Sequence[str],
                  conversations: Sequence[str] | None, processes: int, batch_size: int,
                  progress: Callable[[int], None]) -> ReplayStats:
    """Fold the source up to ``goal`` in ``processes`` child processes, merge their parts into ``store``; return their counters.

    Raises :class:`ProjectionError` naming the child's exit status when one
    fails (the parts stay for a resume).
    """
    root = Path(space.root) / PARTS
    root.mkdir(exist_ok=True)
    jobs = []
    for k, targets in enumerate(split(goal, store.position(), processes)):
        jobs.append(PartJob(settings, targets, str(root / f"{k}.duckdb"), str(space.side_path), tuple(emit),
                            tuple(conversations) if conversations is not None else None, batch_size))
    if not jobs:
        return ReplayStats()
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no engine threads or DuckDB handles inherited
    done: Any = ctx.Queue()
    children = [ctx.Process(target=_part_main, args=(job, done), name=f"memfold-replay-part-{k}", daemon=True)
                for k, job in enumerate(jobs)]
    for child in children:
        child.start()
    stats = ReplayStats()
    try:
        while any(c.is_alive() for c in children) or not done.empty():
            try:
                item = done.get(timeout=0.1)
            except queues.Empty:
                continue
            if isinstance(item, dict):  # a child's counters, when it is done
                stats = stats.add(ReplayStats(**item))
            else:
                progress(item)
    finally:
        for child in children:
            child.join()
    failed = [(c.name, c.exitcode) for c in children if c.exitcode != 0]
    if failed:
        raise ProjectionError(f"replay group: {', '.join(f'{n} exited with {code}' for n, code in failed)}; run the "
                              "replay again to resume (each part keeps what it committed)")
    store.absorb([job.store_path for job in jobs])
    shutil.rmtree(root, ignore_errors=True)
    return stats


def _part_main(job: PartJob, done: Any) -> None:
    """Child process: fold ``job``'s partitions of the source log into its part file (see the module docstring)."""
    tune_gc()  # a bulk fold, as `memfold replay` tunes it
    settings = job.settings
    log_ = open_log(settings.log_url(), partitions=settings.partitions, topic=settings.topic,
                    state_dir=settings.data_dir)
    store = side_inner = None
    try:
        source, sealer = sealed(log_, settings.keystore_location())
        store = DuckDBProjectionStore(job.store_path)
        side_inner = SQLiteEventLog(job.side_path, partitions=source.partition_count)
        side = SealedLog(side_inner, sealer) if sealer is not None else side_inner
        wanted = set(job.conversations or ())
        keep = (lambda e: e.conversation_id in wanted) if job.conversations is not None else None
        fold = ReplayFold(source, side, store, fold_contexts(settings), token_counter(settings.encoding),
                          emit=job.emit, summarizer=None, settings=settings, keep=keep, batch_size=job.batch_size,
                          progress=done.put)
        done.put(asdict(fold.fold_source(job.targets)))
    finally:
        if side_inner is not None:
            side_inner.close()
        if store is not None:
            store.close()
        log_.close()
