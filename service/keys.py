"""API keys: created once, stored hashed, each bound to one tenant and one role.

Two stores with one interface: :class:`ApiKeyStore`, a SQLite file in the
data dir (an embedded log: one service process owns the data dir), and
:class:`SharedApiKeyStore`, records on a compacted Kafka topic
(``TOPIC.apikeys``) that every ``memfold serve`` replica of a Kafka
deployment reads (:func:`open_api_keys` picks by the log). The rest of this
docstring is about the file; the shared store's docstring states its bounds.

A key reads ``mf_<key_id>_<secret>``. Only ``key_id`` and the sha256 of the
secret are stored (in ``api_keys.sqlite`` in the data dir); the secret is shown
once, at creation. The secret is 32 random bytes, so a fast hash is enough:
there is nothing to brute-force, unlike a password. Revocation is a
timestamp; a revoked key is refused on its next request: verified keys are
cached per thread, and the cache is dropped whenever the file changed
(SQLite's ``PRAGMA data_version`` moves when another connection, in any
process, commits), so ``memfold keys revoke`` in another process takes effect
at once and a request with a known key costs no query.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from memfold.core.errors import ConfigError, LogUnavailableError, ValidationError
from memfold.core.settings import Settings
from memfold.core.sqlite_wal import enable_wal

log = logging.getLogger("memfold.service")

ROLES = ("operator", "admin", "writer", "reader")
# What each role may do; a route names the permission it needs. "operate" covers what acts on the whole
# data dir, every tenant at once (replays, promote, verify of everything): no tenant's admin may do it.
PERMISSIONS = {
    "operator": frozenset({"read", "write", "forget", "admin", "operate"}),
    "admin": frozenset({"read", "write", "forget", "admin"}),
    "writer": frozenset({"read", "write"}),
    "reader": frozenset({"read"}),
}
KEYS_FILE = "api_keys.sqlite"

_DDL = """CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, secret_sha256 TEXT NOT NULL, tenant_id TEXT NOT NULL,
    role TEXT NOT NULL, name TEXT, created_at TEXT NOT NULL, revoked_at TEXT)"""


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key, without its secret."""

    key_id: str
    tenant_id: str
    role: str
    name: str | None
    created_at: str
    revoked_at: str | None

    def allows(self, permission: str) -> bool:
        """True when this key's role grants ``permission`` (read, write, forget, admin, operate)."""
        return permission in PERMISSIONS[self.role]


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class ApiKeyStore:
    """The ``api_keys`` table of one data dir. Thread-safe: one SQLite connection per thread."""

    def __init__(self, data_dir: str | Path):
        self.path = Path(data_dir) / KEYS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._epoch = 0  # bumped by this object's own writes (they do not move its data_version)
        with self._conn() as conn:
            conn.execute(_DDL)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None, check_same_thread=False)
            enable_wal(conn, 5.0)
            self._local.conn = conn
        return conn

    def create(self, tenant_id: str, role: str, name: str | None = None) -> tuple[ApiKey, str]:
        """Create a key for ``tenant_id`` with ``role``; return it and the full secret (shown once)."""
        key_id, secret, created = _new_key(tenant_id, role)
        self._conn().execute(
            "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (key_id, _sha256(secret), tenant_id, role, name, created),
        )
        self._epoch += 1
        return ApiKey(key_id, tenant_id, role, name, created, None), f"mf_{key_id}_{secret}"

    def list(self) -> list[ApiKey]:
        """Return every key (active and revoked), oldest first."""
        rows = self._conn().execute(
            "SELECT key_id, tenant_id, role, name, created_at, revoked_at FROM api_keys ORDER BY created_at, key_id"
        ).fetchall()
        return [ApiKey(*row) for row in rows]

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke ``key_id`` (idempotent); raise :class:`ConfigError` if there is no such key."""
        key_id = key_id.removeprefix("mf_").split("_", 1)[0]
        now = datetime.now(UTC).isoformat(timespec="seconds")
        conn = self._conn()
        conn.execute("UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE key_id = ?", (now, key_id))
        self._epoch += 1
        row = conn.execute(
            "SELECT key_id, tenant_id, role, name, created_at, revoked_at FROM api_keys WHERE key_id = ?", (key_id,)
        ).fetchone()
        if row is None:
            raise ConfigError(f"no API key {key_id!r}; 'memfold keys list' shows the ids")
        return ApiKey(*row)

    def close(self) -> None:
        """Nothing to stop: each thread's connection closes with the thread."""

    def authenticate(self, presented: str) -> ApiKey | None:
        """Return the active key matching ``presented`` (the full ``mf_...`` string), else None."""
        if not presented.startswith("mf_"):
            return None
        conn = self._conn()
        stamp = (conn.execute("PRAGMA data_version").fetchone()[0], self._epoch)
        verified = getattr(self._local, "verified", None)
        if verified is None or self._local.stamp != stamp:
            verified = self._local.verified = {}  # the file changed (a key created or revoked): check again
            self._local.stamp = stamp
        digest = _sha256(presented)
        key = verified.get(digest)
        if key is not None:
            return key
        key_id, _, secret = presented[3:].partition("_")
        row = conn.execute(
            "SELECT key_id, tenant_id, role, name, created_at, revoked_at, secret_sha256 FROM api_keys WHERE key_id = ?",
            (key_id,),
        ).fetchone()
        if row is None or row[5] is not None:
            return None
        if not hmac.compare_digest(row[6], _sha256(secret)):
            return None
        key = verified[digest] = ApiKey(*row[:6])  # only verified keys: unknown ones cannot fill memory
        return key


