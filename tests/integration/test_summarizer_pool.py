"""The summarizer pool: bounded concurrency, outcomes in request order, backpressure, ownership (real SQLite + DuckDB)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from memfold.core.events import MessageAppended, MessagePayload
from memfold.core.partitioner import partition_for
from memfold.core.ports import SummaryInput, SummaryOutput
from memfold.core.settings import Settings
from memfold.engine.builders import fold_contexts
from memfold.engine.worker import SummarizerWorker
from memfold.projections.fold import make_request
from memfold.projections.store import DuckDBProjectionStore
from memfold.streams.sqlite_log import SQLiteEventLog

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class SlowSummarizer:
    """Sleeps longer for earlier calls (so calls finish out of order) and records concurrency."""

    name = "slow"

    def __init__(self):
        self.running = 0
        self.peak = 0
        self.calls = 0
        self.lock = threading.Lock()

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.peak = max(self.peak, self.running)
            nap = 0.4 / self.calls
        time.sleep(nap)
        with self.lock:
            self.running -= 1
        return SummaryOutput(text="summary", model="slow")


@pytest.fixture
def parts(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path, policies=("rolling",), policy="rolling")
    log = SQLiteEventLog(tmp_path / "events.sqlite", partitions=4)
    store = DuckDBProjectionStore(tmp_path / "p.duckdb")
    yield settings, log, store
    store.close()
    log.close()


def requests(settings, count: int):
    _, ctx = fold_contexts(settings)["rolling"]
    out = []
    for i in range(count):
        cause = MessageAppended(event_id=f"m{i}", conversation_id=f"c{i}", occurred_at=T0,
                                payload=MessagePayload(role="user", content="hello"))
        out.append(make_request(ctx, cause, covers=(0, 0), inputs=(1, 0)))  # no input messages to fetch
    return out


def answer_all(pool: SummarizerWorker, reqs: list) -> list[str]:
    """Run ``pool`` until every one of ``reqs`` has an outcome on its log; return the answered request ids in log order."""
    pool.start()
    try:
        pool.submit(reqs)
        deadline = time.monotonic() + 30
        while not pool.idle() or sum(pool.log.end_positions().values()) < len(reqs):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        pool.stop()
    return [r.event.payload.request_id for p in pool.log.partitions() for r in pool.log.read(p, 0)]


def test_calls_run_concurrently_and_outcomes_keep_request_order(parts):
    settings, log, store = parts
    summarizer = SlowSummarizer()
    reqs = requests(settings, 6)
    answered = answer_all(SummarizerWorker(log, store, store, summarizer, settings, concurrency=3), reqs)
    assert summarizer.peak == 3
    # Per partition, outcomes are in the order the requests were submitted, whichever call finished first.
    for p in log.partitions():
        in_partition = [r.event_id for r in reqs if partition_for(r.key, 4) == p]
        assert [a for a in answered if a in in_partition] == in_partition
    assert sorted(answered) == sorted(r.event_id for r in reqs)


def test_submit_blocks_while_max_pending_requests_wait(parts):
    settings, log, store = parts
    pool = SummarizerWorker(log, store, store, SlowSummarizer(), settings, max_pending=2)
    done = threading.Event()
    submitter = threading.Thread(target=lambda: (pool.submit(requests(settings, 3)), done.set()))
    submitter.start()
    assert not done.wait(0.3), "a third request was queued beyond max_pending"
    assert pool.pending() == 2
    pool.start()  # the pool takes the queue, making room
    try:
        assert done.wait(10)
    finally:
        pool.stop()
        submitter.join(5)


def test_released_partitions_are_not_answered(parts):
    settings, log, store = parts
    pool = SummarizerWorker(log, store, store, SlowSummarizer(), settings)
    reqs = requests(settings, 6)
    keep = {partition_for(reqs[0].key, 4)}
    pool.retain(keep)
    pool.submit(reqs)
    assert pool.pending() == sum(partition_for(r.key, 4) in keep for r in reqs)


class SteadySummarizer:
    """Each call takes ``nap`` seconds; notes how many outcomes the log held when it started."""

    name = "steady"

    def __init__(self, log, nap: float):
        self.log = log
        self.nap = nap
        self.seen_at_start: list[int] = []

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        self.seen_at_start.append(sum(self.log.end_positions().values()))
        time.sleep(self.nap)
        return SummaryOutput(text="summary", model="steady")


def test_a_slow_models_answers_reach_the_log_before_the_rest_of_the_chunk_is_done(parts):
    """With 6 calls of 0.5 s, 2 at a time, the first two outcomes are appended before the last two calls start.

    (Outcomes used to be appended once per 16 calls: a slow model's first
    summary waited for the whole chunk.)
    """
    settings, log, store = parts
    summarizer = SteadySummarizer(log, 0.5)
    reqs = requests(settings, 6)
    answered = answer_all(SummarizerWorker(log, store, store, summarizer, settings, concurrency=2), reqs)
    assert len(summarizer.seen_at_start) == 6
    assert summarizer.seen_at_start[:2] == [0, 0]
    assert summarizer.seen_at_start[-1] >= 2, summarizer.seen_at_start
    assert sorted(answered) == sorted(r.event_id for r in reqs)


def test_with_a_long_flush_a_chunks_answers_land_in_one_append(parts):
    """``[summarizer] flush_after_s`` longer than the calls: no outcome is appended before the chunk is answered."""
    settings, log, store = parts
    summarizer = SteadySummarizer(log, 0.1)
    reqs = requests(settings, 6)
    worker = SummarizerWorker(log, store, store, summarizer, settings, concurrency=2, flush_after_s=30)
    answered = answer_all(worker, reqs)
    assert summarizer.seen_at_start == [0] * 6  # every call began before any outcome reached the log
    assert sorted(answered) == sorted(r.event_id for r in reqs)
