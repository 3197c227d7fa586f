"""Per-conversation data keys for crypto-shredding: the ``KeyStore`` port and its file backend.

Every conversation (``tenant/conversation``, its *scope*) gets a random
256-bit data key the first time content of it is written; message, summary
and fact content in the log is sealed with it (:mod:`memfold.core.sealing`).
Forgetting a conversation destroys its keys, which makes that content
unreadable everywhere the log was copied, without rewriting the immutable log.

The default backend is one SQLite file in the data dir (``keys.sqlite``)
with ``secure_delete`` on, so a destroyed key is overwritten with zeros in
the file and its WAL is truncated. Anything with the same four methods (a
KMS that wraps data keys with a master key, say) can stand in for it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from memfold.core.errors import KeyStoreError
from memfold.core.ports import KEY_BYTES, KEY_RECHECK_S, KeyStore
from memfold.core.sqlite_wal import enable_wal

_DDL = """CREATE TABLE IF NOT EXISTS data_keys (
    key_id TEXT PRIMARY KEY, scope TEXT NOT NULL, key BLOB,
    created_at TEXT NOT NULL, destroyed_at TEXT)"""


class SQLiteKeyStore:
    """Data keys in one SQLite file; safe across threads and processes sharing the file.

    Destroyed keys leave a tombstone row (scope, creation and destruction
    time, no key bytes) so that audits can show when a conversation was erased.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._active: dict[str, tuple[str, bytes]] = {}
        self._keys: dict[str, bytes] = {}
        # What the caches above were checked against: the file's data_version (moved by
        # other connections' commits only) and its tombstone count, checked when it moved.
        self._version: int | None = None
        self._destroyed: int | None = None
        self._checked_at = 0.0
        try:
            # Created owner-only before SQLite opens it: SQLite gives the -wal and -shm files the
            # database file's mode, and they hold key pages too.
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            os.chmod(self.path, 0o600)
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0, isolation_level=None)
            self._db.execute("PRAGMA secure_delete = ON")  # freed cells are zeroed, not left in the file
            enable_wal(self._db, 30.0)
            self._db.execute(_DDL)
            self._db.execute("CREATE INDEX IF NOT EXISTS data_keys_scope ON data_keys (scope)")
            # Tombstones only: counting them is how a process notices another one destroyed a key.
            self._db.execute("CREATE INDEX IF NOT EXISTS data_keys_destroyed ON data_keys (key_id) WHERE key IS NULL")
        except (sqlite3.Error, OSError) as exc:
            raise KeyStoreError(f"cannot open the key store {self.path}: {exc}") from exc
        for extra in ("-wal", "-shm"):  # made by an older memfold with the default mode
            side = self.path.with_name(self.path.name + extra)
            if side.exists():
                os.chmod(side, 0o600)

    def active_keys(self, scopes: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        with self._lock:
            self._check()  # never seal new content with a key another process destroyed
            out = {scope: self._active[scope] for scope in scopes if scope in self._active}
            missing = list(dict.fromkeys(scope for scope in scopes if scope not in out))
            if not missing:
                return out
            try:  # one transaction (one fsync) for a whole batch of new conversations
                self._db.execute("BEGIN IMMEDIATE")
                found = {}
                for scope in missing:
                    row = self._db.execute(
                        "SELECT key_id, key FROM data_keys WHERE scope = ? AND key IS NOT NULL "
                        "ORDER BY rowid DESC LIMIT 1", [scope],
                    ).fetchone()
                    if row is None:
                        if self._forgotten(scope):
                            continue
                        row = self._new_key(scope)
                    found[scope] = (row[0], bytes(row[1]))
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise KeyStoreError(f"cannot create data keys in {self.path}: {exc}") from exc
            for scope, (key_id, key) in found.items():
                self._active[scope] = (key_id, key)
                self._keys[key_id] = key
            return out | found

    def _forgotten(self, scope: str) -> bool:
        """True when ``scope`` has a destroyed key and no live one (call inside a transaction)."""
        return self._db.execute(
            "SELECT count(*) > 0 AND count(key) = 0 FROM data_keys WHERE scope = ?", [scope]
        ).fetchone()[0] == 1

    def _new_key(self, scope: str) -> tuple[str, bytes]:
        row = ("dk-" + os.urandom(12).hex(), os.urandom(KEY_BYTES))
        self._db.execute(
            "INSERT INTO data_keys (key_id, scope, key, created_at) VALUES (?, ?, ?, ?)", [row[0], scope, row[1], _now()]
        )
        return row

    def status(self, scope: str) -> str:
        with self._lock:
            try:
                live, dead = self._db.execute(
                    "SELECT count(key), count(*) - count(key) FROM data_keys WHERE scope = ?", [scope]
                ).fetchone()
            except sqlite3.Error as exc:
                raise KeyStoreError(f"cannot read the key store {self.path}: {exc}") from exc
        return "live" if live else "forgotten" if dead else "unknown"

    def reopen(self, scope: str) -> bool:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                if not self._forgotten(scope):
                    self._db.execute("COMMIT")
                    return False
                key_id, key = self._new_key(scope)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise KeyStoreError(f"cannot reopen {scope} in {self.path}: {exc}") from exc
            self._active[scope] = (key_id, key)
            self._keys[key_id] = key
            return True

    def key(self, key_id: str) -> bytes | None:
        with self._lock:
            if time.monotonic() - self._checked_at >= KEY_RECHECK_S:  # unsealing is hot: check now and then
                self._check()
            found = self._keys.get(key_id)
            if found is not None:
                return found
            try:
                row = self._db.execute("SELECT key FROM data_keys WHERE key_id = ?", [key_id]).fetchone()
            except sqlite3.Error as exc:
                raise KeyStoreError(f"cannot read the key store {self.path}: {exc}") from exc
            if row is None:
                raise KeyStoreError(
                    f"data key {key_id} is not in the key store {self.path}: every node must use the key "
                    "store the writers use (setting 'keystore', env MEMFOLD_KEYSTORE)"
                )
            if row[0] is None:
                return None
            self._keys[key_id] = bytes(row[0])
            return self._keys[key_id]

    def destroy(self, scope: str) -> int:
        with self._lock:
            try:
                ids = [r[0] for r in self._db.execute(
                    "SELECT key_id FROM data_keys WHERE scope = ? AND key IS NOT NULL", [scope]
                ).fetchall()]
                self._db.execute(
                    "UPDATE data_keys SET key = NULL, destroyed_at = ? WHERE scope = ? AND key IS NOT NULL",
                    [_now(), scope],
                )
                self._truncate_wal()
            except sqlite3.Error as exc:
                raise KeyStoreError(f"cannot destroy the keys of {scope} in {self.path}: {exc}") from exc
            self._active.pop(scope, None)
            for key_id in ids:
                self._keys.pop(key_id, None)
            return len(ids)

    def record_destroyed(self, key_id: str, scope: str) -> None:
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR IGNORE INTO data_keys (key_id, scope, key, created_at, destroyed_at) "
                    "VALUES (?, ?, NULL, ?, ?)", [key_id, scope, _now(), _now()],
                )
            except sqlite3.Error as exc:
                raise KeyStoreError(f"cannot record a destroyed key in {self.path}: {exc}") from exc

    def _check(self) -> None:
        """Drop the cached keys when another process destroyed one since the last check.

        ``PRAGMA data_version`` moves only with other connections' commits
        (~3 µs to ask); only then are the tombstones counted (a partial index),
        and the caches dropped if there are more. Keys are re-read on demand.
        """
        self._checked_at = time.monotonic()
        try:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if version == self._version:
                return
            self._version = version
            destroyed = self._db.execute("SELECT count(*) FROM data_keys WHERE key IS NULL").fetchone()[0]
        except sqlite3.Error as exc:
            raise KeyStoreError(f"cannot read the key store {self.path}: {exc}") from exc
        if destroyed != self._destroyed:
            self._destroyed = destroyed
            self._active.clear()
            self._keys.clear()

    def destroyed(self, scope: str) -> list[tuple[str, str, str]]:
        """Return ``(key_id, created_at, destroyed_at)`` of every destroyed key of ``scope``."""
        with self._lock:
            return self._db.execute(
                "SELECT key_id, created_at, destroyed_at FROM data_keys WHERE scope = ? AND key IS NULL ORDER BY rowid",
                [scope],
            ).fetchall()

    def _truncate_wal(self) -> None:
        """Move the WAL into the file and empty it: the WAL still holds the key's old page."""
        for _ in range(50):
            busy, _log, _done = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
            time.sleep(0.05)  # another process is reading; its snapshot ends soon
        raise KeyStoreError(f"the key store {self.path} stayed busy; the destroyed key may linger in its WAL")

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._active.clear()
            self._keys.clear()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def open_keystore(location: str | Path) -> KeyStore:
    """Open the key store ``location`` names: a file path (SQLite) or ``file:///path``."""
    text = str(location)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise KeyStoreError(f"unknown key store {location!r}: give a file path or kafka://HOST:PORT/TOPIC "
                            "(a KMS needs its own KeyStore class)")
    return SQLiteKeyStore(text)
