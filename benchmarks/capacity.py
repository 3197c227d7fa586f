"""Benchmark: the capacity model's inputs, measured on this machine in one run (distributed mode, local broker).

    python benchmarks/capacity.py [--messages 40000] [--conversations 400] [--partitions 8] [--reads 300]

Starts its own broker (deploy/kafka/local-broker.sh, free ports, temp dir),
appends MESSAGES messages over CONVERSATIONS conversations to a fresh topic
of PARTITIONS partitions, then measures:

1. **Shard nodes.** `memfold project --until-caught-up` as one full replica,
   then as two shard nodes (`--partitions` halves):
   each node's CPU seconds (user + system, from the kernel's accounting of
   the child; the nodes run one after the other, ``--together`` at the same
   time), the events it folded, events per CPU-second, and each shard
   node's CPU over the full node's (the point of sharding: about 0.5). The
   CPU a node spends starting (imports, opening the topic) is measured on an
   empty topic and shown apart, so the per-event figures are of folding.
2. **Replay groups.** `engine.replay` of the topic with 1 and then 2
   processes (fresh namespaces, the live settings, so no summarizer work):
   wall seconds, messages/s and the broker's CPU seconds meanwhile (it runs
   on the same 2 cores).
3. **Routed reads.** Two `memfold serve` shard nodes; READS reads of one
   conversation's messages straight from its owner and through the other
   node (forwarded): p50/p99 of each and the difference, the router's cost.

Figures, not assertions; the sizing table in docs/operations.md is built
from them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from ingest_and_read import messages

from memfold.core.partitioner import partition_for
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

ROOT = Path(__file__).resolve().parents[1]
BROKER = ROOT / "deploy" / "kafka" / "local-broker.sh"
MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_cpu(pid: int) -> float:
    """Return the CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    """Return the CPU seconds of this process and of its children reaped so far (a replay group's processes)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _node_env(topic: str, partitions: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    return env | {"MEMFOLD_TOPIC": topic, "MEMFOLD_PARTITIONS": str(partitions)}


def _project(bootstrap: str, topic: str, partitions: int, data_dir: Path, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([MEMFOLD, "project", "--log", f"kafka://{bootstrap}", "--data-dir", str(data_dir),
                             "--until-caught-up", *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=_node_env(topic, partitions))


def _finish(proc: subprocess.Popen) -> tuple[float, int, str]:
    """Wait for a node; return its CPU seconds (kernel accounting of the child), events folded, output."""
    out = proc.stdout.read() if proc.stdout else ""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"memfold project exited with {proc.returncode}:\n{out}")
    m = re.search(r"projected (\d+) events", out)
    return usage.ru_utime + usage.ru_stime, int(m.group(1)) if m else 0, out


def shard_nodes(bootstrap: str, topic: str, partitions: int, root: Path, together: bool = False) -> dict:
    empty = f"{topic}.empty"
    base, _, _ = _finish(_project(bootstrap, empty, partitions, root / "baseline"))
    full_cpu, full_events, _ = _finish(_project(bootstrap, topic, partitions, root / "full"))
    half = partitions // 2
    lists = [",".join(map(str, range(0, half))), ",".join(map(str, range(half, partitions)))]
    # One after the other: two nodes are two machines; run together on this machine's 2 shared cores they
    # would measure one machine's contention (--together does that instead).
    if together:
        procs = [_project(bootstrap, topic, partitions, root / f"shard{i}", "--partitions", lst)
                 for i, lst in enumerate(lists)]
        shards = [_finish(p)[:2] for p in procs]
    else:
        shards = [_finish(_project(bootstrap, topic, partitions, root / f"shard{i}", "--partitions", lst))[:2]
                  for i, lst in enumerate(lists)]
    how = "run together" if together else "run one after the other"
    print(f"\n1. shard nodes ({partitions} partitions, {how}; a node's start-up, measured on an empty topic: "
          f"{base:.2f} CPU s)")
    print(f"   {'node':<22}{'events':>9}{'CPU s':>9}{'folding CPU s':>15}{'events/CPU s':>14}{'CPU vs full':>13}")
    net_full = max(1e-6, full_cpu - base)
    print(f"   {'full replica':<22}{full_events:>9,}{full_cpu:>9.2f}{net_full:>15.2f}{full_events / net_full:>14,.0f}"
          f"{1.0:>13.2f}")
    ratios = []
    for (cpu, events), lst in zip(shards, lists):
        net = max(1e-6, cpu - base)
        ratios.append(net / net_full)
        print(f"   {'shard ' + lst:<22}{events:>9,}{cpu:>9.2f}{net:>15.2f}{events / net:>14,.0f}{net / net_full:>13.2f}")
    return {"full_events_per_cpu_s": full_events / net_full, "shard_cpu_ratio": max(ratios), "startup_cpu_s": base,
            "shard_events": [e for _, e in shards]}


def replay_groups(settings: Settings, broker_pid: int, n_messages: int) -> dict:
    out = {}
    with MemoryEngine(settings.model_copy(update={"data_dir": settings.data_dir.parent / "replayer"}),
                      role="projector", start=False) as engine:
        engine.replay("warm", processes=1)  # builds this node's offset index of the topic once, as a node has it
        print("\n2. replay groups (live settings: folding only; fresh namespaces)")
        for processes in (1, 2):
            broker, cpu = _proc_cpu(broker_pid), _own_cpu()
            report = engine.replay(f"p{processes}", processes=processes)
            broker, cpu = _proc_cpu(broker_pid) - broker, _own_cpu() - cpu
            rate = n_messages / report.seconds
            out[processes] = rate
            print(f"   {processes} process(es): {report.seconds:6.2f}s, {rate:8,.0f} messages/s "
                  f"({report.run.folded:,} events), {cpu:.2f} CPU s in memfold's processes, "
                  f"{n_messages / cpu:,.0f} messages per CPU s; the broker took {broker:.2f} CPU s meanwhile")
    print(f"   2 processes / 1: {out[2] / out[1]:.2f}x (load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs: a second process only helps when a core is free)")
    return out


def routed_reads(bootstrap: str, topic: str, partitions: int, root: Path, conversations: int, reads: int) -> dict:
    env = _node_env(topic, partitions)
    done = subprocess.run([MEMFOLD, "--data-dir", str(root / "ops"), "--log", f"kafka://{bootstrap}", "keys", "create",
                           "--tenant", "default", "--role", "reader", "--json"], capture_output=True, text=True,
                          env=env, check=True)
    key = json.loads(done.stdout)["key"]
    half = partitions // 2
    nodes = []
    for i, lst in enumerate((range(0, half), range(half, partitions))):
        port = _free_port()
        proc = subprocess.Popen([MEMFOLD, "--data-dir", str(root / f"serve{i}"), "serve", "--log", f"kafka://{bootstrap}",
                                 "--port", str(port), "--partitions", ",".join(map(str, lst))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        nodes.append((proc, f"http://127.0.0.1:{port}"))
    try:
        owned_by_0 = next(f"bench-{c}" for c in range(conversations)
                          if partition_for(f"default/bench-{c}", partitions) < half)
        headers = {"Authorization": f"Bearer {key}"}
        path = f"/v1/conversations/{owned_by_0}/messages?limit=20"
        for _, url in nodes:  # ready, caught up, and routed (the directory has both nodes)
            deadline = time.monotonic() + 600
            while True:
                try:
                    if httpx.get(url + path, headers=headers, timeout=30).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"{url} never answered {path}")
                time.sleep(0.2)
        figures = {}
        with httpx.Client(headers=headers, timeout=30) as client:
            for label, url in (("direct (owner)", nodes[0][1]), ("routed (other node)", nodes[1][1])):
                times = []
                for _ in range(reads):
                    t = time.perf_counter()
                    r = client.get(url + path)
                    times.append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200, r.text
                times.sort()
                figures[label] = (statistics.median(times), times[int(len(times) * 0.99) - 1])
        print(f"\n3. routed reads ({reads} reads of 20 messages, one client, sequential)")
        for label, (p50, p99) in figures.items():
            print(f"   {label:<22} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
        (d50, d99), (r50, r99) = figures["direct (owner)"], figures["routed (other node)"]
        print(f"   the router adds p50 {r50 - d50:+.2f} ms, p99 {r99 - d99:+.2f} ms")
        return {"router_p50_ms": r50 - d50, "router_p99_ms": r99 - d99}
    finally:
        for proc, _ in nodes:
            proc.terminate()
            proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=40_000)
    p.add_argument("--conversations", type=int, default=400)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--reads", type=int, default=300)
    p.add_argument("--together", action="store_true", help="run the two shard nodes at the same time")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfold-capacity-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "MEMFOLD_KAFKA_DIR": str(root / "broker"), "MEMFOLD_KAFKA_PORT": str(_free_port()),
               "MEMFOLD_KAFKA_CONTROLLER_PORT": str(_free_port()), "MEMFOLD_PYTHON": sys.executable}
        bootstrap = f"127.0.0.1:{env['MEMFOLD_KAFKA_PORT']}"
        subprocess.run(["bash", str(BROKER), "start"], env=env, check=True, capture_output=True, text=True)
        broker_pid = int((root / "broker" / "broker.pid").read_text())
        try:
            topic = f"memfold.capacity.{uuid.uuid4().hex[:8]}"
            settings = Settings.load(None, log=f"kafka://{bootstrap}", topic=topic, partitions=args.partitions,
                                     data_dir=root / "client")
            with MemoryEngine(settings, role="client") as client:
                batch = [client.validate(m) for m in messages(args.messages, args.conversations, seed=5)]
                for i in range(0, len(batch), 5000):
                    client.append_events(batch[i: i + 5000])
            print(f"{args.messages:,} messages over {args.conversations:,} conversations on {topic} "
                  f"({args.partitions} partitions), broker {bootstrap}; {os.cpu_count()} CPUs, load "
                  f"{os.getloadavg()[0]:.2f}")
            shard_nodes(bootstrap, topic, args.partitions, root, args.together)
            replay_groups(settings.model_copy(update={"data_dir": root / "node" / "d"}), broker_pid, args.messages)
            routed_reads(bootstrap, topic, args.partitions, root, args.conversations, args.reads)
        finally:
            subprocess.run(["bash", str(BROKER), "stop"], env=env, capture_output=True, text=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
