"""Benchmark: distributed mode end to end on the local Kafka broker.

    python benchmarks/kafka_pipeline.py [--messages 100000] [--conversations 500] [--partitions 8] [--workers 1]

Starts its own broker (deploy/kafka/local-broker.sh, free ports, temp dir),
appends MESSAGES messages over CONVERSATIONS conversations to a fresh topic,
runs WORKERS `memfold worker` subprocesses (one consumer group: fold +
summaries of the partitions each owns), a projector node in this process
and the client that appends in a process of its own, and prints:

- end-to-end messages/s: from the first append until the projection holds
  every message and no summary request is left open (append -> fold ->
  summaries -> projection);
- the raw kafka-python consume rate of the same topic, measured in the same
  run (no decoding), for comparison;
- projector lag (events behind the topic end) p50/p99/max, sampled every 100 ms;
- peak RSS of each process (client, workers, projector node);
- CPU seconds of each process and the load average: on a shared machine the
  wall-clock rates move with the load, the CPU seconds much less.

Figures, not assertions.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ingest_and_read import messages

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

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
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--summarizer-processes", type=int, default=None,
                   help="[summarizer] processes of each worker (default: the worker's own default)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-kafka-bench-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "MEMFOLD_KAFKA_DIR": str(root / "broker"), "MEMFOLD_KAFKA_PORT": str(_free_port()),
               "MEMFOLD_KAFKA_CONTROLLER_PORT": str(_free_port()), "MEMFOLD_PYTHON": sys.executable}
        bootstrap = f"127.0.0.1:{env['MEMFOLD_KAFKA_PORT']}"
        t = time.perf_counter()
        subprocess.run(["bash", str(BROKER), "start"], env=env, check=True, capture_output=True, text=True)
        print(f"local broker up at {bootstrap} in {time.perf_counter() - t:.1f}s")
        workers: list[subprocess.Popen] = []
        client = None
        try:
            topic = f"memfold.bench.{uuid.uuid4().hex[:8]}"
            settings = Settings.load(None, log=f"kafka://{bootstrap}", topic=topic, partitions=args.partitions,
                                     data_dir=root / "node")
            node = MemoryEngine(settings, role="projector")  # creates the topic; projects in a thread
            spawn = multiprocessing.get_context("spawn")
            go, report = spawn.Event(), spawn.Queue()
            client = spawn.Process(target=_client, args=(
                settings.model_copy(update={"data_dir": root / "client"}), args.messages, args.conversations, go, report))
            client.start()
            wenv = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")} | {
                "MEMFOLD_TOPIC": topic, "MEMFOLD_PARTITIONS": str(args.partitions)} | (
                {} if args.summarizer_processes is None
                else {"MEMFOLD_SUMMARIZER__PROCESSES": str(args.summarizer_processes)})
            for i in range(args.workers):
                workers.append(subprocess.Popen(
                    [str(Path(sys.executable).with_name("memfold")), "worker", "--log", f"kafka://{bootstrap}",
                     "--data-dir", str(root / f"worker{i}"), "--log-level", "INFO"],
                    env=wenv, stdout=subprocess.DEVNULL, stderr=open(root / f"worker{i}.log", "w"),
                ))
            _wait_assigned(root, args.workers, workers)
            lags: list[int] = []
            go.set()
            started = time.monotonic()  # the client process appends from now on
            stable_since = projected = None
            while True:
                ends = node.log.end_positions()
                pos = node.store.position()
                lags.append(sum(max(0, e - pos.get(p_, 0)) for p_, e in ends.items()))
                messages_in, open_requests = node.sql(
                    "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM summaries WHERE status = 'processing')"
                )[1][0]
                if projected is None and messages_in >= args.messages:
                    projected = time.monotonic()
                done = messages_in >= args.messages and not open_requests and (lags[-1] == 0 or node.runner.caught_up())
                if done:
                    stable_since = stable_since or time.monotonic()
                    if time.monotonic() - stable_since > 3:  # nothing new for 3 s: the worker is idle
                        break
                else:
                    stable_since = None
                if client.exitcode not in (None, 0):
                    raise SystemExit(f"the client process exited with {client.exitcode}")
                for i, w in enumerate(workers):
                    if w.poll() is not None:
                        raise SystemExit(f"worker {i} exited with {w.returncode}:\n{(root / f'worker{i}.log').read_text()}")
                time.sleep(0.1)
            finished = stable_since
            summaries = node.sql("SELECT status, count(*) FROM summaries GROUP BY 1 ORDER BY 1")[1]
            total_events = sum(node.log.end_positions().values())
            node.close()
            started, appended, client_rss, client_cpu = report.get(timeout=60)
            client.join(60)
            raw = _raw_consume_rate(bootstrap, topic, total_events)
            worker_cpu = [_cpu_seconds(w.pid) for w in workers]
            for w in workers:
                w.terminate()
                w.wait(60)
            worker_rss = [_peak_rss(root / f"worker{i}.log") for i in range(len(workers))]
        finally:
            if client is not None and client.is_alive():
                client.kill()
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait(30)
            subprocess.run(["bash", str(BROKER), "stop"], env=env, capture_output=True, text=True)
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(f"kafka pipeline: {args.messages:,} messages over {args.conversations} conversations, "
          f"{args.partitions} partitions, policy {settings.policy}")
    print(f"  append to Kafka      : {args.messages / (appended - started):>10,.0f} messages/s")
    e2e = args.messages / (finished - started)
    print(f"  end to end           : {e2e:>10,.0f} messages/s  "
          f"({finished - started:.1f} s: append -> fold -> summaries -> projection, {args.workers} worker(s))")
    print(f"  messages projected   : {projected - started:>10.1f} s after the first append, summaries done at "
          f"{finished - started:.1f} s")
    print(f"  raw kafka-python read: {raw:>10,.0f} records/s  ({total_events:,} records incl. derived events)")
    print(f"  ratio                : {e2e / raw:>10.2f}  (end to end / raw consume; target >= 0.30)")
    print(f"  projector lag        : p50 {statistics.median(lags):,.0f}  p99 {p99:,}  max {lags[-1]:,} events "
          f"({len(lags)} samples)")
    print(f"  summaries            : {dict(summaries)}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"  CPU seconds          : client {client_cpu:,.1f}, "
          + ", ".join(f"worker{i} {c:,.1f}" for i, c in enumerate(worker_cpu))
          + f", projector node + raw read {usage.ru_utime + usage.ru_stime:,.1f} (load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: the machine is shared)")
    print(f"  peak RSS             : client {client_rss:,.0f} MiB, "
          + ", ".join(f"worker{i} {mb:,.0f} MiB" for i, mb in enumerate(worker_rss))
          + f", projector node {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    return 0


def _client(settings: Settings, count: int, conversations: int, go, report) -> None:
    """The client process: validate and append ``count`` messages in batches of 2,000 once ``go`` is set.

    Reports (first append started, last acknowledged: monotonic clock, shared by the processes of this
    machine; peak RSS MiB; CPU seconds) on ``report``.
    """
    client = MemoryEngine(settings, role="client")
    go.wait()
    started = time.monotonic()
    batch: list = []
    for m in messages(count, conversations, seed=4):
        batch.append(client.validate(m))
        if len(batch) == 2000:
            client.append_events(batch)
            batch = []
    if batch:
        client.append_events(batch)
    appended = time.monotonic()
    client.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report.put((started, appended, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime))


def _wait_assigned(root: Path, count: int, workers: list) -> None:
    """Wait until every worker logged a partition assignment (the group is formed), at most 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(re.search(r"owning \[\d", (root / f"worker{i}.log").read_text()) for i in range(count)):
            return
        if any(w.poll() is not None for w in workers):
            break
        time.sleep(0.2)
    raise SystemExit("the workers did not join their group: " + (root / "worker0.log").read_text()[-2000:])


def _cpu_seconds(pid: int) -> float:
    """Return the user + system CPU seconds a running process has used so far (Linux /proc), or NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss(log_path: Path) -> float:
    """Return the peak RSS (MiB) a worker printed when it stopped, or NaN."""
    found = re.findall(r"peak RSS (\d+) MiB", log_path.read_text())
    return float(found[-1]) if found else float("nan")


if __name__ == "__main__":
    sys.exit(main())
