"""Benchmark: single-process replay beside a lean reference doing only the replay's necessary work.

    python benchmarks/lean_replay.py [--messages 40000] [--conversations 400]

Ingests MESSAGES messages into an embedded data dir (offline summarizer,
the default policy) and waits for the live summaries. Then, each into a
fresh projection file:

- **lean reference**: read the log's rows with plain ``sqlite3`` (5,000 per
  query, in offset order), unseal the content (the data key store), decode
  the events, fold them with memfold's projector (the policies, the term
  index, the row changes) and write the rows and positions to DuckDB
  through Arrow, one transaction per 5,000 events. Nothing else: no
  namespace, manifest, side log, summary answering, progress or runner.
- **replay, live settings**: ``engine.replay`` with the live settings (the
  same work plus the replay's machinery: every outcome is in the log).
- **replay, cached**: a what-if replay run twice; the second run answers
  every summary from the shared cache (what ``benchmarks/replay.py`` calls
  a cached replay).

Prints messages/s and CPU seconds of each and the replays' share of the
lean rate, by wall clock and by CPU seconds (on a shared machine the CPU
figure is the steadier one); the target: cached replay >= 0.5 of the lean
reference.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from memfold.core.events import decode
from memfold.core.positions import LogRecord, Position
from memfold.core.runtime import tune_gc
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine, fold_contexts
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_and_read import messages  # noqa: E402

BATCH = 5000


def lean(engine: MemoryEngine, log_path: Path, out: Path) -> tuple[float, float, int]:
    """Run the lean reference; return (seconds, CPU seconds, events folded)."""
    store = DuckDBProjectionStore(out)
    projector = Projector(store, fold_contexts(engine.settings), engine.counter)
    con = sqlite3.connect(f"file:{log_path}?mode=ro", uri=True)
    started, cpu, folded = time.perf_counter(), time.process_time(), 0
    try:
        last = -1
        while True:
            rows = con.execute("SELECT id, partition_no, offset_no, type, body FROM events WHERE id > ? ORDER BY id "
                               "LIMIT ?", (last, BATCH)).fetchall()
            if not rows:
                break
            last = rows[-1][0]
            records = []
            for _, partition, offset, kind, body in rows:
                event = decode(body, event_type=kind)
                if engine.sealer is not None:
                    event = engine.sealer.unseal(event)
                records.append(LogRecord(Position(partition, offset), event))
            changes, positions, _decided = projector.project(records)
            store.apply(changes, positions)
            projector.committed(changes)
            folded += len(records)
    finally:
        con.close()
        store.close()
    return time.perf_counter() - started, time.process_time() - cpu, folded


def main(argv: list[str] | None = None) -> int:
    tune_gc()  # as memfold replay does
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=40_000)
    p.add_argument("--conversations", type=int, default=400)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-lean-") as tmp:
        settings = Settings.load(None, data_dir=Path(tmp) / "d")
        with MemoryEngine(settings) as engine:
            batch = [engine.validate(m) for m in messages(args.messages, args.conversations, seed=3)]
            for i in range(0, len(batch), 5000):
                engine.append_events(batch[i: i + 5000])
            engine.wait_idle(timeout=3600)
            log_path = Path(settings.log_url().removeprefix("sqlite:///"))
            if not log_path.is_absolute():
                log_path = Path.cwd() / log_path
            seconds, lean_cpu, folded = lean(engine, log_path, Path(tmp) / "lean.duckdb")
            lean_rate = args.messages / seconds
            print(f"{args.messages:,} messages, {folded:,} log events, {args.conversations:,} conversations")
            print(f"lean reference:          {seconds:6.2f}s ({lean_cpu:6.2f} CPU s) {lean_rate:8,.0f} messages/s")
            rows = []
            cpu = time.process_time()
            report = engine.replay("same")
            rows.append(("replay, live settings", report.seconds, time.process_time() - cpu))
            whatif = {"sliding_window.rolling_window_size": 10}
            engine.replay("first", overrides=whatif)
            cpu = time.process_time()
            report = engine.replay("cached", overrides=whatif)
            rows.append(("replay, cached", report.seconds, time.process_time() - cpu))
            for label, secs, used in rows:
                rate = args.messages / secs
                print(f"{label + ':':<25}{secs:6.2f}s ({used:6.2f} CPU s) {rate:8,.0f} messages/s, "
                      f"{rate / lean_rate:.2f} of the lean reference ({lean_cpu / used:.2f} by CPU seconds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
