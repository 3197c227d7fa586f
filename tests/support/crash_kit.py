"""kill -9 trials shared by tests/crash and benchmarks/crash_trials.py.

Each trial SIGKILLs a real memfold process at a random moment, restarts as
README says, and checks three things:

- lost: a message whose append returned (the child printed its id) is not
  in the log, or a line of the input is missing after the restart;
- duplicated: a message stored twice (same conversation and content), or a
  summary request answered by more than one stored summary;
- differs: the projection is not equal, table for table, to a from-scratch
  rebuild of the same log in a fresh data dir.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memfold.cli.ingest import line_key
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.store import DuckDBProjectionStore

CHILD = Path(__file__).resolve().parents[1] / "crash" / "ingest_child.py"
MEMFOLD = str(Path(sys.executable).with_name("memfold"))
WORDS = "order refund shipping invoice account password delivery address payment warranty".split()
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@dataclass
class TrialResult:
    """One trial: what was killed, whether the kill landed mid-run, and what the checks found."""

    kind: str
    killed: bool
    lost: int = 0
    duplicated: int = 0
    differs: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.differs)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}


def write_input(path: Path, lines: int, conversations: int, seed: int) -> None:
    """Write a JSONL file of ``lines`` messages over ``conversations`` (each line different)."""
    rnd = random.Random(seed)
    texts = []
    for n in range(lines):
        c = n % conversations
        role = "user" if (n // conversations) % 2 == 0 else "assistant"
        content = f"turn {n // conversations}: " + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 30)))
        if n < conversations:
            content += f" my order is #{4000 + c} and the refund is ${50 + c}.00"
        texts.append(json.dumps({"conversation_id": f"conv-{c}", "tenant_id": "acme", "role": role,
                                 "content": content, "ts": (T0 + timedelta(seconds=n)).isoformat()}))
    path.write_text("\n".join(texts) + "\n")


def expected_ids(path: Path, data_dir: Path, **log) -> list[str]:
    """Return the event id ingest gives each line of ``path``: its key under its conversation's data key."""
    texts = path.read_text().splitlines()
    assert len(set(texts)) == len(texts)  # each line its first occurrence
    with MemoryEngine(_settings(data_dir, **log), role="client") as engine:
        return [engine.keyed_event_id(obj["conversation_id"], line_key(path.name, text.encode(), 1),
                                      tenant_id=obj["tenant_id"])
                for text in texts for obj in [json.loads(text)]]


class Child:
    """A subprocess whose stdout lines are collected by a thread (so a kill never blocks on a full pipe)."""

    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def acked(self) -> list[str]:
        return [i for line in list(self.lines) if line.startswith("acked ") for i in line.split()[1:]]

    def wait_for(self, predicate, timeout: float = 300) -> bool:
        """Poll ``predicate`` until true (return True) or the child ends (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if self.proc.poll() is not None:
                return predicate()
            time.sleep(0.005)
        raise TimeoutError("the child neither reached the kill point nor ended")

    def pause(self, seconds: float, predicate) -> None:
        """Sleep up to ``seconds``; return sooner once ``predicate`` holds or the child ended."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not predicate() and self.proc.poll() is None:
            time.sleep(0.001)

    def kill(self) -> bool:
        """SIGKILL the child if it still runs; return True when the kill interrupted it."""
        alive = self.proc.poll() is None
        if alive:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        self.proc.stderr.close()
        return alive


def _run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_env())
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        raise AssertionError(f"{' '.join(args[1:])} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def _settings(data_dir: Path, **log) -> Settings:
    return Settings.load(None, data_dir=data_dir, **log)


def stored_events(data_dir: Path, **log) -> list:
    """Return every event of the data dir's log (content unsealed), read as a client."""
    with MemoryEngine(_settings(data_dir, **log), role="client") as engine:
        return [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 1_000_000)]


