"""``memfold serve``: open the engine and serve it with uvicorn.

One uvicorn worker: DuckDB allows one process per projection file, so one
service owns the data dir and answers every request (reads and appends).
With the embedded log it is two processes: this one (HTTP, keys, limits,
validation, appends) and the fold process it starts (the engine; see
:mod:`.fold_process`). Scale reads with projector nodes in distributed
mode, not with more workers on one data dir.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

import uvicorn

from memfold.core.errors import ConfigError
from memfold.core.ports import KeepsAppended
from memfold.core.runtime import tune_gc, tune_switch_interval
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.projector import ServingHooks
from memfold.service.app import close_app, create_app
from memfold.service.fold_process import RemoteEngine
from memfold.service.keys import open_api_keys
from memfold.service.limits import Limits, ReplicaShares
from memfold.service.router import Routing
from memfold.streams.sqlite_log import RECENT_LIMIT

log = logging.getLogger("memfold.service")


def serve(settings: Settings, *, host: str = "127.0.0.1", port: int = 8080, limits: Limits | None = None,
          log_level: str = "warning", fold_process: bool = True, shard: tuple[list[int] | None, str | None] | None = None,
          advertise: str | None = None, session_timeout: float = 10.0) -> None:
    """Run the service until SIGINT/SIGTERM; the engine is closed (threads stopped, files closed) on the way out.

    ``fold_process`` (with an embedded log): the projector, DuckDB and the
    summarizer worker run in a process of their own (:mod:`.fold_process`);
    this one serves HTTP, validates and appends. With a Kafka log the
    service is a read replica folding in this process, and announces itself
    (``advertise``, default ``http://HOST:PORT``) on the node directory;
    ``shard`` ``(partitions, None)`` or ``(None, group)`` makes it a shard
    node folding a fixed list or what its consumer group assigns, with reads
    of other partitions routed to their owners (:mod:`.router`).
    """
    tune_switch_interval()  # reads on the event loop wait less for the lock the folding threads hold
    # A full collection walks every recall index and hot tail the service holds (100-200 ms, measured
    # with gc.callbacks under benchmarks/service_load.py), and every request waits it out.
    tune_gc()
    if settings.summarizer.processes is None:  # summarizing in a process of its own: see summarizer_processes
        settings = settings.model_copy(update={"summarizer": settings.summarizer.model_copy(update={"processes": 1})})
    kafka = settings.log_url().startswith("kafka://")
    if shard is not None and not kafka:
        raise ConfigError("shard nodes (--partitions, --group) run on a Kafka log: pass --log kafka://HOST:PORT")
    if fold_process and not kafka:
        engine = RemoteEngine(settings)
    else:
        engine = MemoryEngine(settings, role="projector" if kafka else "embedded",
                              partitions=[] if shard is not None else None,
                              hooks=ServingHooks(relate_users=True))  # for the context cache
        if isinstance(engine.log, KeepsAppended):  # the SQLite log: its projector here reads what was appended
            engine.log.keep_appended(RECENT_LIMIT)
    app = directory = shards = keys = None
    try:
        routing = None
        if kafka:
            from memfold.engine.sharding import open_directory, open_shards

            url = advertise or f"http://{host}:{port}"
            directory = open_directory(settings, url, url)
            if shard is not None:
                shards = open_shards(engine, partitions=shard[0], group=shard[1], directory=directory,
                                     session_timeout=session_timeout)
                routing = Routing(directory, engine.log.partition_count, shards.node.serving)
            else:
                directory.publish(None)
            directory.start()
        keys = open_api_keys(settings)
        app = create_app(engine, keys, limits, routing=routing)
        if directory is not None:  # replicas split each key's rate (limits.ReplicaShares)
            limiter = app.state.memfold.limiter
            limiter.share = ReplicaShares(directory, limiter.rate)
            directory.extra = lambda: {"load": limiter.granted()}
        # loop/http "auto": uvloop and httptools when installed (they are dependencies), else asyncio and h11.
        # Keep-alive 60 s (uvicorn's default is 5): an agent reads context once per turn, and a connection
        # closed while idle races with the client's next request on it (a "disconnected" error, a reconnect).
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                timeout_graceful_shutdown=5, timeout_keep_alive=60)
        server = uvicorn.Server(config)
        print(f"memfold serving {settings.data_dir} on http://{host}:{port} (API docs at /docs)", flush=True)
        with _sigterm_ends_here():
            server.run()
    finally:
        if app is not None:
            close_app(app)
        if shards is not None:
            shards.close()  # leaves the group: the partitions go to the other nodes at once
        if directory is not None:
            directory.close()
        if keys is not None:
            keys.close()
        engine.close()


@contextlib.contextmanager
def _sigterm_ends_here() -> Iterator[None]:
    """While serving, a SIGTERM ends the process through ``serve``'s ``finally`` (the engine closed), exit status 0.

    uvicorn shuts down gracefully on SIGTERM, then restores the handler it
    found and raises the signal again. The default handler would kill the
    process on the spot: the engine never closed (its threads, the
    summarizer's worker process, DuckDB). With this handler found instead,
    the raised signal becomes a ``SystemExit`` that unwinds through
    ``serve``. Only the main thread can set handlers; elsewhere nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_(signum: int, frame: object) -> None:
        raise SystemExit(0)

    previous = signal.signal(signal.SIGTERM, exit_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
