"""Load on a live ``memfold serve`` over loopback: concurrent clients appending batches and reading context.

Starts its own service on a free port over a fresh data dir, gives every
client its own API key, and runs three bounded phases (each ends after
``--seconds`` or ``--requests`` per client, whichever comes first):

1. ingest: every client appends batches of ``--batch`` messages to its own conversation;
2. read: every client asks for its conversation's context (``--budget`` tokens): once (read-1: the
   first read of a conversation loads its recall index), then repeatedly (read-2: closed loop, each
   client sends its next read as soon as the last one answered), then at ``--paced`` reads/s per
   client (paced: open loop, latency counted from when each read was due);
3. mixed-paced: each client takes ``--paced-mixed`` turns a second, as agents do: it appends a
   batch, and half a period later reads its context (open loop: latency counted from when the read
   was due; 50 clients at 1 turn/s append 2,500 messages/s);
4. mixed: each client alternates one append of a batch and one context read, back to back (a stress
   test: the service is saturated and latency is mostly queueing).

Prints appended messages/s, context latency p50/p99 (client-measured, over
HTTP) and, under each phase with reads, the same reads as the service timed
them (its ``memfold_context_seconds`` histogram: route and assembly, no HTTP
parsing or queueing; bucket bounds), every non-2xx status by count, and per phase the CPU seconds the
server (with its summarizer worker process) and this load generator used (on a shared machine they compete for
the same cores: with 50 closed-loop clients, latency is about 50 / requests
per second, so it measures throughput as much as service time). At the end:
messages per log transaction (group commit) and the context cache's hit rate. Goals on a 2-core machine: context
p99 <= 20 ms, >= 2,000 appended messages/s with batching, no errors but
deliberate 429s. Run: ``python benchmarks/service_load.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
WORDS = ("order", "refund", "invoice", "shipping", "Lisbon", "Porto", "meeting", "budget", "deadline", "email")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _text(client: int, i: int) -> str:
    words = " ".join(WORDS[(client + i + k) % len(WORDS)] for k in range(12))
    return f"client {client} message {i}: {words} #{1000 + i}"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def _cpu(pid: int, children: bool = True) -> float:
    """CPU seconds (user + system) process ``pid`` and (``children``) its live descendants have used so far.

    Descendants, not only children: the service's fold process starts the summarizer's worker process.
    """
    tick = os.sysconf("SC_CLK_TCK")
    if not children:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick
    used: dict[int, float] = {}
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        used[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
        parents[int(stat.parent.name)] = int(fields[1])

    def descends(p: int) -> bool:
        for _ in range(64):
            if p == pid:
                return True
            if p not in parents:
                return False
            p = parents[p]
        return False

    return sum(seconds for p, seconds in used.items() if descends(p))


async def _phase(name: str, clients: list[httpx.AsyncClient], body, args, paced: float = 0.0) -> None:
    """Run one phase; ``paced`` > 0 sends each client's requests at that rate (per second) instead of back to back."""
    statuses: Counter = Counter()
    served_before = _served(args.url)
    cpu_server, cpu_self = _cpu(args.server_pid), _cpu(os.getpid(), children=False)
    context_s: list[float] = []
    appended = 0
    deadline = time.monotonic() + args.seconds

    start = time.perf_counter()

    async def run(c: int, http: httpx.AsyncClient) -> None:
        nonlocal appended
        for i in range(args.requests):
            if time.monotonic() > deadline:
                return
            kinds = body(i)
            for j, kind in enumerate(kinds):
                started = time.perf_counter()
                if paced:  # open loop: request i is due at a fixed time (each kind of a turn in its slot); latency counts from then
                    started = start + (i + c / len(clients) + j / len(kinds)) / paced
                    await asyncio.sleep(max(0.0, started - time.perf_counter()))
                try:
                    if kind == "append":
                        batch = [{"id": f"{name}-{c}-{i}-{k}", "role": "user" if k % 2 == 0 else "assistant",
                                  "content": _text(c, i * args.batch + k)} for k in range(args.batch)]
                        r = await http.post(f"/v1/conversations/load-{c}/messages", json={"messages": batch})
                        if r.status_code == 201:
                            appended += args.batch
                    else:
                        r = await http.get(f"/v1/conversations/load-{c}/context", params={"budget": args.budget})
                        if r.status_code == 200:
                            context_s.append(time.perf_counter() - started)
                except httpx.TransportError as exc:  # counted, not fatal: the figures say how many
                    statuses[type(exc).__name__] += 1
                    continue
                if r.status_code >= 300:
                    statuses[r.status_code] += 1

    await asyncio.gather(*(run(c, http) for c, http in enumerate(clients)))
    seconds = time.perf_counter() - start
    line = f"{name:<11} {seconds:6.1f}s"
    if appended:
        line += f"  appended {appended:>7,} msgs  {appended / seconds:>8,.0f} msgs/s"
    if context_s:
        line += (f"  context n={len(context_s):>6,}  {len(context_s) / seconds:>6,.0f}/s"
                 f"  p50 {_pct(context_s, 0.50):6.1f} ms  p99 {_pct(context_s, 0.99):6.1f} ms")
    line += f"  non-2xx {dict(statuses)}" if statuses else "  errors 0"
    line += (f"  cpu: server {_cpu(args.server_pid) - cpu_server:.1f}s, generator {_cpu(os.getpid(), children=False) - cpu_self:.1f}s")
    if context_s:
        line += "\n" + " " * 20 + _served_line(served_before, _served(args.url))
    print(line, flush=True)