def check_log(result: TrialResult, events: list, acked: list[str], expected: list[str]) -> None:
    """Fill ``lost`` and ``duplicated`` from the log's events."""
    ids = Counter(e.event_id for e in events)
    messages = [e for e in events if e.type == "MessageAppended"]
    result.lost = len({i for i in acked if i not in ids} | {i for i in expected if i not in ids})
    said = Counter((e.tenant_id, e.conversation_id, e.payload.content) for e in messages)
    summaries = Counter(e.payload.request_id for e in events if e.type == "SummaryProduced")
    result.duplicated = sum(n - 1 for n in said.values()) + sum(n - 1 for n in summaries.values())
    result.duplicated += sum(n - 1 for n in ids.values())
    if len(messages) != len(expected):
        result.notes.append(f"{len(messages)} messages stored for {len(expected)} lines")


def dump(data_dir: Path) -> dict:
    store = DuckDBProjectionStore(data_dir / "projections.duckdb", read_only=True)
    try:
        return store.dump()
    finally:
        store.close()


def rebuilt_dump(data_dir: Path, scratch: Path, **log) -> dict:
    """Return the dump of a projection folded from scratch from ``data_dir``'s log, in a copy of the dir."""
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(data_dir, scratch, ignore=shutil.ignore_patterns("projections.duckdb*"))
    with MemoryEngine(_settings(scratch, **log)) as engine:
        engine.wait_idle(timeout=600)
    return dump(scratch)


def compare(result: TrialResult, got: dict, want: dict) -> None:
    for table in want:
        if got.get(table) != want[table]:
            result.differs = True
            result.notes.append(f"table {table}: {len(got.get(table, []))} rows vs {len(want[table])} rebuilt")


# --------------------------------------------------------------------------- embedded trials


