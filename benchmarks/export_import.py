"""Benchmark: export, import and Parquet snapshots, embedded mode.

    python benchmarks/export_import.py [--messages 200000] [--conversations 1000] [--snapshot-every 1.0]

Ingests MESSAGES messages over CONVERSATIONS conversations (default policy,
offline summarizer) while the engine refreshes a Parquet snapshot every
SNAPSHOT_EVERY seconds and a reader process (plain duckdb, no memfold)
queries it in a loop; prints the reader's rounds, errors and torn reads, and
the freshness of the snapshots (how long after a message was appended the
first snapshot holding it was readable). Then times: (1) export, sealed and
plaintext, Parquet and JSONL (events/s), beside DuckDB's own ``COPY … TO``
of the projection's events table (the anchor); (2) import of the plaintext
export into a fresh data dir (the append, events/s), then its fold (a replay:
messages/s) and verify; (3) a replay of the source with its own settings (every
summary from the cache) for comparison; (4) one snapshot's write time and size.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import duckdb

from memfold.core.runtime import tune_gc
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.portability import ExportFilter, export_engine, import_into
from memfold.engine.snapshots import current_path, write_snapshot

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_and_read import messages  # noqa: E402

READER = Path(__file__).resolve().parents[1] / "tests" / "support" / "snapshot_reader.py"
BATCH = 5000


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _ingest_with_snapshots(root: Path, n: int, conversations: int, every: float) -> None:
    snaps = root / "src-snapshots"
    stop, result = root / "reader.stop", root / "reader.json"
    reader = subprocess.Popen([sys.executable, str(READER), str(snaps), str(stop), str(result)])
    appended: list[tuple[float, int]] = []  # (monotonic time, messages appended so far)
    # snapshot number -> (first seen, messages it holds, how old its read of the projection was when first seen)
    seen: dict[int, tuple[float, int, float]] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            found = current_path(snaps)
            if found is not None:
                number = int(found.name.split("-")[1])
                if number not in seen:
                    now = time.monotonic()
                    try:
                        manifest = json.loads((found / "manifest.json").read_text())
                    except (OSError, ValueError):
                        continue
                    read_at = datetime.fromisoformat(manifest["read_at"]).timestamp()
                    seen[number] = (now, manifest["rows"]["messages"], time.time() - read_at)
            time.sleep(0.01)

    settings = Settings.load(None, data_dir=root / "src",
                             snapshot={"every_seconds": every, "dir": snaps, "keep_seconds": 30.0})
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    with MemoryEngine(settings) as engine:
        batch = [engine.validate(m) for m in messages(n, conversations, seed=3)]
        for i in range(0, len(batch), BATCH):
            engine.append_events(batch[i : i + BATCH])
            appended.append((time.monotonic(), min(i + BATCH, n)))
        engine.wait_idle(timeout=7200)
        ingest_s = time.perf_counter() - started
        deadline = time.monotonic() + 10 * every + 60
        while time.monotonic() < deadline and not any(rows == n for _, rows, _ in seen.values()):
            time.sleep(0.05)
    done.set()
    watcher.join()
    stop.touch()
    reader.wait(120)
    got = json.loads(result.read_text())
    print(f"ingest: {n:,} messages over {conversations:,} conversations in {ingest_s:.1f}s "
          f"({n / ingest_s:,.0f} messages/s) with a snapshot every {every}s")
    print(f"  reader process (plain duckdb): {got['rounds']:,} rounds over {len(got['snapshots'])} snapshots, "
          f"{len(got['errors'])} errors, {len(got['torn'])} torn reads, slowest round {got['slowest_round_s']:.3f}s")
    stale = sorted(age for *_, age in seen.values())
    firsts = sorted(first for first, *_ in seen.values())
    gaps = sorted(b - a for a, b in zip(firsts, firsts[1:]))
    if stale and gaps:
        print(f"  snapshot behind the projection when it became current: {stale[len(stale) // 2]:.2f}s (median) / "
              f"{stale[-1]:.2f}s (max); replaced every {gaps[len(gaps) // 2]:.2f}s (median) / {gaps[-1]:.2f}s (max)")
    ages = []
    for first_seen, rows, _ in seen.values():
        if rows == 0:
            continue
        # The batch holding the snapshot's newest message: when it was appended.
        when = next(t for t, count in appended if count >= rows)
        ages.append(first_seen - when)
    if ages:
        ages.sort()
        print(f"  from append to a snapshot (projector lag included): {ages[len(ages) // 2]:.2f}s (median) / "
              f"{ages[-1]:.2f}s (max) ({len(ages)} snapshots)")


def main(argv: list[str] | None = None) -> int:
    tune_gc()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--conversations", type=int, default=1_000)
    p.add_argument("--snapshot-every", type=float, default=1.0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-export-") as tmp:
        root = Path(tmp)
        _ingest_with_snapshots(root, args.messages, args.conversations, args.snapshot_every)
        settings = Settings.load(None, data_dir=root / "src")
        with MemoryEngine(settings) as engine:
            engine.wait_idle()
            events = sum(engine.log.end_positions().values())
            for name, fmt, plain in (("sealed", "parquet", False), ("plaintext", "parquet", True),
                                     ("plaintext", "jsonl", True)):
                report = export_engine(engine, root / f"export-{name}-{fmt}", format=fmt, plaintext=plain,
                                       only=ExportFilter())
                print(f"export {name} {fmt}: {report.events:,} events in {report.seconds:.2f}s "
                      f"({report.events / report.seconds:,.0f} events/s), {_size(report.directory) / 1e6:.1f} MB")
            started = time.perf_counter()
            snap = write_snapshot(engine.store, root / "snapshots")
            print(f"snapshot: {sum(snap.rows.values()):,} rows in {len(snap.rows)} tables, "
                  f"{snap.bytes / 1e6:.1f} MB in {time.perf_counter() - started:.2f}s")
            cpu = time.process_time()
            replay = engine.replay("same")
            print(f"replay with the same settings (every summary from the cache): {replay.seconds:.2f}s "
                  f"({time.process_time() - cpu:.1f} CPU s), {args.messages / replay.seconds:,.0f} messages/s, "
                  f"{replay.run.folded / replay.seconds:,.0f} log events/s")
        con = duckdb.connect(str(settings.projection_path()), read_only=True)
        started = time.perf_counter()
        con.execute(f"COPY (SELECT * FROM events ORDER BY \"partition\", \"offset\") TO '{root / 'anchor.parquet'}' "
                    "(FORMAT PARQUET, COMPRESSION ZSTD)")
        anchor = time.perf_counter() - started
        con.close()
        print(f"anchor: DuckDB COPY of the projection's {events:,} events to Parquet in {anchor:.2f}s "
              f"({events / anchor:,.0f} events/s), {os.path.getsize(root / 'anchor.parquet') / 1e6:.1f} MB")

        target = Settings.load(None, data_dir=root / "target")
        with MemoryEngine(target, role="client") as client:
            report = import_into(client, root / "export-plaintext-parquet")
        print(f"import (append): {report.stored:,} events in {report.seconds:.2f}s "
              f"({report.stored / report.seconds:,.0f} events/s)")
        started = time.perf_counter()
        with MemoryEngine(target) as engine:
            engine.wait_idle(timeout=7200)
            fold = time.perf_counter() - started
            print(f"import (fold, a replay from the log): {fold:.2f}s ({args.messages / fold:,.0f} messages/s, "
                  f"{events / fold:,.0f} events/s)")
            started = time.perf_counter()
            diffs = engine.verify()
            print(f"import (verify): {time.perf_counter() - started:.2f}s, "
                  f"{'identical' if not diffs else f'{len(diffs)} tables differ'}")
        with MemoryEngine(target, role="client") as client:
            again = import_into(client, root / "export-plaintext-parquet")
        print(f"import again: {again.stored} stored, {again.present:,} already present in {again.seconds:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
