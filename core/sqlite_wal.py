"""Opening one SQLite file from several processes at once: the switch to WAL must wait its turn."""

from __future__ import annotations

import sqlite3
import time


def enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put ``conn``'s file in WAL mode, retrying while another process holds a lock on it.

    Switching the journal mode takes an exclusive lock without going
    through the busy handler, so two processes opening a fresh file at once
    see "database is locked" at once instead of waiting (a flaky two-process
    test caught it). The mode is persistent: once one switched, the others'
    switch is a no-op once they get the lock.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
