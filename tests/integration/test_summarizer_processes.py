"""The offline summarizer in worker processes: the same answers, a dead worker costs a retry, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memfold.cli.ingest import ingest_file
from memfold.core.errors import SummarizerError
from memfold.core.events import SummaryRequested
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.worker import build_input
from memfold.projections.offline_summarizer import OfflineSummarizer
from memfold.projections.summarizer_processes import ProcessSummarizer
from memfold.service.fold_process import FOLD_NICE

SAMPLE = Path(__file__).resolve().parents[2] / "cli" / "data" / "sample.jsonl"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has exited: its parent is gone and nobody reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """The sample ingested with every policy, the summarizer in one worker process."""
    settings = Settings.load(None, data_dir=tmp_path_factory.mktemp("procs"), policies=POLICY_NAMES)
    settings = settings.model_copy(update={"summarizer": settings.summarizer.model_copy(update={"processes": 1})})
    engine = MemoryEngine(settings)
    report = ingest_file(engine, SAMPLE, progress=False)
    assert report.accepted > 600 and not report.rejected
    engine.wait_idle(timeout=300)
    yield engine
    engine.close()


def test_every_policy_summarizes_in_the_worker_process(ingested):
    inner = ingested.summarizer.inner.made
    assert isinstance(inner, ProcessSummarizer)
    children = inner.pids()
    assert len(children) == 1 and children[0] != os.getpid()
    rows = ingested.sql("SELECT policy, status, count(*) FROM summaries GROUP BY ALL ORDER BY ALL")[1]
    completed = {policy for policy, status, n in rows if status == "completed" and n > 0}
    assert completed == set(POLICY_NAMES)
    assert not [r for r in rows if r[1] == "failed"], rows


def test_a_worker_process_answers_exactly_what_the_summarizer_answers_here(ingested):
    requests = [r.event for p in ingested.log.partitions() for r in ingested.log.read(p, 0, limit=100_000)
                if isinstance(r.event, SummaryRequested)]
    inputs = [build_input(r, ingested.store, ingested.store, ingested.settings) for r in requests]
    assert len({i.policy for i in inputs}) == len(POLICY_NAMES) and len(inputs) > 30
    here = OfflineSummarizer(encoding=ingested.settings.encoding)
    there = ingested.summarizer.inner
    for request in inputs:
        assert there.summarize(request) == here.summarize(request)
    assert there.identity(inputs[0]) == here.identity(inputs[0])


def test_a_killed_worker_process_costs_a_retryable_error_and_the_next_call_gets_a_new_one(ingested):
    requests = [r.event for p in ingested.log.partitions() for r in ingested.log.read(p, 0, limit=100_000)
                if isinstance(r.event, SummaryRequested)]
    request = build_input(requests[0], ingested.store, ingested.store, ingested.settings)
    summarizer = ProcessSummarizer(ingested.settings.encoding, 1)
    try:
        expected = summarizer.summarize(request)
        (victim,) = summarizer.pids()
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(SummarizerError) as failure:
            while time.monotonic() < deadline:  # the pool notices the death on its manager thread
                summarizer.summarize(request)
                time.sleep(0.05)
        assert failure.value.retry_after == 0.0 and "summarizer process stopped" in str(failure.value)
        assert summarizer.summarize(request) == expected
        assert victim not in summarizer.pids()
    finally:
        summarizer.close()
    with pytest.raises(SummarizerError, match="shut down"):
        summarizer.summarize(request)


def test_dropping_the_text_caches_retires_the_worker_processes_and_the_next_call_gets_new_ones(ingested):
    """Erasure empties the caches that hold conversation text; a worker process's are emptied by ending it."""
    requests = [r.event for p in ingested.log.partitions() for r in ingested.log.read(p, 0, limit=100_000)
                if isinstance(r.event, SummaryRequested)]
    request = build_input(requests[-1], ingested.store, ingested.store, ingested.settings)
    summarizer = ProcessSummarizer(ingested.settings.encoding, 1)
    try:
        expected = summarizer.summarize(request)
        (before,) = summarizer.pids()
        summarizer.drop_text_caches()
        deadline = time.monotonic() + 10
        while _alive(before) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(before)
        assert summarizer.summarize(request) == expected
        assert before not in summarizer.pids()
    finally:
        summarizer.close()


def test_worker_processes_exit_with_a_killed_parent():
    code = (
        "from memfold.projections.summarizer_processes import ProcessSummarizer\n"
        "import time\n"
        "s = ProcessSummarizer('cl100k_base', 1)\n"
        "print(*s.pids(), flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 1 and all(_alive(pid) for pid in children)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children), "a summarizer worker process outlived its killed parent"



def _descendants(pid: int) -> list[int]:
    """Return the live processes descending from ``pid`` (the service's fold process starts the summarizer's)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    out = []
    for child in parents:
        p = child
        while p in parents and p != pid:
            p = parents[p]
        if p == pid and child != pid:
            out.append(child)
    return out


def test_memfold_serve_summarizes_in_a_lower_priority_worker_process_and_stops_it(tmp_path):
    from fixtures.memfold_service import LiveService

    service = LiveService.start(tmp_path / "data", env={"MEMFOLD_POLICY": "hierarchical",
                                                        "MEMFOLD_POLICIES": "hierarchical"})
    try:
        key = service.key("acme", "writer")
        turns = [{"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant",
                  "content": f"turn {i}: my order #{4400 + i} is late and the refund is ${10 + i}.00"} for i in range(26)]
        with service.http(key) as http:
            assert http.post("/v1/conversations/c1/messages", params={"wait": "true"},
                             json={"messages": turns}).status_code == 201
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # 26 messages pass hierarchical's trigger (20)
                summaries = http.get("/v1/conversations/c1/summaries").json()["summaries"]
                if summaries and all(s["status"] != "processing" for s in summaries):
                    break
                time.sleep(0.05)
        assert summaries and summaries[0]["status"] == "completed", summaries
        workers = [pid for pid in _descendants(service.proc.pid)
                   if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        stat = {pid: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for pid in workers}
        nice = {pid: int(fields[16]) for pid, fields in stat.items()}
        assert workers, "memfold serve answered the summary without a worker process"
        # The fold process (a child of the service, lowered by FOLD_NICE) starts the summarizer's worker,
        # lowered 5 more ([summarizer] process_nice); multiprocessing's resource tracker is not lowered.
        fold = [pid for pid in workers if int(stat[pid][1]) == service.proc.pid and nice[pid] == FOLD_NICE]
        assert fold, nice
        summarizers = [pid for pid in workers if int(stat[pid][1]) in fold]
        assert summarizers and all(nice[pid] == FOLD_NICE + 5 for pid in summarizers), nice
    finally:
        service.stop()
    assert service.proc.returncode == 0, service.log_path.read_text()  # SIGTERM: closed the engine, then exited
    assert not [pid for pid in workers if _alive(pid)], "a summarizer worker outlived memfold serve"
