"""Benchmark: the faust worker (`memfold worker`) alone: start, fold a backlog, restart, live round trips.

    python benchmarks/faust_worker.py --bootstrap HOST:PORT [--messages 5000] [--conversations 50]
                                      [--partitions 8] [--policies hierarchical] [--live 20]

Needs a running broker (deploy/kafka/local-broker.sh start prints its
address). On a fresh topic it appends MESSAGES messages over CONVERSATIONS
conversations, then runs the worker as a subprocess and prints:

- start: process start until the worker logs "ready" (imports, Kafka
  connect, group join, table recovery), as seen from outside and as the
  worker measures it;
- backlog: from "ready" until idle (every offset committed, every request
  answered), with messages/s and events/s (messages + derived events);
- restart: SIGTERM, start again on the same data dir: time to "ready"
  (the table recovers from its changelog) and to idle;
- live: LIVE messages appended one at a time to a new conversation,
  each waited for until idle: the mean and max round trip.

"Idle" is observed the way tests/integration/test_faust_worker.py does it.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ingest_and_read import messages
from kafka import KafkaAdminClient

from memfold.engine.engine import MemoryEngine
from memfold.engine.events import SummaryRequested
from memfold.engine.settings import POLICY_NAMES, Settings
from memfold.streams.faust_app import app_id
from memfold.streams.kafka_log import KafkaEventLog

READY = re.compile(r"worker ready in ([\d.]+)s")


class Worker:
    def __init__(self, bootstrap: str, data_dir: Path, env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("memfold")), "worker", "--log", f"kafka://{bootstrap}",
             "--data-dir", str(data_dir), "--commit-interval", "0.2"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(log_path, "a"),
        )

    def wait_ready(self, seen: int) -> tuple[float, float]:
        """Return (seconds since start as seen from here, seconds the worker reports) for ready #``seen``."""
        while True:
            found = READY.findall(self.log_path.read_text())
            if len(found) >= seen:
                return time.perf_counter() - self.started, float(found[seen - 1])
            if self.proc.poll() is not None:
                raise SystemExit(f"worker exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(0.02)

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(60)


class Idle:
    """"Every offset committed, every request answered, nothing new": read incrementally, so checking stays cheap."""

    def __init__(self, log: KafkaEventLog, admin: KafkaAdminClient, group: str, topic: str):
        self.log, self.admin, self.group, self.topic = log, admin, group, topic
        self.next = {p: 0 for p in log.partitions()}
        self.requests: set[str] = set()
        self.answered: set[str] = set()

    def _read_new(self) -> None:
        for p, start in self.next.items():
            for r in self.log.read(p, start, 1_000_000):
                self.next[p] = r.position.offset + 1
                if isinstance(r.event, SummaryRequested):
                    self.requests.add(r.event.event_id)
                elif r.event.type in ("SummaryProduced", "SummaryFailed"):
                    self.answered.add(r.event.payload.request_id)

    def __call__(self) -> bool:
        ends = self.log.end_positions()
        offsets = self.admin.list_group_offsets({self.group: None}).get(self.group, {})
        committed = {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == self.topic}
        if any(committed.get(p, 0) < end for p, end in ends.items()):
            return False
        self._read_new()
        return self.requests <= self.answered and self.log.end_positions() == ends


def wait_idle(idle: Idle, worker: Worker) -> float:
    started = time.perf_counter()
    while not idle():
        if worker.proc.poll() is not None:
            raise SystemExit(f"worker exited with {worker.proc.returncode}; see {worker.log_path}")
        time.sleep(0.01)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--conversations", type=int, default=50)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--policies", default="hierarchical", help="comma-separated, or 'all'")
    p.add_argument("--live", type=int, default=20)
    args = p.parse_args(argv)
    policies = POLICY_NAMES if args.policies == "all" else tuple(args.policies.split(","))
    topic = f"bench.worker.{uuid.uuid4().hex[:8]}"
    root = Path(tempfile.mkdtemp(prefix="memfold-bench-worker-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    env.update(MEMFOLD_TOPIC=topic, MEMFOLD_PARTITIONS=str(args.partitions), MEMFOLD_POLICIES=",".join(policies))
    settings = Settings.load(None, topic=topic, partitions=args.partitions, policies=policies,
                             log=f"kafka://{args.bootstrap}", data_dir=root / "client")
    group = app_id(settings)
    log = KafkaEventLog(args.bootstrap, topic=topic, partitions=args.partitions, timeout=30)
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    client = MemoryEngine(settings, role="client")
    idle = Idle(log, admin, group, topic)
    worker: Worker | None = None
    try:
        batch = [client.validate(m) for m in messages(args.messages, args.conversations)]
        for i in range(0, len(batch), 2000):
            client.append_events(batch[i : i + 2000])
        print(f"policies {','.join(policies)}; topic {topic} with {args.partitions} partitions; data in {root}")
        print(f"appended {args.messages:,} messages over {args.conversations} conversations")

        worker = Worker(args.bootstrap, root / "worker", env, root / "worker.log")
        outside, inside = worker.wait_ready(1)
        print(f"start:   ready after {outside:.2f}s (worker reports {inside:.2f}s from run_worker)")
        took = wait_idle(idle, worker)
        total = sum(log.end_positions().values())
        requests = len(idle.requests)
        print(f"backlog: idle {took:.2f}s after ready: {args.messages / took:,.0f} messages/s, "
              f"{total / took:,.0f} events/s ({total:,} events, {requests} summary requests)")
        assert worker.stop() == 0

        worker = Worker(args.bootstrap, root / "worker", env, root / "worker.log")
        outside, inside = worker.wait_ready(2)
        took = wait_idle(idle, worker)
        print(f"restart: ready after {outside:.2f}s (worker reports {inside:.2f}s), idle {took:.2f}s later")

        trips = []
        live = list(messages(args.live, 1, seed=7))
        for m in live:
            m["conversation_id"] = "bench-live"
            started = time.perf_counter()
            client.append_events([client.validate(m)])
            wait_idle(idle, worker)
            trips.append(time.perf_counter() - started)
        if trips:
            print(f"live:    {len(trips)} messages one at a time: round trip mean {statistics.mean(trips) * 1000:.0f} ms, "
                  f"max {max(trips) * 1000:.0f} ms (append -> folded -> summaries answered -> committed)")
        assert worker.stop() == 0
        stats = re.findall(r"worker stopped .*", (root / "worker.log").read_text())
        print("worker:  " + "\n         ".join(stats))
    finally:
        if worker is not None and worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(30)
        client.close()
        log.close()
        admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
