"""Benchmark: what-if replays and verify, embedded mode.

    python benchmarks/replay.py [--messages 200000] [--conversations 1000] [--set sliding_window.rolling_window_size=10]

Ingests MESSAGES messages over CONVERSATIONS conversations (the default
policy, offline summarizer), waits for the live summaries, then times:
(1) a replay with the changed settings (every summary of the new settings
is a model call of the offline summarizer: messages/s and calls printed);
(2) the same replay into a second namespace, where every summary comes from
the shared cache (target to report against: >= 50,000 messages/s);
(3) ``verify`` of the live projection; then the peak RSS of the process.
Replays also print the process CPU seconds they took (every thread), the
comparable figure when other work shares the machine. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from memfold.core.overrides import parse_assignments
from memfold.core.runtime import tune_gc
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_and_read import messages  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    tune_gc()  # as memfold replay / rebuild / verify do
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--conversations", type=int, default=1_000)
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    overrides = parse_assignments(args.assignments or ["sliding_window.rolling_window_size=10"])
    with tempfile.TemporaryDirectory(prefix="memfold-replay-") as tmp:
        with MemoryEngine(Settings.load(None, data_dir=Path(tmp) / "d")) as engine:
            started = time.perf_counter()
            batch = [engine.validate(m) for m in messages(args.messages, args.conversations, seed=3)]
            for i in range(0, len(batch), 5000):
                engine.append_events(batch[i : i + 5000])
            engine.wait_idle(timeout=3600)
            events = engine.sql("SELECT count(*) FROM events")[1][0][0]
            print(f"live: {args.messages:,} messages over {args.conversations:,} conversations, {events:,} events "
                  f"in the log, ingested and summarized in {time.perf_counter() - started:.1f}s")
            for name, what in (("first", "offline summarizer"), ("cached", "every summary from the cache")):
                cpu = time.process_time()
                report = engine.replay(name, overrides=overrides)
                rate = args.messages / report.seconds
                cpu = time.process_time() - cpu  # on a shared, loaded machine the steadier figure
                print(f"replay {name} ({what}): {report.seconds:.2f}s ({cpu:.2f} CPU s), {rate:,.0f} messages/s "
                      f"({report.run.folded / report.seconds:,.0f} log events/s); {report.run.answered:,} requests, "
                      f"{report.run.cache_hits:,} cache hits, {report.run.model_calls:,} model calls")
            started = time.perf_counter()
            diffs = engine.verify()
            took = time.perf_counter() - started
            print(f"verify: {took:.2f}s ({args.messages / took:,.0f} messages/s), "
                  f"{'identical' if not diffs else f'{len(diffs)} table(s) differ'}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")  # kilobytes on Linux
    return 0


if __name__ == "__main__":
    sys.exit(main())
