"""A reader that knows nothing of memfold: plain duckdb over a snapshot root, in a loop, until told to stop.

Usage: snapshot_reader.py ROOT STOP_FILE RESULT_FILE. Each round resolves
ROOT/current once, reads that snapshot's manifest and checks that the
Parquet agrees with it and with itself (messages = MessageAppended events =
the conversations' message counts). Writes what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import duckdb


def main(root: Path, stop: Path, result: Path) -> None:
    rounds, no_snapshot_yet, seen, errors, torn = 0, 0, set(), [], []
    slowest = 0.0
    con = duckdb.connect()
    while not stop.exists():
        link = root / "current"
        if not link.is_symlink():
            no_snapshot_yet += 1
            time.sleep(0.01)
            continue
        started = time.perf_counter()
        try:
            snap = root / os.readlink(link)
            manifest = json.loads((snap / "manifest.json").read_text())

            def q(sql: str, snap=snap):
                return con.execute(sql.replace("SNAP", snap.as_posix())).fetchone()

            counts = {t: q(f"SELECT count(*) FROM read_parquet('SNAP/{t}/**/*.parquet')")[0]
                      for t in ("messages", "events", "conversations", "summaries", "facts")}
            appended = q("SELECT count(*) FROM read_parquet('SNAP/events/**/*.parquet') WHERE type = 'MessageAppended'")[0]
            folded = q("SELECT coalesce(sum(message_count), 0) FROM read_parquet('SNAP/conversations/**/*.parquet')")[0]
            by_day = q("SELECT count(*) FROM read_parquet('SNAP/messages/**/*.parquet', hive_partitioning = true) "
                       "WHERE date IS NOT NULL")[0]
            for table, n in counts.items():
                if n != manifest["rows"][table]:
                    torn.append(f"snapshot {manifest['snapshot']}: {table} has {n} rows, manifest {manifest['rows'][table]}")
            if not counts["messages"] == appended == folded == by_day:
                torn.append(f"snapshot {manifest['snapshot']}: messages {counts['messages']}, appended {appended}, "
                            f"conversations say {folded}, partitioned by day {by_day}")
            seen.add(manifest["snapshot"])
            rounds += 1
        except Exception as exc:  # noqa: BLE001 - every error is what the test asserts on
            errors.append(f"{type(exc).__name__}: {exc}")
        slowest = max(slowest, time.perf_counter() - started)
    result.write_text(json.dumps({"rounds": rounds, "waiting": no_snapshot_yet, "snapshots": sorted(seen),
                                  "errors": errors, "torn": torn, "slowest_round_s": slowest}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
