"""Projection snapshots as plain Parquet: written beside, swapped in atomically, readable by any tool while the engine runs.

Layout of a snapshot root ``DIR`` (docs/analytics.md)::

    DIR/current -> snap-000042           a symlink, replaced atomically (rename)
    DIR/snap-000042/manifest.json        row counts, log positions, settings, when
    DIR/snap-000042/<table>/tenant_id=T/[date=D/]data_0.parquet

A snapshot is written to ``DIR/.tmp-snap-…`` from one read transaction of
the projection (the counts in its manifest are exactly its rows), renamed
to ``snap-N`` and only then pointed at by ``current``. A reader that
resolves ``current`` once (``os.path.realpath``) reads one whole snapshot;
the snapshot it resolved is kept for ``keep_seconds`` after it stops being
current (default 300), so a query started before a swap finishes on it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memfold.core.errors import MemfoldError, ValidationError
from memfold.projections.store import SNAPSHOT_TABLES

log = logging.getLogger("memfold.snapshots")

CURRENT = "current"
MANIFEST = "manifest.json"
_NAME = re.compile(r"^snap-(\d{6,})$")
# One writer at a time per snapshot root in this process: the refresher and an erasure's rewrite.
_WRITING: dict[Path, threading.Lock] = {}
_WRITING_GUARD = threading.Lock()


def _lock(root: Path) -> threading.Lock:
    with _WRITING_GUARD:
        return _WRITING.setdefault(root.resolve(), threading.Lock())
RETIRED = ".retired"  # in a snapshot dir: when it stopped being current (its mtime)


@dataclass(frozen=True)
class Snapshot:
    path: Path
    number: int
    rows: dict[str, int]
    positions: dict[int, int]
    seconds: float
    bytes: int


def write_snapshot(store: Any, root: str | Path, *, node: str | None = None, keep_seconds: float = 300.0) -> Snapshot:
    """Write every projection table of ``store`` as a new snapshot under ``root`` and make it ``current``.

    Steps: (1) write the tables into a temporary directory from one read
    transaction (the projector keeps committing); (2) write its manifest;
    (3) rename it to ``snap-N``; (4) point ``current`` at it by renaming a
    fresh symlink over the old one (atomic); (5) remove snapshots retired
    more than ``keep_seconds`` ago. A failure before (4) leaves ``current``
    as it was and removes the temporary directory.
    """
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    with _lock(base):
        return _write(store, base, node, keep_seconds)


def _write(store: Any, base: Path, node: str | None, keep_seconds: float) -> Snapshot:
    started = time.perf_counter()
    number = max((n for n, _ in _snapshots(base)), default=0) + 1
    name = f"snap-{number:06d}"
    tmp = base / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        read_at = datetime.now(UTC).isoformat()  # the projection as of (about) this time
        written = store.write_parquet(tmp, SNAPSHOT_TABLES)  # (1)
        manifest = {
            "snapshot": number, "node": node, "read_at": read_at, "created_at": datetime.now(UTC).isoformat(),
            "rows": written["rows"], "positions": {str(p): o for p, o in sorted(written["positions"].items())},
            "fold_version": written["meta"].get("fold_version"),
            "settings_hashes": json.loads(written["meta"].get("policies") or "{}"),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")  # (2)
        final = base / name
        tmp.rename(final)  # (3)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    previous = current_path(base)
    link = base / f".{CURRENT}-{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(name)
    os.replace(link, base / CURRENT)  # (4)
    if previous is not None and previous.exists():
        (previous / RETIRED).touch()
    _prune(base, keep_seconds, keep={final, previous})  # (5)
    size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file())
    return Snapshot(final, number, written["rows"], written["positions"], time.perf_counter() - started, size)


def erase_in_snapshots(store: Any, root: str | Path) -> list[str]:
    """After an erasure: replace the snapshots under ``root`` by one fresh snapshot of ``store``, at once.

    The forgotten conversation's rows are gone from the projection, so the
    fresh snapshot does not hold them; every older snapshot is removed now,
    not ``keep_seconds`` later (a reader in the middle of one gets an error:
    erasure comes first). Returns what could not be done, as
    ``MemoryEngine.forget`` reports copies (empty when all is well, or when
    ``root`` holds no snapshot).
    """
    base = Path(root)
    if not base.is_dir():
        return []
    with _lock(base):
        try:
            if current_path(base) is not None:
                fresh = _write(store, base, None, keep_seconds=0.0).path
            else:
                fresh = None
            for path in base.iterdir():
                if path.name != CURRENT and path != fresh and path.is_dir():
                    shutil.rmtree(path)
        except (MemfoldError, OSError) as exc:
            return [f"the snapshots in {base}: {exc}"]
    return []


def current_path(root: str | Path) -> Path | None:
    """Return the snapshot directory ``root/current`` points at now (resolved once), or None when there is none."""
    link = Path(root) / CURRENT
    if not link.is_symlink():
        return None
    return (Path(root) / os.readlink(link)).resolve()


def require_current(root: str | Path) -> Path:
    """Return :func:`current_path` or raise a :class:`ValidationError` saying how to make a snapshot."""
    found = current_path(root)
    if found is None or not (found / MANIFEST).is_file():
        raise ValidationError(f"no snapshot in {root}: write one with `memfold snapshot {root}` or set "
                              "snapshot.every_seconds", field="snapshot")
    return found


def _snapshots(base: Path) -> list[tuple[int, Path]]:
    return sorted((int(m.group(1)), p) for p in base.iterdir() if (m := _NAME.match(p.name)) and p.is_dir())


def _prune(base: Path, keep_seconds: float, keep: set[Path | None]) -> None:
    now = time.time()
    for _, path in _snapshots(base):
        if path in keep:
            continue
        retired = path / RETIRED
        if not retired.exists():
            retired.touch()  # current once, retired by a process that died before marking it
        elif now - retired.stat().st_mtime >= keep_seconds:
            shutil.rmtree(path, ignore_errors=True)
    for stale in base.glob(".tmp-snap-*"):  # a writer killed half-way
        if now - stale.stat().st_mtime >= keep_seconds:
            shutil.rmtree(stale, ignore_errors=True)


class SnapshotRefresher:
    """A daemon thread writing a snapshot of ``store`` every ``every_seconds`` (setting ``snapshot.every_seconds``).

    An interval's failure (a full disk, a file swap in progress) is logged
    and retried at the next interval; ``current`` stays the last good one.
    """

    def __init__(self, store: Any, root: Path, every_seconds: float, *, node: str | None = None,
                 keep_seconds: float = 300.0):
        self.store, self.root, self.every = store, root, every_seconds
        self.node, self.keep_seconds = node, keep_seconds
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memfold-snapshots", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                write_snapshot(self.store, self.root, node=self.node, keep_seconds=self.keep_seconds)
                self.written += 1
            except (MemfoldError, OSError) as exc:
                log.warning("snapshot to %s failed (retried in %.0fs): %s", self.root, self.every, exc)

    def stop(self) -> None:
        """Stop after the snapshot in progress, if any. Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
