"""The faust-streaming app of distributed mode: the policy fold as an agent on the events topic, the summarizer beside it.

- the agent ``memfold-fold`` reads the events topic (raw values, decoded
  with :func:`memfold.engine.events.decode`) and folds every event into the
  active policies with :class:`~memfold.streams.fold_table.PolicyFolder`
  (the projector's own per-event rule,
  :func:`~memfold.projections.fold.fold_event`), keeps the state in a
  changelog-backed table, and appends what the policies decide;
- the task ``summarize`` answers the ``SummaryRequested`` events of the
  worker's partitions from a local DuckDB replica of the topic (messages,
  base summaries, outcomes) with the embedded summarizer worker's rules;
  the fold agent wakes it when it folds a request.

Correctness rests on the log, not on faust's delivery or commits:

- faust's exactly-once mode is not used; every table value records the
  offset it is current through, so a re-delivered event is a no-op, and
  derived events have deterministic ids that the log de-duplicates;
- faust can also *skip* events after a restart (its recovery clears fetched
  records and may commit past them: faust-streaming issues #596, #606,
  reproduced by tests/integration/test_faust_worker.py). The fold agent
  therefore folds every offset of a partition in order, reading any it was
  not handed from the log; when faust sits on records it never delivers, a
  timer seeks it back to the first unfolded offset; folded offsets are
  acked so faust's commits do not stall on its own lost acks; and the
  summarizer answers every open request its replica shows, whatever faust
  delivered. One agent, not two: faust acks an event once every agent acked
  it, and an event lost from one agent's queue only would stall commits;
- an event that cannot be processed is never acked past: log errors are
  retried, anything else stops the process before faust can commit it
  (fail-stop, the same recovery path as a kill -9).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import faust
from faust.types import Message

from memfold.engine.engine import fold_contexts
from memfold.engine.errors import ConfigError, LogError, ProjectionError
from memfold.engine.events import Event, SummaryRequested, decode
from memfold.engine.sealing import Sealer
from memfold.engine.ids import content_hash
from memfold.engine.partitioner import partition_for
from memfold.engine.positions import LogRecord, Position
from memfold.engine.settings import Settings
from memfold.engine.tokens import counter as token_counter
from memfold.projections.fold import failed
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore
from memfold.projections.summarizers import build_summarizer

from .embedded import EmbeddedRunner
from .fold_table import PolicyFolder
from .kafka_log import KafkaEventLog, record_headers, record_value
from .sealed_log import sealed
from .worker import answer, build_input

log = logging.getLogger("memfold.faust")

TABLE_NAME = "fold-state"
REPLICA_FILE = "replica.duckdb"
SWEEP_INTERVAL_S = 2.0
CHANGELOG_SEGMENT_BYTES = 64 * 1024 * 1024
ANSWERED_KEPT = 100_000
NUDGE_AFTER_S = 4.0
_RETRY_MIN_S, _RETRY_MAX_S = 0.5, 10.0
T = TypeVar("T")


def app_id(settings: Settings) -> str:
    """Return the faust app id (= consumer group, changelog prefix) for ``settings``.

    It names the topic and hashes everything the fold depends on (active
    policies, their settings hashes, the token encoding): new fold settings
    start a new group and a new table, which re-folds the topic from the
    start, as the embedded engine rebuilds its projection when they change.
    """
    fold_key = content_hash(
        settings.encoding, [(p, settings.settings_hash(p)) for p in settings.active_policies], length=10
    )
    return f"memfold-{settings.topic}-{fold_key}"


def default_instance_id(data_dir: str | Path) -> str:
    """Return the static group member id of the worker owning ``data_dir`` (a restart keeps its partitions)."""
    return "memfold-worker-" + content_hash(str(Path(data_dir).resolve()), length=12)


def default_store() -> str:
    """Return ``rocksdb://`` when faust's RocksDB driver (rocksdict) is installed, else ``memory://``."""
    return "rocksdb://" if importlib.util.find_spec("rocksdict") is not None else "memory://"


# --------------------------------------------------------------------------- the summarizer


