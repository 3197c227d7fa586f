"""The faust-streaming app of distributed mode: the policy fold and the summarizer as agents on the events topic.

Two agents read the events topic (raw values, decoded with
:func:`memfold.engine.events.decode`):

- ``memfold-fold`` folds every event into the active policies with
  :func:`memfold.projections.fold.fold_event` (the projector's own per-event
  rule), keeps per-conversation state in a changelog-backed table, and appends
  the requests the policies decide;
- ``memfold-summarize`` answers ``SummaryRequested`` events from a local
  DuckDB replica of the topic (messages, base summaries, outcomes), exactly as
  the embedded :class:`~memfold.streams.worker.SummarizerWorker` does.

Correctness does not rest on faust's exactly-once mode. Every table value
records the topic offset it has folded through, so a re-delivered event is a
no-op; decided requests and outcomes have deterministic ids, which the log
de-duplicates; and an event whose processing cannot finish never gets acked
past: transient log errors are retried, anything else stops the process
before the offset is committed (fail-stop, like a kill -9).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import faust
from pydantic import BaseModel

from memfold.engine.engine import fold_contexts
from memfold.engine.errors import ConfigError, LogError, ProjectionError
from memfold.engine.events import Event, MessageAppended, SummaryRequested, decode
from memfold.engine.ids import content_hash
from memfold.engine.ports import FoldContext, Policy
from memfold.engine.positions import Position
from memfold.engine.settings import Settings
from memfold.engine.tokens import TokenCounter, counter as token_counter
from memfold.projections.fold import ConversationCounters, failed, fold_event
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore
from memfold.projections.summarizers import build_summarizer

from .embedded import EmbeddedRunner
from .kafka_log import HEADER_EVENT_TYPE, KafkaEventLog
from .worker import answer, build_input

log = logging.getLogger("memfold.faust")

TABLE_NAME = "fold-state"
REPLICA_FILE = "replica.duckdb"
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


def default_store() -> str:
    """Return ``rocksdb://`` when faust's RocksDB driver (rocksdict) is installed, else ``memory://``."""
    return "rocksdb://" if importlib.util.find_spec("rocksdict") is not None else "memory://"


# --------------------------------------------------------------------------- the policy fold


def conversation_key(key: str) -> str:
    return f"conv|{key}"


def state_key(policy: str, key: str) -> str:
    return f"state|{policy}|{key}"


def id_key(partition: int, event_id: str) -> str:
    return f"id|{partition}|{event_id}"