def _new_key(tenant_id: str, role: str) -> tuple[str, str, str]:
    """Check ``tenant_id`` and ``role``; return a fresh ``(key_id, secret, created_at)``."""
    if role not in ROLES:
        raise ValidationError(f"unknown role {role!r}: choose from {', '.join(ROLES)}", field="role")
    if not tenant_id or "/" in tenant_id:
        raise ValidationError("tenant must be a non-empty string without '/'", field="tenant")
    return secrets.token_hex(6), secrets.token_urlsafe(32), datetime.now(UTC).isoformat(timespec="seconds")


class SharedApiKeyStore:
    """API keys as records on a compacted topic every service replica reads (``TOPIC.apikeys``).

    A record's key is the key id; its value ``{"tenant_id", "role", "name",
    "created_at", "revoked_at", "secret_sha256"}``. Revoking writes the same
    record with ``revoked_at`` set, so after compaction only the revoked
    record is left; a revoked id never becomes valid again here, whatever
    record follows. Each replica keeps the table in memory, answers
    :meth:`authenticate` from it (no broker round trip on a request), and
    reads the topic again every ``refresh`` seconds on a thread of its own.

    Bounds: a key created or revoked on one replica (or by ``memfold keys``)
    is known to every replica within ``refresh`` seconds plus one read of the
    topic (1 s by default, a few milliseconds more on a healthy broker); at
    once on the replica that wrote it. When a replica could not read the
    topic for ``stale_after`` seconds (the broker unreachable) it refuses
    every key with :class:`LogUnavailableError` (503) rather than honouring
    a revocation it cannot see.
    """

    def __init__(self, table, *, refresh: float = 1.0, stale_after: float = 30.0, follow: bool = True):
        self.table = table
        self.refresh = refresh
        self.stale_after = stale_after
        self._lock = threading.Lock()
        self._records: dict[str, dict] = {}
        self._revoked: set[str] = set()
        self._read_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read()
        if follow:
            self._thread = threading.Thread(target=self._follow, name="memfold-apikeys", daemon=True)
            self._thread.start()

    def _read(self) -> None:
        records = self.table.read_new()
        with self._lock:
            for key_id, value in records:
                if key_id in self._revoked:
                    continue
                self._records[key_id] = value
                if value.get("revoked_at"):
                    self._revoked.add(key_id)
            self._read_at = time.monotonic()

    def _follow(self) -> None:
        while not self._stop.wait(self.refresh):
            try:
                self._read()
            except LogUnavailableError as exc:  # tried again next time; stale_after bounds how long keys are honoured
                log.warning("API key topic %s: %s", self.table.topic, exc)

    def create(self, tenant_id: str, role: str, name: str | None = None) -> tuple[ApiKey, str]:
        """Create a key for ``tenant_id`` with ``role`` (durable on the topic first); return it and the secret."""
        key_id, secret, created = _new_key(tenant_id, role)
        record = {"tenant_id": tenant_id, "role": role, "name": name, "created_at": created, "revoked_at": None,
                  "secret_sha256": _sha256(secret)}
        self.table.write([(key_id, record)])
        self._read()
        return ApiKey(key_id, tenant_id, role, name, created, None), f"mf_{key_id}_{secret}"

    def list(self) -> list[ApiKey]:
        """Return every key (active and revoked), oldest first, as of the last read of the topic."""
        with self._lock:
            keys = [_from_record(k, v) for k, v in self._records.items()]
        return sorted(keys, key=lambda k: (k.created_at, k.key_id))

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke ``key_id`` (idempotent) on every replica; raise :class:`ConfigError` if there is no such key."""
        key_id = key_id.removeprefix("mf_").split("_", 1)[0]
        self._read()
        with self._lock:
            record = self._records.get(key_id)
        if record is None:
            raise ConfigError(f"no API key {key_id!r}; 'memfold keys list' shows the ids")
        if not record.get("revoked_at"):
            record = {**record, "revoked_at": datetime.now(UTC).isoformat(timespec="seconds")}
            self.table.write([(key_id, record)])
            self._read()
        return _from_record(key_id, record)

    def authenticate(self, presented: str) -> ApiKey | None:
        """Return the active key matching ``presented`` (the full ``mf_...`` string), else None; memory only."""
        if time.monotonic() - self._read_at > self.stale_after:
            raise LogUnavailableError(
                f"the API key topic {self.table.topic!r} could not be read for {self.stale_after:g}s: keys are "
                "refused until it can (a revocation made meanwhile would not be seen); check the broker")
        if not presented.startswith("mf_"):
            return None
        key_id, _, secret = presented[3:].partition("_")
        with self._lock:
            record = self._records.get(key_id)
        if record is None or record.get("revoked_at") or key_id in self._revoked:
            return None
        if not hmac.compare_digest(record["secret_sha256"], _sha256(secret)):
            return None
        return _from_record(key_id, record)

    def adopt(self, path: Path) -> int:
        """Copy the keys of an ``api_keys.sqlite`` file that the topic does not hold yet; return how many.

        A deployment that kept keys in a file per replica keeps them working
        when it moves to the shared store (ids and secret hashes unchanged).
        """
        if not path.exists():
            return 0
        conn = sqlite3.connect(path)
        try:
            rows = conn.execute("SELECT key_id, secret_sha256, tenant_id, role, name, created_at, revoked_at "
                                "FROM api_keys").fetchall()
        except sqlite3.Error:
            return 0
        finally:
            conn.close()
        with self._lock:
            new = [r for r in rows if r[0] not in self._records]
        if new:
            self.table.write([(r[0], {"secret_sha256": r[1], "tenant_id": r[2], "role": r[3], "name": r[4],
                                      "created_at": r[5], "revoked_at": r[6]}) for r in new])
            self._read()
        return len(new)

    def close(self) -> None:
        """Stop following the topic and close it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.table.close()


