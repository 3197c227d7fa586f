"""The Kafka log's offset index, on disk: the read-assigned ``seq`` of every offset and the first offset of every event id.

Kafka can neither number a conversation's events nor refuse a duplicate, so
:class:`~memfold.streams.kafka_log.KafkaEventLog` derives both from the
partition's order (see its module docstring). What it derives grows with
history (one row per offset, one per event id), so it lives in a SQLite
file, not in memory: memory holds the next offset to index per partition
and a bounded cache of each conversation's last ``seq``. A log opened with
a file path (an engine's data dir) keeps its index across restarts and only
reads what was appended since; without one it uses a private temporary
file SQLite deletes on close.

The index is derived data, so any of it can be rebuilt from the topic. It
is only ever extended in offset order, each extension in one transaction
(rows + the partition's next offset), so a crash leaves a prefix. Several
processes may share one file (a client appending with a worker's data dir):
an extension first reloads the partition's next offset from the file, and
rows another process wrote are the same rows (the numbering is a function
of the partition alone).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from memfold.core.errors import LogUnavailableError
from memfold.core.sqlite_wal import enable_wal

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL, last_id TEXT)",
    # seq 0 marks a duplicate (an event id stored earlier in the partition): read drops it.
    "CREATE TABLE IF NOT EXISTS seqs (partition INTEGER, offset INTEGER, seq INTEGER NOT NULL, "
    "PRIMARY KEY (partition, offset)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS ids (event_id TEXT, partition INTEGER, offset INTEGER NOT NULL, "
    "PRIMARY KEY (event_id, partition)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS heads (partition INTEGER, key TEXT, last_seq INTEGER NOT NULL, "
    "PRIMARY KEY (partition, key)) WITHOUT ROWID",
)
_IN_JSON = "IN (SELECT value FROM json_each(?))"


class OffsetIndex:
    """Per-partition ``seq`` numbering and event-id de-duplication of one topic, kept in a SQLite file.

    Not thread-safe on its own: the log calls it under its lock. Memory is
    bounded by ``max_cached_keys`` conversations (their last ``seq``), not by
    the number of offsets or event ids indexed.
    """

    def __init__(self, path: str | Path | None, *, max_cached_keys: int = 100_000):
        self.path = None if path is None else Path(path)
        self.max_cached_keys = max_cached_keys
        self._next: dict[int, int] = {}  # partition -> next offset to index (loaded from the file)
        self._heads: dict[int, dict[str, int]] = {}  # partition -> key -> last seq (a cache of the file's heads)
        try:
            if self.path is None:
                self._db = sqlite3.connect("", check_same_thread=False, isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=60)
                enable_wal(self._db, 60.0)
                self._db.execute("PRAGMA synchronous=NORMAL")  # derived data: a power cut may cost a suffix
            for statement in _SCHEMA:
                self._db.execute(statement)
        except (sqlite3.Error, OSError) as exc:
            raise LogUnavailableError(f"cannot open the Kafka offset index {self.path or '(temporary)'}: {exc}") from exc

    # ------------------------------------------------------------------ reading

    def next_offset(self, partition: int) -> int:
        """Return the first offset of ``partition`` not indexed yet."""
        if partition not in self._next:
            self._reload(partition)
        return self._next[partition]

    def last_id(self, partition: int) -> str | None:
        """Return the event id of the last record indexed in ``partition`` (None when none or a hole)."""
        row = self._db.execute("SELECT last_id FROM meta WHERE partition = ?", [partition]).fetchone()
        return row[0] if row else None

    def seqs(self, partition: int, start: int, stop: int) -> dict[int, int]:
        """Return ``offset -> seq`` for indexed offsets ``start <= offset < stop`` (0: a duplicate; absent: no record)."""
        rows = self._db.execute(
            "SELECT offset, seq FROM seqs WHERE partition = ? AND offset >= ? AND offset < ?", [partition, start, stop]
        )
        return dict(rows.fetchall())

    def offsets(self, partition: int, event_ids: Iterable[str]) -> dict[str, int]:
        """Return the first offset in ``partition`` of each of ``event_ids`` indexed there."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        rows = self._db.execute(
            f"SELECT event_id, offset FROM ids WHERE partition = ? AND event_id {_IN_JSON}", [partition, json.dumps(ids)]
        )
        return dict(rows.fetchall())

    def find(self, event_ids: Iterable[str]) -> dict[str, tuple[int, int]]:
        """Return ``event_id -> (partition, first offset)`` for each of ``event_ids`` indexed in any partition."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        rows = self._db.execute(f"SELECT event_id, partition, offset FROM ids WHERE event_id {_IN_JSON}", [json.dumps(ids)])
        return {event_id: (partition, offset) for event_id, partition, offset in rows.fetchall()}

    def cached_keys(self) -> int:
        """Return how many conversations' last ``seq`` are held in memory (bounded by ``max_cached_keys``)."""
        return sum(len(heads) for heads in self._heads.values())

    # ------------------------------------------------------------------ extending

    def extend(self, partition: int, records: Sequence[tuple[int, str, str]], upto: int) -> dict[int, int]:
        """Index ``records`` ``(offset, key, event_id)`` of ``partition`` (ascending, from its next offset), up to ``upto``.

        Offsets below ``upto`` without a record are holes. Returns ``offset ->
        seq`` for the records indexed here; records another process indexed
        meanwhile are left out (ask :meth:`seqs`). One transaction.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                assigned = self._extend(partition, records, upto)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._next.pop(partition, None)
            self._heads.pop(partition, None)
            raise LogUnavailableError(f"cannot write the Kafka offset index {self.path or '(temporary)'}: {exc}") from exc
        return assigned

    def _extend(self, partition: int, records: Sequence[tuple[int, str, str]], upto: int) -> dict[int, int]:
        db = self._db
        row = db.execute("SELECT next_offset FROM meta WHERE partition = ?", [partition]).fetchone()
        stored, mine = (row[0] if row else 0), self._next.get(partition)
        if stored != mine:
            self._reload(partition)  # another process extended the file: continue from there
            if mine is not None and stored < mine:
                raise sqlite3.OperationalError(f"partition {partition} went back from offset {mine} to {stored}")
        start = self._next[partition]
        records = [r for r in records if r[0] >= start]
        if upto <= start:
            return {}
        heads = self._heads.setdefault(partition, {})
        missing = sorted({key for _, key, _ in records if key not in heads})
        if missing:
            if len(heads) + len(missing) > self.max_cached_keys:
                heads.clear()  # bounded: the file holds every head, reloaded on use
                missing = sorted({key for _, key, _ in records})
            found = dict(db.execute(
                f"SELECT key, last_seq FROM heads WHERE partition = ? AND key {_IN_JSON}", [partition, json.dumps(missing)]
            ).fetchall())
            heads.update((key, found.get(key, 0)) for key in missing)
        known = set(self.offsets(partition, (event_id for _, _, event_id in records)))
        assigned: dict[int, int] = {}
        new_ids: list[tuple[str, int, int]] = []
        touched: set[str] = set()
        for offset, key, event_id in records:
            if event_id in known:
                assigned[offset] = 0
                continue
            known.add(event_id)
            seq = heads[key] + 1
            heads[key] = seq
            touched.add(key)
            assigned[offset] = seq
            new_ids.append((event_id, partition, offset))
        db.executemany("INSERT INTO seqs VALUES (?, ?, ?)", [(partition, o, s) for o, s in assigned.items()])
        db.executemany("INSERT INTO ids VALUES (?, ?, ?)", new_ids)
        db.executemany(
            "INSERT INTO heads VALUES (?, ?, ?) ON CONFLICT (partition, key) DO UPDATE SET last_seq = excluded.last_seq",
            [(partition, key, heads[key]) for key in touched],
        )
        end = max(upto, records[-1][0] + 1) if records else upto
        last_id = records[-1][2] if records and records[-1][0] == end - 1 else None
        db.execute(
            "INSERT INTO meta VALUES (?, ?, ?) ON CONFLICT (partition) DO UPDATE SET next_offset = excluded.next_offset, "
            "last_id = excluded.last_id",
            [partition, end, last_id],
        )
        self._next[partition] = end
        return assigned

    def reset(self, partition: int) -> None:
        """Forget everything indexed for ``partition`` (the topic was recreated under the same name)."""
        self._db.execute("BEGIN IMMEDIATE")
        for table in ("meta", "seqs", "ids", "heads"):
            self._db.execute(f"DELETE FROM {table} WHERE partition = ?", [partition])
        self._db.execute("COMMIT")
        self._next[partition] = 0
        self._heads[partition] = {}

    def close(self) -> None:
        """Close the file (a temporary index is deleted). Idempotent."""
        try:
            self._db.close()
        except sqlite3.Error:
            pass

    def _reload(self, partition: int) -> None:
        row = self._db.execute("SELECT next_offset FROM meta WHERE partition = ?", [partition]).fetchone()
        self._next[partition] = row[0] if row else 0
        self._heads[partition] = {}
