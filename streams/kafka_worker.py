"""Run a memfold worker (``memfold worker``): the faust app's agents in this process until told to stop."""

from __future__ import annotations

import asyncio
import logging
import logging.config
import os
import signal
import time
from pathlib import Path
from typing import Any

from memfold.engine.errors import MemfoldError
from memfold.engine.settings import Settings

log = logging.getLogger("memfold.worker")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def logging_config(level: str = "INFO") -> dict[str, Any]:
    """Return a dictConfig: plain one-line records on stderr; faust, mode and the Kafka clients only from WARNING."""
    quiet = "DEBUG" if level.upper() == "DEBUG" else "WARNING"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": LOG_FORMAT}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        # kafka-python (under KafkaEventLog) logs every failed connection attempt and a busy GIL as
        # errors; KafkaEventLog turns what matters into one LogUnavailableError, logged by us.
        "loggers": {
            **{name: {"level": quiet} for name in ("faust", "mode", "aiokafka")},
            "kafka": {"level": "DEBUG" if quiet == "DEBUG" else "CRITICAL"},
        },
    }


def run_worker(
    settings: Settings,
    bootstrap: str,
    data_dir: str | Path,
    *,
    stop_after: float | None = None,
    loglevel: str = "INFO",
    **app_options: Any,
) -> int:
    """Run the policy and summarizer agents until SIGTERM/SIGINT (or ``stop_after`` seconds); return an exit code.

    1. Connect to Kafka at ``bootstrap`` (creating the events topic if
       missing) and open the local replica in ``data_dir``. An unreachable
       broker or a topic that does not fit the settings ends here: one
       plain log line, exit code 1.
    2. Start the faust worker (plain logging, no web server). SIGTERM and
       SIGINT stop it cleanly: the agents finish the event in hand, the
       changelog is flushed and the consumed offsets committed. After
       ``stop_after`` seconds the worker stops the same way.
    3. Close the replica and the log.

    A worker killed at any point (kill -9) loses nothing and duplicates
    nothing once restarted: see :mod:`memfold.streams.faust_app`.
    ``app_options`` go to :func:`~memfold.streams.faust_app.create_app`.
    """
    logging.config.dictConfig(logging_config(loglevel))
    started = time.perf_counter()
    from .faust_app import create_app  # imports faust: only workers pay for it

    app = create_app(settings, bootstrap, data_dir=data_dir, **app_options)
    runtime = app.memfold_runtime
    try:
        runtime.open()
    except MemfoldError as exc:
        log.error("cannot start the worker: %s", exc)
        runtime.close()
        return 1
    log.info("worker %s starting (%d policies: %s)", app.conf.id, len(settings.active_policies),
             ",".join(settings.active_policies))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = _worker(app, loop, loglevel, started)
    if stop_after is not None:
        loop.call_later(stop_after, os.kill, os.getpid(), signal.SIGTERM)
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:  # how faust's worker reports its end
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        stats = f"{app.memfold_folder.stats()}; {runtime.stats()}"
        runtime.close()
    log.info("worker stopped (exit %d) after %.1fs: %s", code, time.perf_counter() - started, stats)
    return code


def _worker(app: Any, loop: asyncio.AbstractEventLoop, loglevel: str, started: float) -> Any:
    import faust

    class Worker(faust.Worker):
        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            log.info("worker ready in %.2fs (partitions assigned, table recovered)", time.perf_counter() - started)

    return Worker(
        app, loop=loop, loglevel=loglevel, logging_config=logging_config(loglevel), quiet=True,
        redirect_stdouts=False, blocking_timeout=None,
    )