class PolicyFolder:
    """Fold one topic record into the policies, reading and planning writes to a key-value table.

    Table layout (one table, so every write of a record goes to the same
    changelog partition, in order):

    - ``conv|tenant/conversation`` → ``{"offset", "seq", "message_count",
      "token_count", "deleted"}``; ``offset`` is the last topic offset folded
      for the conversation (written last, so it implies every other write);
    - ``state|policy|tenant/conversation`` → ``{"offset", "state"}`` (state
      JSON, as the projector stores it); written only when the state changed;
    - ``id|partition|event_id`` → the first offset of that event id, to drop
      a re-appended duplicate exactly as :class:`KafkaEventLog` does on read.
    """

    def __init__(self, table: Any, policies: Mapping[str, tuple[Policy, FoldContext]], counter: TokenCounter):
        self.table = table
        self.policies = policies
        self.counter = counter
        self._parsed: dict[str, tuple[int, BaseModel]] = {}  # table key -> (its offset, parsed state)
        self.folded = 0
        self.skipped = 0

    def plan(self, partition: int, offset: int, value: bytes) -> tuple[list[SummaryRequested], dict[str, Any]] | None:
        """Fold the record at ``partition``/``offset``; return (requests to append, table writes), or None.

        None means nothing to do: the record was folded already (offset at or
        before the conversation's folded offset) or repeats an event id stored
        earlier in the partition. Pure apart from reading the table: the caller
        appends the requests first, then writes, so a crash in between re-plans
        the same requests.
        """
        event = decode(value)
        key = event.key
        conv = self.table.get(conversation_key(key)) or {
            "offset": -1, "seq": 0, "message_count": 0, "token_count": 0, "deleted": False,
        }
        first = self.table.get(id_key(partition, event.event_id))
        if offset <= conv["offset"] or (first is not None and first < offset):
            self.skipped += 1
            return None
        event = event.with_seq(conv["seq"] + 1)
        tokens = self.counter.count_message(event.payload.content or "") if isinstance(event, MessageAppended) else 0
        pending = {name: pc for name, pc in self.policies.items() if self._state_offset(name, key) < offset}
        folded = fold_event(
            event,
            ConversationCounters(conv["message_count"], conv["token_count"], conv["deleted"]),
            pending,
            lambda name: self._state(name, event),
            tokens=tokens,
        )
        writes: dict[str, Any] = {}
        for name, state in folded.states.items():
            if state != self._state(name, event):
                writes[state_key(name, key)] = {"offset": offset, "state": state.model_dump_json()}
                self._parsed[state_key(name, key)] = (offset, state)
        writes[id_key(partition, event.event_id)] = offset
        c = folded.counters
        writes[conversation_key(key)] = {
            "offset": offset, "seq": event.seq, "message_count": c.message_count,
            "token_count": c.token_count, "deleted": c.deleted,
        }
        self.folded += 1
        return folded.requests, writes

    def stats(self) -> str:
        """Return one line of counters: events folded, events skipped."""
        return f"folded {self.folded} events ({self.skipped} skipped as re-delivered or repeated)"

    def _state_offset(self, policy: str, key: str) -> int:
        stored = self.table.get(state_key(policy, key))
        return -1 if stored is None else stored["offset"]

    def _state(self, policy: str, event: Event) -> BaseModel:
        tkey = state_key(policy, event.key)
        stored = self.table.get(tkey)
        impl = self.policies[policy][0]
        if stored is None:
            return impl.initial(event.tenant_id, event.conversation_id)
        cached = self._parsed.get(tkey)
        if cached is not None and cached[0] == stored["offset"]:
            return cached[1]
        state = impl.State.model_validate_json(stored["state"])
        self._parsed[tkey] = (stored["offset"], state)
        return state


# --------------------------------------------------------------------------- the summarizer