class SummaryResponder:
    """Answer summary requests from the replica with the embedded worker's rules. Call from one thread.

    Per request: skip it when its outcome is folded already (restart,
    re-delivery) or this process answered it; answer it ``SummaryFailed``
    ``Superseded`` when a newer open request of the same (policy,
    conversation, topic) exists (newest wins); otherwise call the summarizer
    through :func:`~memfold.streams.worker.answer`.
    """

    def __init__(self, store: DuckDBProjectionStore, summarizer: Any, settings: Settings):
        self.store = store
        self.summarizer = summarizer
        self.settings = settings
        self.calls = 0
        # Answered here, outcome maybe not folded into the replica yet; old entries are dropped.
        self._answered: OrderedDict[str, None] = OrderedDict()

    def stored_at(self, request_id: str) -> Position | None:
        """Return where the replica holds the first copy of ``request_id``, or None."""
        row = self.store.connection.execute(
            'SELECT "partition", "offset" FROM events WHERE event_id = ? ORDER BY "offset" LIMIT 1', [request_id]
        ).fetchone()
        return None if row is None else Position(row[0], row[1])

    def open_requests(self, partition: int, upto: int) -> list[tuple[SummaryRequested, int]]:
        """Return the open requests of ``partition`` at offsets up to ``upto`` (with their seq), oldest first."""
        rows = self.store.connection.execute(
            "SELECT e.event_id, e.tenant_id, e.conversation_id, e.seq, e.occurred_at, e.causation_id, e.payload, "
            "e.schema_version FROM summaries s JOIN events e ON e.event_id = s.request_id "
            "WHERE s.status = 'processing' AND e.\"partition\" = ? AND e.\"offset\" <= ? ORDER BY e.\"offset\"",
            [partition, upto],
        ).fetchall()
        out = []
        for event_id, tenant, conv, seq, at, cause, payload, version in rows:
            if event_id in self._answered:
                continue
            request = decode(json.dumps({
                "event_id": event_id, "type": SummaryRequested.TYPE, "schema_version": version, "tenant_id": tenant,
                "conversation_id": conv, "seq": seq, "occurred_at": at.isoformat(), "causation_id": cause,
                "payload": json.loads(payload),
            }))
            out.append((request, seq))
        return out

    def outcome_for(self, request: SummaryRequested, seq: int) -> Event | None:
        """Return the outcome to append for ``request`` (logged at ``seq``), or None when it needs none."""
        if request.event_id in self._answered:
            return None
        if self.store.outcome(request.payload.request_id) not in (None, "processing"):
            return None
        self._answered[request.event_id] = None
        if len(self._answered) > ANSWERED_KEPT:
            self._answered.popitem(last=False)
        newer = self._newer_open_request(request, seq)
        if newer is not None:
            return failed(
                request, reason=f"superseded by {newer}", error_type="Superseded",
                summarizer=getattr(self.summarizer, "name", ""),
            )
        summary_input = build_input(request, self.store, self.store, self.settings)
        self.calls += 1
        return answer(request, summary_input, self.summarizer)

    def _newer_open_request(self, request: SummaryRequested, seq: int) -> str | None:
        p = request.payload
        row = self.store.connection.execute(
            "SELECT request_id FROM summaries WHERE policy = ? AND tenant_id = ? AND conversation_id = ? "
            "AND topic_id IS NOT DISTINCT FROM ? AND status = 'processing' AND requested_seq > ? "
            "ORDER BY requested_seq DESC LIMIT 1",
            [p.policy, request.tenant_id, request.conversation_id, p.topic_id, seq],
        ).fetchone()
        return None if row is None else row[0]


# --------------------------------------------------------------------------- runtime


