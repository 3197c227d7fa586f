"""Benchmark: ingest throughput (append + project) and context-read latency, embedded mode.

    python benchmarks/ingest_and_read.py [--messages 20000,200000] [--conversations 1000]
                                         [--long 10000] [--reads 2000] [--budget 3000]
                                         [--dense local|openai|st] [--only-reads | --only-ingest]

Prints, for each size in MESSAGES: messages/s for append+project across
CONVERSATIONS conversations (time until the projection has caught up; the
summarizer keeps working in the background and its time is printed
separately) next to a plain SQLite insert of the same rows measured in the
same run, and their ratio; then p50/p99 latency of
``context(budget=BUDGET)`` for one LONG-message conversation, without and
with a query (BM25 recall; a typical query and a low-vocabulary one made of
the conversation's most common words), and the peak RSS of the process. Targets to
report against: append + project >= 30% of the plain SQLite insert and
>= 50,000 messages/s, p99 context read <= 5 ms (with a query too).
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

WORDS = (
    "order refund invoice delivery address payment warranty account password shipping tracking label "
    "customer support replacement battery screen charger subscription plan upgrade discount coupon "
    "please thanks could would should today tomorrow yesterday week month number status update"
).split()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


def bench_sqlite_insert(root: Path, n: int, conversations: int) -> float:
    """Return rows/s of a plain SQLite insert of the same rows (batches of 2,000, one commit each).

    Same durability as memfold's log: WAL journal, ``synchronous=FULL`` (a
    committed batch survives power loss), one transaction per batch of 2,000.
    """
    import sqlite3

    con = sqlite3.connect(root / f"plain-{n}.sqlite")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id TEXT, role TEXT, content TEXT, ts TEXT)")
    rows = [(m["conversation_id"], m["role"], m["content"], m["occurred_at"].isoformat()) for m in messages(n, conversations)]
    started = time.perf_counter()
    for i in range(0, n, 2000):
        with con:
            con.executemany("INSERT INTO messages (conversation_id, role, content, ts) VALUES (?, ?, ?, ?)",
                            rows[i : i + 2000])
    elapsed = time.perf_counter() - started
    con.close()
    return n / elapsed


def bench_ingest(root: Path, n: int, conversations: int) -> None:
    plain = bench_sqlite_insert(root, n, conversations)
    settings = Settings.load(None, data_dir=root / f"ingest-{n}")
    with MemoryEngine(settings) as engine:
        batch: list = []
        source = list(messages(n, conversations))  # made before the clock starts, as the plain insert's rows are
        started = time.perf_counter()
        last = None
        for m in source:
            batch.append(engine.validate(m))
            if len(batch) == 2000:
                last = engine.append_events(batch)[-1]
                batch = []
        if batch:
            last = engine.append_events(batch)[-1]
        appended = time.perf_counter()
        # Wait on the positions the store commits (a dict read), not on caught_up(), which reads and
        # decodes from the log: polled every 5 ms it took the CPU the projector needs.
        ends = engine.log.end_positions()
        while any(engine.store.position().get(p, 0) < end for p, end in ends.items()):
            time.sleep(0.005)
        while not engine.runner.caught_up():  # and the requests the runner appended meanwhile
            time.sleep(0.005)
        projected = time.perf_counter()
        engine.wait_idle(timeout=1800)
        idle = time.perf_counter()
        summaries = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed'")[1][0][0]
        assert last is not None
    print(f"ingest: {n:,} messages over {conversations:,} conversations (policy {settings.policy})")
    print(f"  append only          : {n / (appended - started):>10,.0f} messages/s  ({appended - started:.2f} s)")
    rate = n / (projected - started)
    print(f"  append + project     : {rate:>10,.0f} messages/s  ({projected - started:.2f} s)   target >= 50,000")
    print(f"  plain SQLite insert  : {plain:>10,.0f} rows/s      (same rows, same run; WAL, synchronous=FULL like the log)")
    print(f"  ratio                : {rate / plain:>10.2f}  (append + project / plain insert; target >= 0.30)")
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


def _talk(n: int, seed: int = 5):
    """Yield ``n`` alternating turns over a Zipf-distributed 5,000-word vocabulary (real talk's shape, not 50 words)."""
    rnd = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "du", "nor", "pi", "ga", "tes", "ul", "bri", "co"]
    vocab = sorted({"".join(rnd.choice(syllables) for _ in range(rnd.randint(2, 4))) for _ in range(6000)})[:5000]
    rnd.shuffle(vocab)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    glue = ["the", "and", "I", "you", "was", "to", "of", "it", "we", "that"]
    for i in range(n):
        words = rnd.choices(vocab, weights, k=rnd.randint(8, 60))
        text = " ".join(w if rnd.random() < 0.6 else f"{rnd.choice(glue)} {w}" for w in words)
        yield {"conversation_id": "recall-0", "role": "user" if i % 2 == 0 else "assistant", "content": text,
               "occurred_at": T0 + timedelta(minutes=10 * i)}