def _from_record(key_id: str, value: dict) -> ApiKey:
    return ApiKey(key_id, value["tenant_id"], value["role"], value.get("name"), value["created_at"],
                  value.get("revoked_at"))


def api_keys_topic(settings: Settings) -> str:
    """Return the shared key store's topic: ``TOPIC.apikeys`` beside the events topic."""
    return f"{settings.topic}.apikeys"


def open_api_keys(settings: Settings, *, follow: bool = True) -> ApiKeyStore | SharedApiKeyStore:
    """Open the API keys of ``settings``: the shared topic with a Kafka log, else the data dir's file.

    ``follow`` False (a one-shot ``memfold keys`` command) reads the topic
    when asked only, with no thread.
    """
    url = settings.log_url()
    if not url.startswith("kafka://"):
        return ApiKeyStore(settings.data_dir)
    from memfold.streams.compacted_topic import CompactedTopic

    table = CompactedTopic(urlsplit(url).netloc, api_keys_topic(settings), client_id="memfold-apikeys")
    try:
        store = SharedApiKeyStore(table, follow=follow)
    except BaseException:
        table.close()
        raise
    adopted = store.adopt(Path(settings.data_dir) / KEYS_FILE)
    if adopted:
        log.warning("copied %d API key(s) from %s to the shared topic %s", adopted,
                    Path(settings.data_dir) / KEYS_FILE, table.topic)
    return store

