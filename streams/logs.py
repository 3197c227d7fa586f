"""Pick an event log backend by URL: ``sqlite:///path/to/file`` or ``kafka://host:port[,host:port]``.

Backends are named by dotted path and imported only when their scheme is
used (as faust's ``stores.by_url`` does), so the embedded mode never imports
a Kafka client.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from memfold.core.errors import ConfigError
from memfold.core.ports import EventLog

BACKENDS: dict[str, str] = {
    "sqlite": "memfold.streams.sqlite_log:SQLiteEventLog",
    "kafka": "memfold.streams.kafka_log:KafkaEventLog",
}


def open_log(
    url: str, *, partitions: int = 8, topic: str = "memfold.events", timeout: float | None = None,
    state_dir: str | Path | None = None,
) -> EventLog:
    """Open the event log ``url`` names, with ``partitions`` partitions.

    - ``sqlite:///relative/path`` and ``sqlite:////absolute/path`` (the
      SQLAlchemy convention: what follows ``sqlite:///`` is the file path);
      the file is created when missing. ``topic`` is ignored.
    - ``kafka://host:port[,host:port...]``: the bootstrap servers of a Kafka
      cluster; events go to ``topic``; ``timeout`` (seconds, default the
      backend's) bounds every wait on the cluster. With ``state_dir`` (a
      node's data dir) the log keeps its offset index in
      ``state_dir/kafka-index/TOPIC.sqlite`` across restarts; without, in a
      temporary file.

    Raises :class:`~memfold.core.errors.ConfigError` for an unknown scheme
    or a URL without a path or host; backend errors (``LogUnavailableError``,
    a partition count that differs from the existing log's) pass through.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(f"event log URL {url!r} has no scheme; {_supported()}")
    scheme = scheme.lower()
    if scheme not in BACKENDS:
        raise ConfigError(f"unknown event log scheme {scheme!r} in {url!r}; {_supported()}")
    backend = _load(BACKENDS[scheme])
    if scheme == "sqlite":
        path = rest[1:] if rest.startswith("/") else ""
        if not path:
            raise ConfigError(f"event log URL {url!r} names no file; use sqlite:///path/to/events.sqlite")
        return backend(path, partitions=partitions)
    bootstrap = urlsplit(url).netloc
    if not bootstrap:
        raise ConfigError(f"event log URL {url!r} names no broker; use kafka://host:9092[,host:9092]")
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    if state_dir is not None:
        extra["index_path"] = Path(state_dir) / "kafka-index" / f"{topic}.sqlite"
    return backend(bootstrap, topic=topic, partitions=partitions, **extra)


def _supported() -> str:
    return "supported schemes: " + ", ".join(f"{scheme}://" for scheme in sorted(BACKENDS))


def _load(dotted: str) -> Any:
    module_name, _, attribute = dotted.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"event log backend {dotted} cannot be loaded: {exc}") from exc
