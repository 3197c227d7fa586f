"""Benchmark: time-travel context reads (``context(..., as_of=position)``), embedded mode.

    python benchmarks/time_travel.py [--messages 10000] [--reads 1000] [--budget 3000] [--policy hierarchical]
                                       [--step 500]

Ingests MESSAGES messages into one conversation, STEP at a time (one batch
each), waiting for the summaries due after each step and recording the live
context (with and without a budget) at that point of the log; then reads the
context as of READS random log positions of that conversation's history.
Prints p50/p99/max latency, and checks that the context as of each recorded
position equals what the live read returned there. Target to report against:
p99 <= 10 ms at 10,000 messages. Figures, not assertions (a mismatch is
printed and makes the exit status 1).

Why batches of STEP, not a few messages between waits: a hierarchical
summary is over every message so far, so each wait costs a summarizer call
over the whole conversation; 200 waits (STEP 50) made the setup quadratic
(over 10 minutes at 10,000 messages), 20 waits keep it to about 70 s of CPU. In
between, positions still see a summary lagging by up to STEP messages, as a
slow summarizer leaves it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memfold.core.positions import Position
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_and_read import messages  # noqa: E402

CONVERSATION = "bench-0"


def ingest(engine: MemoryEngine, n: int, step: int, budgets: tuple[int | None, ...]) -> tuple[list, float]:
    """Append ``n`` messages in batches of ``step``, waiting after each; return (recorded contexts, seconds).

    Recorded: (position, budget, live context as dicts) right after each batch and its summaries.
    """
    batch = [engine.validate(m) for m in messages(n, 1, seed=5)]
    recorded = []
    started = time.perf_counter()
    for i in range(0, len(batch), step):
        last = engine.append_events(batch[i : i + step])[-1]
        engine.wait_idle(timeout=600)
        at = Position(last.partition, engine.store.position()[last.partition] - 1)  # the summaries too
        for budget in budgets:
            recorded.append((at, budget, [m.as_dict() for m in engine.context(CONVERSATION, budget=budget)]))
    return recorded, time.perf_counter() - started


def read(engine: MemoryEngine, picks: list[Position], budget: int | None) -> tuple[list[float], list[float], float, int]:
    """Return (sorted as-of latencies in ms, sorted CPU ms of the reading thread, live read ms, size of the last context).

    The CPU time leaves out waiting for a core: on a shared, loaded machine
    the latency's tail is mostly that wait.
    """
    for at in picks[:20]:  # warm up: the history loads once per conversation
        engine.context(CONVERSATION, budget=budget, as_of=at)
    samples, cpu = [], []
    for at in picks:
        t, c = time.perf_counter(), time.thread_time()
        ctx = engine.context(CONVERSATION, budget=budget, as_of=at)
        cpu.append((time.thread_time() - c) * 1000)
        samples.append((time.perf_counter() - t) * 1000)
    live = time.perf_counter()
    for _ in range(50):
        engine.context(CONVERSATION, budget=budget)
    return sorted(samples), sorted(cpu), (time.perf_counter() - live) * 1000 / 50, len(ctx)


def mismatches(engine: MemoryEngine, recorded: list) -> int:
    """Return how many recorded live contexts the as-of read does not reproduce exactly."""
    return sum([m.as_dict() for m in engine.context(CONVERSATION, budget=budget, as_of=at)] != expected
               for at, budget, expected in recorded)


def _p99(samples: list[float]) -> float:
    return samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def report(samples: list[float], cpu: list[float], live_ms: float, size: int, budget: int | None) -> str:
    what = "no budget (no recall)" if budget is None else f"budget {budget} (with recall)"
    return (f"  context(as_of=position), {what:<28}: p50 {statistics.median(samples):7.2f} ms   "
            f"p99 {_p99(samples):7.2f} ms   max {samples[-1]:7.2f} ms   (CPU p50 {statistics.median(cpu):.2f} ms, "
            f"p99 {_p99(cpu):.2f} ms; live read {live_ms:.2f} ms; last: {size} messages)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=10_000)
    p.add_argument("--reads", type=int, default=1_000)
    p.add_argument("--budget", type=int, default=3_000)
    p.add_argument("--policy", default="hierarchical")
    p.add_argument("--step", type=int, default=500, help="messages per batch, each followed by a wait for its summaries")
    args = p.parse_args(argv)
    budgets = (None, args.budget)
    with tempfile.TemporaryDirectory(prefix="memfold-tt-") as tmp:
        settings = Settings.load(None, data_dir=Path(tmp) / "tt", policy=args.policy, policies=(args.policy,))
        with MemoryEngine(settings) as engine:
            recorded, ingested = ingest(engine, args.messages, args.step, budgets)
            _cols, rows = engine.sql(
                'SELECT "partition", "offset" FROM events WHERE conversation_id = ? ORDER BY seq', [CONVERSATION])
            snapshots = engine.sql("SELECT count(*) FROM state_history WHERE conversation_id = ?", [CONVERSATION])[1][0][0]
            rnd = random.Random(7)
            picks = [Position(*rows[rnd.randrange(len(rows))]) for _ in range(args.reads)]
            figures = {budget: read(engine, picks, budget) for budget in budgets}
            wrong = mismatches(engine, recorded)
    print(f"time travel: {args.messages:,}-message conversation ({len(rows):,} events, {snapshots} state snapshots, "
          f"ingested + summarized in {ingested:.1f} s, batches of {args.step}, policy {args.policy}), "
          f"{args.reads} random positions")
    for budget, figure in figures.items():
        print(report(*figure, budget))
    print(f"  as of the {len(recorded)} positions recorded during ingestion: "
          f"{len(recorded) - wrong} equal to the live read then, {wrong} differ")
    print("  target: p99 <= 10 ms")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
