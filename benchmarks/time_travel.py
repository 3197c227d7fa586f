"""Benchmark: time-travel context reads (``context(..., as_of=position)``), embedded mode.

    python benchmarks/time_travel.py [--messages 10000] [--reads 1000] [--budget 3000] [--policy hierarchical]
                                       [--step 50]

Ingests MESSAGES messages into one conversation, STEP at a time, waiting
for the summaries due after each step (as live talk would), then reads the context as of READS random log
positions of that conversation's history. Prints p50/p99/max latency and
how many events each read folded forward from its snapshot. Target to
report against: p99 <= 10 ms at 10,000 messages. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memfold.engine.engine import MemoryEngine
from memfold.engine.positions import Position
from memfold.engine.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_and_read import messages  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=10_000)
    p.add_argument("--reads", type=int, default=1_000)
    p.add_argument("--budget", type=int, default=3_000)
    p.add_argument("--policy", default="hierarchical")
    p.add_argument("--step", type=int, default=50, help="messages appended between waits for the summaries")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-tt-") as tmp:
        settings = Settings.load(None, data_dir=Path(tmp) / "tt", policy=args.policy, policies=(args.policy,))
        with MemoryEngine(settings) as engine:
            batch = [engine.validate(m) for m in messages(args.messages, 1, seed=5)]
            started = time.perf_counter()
            for i in range(0, len(batch), args.step):  # paced, as live talk: summaries land between steps
                engine.append_events(batch[i : i + args.step])
                engine.wait_idle(timeout=600)
            ingested = time.perf_counter() - started
            conv = "bench-0"
            cols, rows = engine.sql(
                'SELECT "partition", "offset", seq FROM events WHERE conversation_id = ? ORDER BY seq', [conv])
            snapshots = engine.sql("SELECT count(*) FROM state_history WHERE conversation_id = ?", [conv])[1][0][0]
            rnd = random.Random(7)
            picks = [rows[rnd.randrange(len(rows))] for _ in range(args.reads)]
            figures = {}
            for budget in (None, args.budget):
                for part, off, _seq in picks[:20]:  # warm up: the history loads once per conversation
                    engine.context(conv, budget=budget, as_of=Position(part, off))
                samples = []
                for part, off, _seq in picks:
                    t = time.perf_counter()
                    ctx = engine.context(conv, budget=budget, as_of=Position(part, off))
                    samples.append((time.perf_counter() - t) * 1000)
                live = time.perf_counter()
                for _ in range(50):
                    engine.context(conv, budget=budget)
                figures[budget] = (sorted(samples), (time.perf_counter() - live) * 1000 / 50, len(ctx))
    print(f"time travel: {args.messages:,}-message conversation ({len(rows):,} events, {snapshots} state snapshots, "
          f"ingested + summarized in {ingested:.1f} s, policy {args.policy}), {args.reads} random positions")
    for budget, (samples, live_ms, size) in figures.items():
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        what = "no budget (no recall)" if budget is None else f"budget {budget} (with recall)"
        print(f"  context(as_of=position), {what:<28}: p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   "
              f"max {samples[-1]:7.2f} ms   (live read {live_ms:.2f} ms; last: {size} messages)")
    print("  target: p99 <= 10 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
