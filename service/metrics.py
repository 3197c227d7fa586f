"""Prometheus metrics of one service process (GET /metrics).

Counters and histograms are updated by the routes; the projection's figures
(projector lag, summary queue, summarizer latency and failures) are read from
the log and the projection at scrape time by a collector, so they are true
whatever process produced the summaries (embedded worker or Kafka worker).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServiceMetrics:
    """The registry of one app: request figures plus a projection collector over ``engine``."""

    def __init__(self, engine):
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "memfold_http_request_seconds", "HTTP request latency by route template, method and status.",
            ("route", "method", "status"), buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.appended = Counter(
            "memfold_messages_appended", "Messages appended through the API (ingest rate: rate() of this).",
            registry=self.registry,
        )
        self.context_seconds = Histogram(
            "memfold_context_seconds", "Time to assemble a context (GET .../context), excluding HTTP.",
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.rejected = Counter(
            "memfold_requests_rejected", "Requests refused by a limit or a key check.", ("reason",),
            registry=self.registry,
        )
        self.append_groups = Counter(
            "memfold_append_transactions", "Log transactions written for appends (group commit: appended / this is "
            "messages per transaction).", registry=self.registry,
        )
        self.context_cache = Counter(
            "memfold_context_cache", "Context reads answered from the cache (hit) or computed (miss).", ("outcome",),
            registry=self.registry,
        )
        self.collector = _ProjectionCollector(engine)
        self.registry.register(self.collector)


class _ProjectionCollector:
    """Reads lag, summary queue and summarizer outcomes when Prometheus scrapes."""

    def __init__(self, engine):
        self.engine = engine
        self.partitions = None  # a shard node: () -> the partitions it serves (lag counts only those)

    def describe(self):
        return []  # figures are computed per scrape; no fixed description needed

    def collect(self):
        engine = self.engine
        ends, applied = engine.progress()
        lag = GaugeMetricFamily("memfold_projector_lag_events", "Events in the log not yet in the projection.")
        mine = None if self.partitions is None else set(self.partitions())
        lag.add_metric([], sum(max(0, end - applied.get(p, 0)) for p, end in ends.items() if mine is None or p in mine))
        yield lag
        by_status = engine.summary_counts()
        queue = GaugeMetricFamily("memfold_summary_queue", "Summary requests still processing (no outcome yet).")
        queue.add_metric([], by_status.get("processing", (0, 0))[0])
        yield queue
        done = CounterMetricFamily("memfold_summaries", "Summary outcomes in the projection.", labels=["status"])
        for status in ("completed", "failed"):
            done.add_metric([status], by_status.get(status, (0, 0))[0])
        yield done
        seconds = CounterMetricFamily(
            "memfold_summarizer_latency_seconds", "Summarizer call time summed over outcomes (divide by memfold_summaries).",
            labels=["status"],
        )
        for status in ("completed", "failed"):
            seconds.add_metric([status], (by_status.get(status, (0, 0))[1] or 0) / 1000.0)
        yield seconds
