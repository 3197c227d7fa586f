"""API keys: created once, stored hashed, each bound to one tenant and one role.

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
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memfold.core.errors import ConfigError, ValidationError
from memfold.core.sqlite_wal import enable_wal

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
        if role not in ROLES:
            raise ValidationError(f"unknown role {role!r}: choose from {', '.join(ROLES)}", field="role")
        if not tenant_id or "/" in tenant_id:
            raise ValidationError("tenant must be a non-empty string without '/'", field="tenant")
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        created = datetime.now(UTC).isoformat(timespec="seconds")
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
