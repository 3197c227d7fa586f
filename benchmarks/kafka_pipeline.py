"""Benchmark: distributed mode end to end on the local Kafka broker.

    python benchmarks/kafka_pipeline.py [--messages 100000] [--conversations 500] [--partitions 8]

Starts its own broker (deploy/kafka/local-broker.sh, free ports, temp dir),
appends MESSAGES messages over CONVERSATIONS conversations to a fresh topic,
runs a `memfold worker` (faust: policy fold + summarizer) in a subprocess and
a projector node in this process, and prints:

- end-to-end messages/s: from the first append until the projection holds
  every message and no summary request is left open (append -> fold ->
  summaries -> projection);
- the raw kafka-python consume rate of the same topic, measured in the same
  run (no decoding), for comparison;
- projector lag (events behind the topic end) p50/p99/max, sampled every 100 ms.

Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ingest_and_read import messages

from memfold.engine.engine import MemoryEngine
from memfold.engine.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
BROKER = ROOT / "deploy" / "kafka" / "local-broker.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raw_consume_rate(bootstrap: str, topic: str, total: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000,
                             max_poll_records=5000, fetch_max_bytes=64 * 1024 * 1024)
    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    started, seen = time.perf_counter(), 0
    while seen < total:
        batch = consumer.poll(timeout_ms=1000)
        if not batch:
            break
        seen += sum(len(v) for v in batch.values())
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--conversations", type=int, default=500)
    p.add_argument("--partitions", type=int, default=8)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-kafka-bench-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "MEMFOLD_KAFKA_DIR": str(root / "broker"), "MEMFOLD_KAFKA_PORT": str(_free_port()),
               "MEMFOLD_KAFKA_CONTROLLER_PORT": str(_free_port()), "MEMFOLD_PYTHON": sys.executable}
        bootstrap = f"127.0.0.1:{env['MEMFOLD_KAFKA_PORT']}"
        t = time.perf_counter()
        subprocess.run(["bash", str(BROKER), "start"], env=env, check=True, capture_output=True, text=True)
        print(f"local broker up at {bootstrap} in {time.perf_counter() - t:.1f}s")
        worker = None
        try:
            topic = f"memfold.bench.{uuid.uuid4().hex[:8]}"
            settings = Settings.load(None, log=f"kafka://{bootstrap}", topic=topic, partitions=args.partitions,
                                     data_dir=root / "node")
            client = MemoryEngine(settings.model_copy(update={"data_dir": root / "client"}), role="client")
            node = MemoryEngine(settings, role="projector")  # creates the topic; projects in a thread
            wenv = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")} | {
                "MEMFOLD_TOPIC": topic, "MEMFOLD_PARTITIONS": str(args.partitions)}
            worker = subprocess.Popen(
                [str(Path(sys.executable).with_name("memfold")), "worker", "--log", f"kafka://{bootstrap}",
                 "--data-dir", str(root / "worker"), "--log-level", "WARNING"],
                env=wenv, stdout=subprocess.DEVNULL, stderr=open(root / "worker.log", "w"),
            )
            time.sleep(3)  # let the worker join its group before the load starts
            lags: list[int] = []
            started = time.perf_counter()
            batch: list = []
            for m in messages(args.messages, args.conversations, seed=4):
                batch.append(client.validate(m))
                if len(batch) == 2000:
                    client.append_events(batch)
                    batch = []
            if batch:
                client.append_events(batch)
            appended = time.perf_counter()
            stable_since = None
            while True:
                ends = node.log.end_positions()
                pos = node.store.position()
                lags.append(sum(max(0, e - pos.get(p_, 0)) for p_, e in ends.items()))
                done = node.runner.caught_up() and node.sql(
                    "SELECT (SELECT count(*) FROM messages) >= ? AND "
                    "(SELECT count(*) FROM summaries WHERE status = 'processing') = 0", [args.messages]
                )[1][0][0]
                if done:
                    stable_since = stable_since or time.perf_counter()
                    if time.perf_counter() - stable_since > 3:  # nothing new for 3 s: the worker is idle
                        break
                else:
                    stable_since = None
                if worker.poll() is not None:
                    raise SystemExit(f"worker exited with {worker.returncode}; see {root / 'worker.log'}")
                time.sleep(0.1)
            finished = stable_since
            summaries = node.sql("SELECT status, count(*) FROM summaries GROUP BY 1 ORDER BY 1")[1]
            total_events = sum(node.log.end_positions().values())
            node.close()
            client.close()
            raw = _raw_consume_rate(bootstrap, topic, total_events)
        finally:
            if worker is not None and worker.poll() is None:
                worker.terminate()
                worker.wait(30)
            subprocess.run(["bash", str(BROKER), "stop"], env=env, capture_output=True, text=True)
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(f"kafka pipeline: {args.messages:,} messages over {args.conversations} conversations, "
          f"{args.partitions} partitions, policy {settings.policy}")
    print(f"  append to Kafka      : {args.messages / (appended - started):>10,.0f} messages/s")
    print(f"  end to end           : {args.messages / (finished - started):>10,.0f} messages/s  "
          f"({finished - started:.1f} s: append -> fold -> summaries -> projection)")
    print(f"  raw kafka-python read: {raw:>10,.0f} records/s  ({total_events:,} records incl. derived events)")
    print(f"  projector lag        : p50 {statistics.median(lags):,.0f}  p99 {p99:,}  max {lags[-1]:,} events "
          f"({len(lags)} samples)")
    print(f"  summaries            : {dict(summaries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
