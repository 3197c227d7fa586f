"""What an erasure must finish, kept on disk: pending forgets and the leftovers of killed commands.

``forget`` records its intent here before it destroys anything and clears it
only once every copy is gone, so a ``forget`` killed half-way (or stopped by a
full disk) is visible (``audit`` says "pending") and the next ``forget`` of the
same conversation finishes it. :func:`remove_leftovers` deletes the files a
killed ``rebuild``, ``verify`` or compaction leaves beside the projections:
they are copies of projection rows, plaintext included.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

PENDING_DIR = "erasures"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and make it owner-only (0700): it holds keys and plaintext."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


class PendingErasures:
    """One small file per conversation whose ``forget`` has begun and not finished, under ``data_dir/erasures``."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / PENDING_DIR

    def _path(self, tenant_id: str, conversation_id: str) -> Path:
        name = hashlib.sha256(f"{tenant_id}/{conversation_id}".encode()).hexdigest()[:32]
        return self.root / f"{name}.json"

    def begin(self, tenant_id: str, conversation_id: str) -> bool:
        """Record that the erasure of a conversation has begun (durably); return True if it was pending already."""
        path = self._path(tenant_id, conversation_id)
        if path.exists():
            return True
        private_dir(self.root)
        tmp = path.with_suffix(".tmp")
        body = {"tenant_id": tenant_id, "conversation_id": conversation_id, "began_at": datetime.now(UTC).isoformat()}
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(body, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return False

    def done(self, tenant_id: str, conversation_id: str) -> None:
        """Clear the record: every copy is gone."""
        self._path(tenant_id, conversation_id).unlink(missing_ok=True)

    def is_pending(self, tenant_id: str, conversation_id: str) -> bool:
        return self._path(tenant_id, conversation_id).exists()

    def _user_path(self, tenant_id: str, user_id: str) -> Path:
        name = hashlib.sha256(f"user\x00{tenant_id}/{user_id}".encode()).hexdigest()[:32]
        return self.root / f"user-{name}.json"

    def begin_user(self, tenant_id: str, user_id: str, conversations: list[str]) -> None:
        """Record (durably) that a user's erasure has begun and which conversations it covers (not the user id)."""
        private_dir(self.root)
        path = self._user_path(tenant_id, user_id)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"tenant_id": tenant_id, "conversations": conversations}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def user_conversations(self, tenant_id: str, user_id: str) -> list[str]:
        """Return the conversations of a user's erasure that began and did not finish ([] when none is pending)."""
        path = self._user_path(tenant_id, user_id)
        try:
            return list(json.loads(path.read_text(encoding="utf-8"))["conversations"])
        except FileNotFoundError:
            return []

    def done_user(self, tenant_id: str, user_id: str) -> None:
        """Clear a user's record: every conversation and the user memory are gone."""
        self._user_path(tenant_id, user_id).unlink(missing_ok=True)


def remove_leftovers(data_dir: Path, live: Path, *, busy: set[Path] = frozenset()) -> list[str]:
    """Delete what killed commands left beside the projections; return the names removed.

    ``live`` is the live projection file. Removed: a compaction's ``.compact``
    copy, a rebuild's beside file (``<stem>.rebuild<suffix>``) and their WALs,
    ``verify``'s temporary namespaces (``replays/.verify-<pid>-<n>``) whose
    process is gone, and the same copies inside each replay namespace.
    ``busy`` names paths this process is using (a rebuild running now).
    """
    removed: list[str] = []

    def drop(path: Path) -> None:
        if path in busy or not (path.exists() or path.is_symlink()):
            return
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(str(path.relative_to(data_dir)) if path.is_relative_to(data_dir) else str(path))

    def beside_copies(projection: Path) -> None:
        for copy in (projection.with_name(projection.name + ".compact"),
                     projection.with_name(f"{projection.stem}.rebuild{projection.suffix}")):
            drop(copy)
            drop(copy.with_name(copy.name + ".wal"))

    beside_copies(live)
    replays = Path(data_dir) / "replays"
    if replays.is_dir():
        for space in replays.iterdir():
            if space.name.startswith(".verify-"):
                pid = space.name.split("-")[1]
                if not (pid.isdigit() and _alive(int(pid))):
                    drop(space)
            elif space.is_dir():
                for projection in space.glob("*.duckdb"):
                    beside_copies(projection)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