def _samples(url: str, name: str) -> list:
    """Return the service's current samples of metric ``name`` (Prometheus text, parsed by prometheus_client)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=30).text
    return [s for family in text_string_to_metric_families(text) if family.name == name for s in family.samples]


def _served(url: str) -> dict[float, float]:
    """Return the service's context-time histogram (``memfold_context_seconds``): bucket bound (s) -> reads at or under it."""
    return {float(s.labels["le"]): s.value for s in _samples(url, "memfold_context_seconds")
            if s.name.endswith("_bucket")}


def _served_line(before: dict[float, float], after: dict[float, float]) -> str:
    """Describe the phase's reads as the service timed them (route + assembly, no HTTP parsing or queueing).

    From the histogram's buckets, so p50/p99 are bucket bounds ("<= 5 ms"). The difference from the
    clients' figures is time outside the read: the request waiting for the event loop and the
    interpreter lock, the response on its way back, and the load generator's own delays.
    """
    counts = {b: after.get(b, 0) - before.get(b, 0) for b in sorted(after)}
    total = counts.get(float("inf"), 0)
    if not total:
        return "server-side: no context read timed"
    largest = max(b for b in counts if b != float("inf"))

    def bound(q: float) -> str:
        b = next(b for b, n in counts.items() if n >= q * total)
        return f"> {largest * 1000:g} ms" if b == float("inf") else f"<= {b * 1000:g} ms"

    under = counts.get(0.005, 0) / total
    return f"server-side (route + assembly): p50 {bound(0.5)}, p99 {bound(0.99)}, {under:.0%} under 5 ms"


def _gauge(url: str, name: str) -> float:
    return sum(s.value for s in _samples(url, name))


def _lag(url: str) -> float:
    return _gauge(url, "memfold_projector_lag_events")