class SummaryResponder:
    """Answer one ``SummaryRequested`` from the replica; the embedded worker's rules, one request at a time.

    Skips a request already answered (outcome folded in the replica) or
    repeated (the same id earlier in the partition); answers a request that a
    newer open request of the same (policy, conversation, topic) supersedes
    with ``SummaryFailed`` ``Superseded``; otherwise calls the summarizer
    through :func:`~memfold.streams.worker.answer`.
    """

    def __init__(self, store: DuckDBProjectionStore, summarizer: Any, settings: Settings):
        self.store = store
        self.summarizer = summarizer
        self.settings = settings
        self.calls = 0

    def stored_at(self, request: SummaryRequested) -> tuple[int, int, int] | None:
        """Return (partition, offset, seq) where the replica holds the request's first copy, or None."""
        row = self.store.connection.execute(
            'SELECT "partition", "offset", seq FROM events WHERE event_id = ? ORDER BY "offset" LIMIT 1',
            [request.event_id],
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def outcome_for(self, request: SummaryRequested, position: Position) -> Event | None:
        """Return the outcome event to append for the request read at ``position``, or None to skip it."""
        stored = self.stored_at(request)
        if stored is None or (stored[0], stored[1]) != (position.partition, position.offset):
            return None  # a repeat of an earlier copy: the log drops it on read
        if self.store.outcome(request.payload.request_id) not in (None, "processing"):
            return None  # answered already (restart, re-delivery)
        newer = self._newer_open_request(request, stored[2])
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
    """What the agents use besides faust: the log to append to, the local replica, the summarizer, threads.

    :meth:`open` connects (blocking; raises ``LogUnavailableError`` when no
    broker answers within ``timeout`` seconds) and starts the replica's
    projection thread; :meth:`close` stops everything. Blocking calls (Kafka
    appends, DuckDB, the model) run on two single-thread executors so the
    faust event loop keeps heart-beating.
    """

    def __init__(self, settings: Settings, bootstrap: str, data_dir: Path, *, timeout: float = 15.0):
        self.settings = settings
        self.bootstrap = bootstrap
        self.data_dir = Path(data_dir)
        self.timeout = timeout
        self.log: KafkaEventLog | None = None
        self.replica_log: KafkaEventLog | None = None
        self.store: DuckDBProjectionStore | None = None
        self.runner: EmbeddedRunner | None = None
        self.responder: SummaryResponder | None = None
        self._append_pool = ThreadPoolExecutor(1, thread_name_prefix="memfold-append")
        self._summary_pool = ThreadPoolExecutor(1, thread_name_prefix="memfold-summarize")
        self._open_lock = threading.Lock()
        self.stopping = False
        self.appended = 0

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
            self.store = DuckDBProjectionStore(self.data_dir / REPLICA_FILE)
            self._bind(f"kafka://{self.bootstrap}/{s.topic}")
            # No policies: the replica holds the rows the summarizer reads (messages, summaries) and
            # decides nothing, so it appends nothing and does not depend on the policy settings.
            projector = Projector(self.store, {}, token_counter(s.encoding))
            self.runner = EmbeddedRunner(self.replica_log, self.store, projector, poll_interval=0.02)
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
            raise ConfigError(
                f"{self.data_dir} holds a worker replica of {bound}, not {log_url}; use another --data-dir"
            )

    def stats(self) -> str:
        """Return one line of counters: events appended, summarizer calls."""
        calls = self.responder.calls if self.responder is not None else 0
        return f"appended {self.appended} events, {calls} summarizer calls"

    def _responder(self) -> SummaryResponder:
        # Built on the summarizer thread: the summary cache uses that thread's DuckDB cursor.
        assert self.store is not None
        summarizer = build_summarizer(self.settings, cache_conn=self.store.connection)
        return SummaryResponder(self.store, summarizer, self.settings)

    def close(self) -> None:
        """Stop the replica and close the log and the store. Idempotent."""
        self.stopping = True
        if self.runner is not None:
            self.runner.stop()
        self._summary_pool.shutdown(wait=True)
        self._append_pool.shutdown(wait=True)
        for closable in (self.store, self.replica_log, self.log):
            if closable is not None:
                closable.close()
        self.runner = self.store = self.replica_log = self.log = self.responder = None

    # ----------------------------------------------------------------- async helpers for the agents

    async def ensure_open(self) -> None:
        if not self.is_open:
            await asyncio.get_running_loop().run_in_executor(None, self.open)

    async def append(self, events: Sequence[Event], where: str) -> None:
        """Append ``events`` (retrying while the log is unavailable); fail-stop if stopping meanwhile."""
        assert self.log is not None
        await self._retrying(lambda: self._in(self._append_pool, self.log.append, list(events)), where)
        self.appended += len(events)
        if self.runner is not None:
            self.runner.notify()

    async def wait_replica(self, request: SummaryRequested, position: Position) -> None:
        """Wait until the replica has applied ``position`` (or holds an earlier copy of the request)."""
        assert self.store is not None and self.runner is not None and self.responder is not None
        waited = 0
        while not self.store.has_reached(position):
            if waited % 50 == 0:  # a repeat at the partition's end never advances the position: look it up
                stored = await self._retrying(
                    lambda: self._in(self._summary_pool, self.responder.stored_at, request), f"lookup {position}"
                )
                if stored is not None and (stored[0], stored[1]) < (position.partition, position.offset):
                    return
            self.runner.notify()
            await asyncio.sleep(0.01)
            waited += 1

    async def respond(self, request: SummaryRequested, position: Position) -> Event | None:
        assert self.responder is not None
        return await self._retrying(
            lambda: self._in(self._summary_pool, self.responder.outcome_for, request, position), f"answer {position}"
        )

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
    """Log ``reason`` and end the process at once, before faust can commit the event being processed.

    An agent exception would make faust ack (and later commit) the event and
    restart the agent on the next one, silently skipping it; exiting instead
    leaves the offset uncommitted, so a restarted worker folds it again (the
    same recovery path as a kill -9).
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
    """Return the faust app of a memfold worker: the policy agent, the summarizer agent, the fold table.

    ``bootstrap`` is ``host:port[,host:port]``; ``data_dir`` holds the replica
    (``replica.duckdb``) and faust's files. ``store`` is the table store URL
    (default :func:`default_store`). ``instance_id`` is the static group
    membership id: a worker restarted with the same one takes its partitions
    back at once instead of after the session timeout (default: derived from
    the resolved data dir, which one worker owns at a time). The runtime
    (log, replica, summarizer) is ``app.memfold_runtime``; it opens on the
    first event unless opened before (:func:`~memfold.streams.kafka_worker.run_worker` does).
    """
    data_dir = Path(data_dir)
    runtime = WorkerRuntime(settings, bootstrap, data_dir, timeout=timeout)
    policies = fold_contexts(settings)
    if instance_id is None:
        instance_id = "memfold-worker-" + content_hash(str(data_dir.resolve()), length=12)
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
    app.memfold_runtime = runtime  # type: ignore[attr-defined]
    topic = app.topic(
        settings.topic, partitions=settings.partitions, key_type=bytes, value_type=bytes,
        key_serializer="raw", value_serializer="raw",
    )
    table = app.Table(
        TABLE_NAME, default=None, partitions=settings.partitions,
        schema=faust.Schema(key_serializer="json", value_serializer="json"),
    )
    folder = PolicyFolder(table, policies, token_counter(settings.encoding))

    @app.agent(topic, name="memfold-fold")
    async def fold(stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            where = f"fold {message.partition}:{message.offset}"
            try:
                await runtime.ensure_open()
                planned = folder.plan(message.partition, message.offset, event.value)
                if planned is None:
                    continue
                requests, writes = planned
                if requests:
                    # Log first, then the table: a crash in between re-plans and re-appends the same ids.
                    await runtime.append(requests, where)
                    for r in requests:
                        log.info("%s %s policy=%s conversation=%s", r.type, r.event_id, r.payload.policy, r.key)
                for key, value in writes.items():
                    table[key] = value
            except Exception as exc:  # noqa: BLE001 - never let faust ack an unfolded event
                log.exception("cannot %s", where)
                fail_stop(f"cannot {where}: {type(exc).__name__}: {exc}")

    @app.agent(topic, name="memfold-summarize")
    async def summarize(stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            if _event_type(message) != SummaryRequested.TYPE:
                continue
            position = Position(message.partition, message.offset)
            try:
                await runtime.ensure_open()
                request = decode(event.value)
                assert isinstance(request, SummaryRequested)
                await runtime.wait_replica(request, position)
                outcome = await runtime.respond(request, position)
                if outcome is None:
                    continue
                await runtime.append([outcome], f"record the outcome of {request.event_id}")
                log.info(
                    "answered %s with %s %s (%s)", request.event_id, outcome.type, outcome.event_id,
                    getattr(outcome.payload, "error_type", "") or f"{outcome.payload.latency_ms} ms",
                )
            except Exception as exc:  # noqa: BLE001 - never let faust ack an unanswered request
                log.exception("cannot answer the request at %s", position)
                fail_stop(f"cannot answer the request at {position}: {type(exc).__name__}: {exc}")

    @app.timer(interval=30.0)
    async def report() -> None:
        log.info("%s; %s", folder.stats(), runtime.stats())

    app.memfold_folder = folder  # type: ignore[attr-defined]
    return app


def _event_type(message: Any) -> str | None:
    """Return the ``event_type`` header of a record, or its decoded type when the header is missing."""
    for name, value in message.headers or ():
        if name == HEADER_EVENT_TYPE:
            return value.decode("utf-8") if isinstance(value, bytes) else value
    try:
        return decode(message.value).type
    except Exception:  # an undecodable record is the fold agent's to report
        return None
