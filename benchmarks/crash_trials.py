"""Benchmark: the full kill -9 run. SIGKILL memfold processes at random moments, restart as README says, check.

usage: python benchmarks/crash_trials.py [--trials 100] [--seed N] [--no-kafka] [--minutes M]

Trials rotate over: the embedded ingest process while it appends, the same
process while its summarizer worker answers requests, the embedded projector
(``memfold rebuild``), and (on a local broker this script starts) a Kafka
ingest client followed by a projector node on its topic, and a distributed
worker (``memfold worker``, through tests/support/worker_kit.py, compared with
a clean embedded run). Every trial checks
that no acknowledged message is lost, nothing is stored twice (messages or
summaries), and the projection equals a from-scratch rebuild (table dumps).
Prints one line per trial, then trials / failures per kind. ``--minutes``
stops starting new trials after that long (the count run is printed).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import crash_kit  # noqa: E402

KINDS = ("embedded-ingest", "embedded-summarize", "embedded-projector", "kafka", "embedded-ingest",
         "embedded-summarize", "embedded-projector", "kafka", "kafka-worker")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-kafka", action="store_true", help="embedded trials only (no broker)")
    ap.add_argument("--minutes", type=float, default=None, help="start no new trial after this long")
    ap.add_argument("--lines", type=int, default=300, help="input lines per trial")
    args = ap.parse_args(argv)

    rnd = random.Random(args.seed)
    kinds = tuple(k for k in KINDS if not k.startswith("kafka")) if args.no_kafka else KINDS
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # kind -> [trials, failures, killed mid-run]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="memfold-crash-") as tmp:
        broker = None
        bootstrap = None
        try:
            if not args.no_kafka:
                from fixtures.kafka_broker import LocalBroker

                broker = LocalBroker(Path(tmp) / "broker")
                bootstrap = broker.start()
                print(f"local broker at {bootstrap}", flush=True)
            for n in range(args.trials):
                if args.minutes is not None and time.monotonic() - started > args.minutes * 60:
                    print(f"stopping after {args.minutes} minutes", flush=True)
                    break
                kind = kinds[n % len(kinds)]
                root = Path(tmp) / f"trial-{n}"
                root.mkdir()
                t = time.monotonic()
                for result in _guarded(_trial(kind, root, rnd, bootstrap, args.lines), kind):
                    row = totals[result.kind]
                    row[0] += 1
                    row[1] += result.failed
                    row[2] += result.killed
                    status = "FAIL" if result.failed else "ok"
                    print(f"trial {n + 1:>3} {result.kind:<20} {status:<4} killed={result.killed!s:<5} "
                          f"lost={result.lost} duplicated={result.duplicated} differs={result.differs} "
                          f"{time.monotonic() - t:5.1f}s {'; '.join(result.notes)}", flush=True)
        finally:
            if broker is not None:
                broker.stop()
    trials = sum(r[0] for r in totals.values())
    failures = sum(r[1] for r in totals.values())
    print()
    for kind, (count, failed, killed) in sorted(totals.items()):
        print(f"{kind:<20} trials {count:>3}  failures {failed:>2}  killed mid-run {killed:>3}")
    print(f"trials {trials} / failures {failures} in {time.monotonic() - started:.0f}s")
    return 1 if failures else 0


def _guarded(results, kind: str):
    """Yield the trial's results; a trial that raises (a restart that fails, a hang) is one failed trial."""
    try:
        yield from results
    except Exception as exc:
        result = crash_kit.TrialResult(kind, killed=True, differs=True)
        result.notes.append(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        yield result


def _trial(kind: str, root: Path, rnd: random.Random, bootstrap: str | None, lines: int):
    conversations = max(1, lines // 100)
    if kind == "embedded-projector":
        yield crash_kit.projector_trial(root, rnd, lines=lines, conversations=conversations)
    elif kind == "kafka-worker":
        yield crash_kit.kafka_worker_trial(root, rnd, bootstrap)
    elif kind.startswith("embedded-"):
        yield crash_kit.embedded_trial(root, rnd, kind.removeprefix("embedded-"), lines=lines, conversations=conversations)
    else:
        ingest = crash_kit.kafka_ingest_trial(root, rnd, bootstrap, lines=lines, conversations=conversations)
        yield ingest
        topic = next(n.split()[1] for n in ingest.notes if n.startswith("topic "))
        yield crash_kit.kafka_projector_trial(root, rnd, bootstrap, topic)


if __name__ == "__main__":
    sys.exit(main())
