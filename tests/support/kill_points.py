"""SIGKILL a distributed worker at many random points and check the run against a clean embedded one.

    .venv/bin/python tests/support/kill_points.py [--kills 20] [--messages 40] [--seed 1]

Starts its own local broker (deploy/kafka/local-broker.sh, free ports) unless
MEMFOLD_KAFKA_BOOTSTRAP names one. Appends MESSAGES messages of a sample
conversation one at a time; after KILLS of them (chosen at random) the worker
is SIGKILLed a random 0-300 ms later and restarted. Exits 0 when the log and
the projection equal embedded mode's with 0 lost messages and 0 duplicated
summaries; prints what differs otherwise. make test runs three kill points
(tests/integration/test_kafka_worker.py); this script is for many more.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.kafka_broker import free_port  # noqa: E402

from support.worker_kit import conversation, embedded_reference, run_with_kills  # noqa: E402

BROKER = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "local-broker.sh"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--messages", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    messages = conversation("support-4711", args.messages)
    kill_after = set(random.Random(args.seed).sample(range(args.messages), min(args.kills, args.messages)))
    with tempfile.TemporaryDirectory(prefix="memfold-kills-") as tmp:
        root = Path(tmp)
        bootstrap = os.environ.get("MEMFOLD_KAFKA_BOOTSTRAP")
        env = {**os.environ, "MEMFOLD_KAFKA_DIR": str(root / "broker"), "MEMFOLD_KAFKA_PORT": str(free_port()),
               "MEMFOLD_KAFKA_CONTROLLER_PORT": str(free_port()), "MEMFOLD_PYTHON": sys.executable}
        if bootstrap is None:
            subprocess.run(["bash", str(BROKER), "start"], env=env, check=True, capture_output=True, text=True)
            bootstrap = f"127.0.0.1:{env['MEMFOLD_KAFKA_PORT']}"
        try:
            started = time.perf_counter()
            ref_events, ref_projection = embedded_reference(root / "embedded", messages, 4)
            run = run_with_kills(bootstrap, root / "run", messages, kill_after, partitions=4, seed=args.seed)
        finally:
            if "MEMFOLD_KAFKA_BOOTSTRAP" not in os.environ:
                subprocess.run(["bash", str(BROKER), "stop"], env=env, capture_output=True, text=True)
        events = run["events"]
        problems = []
        lost = {e.event_id for e in ref_events} - {e.event_id for e in events}
        extra = {e.event_id for e in events} - {e.event_id for e in ref_events}
        if lost or extra:
            problems.append(f"{len(lost)} event(s) missing, {len(extra)} unexpected")
        duplicated = [i for i, n in run["raw"].items() if n > 1 and i.startswith("sum-")]
        if duplicated:
            problems.append(f"{len(duplicated)} summaries stored twice")
        if [(e.event_id, e.seq) for e in events] != [(e.event_id, e.seq) for e in ref_events]:
            problems.append("the log's order or seq numbers differ from embedded mode")
        problems += [f"table {t} differs" for t, rows in ref_projection.items() if run["projection"][t] != rows]
        produced = sum(e.type == "SummaryProduced" for e in events)
        print(f"{len(kill_after)} SIGKILLs over {args.messages} messages (seed {args.seed}) in "
              f"{time.perf_counter() - started:.0f}s: {len(events)} events, {produced} summaries, "
              f"{sum(run['raw'].values()) - len(run['raw'])} stored repeats; "
              + ("identical to embedded mode" if not problems else "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