def _counter(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of counter ``name`` (family name, no ``_total``; its ``_total`` samples) matching ``labels`` (0 when absent)."""
    return sum(s.value for s in _samples(url, name) if s.name.endswith("_total")
               and all(s.labels.get(k) == v for k, v in labels.items()))


async def _load(url: str, keys: list[str], args) -> None:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=60, limits=limits)
               for k in keys]
    try:
        await _phase("ingest", clients, lambda i: ("append",), args)
        started = time.perf_counter()
        while _lag(url) > 0 and time.perf_counter() - started < 300:
            await asyncio.sleep(0.2)
        caught_up = time.perf_counter() - started
        while _gauge(url, "memfold_summary_queue") > 0 and time.perf_counter() - started < 120:
            await asyncio.sleep(0.2)
        print(f"        after the ingest: projector caught up in {caught_up:.1f}s, summaries due done in "
              f"{time.perf_counter() - started:.1f}s (reads below run on an idle engine)", flush=True)
        # The first read of a conversation loads its recall index; the second pass is the steady state.
        await _phase("read-1", clients, lambda i: ("context",) if i == 0 else (), args)
        await _phase("read-2", clients, lambda i: ("context",), args)
        if args.paced:
            await _phase("paced", clients, lambda i: ("context",), args, paced=args.paced)
        if args.paced_mixed:
            await _phase("mixed-paced", clients, lambda i: ("append", "context"), args, paced=args.paced_mixed)
        await _phase("mixed", clients, lambda i: ("append", "context"), args)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--batch", type=int, default=50, help="messages per append")
    p.add_argument("--budget", type=int, default=1000, help="context token budget")
    p.add_argument("--seconds", type=float, default=15.0, help="time bound of each phase")
    p.add_argument("--requests", type=int, default=200, help="request bound per client and phase")
    p.add_argument("--paced", type=float, default=1.0,
                   help="reads/s per client of the 'paced' phase (open loop, after read-2; 0 skips it): the latency "
                        "of a read when the service is not saturated")
    p.add_argument("--paced-mixed", type=float, default=1.0,
                   help="turns/s per client of the 'mixed-paced' phase (open loop, before mixed; 0 skips it): each turn "
                        "appends a batch, then half a period later reads the context, as agents taking turns do")
    p.add_argument("--lazy-ms", type=int, default=0,
                   help="hierarchical lazy_timeout_ms: how long a read may wait for a pending summary (seed default "
                        "2000; 0 answers at once with the fallback, which is what a latency target needs)")
    p.add_argument("--summarizer-processes", type=int, default=1,
                   help="[summarizer] processes: worker processes running the offline summarizer (0: threads of the "
                        "service process, where summarizing competes with reads for the interpreter lock)")
    p.add_argument("--fold-in-process", action="store_true",
                   help="serve with the fold in the serving process (memfold serve --fold-in-process), as before "
                        "2026-11-27, to compare with the default fold process")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="memfold-load-") as tmp:
        data = Path(tmp) / "data"
        port = _free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")},
               "MEMFOLD_HIERARCHICAL__LAZY_TIMEOUT_MS": str(args.lazy_ms),
               "MEMFOLD_SUMMARIZER__PROCESSES": str(args.summarizer_processes)}
        flags = ["--fold-in-process"] if args.fold_in_process else []
        server = subprocess.Popen([MEMFOLD, "--data-dir", str(data), "serve", "--port", str(port), "--rate", "0", *flags],
                                  env=env, stdout=subprocess.DEVNULL, stderr=(Path(tmp) / "serve.log").open("w"))
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                if server.poll() is not None:
                    log = (Path(tmp) / "serve.log").read_text().strip()
                    print(f"memfold serve exited with {server.returncode}: {log}", file=sys.stderr)
                    return 1
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from memfold.service.keys import ApiKeyStore

            store = ApiKeyStore(data)
            keys = [store.create(f"tenant-{c % 5}", "writer")[1] for c in range(args.clients)]
            print(f"memfold serve on {url}: {args.clients} clients, batches of {args.batch}, "
                  f"context budget {args.budget}, lazy wait {args.lazy_ms} ms, summarizer processes {args.summarizer_processes}, "
                  f"fold {'in the serving process' if args.fold_in_process else 'in a process of its own'}, "
                  f"phases <= {args.seconds:g}s / {args.requests} requests per client",
                  flush=True)
            args.server_pid, args.url = server.pid, url
            asyncio.run(_load(url, keys, args))
            appended = _counter(url, "memfold_messages_appended")
            transactions = _counter(url, "memfold_append_transactions")
            hits = _counter(url, "memfold_context_cache", outcome="hit")
            reads = _counter(url, "memfold_context_cache")
            print(f"projector lag at the end: {_lag(url):.0f} events; {appended / max(transactions, 1):.0f} messages "
                  f"per log transaction; context cache hits {hits / max(reads, 1):.0%} of {reads:.0f} reads")
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:  # never leave a server behind to load the next run
                print("the service did not stop within 30s of SIGTERM: killed", file=sys.stderr)
                server.kill()
                server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