def bench_recall_read(root: Path, long: int, reads: int, budget: int, dense: str | None = None) -> None:
    """Print p50/p99 of ``context(budget, query=...)`` on one LONG-message conversation (BM25 recall on).

    Three kinds of query, each so every read ranks, recalls, and fills the rest of the budget:
    *typical*, a question made of 2-5 words of a random earlier message; *low-vocabulary*,
    4 of the conversation's 12 most common words (each in thousands of messages: the case
    that makes BM25 score the most postings); and *overview*, "in what order did I bring up
    ... across our conversations?" (a question about the order: below 4,000 tokens of room, so
    at the default budget too, it ranks 128 hits, not 64). With ``dense`` (an embedder kind), recall fuses
    BM25 with that embedder's ranking; every query is new, so each read embeds its query once.
    Then the engine is opened again (a restarted process) and typical reads are timed from cold.
    """
    from collections import Counter

    extra = {"retrieval": {"embedder": dense}} if dense else {}
    settings = Settings.load(None, data_dir=root / f"recall-{dense or 'bm25'}", **extra)
    with MemoryEngine(settings) as engine:
        history = list(_talk(long))
        batch = [engine.validate(m) for m in history]
        for i in range(0, len(batch), 2000):
            engine.append_events(batch[i : i + 2000])
        engine.wait_idle(timeout=600)
        rnd = random.Random(7)
        common = [w for w, _ in Counter(w for m in history for w in m["content"].split()).most_common(40) if len(w) > 3][:12]

        def typical() -> str:
            words = history[rnd.randrange(long - 50)]["content"].split()
            return "when did we talk about " + " ".join(rnd.sample(words, min(len(words), rnd.randint(2, 5)))) + "?"

        def low_vocabulary() -> str:
            return "what did we say about the " + " ".join(rnd.sample(common, 4)) + "?"

        def overview() -> str:  # a question about the whole conversation: with little room, a wider ranking
            words = history[rnd.randrange(long - 50)]["content"].split()
            return "in what order did I bring up " + " ".join(rnd.sample(words, min(len(words), 3))) + " across our conversations?"

        conv = "recall-0"
        for _ in range(50):  # warm up: the first read loads the conversation's index into memory
            engine.context(conv, budget=budget, query=typical())
        print(f"context read with a query: {long:,}-message conversation, budget {budget} tokens, {reads} reads "
              f"per kind (policy {settings.policy}, {'BM25 fused with ' + dense + ' embeddings' if dense else 'BM25'} recall)")
        for name, question in (("typical", typical), ("low-vocabulary", low_vocabulary), ("overview", overview)):
            _time_reads(engine, conv, budget, reads, name, question)
    # A restarted process holds nothing in memory: its reads of a conversation no batch has touched since
    # fill the caches from the store (the first read also loads the recall index; it is in these figures).
    with MemoryEngine(settings) as engine:
        _time_reads(engine, conv, budget, reads, "typical, after a restart", typical)


def _time_reads(engine, conv: str, budget: int, reads: int, name: str, question) -> None:
    samples, cpu, recalled = [], [], 0
    for _ in range(reads):
        q = question()
        t, c = time.perf_counter(), time.thread_time()
        ctx = engine.context(conv, budget=budget, query=q)
        cpu.append((time.thread_time() - c) * 1000)
        samples.append((time.perf_counter() - t) * 1000)
        recalled += sum(m.kind == "recalled" for m in ctx)
    samples.sort()
    cpu.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    cpu_p99 = cpu[min(len(cpu) - 1, int(len(cpu) * 0.99))]
    print(f"  {name:15s} p50 {statistics.median(samples):.2f} ms   p99 {p99:.2f} ms   max {samples[-1]:.2f} ms"
          f"   target p99 <= 5 ms   ({recalled / reads:.1f} recalled messages per context)")
    print(f"  {'':15s} CPU time of the reading thread: p50 {statistics.median(cpu):.2f} ms   p99 {cpu_p99:.2f} ms "
          f"(wall minus waiting for a core: tells a slow read from a busy machine)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", default="20000,200000", help="sizes to ingest, comma separated")
    p.add_argument("--conversations", type=int, default=1_000)
    p.add_argument("--long", type=int, default=10_000)
    p.add_argument("--reads", type=int, default=2_000)
    p.add_argument("--budget", type=int, default=3_000)
    p.add_argument("--dense", choices=("local", "openai", "st"), default=None,
                   help="also time reads with BM25 fused with this embedder's dense retrieval")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--only-reads", action="store_true", help="skip the ingest benchmarks")
    only.add_argument("--only-ingest", action="store_true",
                      help="only append + project (and time to idle) per size: no two-process run, no reads")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-bench-") as tmp:
        if not args.only_reads:
            sizes = [int(x) for x in args.messages.split(",")]
            for n in sizes:
                before = _rss()
                bench_ingest(Path(tmp), n, args.conversations)
                # The engine is closed by now; what it grew is what the process holds beyond the input
                # rows (also counted here) and what the allocator keeps.
                print(f"  RSS                  : {before:,.0f} MiB before, {_rss():,.0f} MiB after this ingest")
            if args.only_ingest:
                return _peak_rss()
            bench_two_processes(Path(tmp), sizes[0], args.conversations)
        bench_read(Path(tmp), args.long, args.reads, args.budget)
        bench_recall_read(Path(tmp), args.long, args.reads, args.budget)
        if args.dense:
            dense = {"st": "sentence-transformers"}.get(args.dense, args.dense)
            bench_recall_read(Path(tmp), args.long, args.reads, args.budget, dense=dense)
    return _peak_rss()


def _rss() -> float:
    """Resident set size of this process now, in MiB (Linux)."""
    import os

    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss() -> int:
    import resource

    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB (this process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