def embedded_trial(root: Path, rnd: random.Random, phase: str, lines: int = 600, conversations: int = 6) -> TrialResult:
    """Kill the embedded ingest process while it appends ("ingest") or summarizes ("summarize"); resume; check.

    The embedded process also runs the projector, so an "ingest" kill lands
    in appends or projection transactions, a "summarize" kill in the
    summarizer worker or the folds of its outcomes.
    """
    data, path = root / "data", root / "in.jsonl"
    write_input(path, lines, conversations, seed=rnd.randrange(1 << 30))
    batch = rnd.choice([25, 50, 100])
    child = Child([sys.executable, str(CHILD), str(data), str(path), str(batch)])
    if phase == "ingest":
        target = rnd.randint(1, max(1, lines // batch - 1))
        child.wait_for(lambda: len(child.acked()) >= target * batch)
        time.sleep(rnd.uniform(0, 0.03))
    else:  # the file is in the log; the process now waits for the summaries due (a bulk ingest leaves a few)
        child.wait_for(lambda: "ingested" in child.lines)
        time.sleep(rnd.uniform(0, 0.15))
    result = TrialResult(f"embedded-{phase}", killed=child.kill())
    acked = child.acked()
    _run([MEMFOLD, "--data-dir", str(data), "ingest", str(path), "--resume", "--quiet"])  # README: restart
    check_log(result, stored_events(data), acked, expected_ids(path, data))
    compare(result, dump(data), rebuilt_dump(data, root / "rebuilt"))
    return result


# When to kill a process whose reference run took ``took`` seconds: a fraction of it drawn from the first
# window; when the process had already ended (a faster run than the reference, on a machine whose speed
# varies), a new run is killed sooner, from the next window. A trial whose every run ended is not killed.
KILL_WINDOWS = ((0.2, 0.9), (0.1, 0.4), (0.02, 0.15))


def projector_trial(root: Path, rnd: random.Random, lines: int = 600, conversations: int = 6) -> TrialResult:
    """Kill ``memfold rebuild`` (the projector folding the whole log) at a random moment; restart it; check."""
    data, path = root / "data", root / "in.jsonl"
    write_input(path, lines, conversations, seed=rnd.randrange(1 << 30))
    _run([MEMFOLD, "--data-dir", str(data), "ingest", str(path), "--quiet"])
    started = time.monotonic()
    _run([MEMFOLD, "--data-dir", str(data), "rebuild"])
    took = time.monotonic() - started
    killed = False
    for low, high in KILL_WINDOWS:  # a run faster than the reference may end first: then again, killed sooner
        child = Child([MEMFOLD, "--data-dir", str(data), "rebuild"])
        time.sleep(rnd.uniform(low, high) * took)
        if killed := child.kill():
            break
    result = TrialResult("embedded-projector", killed=killed)
    _run([MEMFOLD, "--data-dir", str(data), "rebuild"])  # README: run it again
    check_log(result, stored_events(data), [], expected_ids(path, data))
    compare(result, dump(data), rebuilt_dump(data, root / "rebuilt"))
    return result


def replay_trial(root: Path, rnd: random.Random, lines: int = 600, conversations: int = 6) -> TrialResult:
    """Kill ``memfold replay`` (a what-if fold into its own namespace) mid-fold; run it again; check.

    The resumed namespace must equal one replayed without interruption
    (run columns aside: an answer made before the kill comes from the cache
    after it), and the live projection and log must not have changed.
    """
    from support.worker_kit import projection

    data, path = root / "data", root / "in.jsonl"
    write_input(path, lines, conversations, seed=rnd.randrange(1 << 30))
    _run([MEMFOLD, "--data-dir", str(data), "ingest", str(path), "--quiet"])
    live, events = dump(data), stored_events(data)
    knobs = ["--set", "sliding_window.rolling_window_size=6", "--set", "sliding_window.summarize_after_seq=2",
             "--batch-size", "20", "--quiet"]
    ref = _run([MEMFOLD, "--data-dir", str(data), "replay", "--name", "ref", *knobs])
    took = float(ref.stdout.split(" in ", 1)[1].split("s ", 1)[0])  # the fold itself, without process start
    side = data / "replays" / "cut" / "events.sqlite"
    child = Child([MEMFOLD, "--data-dir", str(data), "replay", "--name", "cut", *knobs])
    child.wait_for(lambda: _side_events(side) > 0)  # the fold is under way: it has decided a request
    time.sleep(rnd.uniform(0, 0.5) * took)
    result = TrialResult("embedded-replay", killed=child.kill())
    again = _run([MEMFOLD, "--data-dir", str(data), "replay", "--name", "cut", "--quiet"])  # README: run it again
    result.notes.append(again.stdout.strip())
    got, want = projection(data / "replays" / "cut" / "projections.duckdb"), projection(data / "replays" / "ref" / "projections.duckdb")
    compare(result, got, want)
    check_log(result, stored_events(data), [], expected_ids(path, data))
    if stored_events(data) != events or dump(data) != live:
        result.differs = True
        result.notes.append("the live log or projection changed")
    return result


def _side_events(path: Path) -> int:
    import sqlite3

    if not path.is_file():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM events").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:  # being created
        return 0


# --------------------------------------------------------------------------- Kafka trials


def kafka_ingest_trial(root: Path, rnd: random.Random, bootstrap: str, lines: int = 400, conversations: int = 5) -> TrialResult:
    """Kill a Kafka ingest client after a random number of acknowledged batches; resume; check the topic."""
    # Its own topic every run (a broker given by MEMFOLD_KAFKA_BOOTSTRAP outlives the run): in a topic that
    # already holds the file the client's appends are acknowledged duplicates, and it ends before any kill.
    topic = f"memfold.crash.{rnd.randrange(1 << 40):010x}.{uuid.uuid4().hex[:8]}"
    log = {"log": f"kafka://{bootstrap}", "topic": topic}
    data, path = root / "client", root / "in.jsonl"
    write_input(path, lines, conversations, seed=rnd.randrange(1 << 30))
    batch = rnd.choice([20, 40])
    child = Child([sys.executable, str(CHILD), str(data), str(path), str(batch), log["log"], topic])
    # The client ends as soon as its last batch is acked (nothing to wait for, unlike embedded mode): on a
    # busy machine a kill a blind pause after batch n-1 came after the end. So the kill lands within the batch
    # after ``target`` (at a random moment of it, at the latest when it is acked), and two batches stay unsent.
    target = rnd.randint(1, max(1, lines // batch - 3))
    child.wait_for(lambda: len(child.acked()) >= target * batch)
    child.pause(rnd.uniform(0, 0.05), lambda: len(child.acked()) >= (target + 1) * batch)
    result = TrialResult("kafka-ingest", killed=child.kill())
    acked = child.acked()
    _run_env([MEMFOLD, "--data-dir", str(data), "--log", log["log"], "ingest", str(path), "--resume", "--quiet"],
             {"MEMFOLD_TOPIC": topic})  # README: restart
    check_log(result, stored_events(data, **log), acked, expected_ids(path, data, **log))
    result.notes.append(f"topic {topic}")
    return result


def kafka_projector_trial(root: Path, rnd: random.Random, bootstrap: str, topic: str) -> TrialResult:
    """Kill a projector node (``memfold project --until-caught-up``) mid-fold; restart it; compare with a fresh node."""
    url = f"kafka://{bootstrap}"
    fresh = root / "fresh"
    project = ["project", "--until-caught-up"]
    env_topic = {"MEMFOLD_TOPIC": topic}
    started = time.monotonic()
    _run_env([MEMFOLD, "--data-dir", str(fresh), "--log", url, *project], env_topic)
    took = time.monotonic() - started
    killed = False
    for attempt, (low, high) in enumerate(KILL_WINDOWS):
        node = root / f"node-{attempt}"  # a node that ended before the kill is done: the next one starts afresh
        child = subprocess.Popen([MEMFOLD, "--data-dir", str(node), "--log", url, *project],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**_env(), **env_topic})
        time.sleep(rnd.uniform(low, high) * took)
        killed = child.poll() is None
        child.kill()
        child.communicate()
        if killed:
            break
    result = TrialResult("kafka-projector", killed=killed)
    _run_env([MEMFOLD, "--data-dir", str(node), "--log", url, *project], env_topic)  # README: start it again
    compare(result, dump(node), dump(fresh))
    return result


def _run_env(args: list[str], extra: dict[str, str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**_env(), **extra})
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        raise AssertionError(f"{' '.join(args[1:])} exited {proc.returncode}: {proc.stderr[-2000:]}")


def kafka_worker_trial(root: Path, rnd: random.Random, bootstrap: str, messages: int = 30) -> TrialResult:
    """SIGKILL a distributed worker (``memfold worker``) once at a random message and restart it (worker_kit's
    harness); the topic and the worker's projection must equal a clean embedded run of the same messages."""
    from support.worker_kit import conversation, embedded_reference, run_with_kills

    batch = conversation("support-4711", messages)  # a sample conversation; each run gets its own topic
    want_events, want_projection = embedded_reference(root / "embedded", batch, 4)
    run = run_with_kills(bootstrap, root / "run", batch, {rnd.randrange(messages)}, partitions=4,
                         seed=rnd.randrange(1 << 30))
    result = TrialResult("kafka-worker", killed=True)
    got_ids, want_ids = {e.event_id for e in run["events"]}, {e.event_id for e in want_events}
    result.lost = len({e.event_id for e in want_events if e.type == "MessageAppended"} - got_ids)
    result.duplicated = sum(1 for i, n in run["raw"].items() if n > 1 and i.startswith("sum-"))
    if got_ids != want_ids or [(e.event_id, e.seq) for e in run["events"]] != [(e.event_id, e.seq) for e in want_events]:
        result.differs = True
        result.notes.append(f"log: {len(want_ids - got_ids)} events missing, {len(got_ids - want_ids)} unexpected")
    compare(result, run["projection"], want_projection)
    return result
