"""Rate limits split between service replicas: two limiters and two node directories over one in-memory table.

A simulated clock drives the buckets and the heartbeats, so the figures are
exact: no timing in the test.
"""

from __future__ import annotations

from memfold.service.limits import RateLimiter, ReplicaShares
from memfold.streams.shard_directory import ShardDirectory


class Table:
    """An in-memory compacted topic: every reader gets each record once, in write order."""

    topic = "memfold.test.nodes"

    def __init__(self):
        self.records: list[tuple[str, dict]] = []

    def reader(self) -> Reader:
        return Reader(self)


class Reader:
    def __init__(self, table: Table):
        self.table = table
        self.topic = table.topic
        self.next = 0

    def write(self, records):
        self.table.records.extend(records)

    def read_new(self):
        out = self.table.records[self.next:]
        self.next = len(self.table.records)
        return out

    def close(self):
        pass


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _replicas(rate: float, burst: int, n: int = 2):
    table, clock = Table(), Clock()
    out = []
    for i in range(n):
        directory = ShardDirectory(table.reader(), f"node-{i}", f"http://node-{i}")
        limiter = RateLimiter(rate, burst, clock=clock)
        limiter.share = ReplicaShares(directory, rate)
        directory.extra = lambda limiter=limiter: {"load": limiter.granted()}
        directory.publish(None)
        out.append((directory, limiter))
    return out, clock


def _run(replicas, clock, seconds: int, demand: list[float], key: str = "k1") -> list[int]:
    """Offer ``demand[i]`` requests per second to replica i for ``seconds``; heartbeat every second; count grants."""
    granted = [0] * len(replicas)
    step = 0.01
    for tick in range(int(seconds / step)):
        clock.now += step
        for i, (_, limiter) in enumerate(replicas):
            # demand[i] requests a second, spread evenly over the ticks
            due = int((tick + 1) * step * demand[i]) - int(tick * step * demand[i])
            granted[i] += sum(limiter.take(key) == 0.0 for _ in range(due))
        if (tick + 1) % int(1 / step) == 0:
            for directory, _ in replicas:
                directory._write_mine()
            for directory, _ in replicas:
                directory.refresh()
    return granted


def test_a_key_spread_over_two_replicas_gets_its_rate_once_not_twice():
    replicas, clock = _replicas(rate=100, burst=100)
    warmup = _run(replicas, clock, 3, [1000, 1000])
    steady = _run(replicas, clock, 20, [1000, 1000])
    # Alone each replica would grant 100/s: 4,000 in 20 s. Split, the two grant about the rate between them.
    assert 1900 <= sum(steady) <= 2100, steady
    assert all(g >= 900 for g in steady), steady  # neither replica is starved (floor: rate / N)
    assert sum(warmup) > 0


def test_a_key_on_one_replica_keeps_its_whole_rate():
    replicas, clock = _replicas(rate=100, burst=100)
    granted = _run(replicas, clock, 20, [1000, 0])
    assert granted[1] == 0
    assert 1990 <= granted[0] <= 2100, granted  # the full 100/s (plus the first burst), not 100/N


def test_uneven_demand_is_served_and_the_total_stays_at_the_rate():
    replicas, clock = _replicas(rate=100, burst=50)
    _run(replicas, clock, 3, [30, 1000])
    granted = _run(replicas, clock, 20, [30, 1000])
    assert 590 <= granted[0] <= 610, granted  # its 30/s fit in its floor share: all served
    assert 1900 <= sum(granted) <= 2100, granted


def test_other_keys_are_not_limited_by_a_busy_one():
    replicas, clock = _replicas(rate=100, burst=100)
    _run(replicas, clock, 5, [1000, 1000], key="busy")
    quiet = _run(replicas, clock, 5, [50, 0], key="quiet")
    assert quiet == [250, 0]