class WorkerRuntime:
    """What the agents use besides faust: the log, the local replica, the summarizer, two worker threads.

    :meth:`open` connects (blocking; raises ``LogUnavailableError`` when no
    broker answers within ``timeout`` seconds) and starts the replica's
    projection thread; :meth:`close` stops everything. Blocking calls run on
    single-thread executors (Kafka appends and reads on one, DuckDB and the
    model on the other) so the faust event loop keeps heart-beating.
    """

    def __init__(self, settings: Settings, bootstrap: str, data_dir: Path, *, timeout: float = 15.0):
        self.settings = settings
        self.bootstrap = bootstrap
        self.data_dir = Path(data_dir)
        self.timeout = timeout
        self.log: KafkaEventLog | None = None
        self.sealer: Sealer | None = None
        self.replica_log: KafkaEventLog | None = None
        self.store: DuckDBProjectionStore | None = None
        self.runner: EmbeddedRunner | None = None
        self.responder: SummaryResponder | None = None
        self._log_pool = ThreadPoolExecutor(1, thread_name_prefix="memfold-log")
        self._summary_pool = ThreadPoolExecutor(1, thread_name_prefix="memfold-summarize")
        self._open_lock = threading.Lock()
        self.stopping = False
        self.appended = 0

    def unseal(self, event: Event) -> Event:
        """Return ``event`` with its content unsealed (as is when no key store is configured)."""
        return self.sealer.unseal(event) if self.sealer is not None else event

    @property
    def is_open(self) -> bool:
        return self.responder is not None

    def open(self) -> None:
        """Connect to the topic (creating it if missing) and start the replica; idempotent."""
        with self._open_lock:
            if self.is_open:
                return
            s = self.settings
            started = time.perf_counter()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.log = KafkaEventLog(
                self.bootstrap, topic=s.topic, partitions=s.partitions, timeout=self.timeout, client_id="memfold-worker"
            )
            self.replica_log = KafkaEventLog(
                self.bootstrap, topic=s.topic, partitions=s.partitions, timeout=self.timeout, client_id="memfold-replica"
            )
            # Sealed content (a shared key store is configured) is unsealed for the fold and the replica,
            # and summaries are sealed on append, as in every other runner.
            self.log, self.sealer = sealed(self.log, s.keystore)
            self.replica_log, _ = sealed(self.replica_log, s.keystore)
            self.store = DuckDBProjectionStore(self.data_dir / REPLICA_FILE)
            self._bind(f"kafka://{self.bootstrap}/{s.topic}")
            # No policies: the replica holds the rows the summarizer reads (messages, summaries) and
            # decides nothing, so it appends nothing and does not depend on the policy settings.
            projector = Projector(self.store, {}, token_counter(s.encoding))
            # Polled slowly: the fold agent wakes it whenever it folds something, so an idle worker stays idle.
            self.runner = EmbeddedRunner(self.replica_log, self.store, projector, poll_interval=0.5)
            self.runner.start()
            self.responder = self._summary_pool.submit(self._responder).result()
            log.info(
                "connected to %s topic %s (%d partitions); replica %s at %s; opened in %.2fs",
                self.bootstrap, s.topic, s.partitions, self.data_dir / REPLICA_FILE,
                _positions(self.store.position()), time.perf_counter() - started,
            )

    def _bind(self, log_url: str) -> None:
        """Refuse a replica built from another topic: its positions would mean nothing here."""
        assert self.store is not None
        bound = self.store.meta("worker_log")
        if bound is None:
            self.store.set_meta("worker_log", log_url)
        elif bound != log_url:
            raise ConfigError(f"{self.data_dir} holds a worker replica of {bound}, not {log_url}; use another --data-dir")

    def _responder(self) -> SummaryResponder:
        # Built on the summarizer thread: the summary cache uses that thread's DuckDB cursor.
        assert self.store is not None
        return SummaryResponder(self.store, build_summarizer(self.settings, cache_conn=self.store.connection), self.settings)

    def stats(self) -> str:
        """Return one line of counters: events appended, summarizer calls."""
        calls = self.responder.calls if self.responder is not None else 0
        return f"appended {self.appended} events, {calls} summarizer calls"

    def close(self) -> None:
        """Stop the replica and close the log and the store. Idempotent."""
        self.stopping = True
        if self.runner is not None:
            self.runner.stop()
        self._summary_pool.shutdown(wait=True)
        self._log_pool.shutdown(wait=True)
        for closable in (self.store, self.replica_log, self.log):
            if closable is not None:
                closable.close()
        self.runner = self.store = self.replica_log = self.log = self.responder = None

    # ----------------------------------------------------------------- async helpers for the agents

    def wake_replica(self) -> None:
        """Tell the replica there is something new to read (instead of waiting for its next poll)."""
        if self.runner is not None:
            self.runner.notify()

    async def ensure_open(self) -> None:
        if not self.is_open:
            await asyncio.get_running_loop().run_in_executor(None, self.open)

    async def append(self, events: Sequence[Event], where: str) -> None:
        """Append ``events``, retrying while the log is unavailable."""
        assert self.log is not None
        await self._retrying(lambda: self._in(self._log_pool, self.log.append, list(events)), where)
        self.appended += len(events)
        self.wake_replica()

    async def end_positions(self) -> dict[int, int]:
        """Return the log's end offset per partition."""
        assert self.log is not None
        return await self._retrying(lambda: self._in(self._log_pool, self.log.end_positions), "read the end offsets")

    async def read(self, partition: int, start: int, stop: int) -> list[LogRecord]:
        """Return the records of ``partition`` at offsets ``start`` <= offset < ``stop`` (repeats dropped)."""
        assert self.log is not None
        records = await self._retrying(
            lambda: self._in(self._log_pool, self.log.read, partition, start, stop - start), f"read {partition}:{start}"
        )
        return [r for r in records if r.position.offset < stop]

    async def answer_open_requests(self, partition: int, upto: int) -> None:
        """Answer every open request the replica holds in ``partition`` up to offset ``upto``, oldest first.

        The replica, not faust's delivery, says what is open, so a request
        faust never handed over is answered too. Appends each outcome before
        answering the next; call from one task at a time.
        """
        assert self.responder is not None
        pending = await self._retrying(
            lambda: self._in(self._summary_pool, self.responder.open_requests, partition, upto),
            f"list open requests of partition {partition}",
        )
        for request, seq in pending:
            outcome = await self._retrying(
                lambda: self._in(self._summary_pool, self.responder.outcome_for, request, seq),
                f"answer {request.event_id}",
            )
            if outcome is None:
                continue
            await self.append([outcome], f"record the outcome of {request.event_id}")
            log.info(
                "answered %s with %s %s (%s)", request.event_id, outcome.type, outcome.event_id,
                getattr(outcome.payload, "error_type", "") or f"{outcome.payload.latency_ms} ms",
            )

    async def wait_replica(self, position: Position, request_id: str) -> None:
        """Wait until the replica has applied ``position`` (or holds the request's earlier copy)."""
        assert self.store is not None and self.runner is not None and self.responder is not None
        waited = 0
        while not self.store.has_reached(position):
            if waited % 50 == 0:  # a repeat at the partition's end never advances the position
                stored = await self._retrying(
                    lambda: self._in(self._summary_pool, self.responder.stored_at, request_id), f"look up {request_id}"
                )
                if stored is not None and stored < position:
                    return
            self.runner.notify()
            await asyncio.sleep(0.01)
            waited += 1

    async def _in(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def _retrying(self, call: Callable[[], Awaitable[T]], where: str) -> T:
        delay = _RETRY_MIN_S
        while True:
            try:
                return await call()
            except (LogError, ProjectionError) as exc:
                if self.stopping:
                    fail_stop(f"stopping while {where} kept failing ({exc}); it is redone on restart")
                log.warning("%s failed, retrying in %.1fs: %s", where, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)


def fail_stop(reason: str) -> None:
    """Log ``reason`` and end the process at once, before faust can commit the event in hand.

    An exception escaping an agent makes faust ack (and later commit) the
    event and restart the agent on the next one, skipping it; exiting leaves
    the offset uncommitted, so a restarted worker processes it again.
    """
    log.critical("memfold worker stops: %s", reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(1)


def _positions(pos: Mapping[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(pos.items())) or "start"


# --------------------------------------------------------------------------- the app


def create_app(
    settings: Settings,
    bootstrap: str,
    *,
    data_dir: str | Path,
    store: str | None = None,
    commit_interval: float = 2.8,
    instance_id: str | None = None,
    timeout: float = 15.0,
) -> faust.App:
    """Return the faust app of a memfold worker: the fold agent, its table, the summarizer task.

    ``bootstrap`` is ``host:port[,host:port]``; ``data_dir`` holds the replica
    (``replica.duckdb``) and faust's files. ``store`` is the table store URL
    (default :func:`default_store`). ``instance_id`` is the static group
    membership id: a worker restarted with the same one takes its partitions
    back at once instead of after the session timeout (default: derived from
    the resolved data dir, which one worker owns at a time). The runtime
    (log, replica, summarizer) is ``app.memfold_runtime`` and the fold
    ``app.memfold_folder``; the runtime opens on the first event unless
    opened before (:func:`~memfold.streams.kafka_worker.run_worker` does).
    """
    data_dir = Path(data_dir)
    runtime = WorkerRuntime(settings, bootstrap, data_dir, timeout=timeout)
    if instance_id is None:
        instance_id = default_instance_id(data_dir)
    app = faust.App(
        app_id(settings),
        broker=",".join(f"kafka://{hp}" for hp in bootstrap.split(",")),
        store=store or default_store(),
        datadir=str(data_dir / "faust"),
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        autodiscover=False,
        broker_commit_interval=commit_interval,
        consumer_auto_offset_reset="earliest",
        consumer_group_instance_id=instance_id,
    )
    topic = app.topic(
        settings.topic, partitions=settings.partitions, key_type=bytes, value_type=bytes,
        key_serializer="raw", value_serializer="raw",
    )
    table = app.Table(
        TABLE_NAME, default=None, partitions=settings.partitions,
        schema=faust.Schema(key_serializer="json", value_serializer="json"),
        # The changelog is compacted, but only in closed segments: smaller ones keep a restart's
        # recovery near the live state instead of the whole history (the broker default is 1 GiB).
        extra_topic_configs={"segment.bytes": str(CHANGELOG_SEGMENT_BYTES)},
    )
    folder = PolicyFolder(table, fold_contexts(settings), token_counter(settings.encoding))
    app.memfold_runtime = runtime  # type: ignore[attr-defined]
    app.memfold_folder = folder  # type: ignore[attr-defined]

    async def append(events: list[Event]) -> None:
        """Append ``events`` with faust's producer, as KafkaEventLog would store them; return once acked.

        One round trip instead of KafkaEventLog's three (end offsets, index
        catch-up, send): the fold agent appends on most messages. A repeat
        after a crash is stored again and dropped on read, by every reader.
        """
        sent = [
            await topic.send(
                key=e.key.encode("utf-8"), value=record_value(e), partition=partition_for(e.key, settings.partitions),
                headers=record_headers(e),
            )
            for e in events
        ]
        await asyncio.gather(*sent)
        runtime.appended += len(events)

    async def fold_one(partition: int, offset: int, event: Event) -> None:
        derived, writes = folder.plan(partition, offset, event)
        if derived:
            # Log first (acknowledged), then the table: a crash in between plans the same ids again.
            await append(derived)
            for d in derived:
                log.info("%s %s policy=%s conversation=%s", d.type, d.event_id, d.payload.policy, d.key)
        for key, value in writes.items():
            table[key] = value

    wake = asyncio.Event()
    triggers: dict[int, tuple[int, str]] = {}  # partition -> (offset, id) of the newest request seen
    last_event = [time.monotonic()]  # when the fold agent last got an event

    @app.agent(topic, name="memfold-fold")
    async def fold(stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            partition, offset = message.partition, message.offset
            where = f"fold {partition}:{offset}"
            last_event[0] = time.monotonic()
            try:
                await runtime.ensure_open()
                last = folder.position(partition)
                if offset <= last:
                    folder.skipped += 1  # re-delivered
                    continue
                records = []
                if offset > last + 1:
                    log.warning("faust skipped %s:%d..%d; folding them from the log", partition, last + 1, offset - 1)
                    records = await runtime.read(partition, last + 1, offset)
                    folder.filled += len(records)
                decoded = decode(event.value)
                records.append(LogRecord(Position(partition, offset), runtime.unseal(decoded)))
                runtime.wake_replica()
                for record in records:
                    await fold_one(partition, record.position.offset, record.event)
                    if isinstance(record.event, SummaryRequested):
                        triggers[partition] = (record.position.offset, record.event.event_id)
                        wake.set()
            except Exception as exc:  # noqa: BLE001 - never let faust ack an unfolded event
                log.exception("cannot %s", where)
                fail_stop(f"cannot {where}: {type(exc).__name__}: {exc}")

    @app.task
    async def summarize() -> None:
        """Answer the open requests of this worker's partitions: at once when one is folded, else every few seconds.

        Decoupled from the fold agent (a slow model never holds folding up)
        and from faust's delivery: the replica says what is open, so requests
        of a crashed worker, or of events faust skipped, are answered too.
        """
        try:
            await runtime.ensure_open()
            assert runtime.store is not None
            while True:
                try:
                    await asyncio.wait_for(wake.wait(), SWEEP_INTERVAL_S)
                except asyncio.TimeoutError:
                    pass
                wake.clear()
                due = dict(triggers)
                triggers.clear()
                for partition, (offset, request_id) in sorted(due.items()):
                    await runtime.wait_replica(Position(partition, offset), request_id)
                reached = runtime.store.position()
                for tp in sorted(app.consumer.assignment()):
                    if tp.topic == settings.topic and reached.get(tp.partition, 0) > 0:
                        await runtime.answer_open_requests(tp.partition, reached[tp.partition] - 1)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a dead summarizer would leave every request open
            log.exception("the summarizer failed")
            fail_stop(f"the summarizer failed: {type(exc).__name__}: {exc}")

    @app.timer(interval=1.0)
    async def unblock_commits() -> None:
        _ack_folded(app, settings.topic, folder)

    @app.timer(interval=NUDGE_AFTER_S / 2)
    async def nudge() -> None:
        """Seek faust back to the first unfolded offset when it holds records it never delivers.

        faust can fetch records while it recovers the table, drop them from its
        queues and go on fetching after them (faust-streaming #596): with no
        later record to reveal the gap, they would wait forever. When the fold
        agent has had nothing for a while but the log holds unfolded records in
        one of its partitions, fetch them again.
        """
        if not runtime.is_open or time.monotonic() - last_event[0] < NUDGE_AFTER_S:
            return
        if app.rebalancing or not app.tables.recovery.completed.is_set():
            return  # faust seeks every partition itself once recovered
        ends = await runtime.end_positions()
        for tp in sorted(app.consumer.assignment()):
            folded = folder.position(tp.partition)
            if tp.topic == settings.topic and ends.get(tp.partition, 0) - 1 > folded:
                log.warning("faust holds %s:%d.. back; seeking to it again", tp.partition, folded + 1)
                await app.consumer.seek(tp, folded + 1)
                last_event[0] = time.monotonic()

    @app.timer(interval=30.0)
    async def report() -> None:
        log.info("%s; %s", folder.stats(), runtime.stats())

    return app


def _ack_folded(app: faust.App, topic: str, folder: PolicyFolder) -> None:
    """Mark every offset the table says is folded as acked, so faust's offset commits keep up.

    faust commits a partition only up to the first offset it has not seen
    acked, and after a restart its bookkeeping can lose events or acks for
    good (faust-streaming issue #596): commits then stop while processing
    goes on. Offsets at or below the table's ``part|`` position are folded,
    and the summarizer does not depend on commits, so acking them is safe.
    faust's committed offset is read (private, read-only) to ack only the
    range faust is still waiting for.
    """
    consumer = app.consumer
    committed_offsets = getattr(consumer, "_committed_offset", {})
    for tp in consumer.assignment():
        if tp.topic != topic:
            continue
        committed, folded = committed_offsets.get(tp), folder.position(tp.partition)
        if committed is None or committed > folded:
            continue
        for offset in range(committed, folded + 1):
            consumer.ack(Message(tp.topic, tp.partition, offset, 0.0, 0, None, None, None, None, tp=tp))
