"""Benchmark: ingest throughput (append + project) and context-read latency, embedded mode.

    python benchmarks/ingest_and_read.py [--messages 200000] [--conversations 1000]
                                         [--long 10000] [--reads 2000] [--budget 3000]

Prints: messages/s for append+project of MESSAGES messages across
CONVERSATIONS conversations (time until the projection has caught up; the
summarizer keeps working in the background and its time is printed
separately), and p50/p99 latency of ``context(budget=BUDGET)`` for one
LONG-message conversation. Targets to report against: >= 20,000 messages/s,
p99 context read <= 5 ms. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from memfold.engine.engine import MemoryEngine
from memfold.engine.settings import Settings

WORDS = (
    "order refund invoice delivery address payment warranty account password shipping tracking label "
    "customer support replacement battery screen charger subscription plan upgrade discount coupon "
    "please thanks could would should today tomorrow yesterday week month number status update"
).split()
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def messages(n: int, conversations: int, seed: int = 1):
    rnd = random.Random(seed)
    for i in range(n):
        c = i % conversations
        turn = i // conversations
        yield {
            "conversation_id": f"bench-{c}",
            "role": "user" if turn % 2 == 0 else "assistant",
            "content": " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(8, 40))),
            "occurred_at": T0 + timedelta(seconds=i),
        }


def bench_ingest(root: Path, n: int, conversations: int) -> None:
    settings = Settings.load(None, data_dir=root / "ingest")
    with MemoryEngine(settings) as engine:
        batch: list = []
        started = time.perf_counter()
        last = None
        for m in messages(n, conversations):
            batch.append(engine.validate(m))
            if len(batch) == 2000:
                last = engine.append_events(batch)[-1]
                batch = []
        if batch:
            last = engine.append_events(batch)[-1]
        appended = time.perf_counter()
        while not engine.runner.caught_up():
            time.sleep(0.005)
        projected = time.perf_counter()
        engine.wait_idle(timeout=1800)
        idle = time.perf_counter()
        summaries = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed'")[1][0][0]
        assert last is not None
    print(f"ingest: {n:,} messages over {conversations:,} conversations (policy {settings.policy})")
    print(f"  append only          : {n / (appended - started):>10,.0f} messages/s  ({appended - started:.2f} s)")
    print(f"  append + project     : {n / (projected - started):>10,.0f} messages/s  ({projected - started:.2f} s)   target >= 20,000")
    print(f"  + summaries (idle)   : {n / (idle - started):>10,.0f} messages/s  ({idle - started:.2f} s, {summaries} summaries)")


def _writer(data_dir: str, n: int, conversations: int) -> None:
    """Append from a separate process, as a web app's writers would (SQLite is multi-process safe)."""
    settings = Settings.load(None, data_dir=Path(data_dir))
    engine = MemoryEngine(settings, role="client")
    batch: list = []
    for m in messages(n, conversations, seed=3):
        batch.append(engine.validate(m))
        if len(batch) == 2000:
            engine.append_events(batch)
            batch = []
    if batch:
        engine.append_events(batch)
    engine.close()


def bench_two_processes(root: Path, n: int, conversations: int) -> None:
    import multiprocessing

    data_dir = root / "two"
    settings = Settings.load(None, data_dir=data_dir)
    with MemoryEngine(settings) as engine:  # the projecting process (creates the log first)
        ctx = multiprocessing.get_context("spawn")
        started = time.perf_counter()
        writer = ctx.Process(target=_writer, args=(str(data_dir), n, conversations))
        writer.start()
        while True:
            rows = engine.sql("SELECT count(*) FROM messages")[1][0][0] if engine.runner.caught_up() else 0
            if rows >= n:
                break
            time.sleep(0.01)
        projected = time.perf_counter()
        writer.join()
    print(f"  writer process + projecting engine: {n / (projected - started):>10,.0f} messages/s  "
          f"({projected - started:.2f} s, 2 processes on 2 cores)")


def bench_read(root: Path, long: int, reads: int, budget: int) -> None:
    settings = Settings.load(None, data_dir=root / "read")
    with MemoryEngine(settings) as engine:
        batch = [engine.validate(m) for m in messages(long, 1, seed=2)]
        for i in range(0, len(batch), 2000):
            engine.append_events(batch[i : i + 2000])
        engine.wait_idle(timeout=600)
        conv = "bench-0"
        for _ in range(50):  # warm up caches and the DuckDB plan
            engine.context(conv, budget=budget)
        samples = []
        for _ in range(reads):
            t = time.perf_counter()
            ctx = engine.context(conv, budget=budget)
            samples.append((time.perf_counter() - t) * 1000)
        samples.sort()
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    kinds = {}
    for m in ctx:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    print(f"context read: {long:,}-message conversation, budget {budget} tokens, {reads} reads (policy {settings.policy})")
    print(f"  p50 {p50:.2f} ms   p99 {p99:.2f} ms   max {samples[-1]:.2f} ms   target p99 <= 5 ms")
    print(f"  last context: {len(ctx)} messages, {sum(m.tokens for m in ctx)} tokens, kinds {kinds}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--conversations", type=int, default=1_000)
    p.add_argument("--long", type=int, default=10_000)
    p.add_argument("--reads", type=int, default=2_000)
    p.add_argument("--budget", type=int, default=3_000)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-bench-") as tmp:
        bench_ingest(Path(tmp), args.messages, args.conversations)
        bench_two_processes(Path(tmp), args.messages, args.conversations)
        bench_read(Path(tmp), args.long, args.reads, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
