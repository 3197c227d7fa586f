"""Opening a DuckDB projection file: the lock wait, the owner-only mode, and opening it ahead on a thread.

DuckDB releases the GIL while it opens a file (~20 ms: the database
instance, its catalog, the write-ahead log), so a short-lived process (a
CLI command) can ask for the file early with :func:`open_ahead` and go on
loading code meanwhile; the store's :func:`connect` of the same file and mode
then takes that connection, or opens the file itself, with its own errors,
when opening ahead failed.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import duckdb

from memfold.core.errors import ProjectionBusyError, ProjectionError

_ahead: dict[tuple[str, bool], tuple[threading.Thread, dict[str, duckdb.DuckDBPyConnection]]] = {}
_ahead_lock = threading.Lock()


def open_ahead(path: str | Path, *, read_only: bool = False) -> None:
    """Start opening ``path`` on a thread for the next :func:`connect` of it in this process (no lock wait)."""
    key = (str(path), read_only)
    opened: dict[str, duckdb.DuckDBPyConnection] = {}

    def run() -> None:
        try:
            opened["con"] = connect_now(Path(path), read_only, 0.0)
        except Exception:  # noqa: S110 - connect() opens the file again and reports what this saw
            pass

    with _ahead_lock:
        if key in _ahead:
            return
        thread = threading.Thread(target=run, name="memfold-open-ahead", daemon=True)
        _ahead[key] = (thread, opened)
    thread.start()


def connect(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """Return a connection to ``path``: the one :func:`open_ahead` made, if any, else :func:`connect_now`'s."""
    with _ahead_lock:
        ahead = _ahead.pop((str(path), read_only), None)
    if ahead is not None:
        thread, opened = ahead
        thread.join()
        if "con" in opened:
            return opened["con"]
    return connect_now(path, read_only, wait_s)


def connect_now(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """Open ``path``, waiting up to ``wait_s`` for another process's lock; raise :class:`ProjectionBusyError`
    when it stays locked and :class:`ProjectionError` for any other failure."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            if not read_only and path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)  # plaintext rows: owner-only, like the key store
            return con
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise ProjectionError(f"cannot open projection {path}: {exc}") from exc
            if time.monotonic() >= deadline:
                holder = str(exc).split("held in", 1)[-1].split(". See", 1)[0].strip()
                raise ProjectionBusyError(
                    f"the projection {path} is in use by another memfold process ({holder}); "
                    "DuckDB allows one writer per file: wait for it to finish or stop it, then retry"
                ) from exc
            time.sleep(0.1)
        except duckdb.Error as exc:
            raise ProjectionError(f"cannot open projection {path}: {exc}") from exc
