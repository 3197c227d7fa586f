"""The embedded event log: one SQLite file, append-only, partitioned like a Kafka topic.

Layout of the file::

    meta                key → value: partition count, file schema version
    events              one row per event, in append order; unique (partition_no, offset_no),
                        unique event_id; triggers abort every UPDATE and DELETE
    partition_heads     partition_no → next_offset
    conversation_heads  (tenant_id, conversation_id) → last_seq

The heads tables let an append, and ``end_positions()``, skip scanning events.

Durability and concurrency: WAL journal, ``synchronous=FULL`` (a returned
position survives a crash or power loss), a busy timeout, and ``BEGIN
IMMEDIATE`` for appends, so appenders in any number of threads and processes
serialize on the file's write lock while readers keep reading.
"""

from __future__ import annotations

import itertools
import math
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from memfold.core.errors import (
    AppendFailedError,
    ConfigError,
    EventDecodeError,
    LogCorruptionError,
    LogUnavailableError,
    ValidationError,
)
from memfold.core.events import Event, MessageAppended, decode
from memfold.core.partitioner import partition_for
from memfold.core.positions import LogRecord, Position, check_offsets
from memfold.core.sqlite_wal import enable_wal
from memfold.core.unreadable import UnreadableRecord

SCHEMA_VERSION = 1
_CHUNK = 500  # ids per IN (...) query, well below SQLite's bound-parameter limit
RECENT_LIMIT = 20_000  # appended messages memfold serve keeps for the next read (SQLiteEventLog.keep_appended)
_CACHE_KIB = 32 * 1024  # page cache per connection
_WAL_AUTOCHECKPOINT_PAGES = 10_000  # ~40 MiB of WAL between automatic checkpoints

_SCHEMA = (
    """\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID""",
    # A rowid table: rows land in append order on densely filled pages, whereas
    # clustering on (partition, offset) splits pages at one point per partition.
    """\
CREATE TABLE IF NOT EXISTS events (
    id              INTEGER PRIMARY KEY,
    partition_no    INTEGER NOT NULL,
    offset_no       INTEGER NOT NULL,
    event_id        TEXT NOT NULL,
    type            TEXT NOT NULL,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    body            TEXT NOT NULL
)""",
    """\
CREATE UNIQUE INDEX IF NOT EXISTS events_position ON events (partition_no, offset_no)""",
    # Idempotent appends look ids up here. There is deliberately no unique index
    # on (conversation, seq): seq comes from conversation_heads under the write
    # lock, and that index would double the cost of every append.
    """\
CREATE UNIQUE INDEX IF NOT EXISTS events_event_id ON events (event_id)""",
    """\
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'memfold events are append-only: UPDATE is refused'); END""",
    """\
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'memfold events are append-only: DELETE is refused'); END""",
    """\
CREATE TABLE IF NOT EXISTS partition_heads (
    partition_no INTEGER PRIMARY KEY,
    next_offset  INTEGER NOT NULL
)""",
    """\
CREATE TABLE IF NOT EXISTS conversation_heads (
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    last_seq        INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id)
) WITHOUT ROWID""",
)

_INSERT_EVENT = (
    "INSERT INTO events (partition_no, offset_no, event_id, type, tenant_id, conversation_id, seq, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_CONVERSATION = (
    "INSERT INTO conversation_heads (tenant_id, conversation_id, last_seq) VALUES (?, ?, ?)"
    " ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET last_seq = excluded.last_seq"
)
_UPDATE_PARTITION = "UPDATE partition_heads SET next_offset = ? WHERE partition_no = ?"
_READ = (
    "SELECT offset_no, type, body FROM events WHERE partition_no = ? AND offset_no >= ?"
    " ORDER BY offset_no LIMIT ?"
)
_IDENTITY = "SELECT event_id, tenant_id, conversation_id FROM events WHERE partition_no = ? AND offset_no = ?"


def encode_with_seq(event: Event, seq: int) -> str:
    """Return ``event.with_seq(seq).encode()``, without copying the model when possible.

    The copy costs about as much as the encoding itself, so the ``seq`` token
    is replaced in the encoded text instead. That is exact: ``,"seq":`` cannot
    occur inside a JSON string (its quote would be escaped), and the envelope
    serializes ``seq`` before ``payload``, the only field holding nested
    objects. If the layout ever changes, the slow path is taken.
    """
    text = event.encode()
    token = f',"seq":{event.seq},'
    at = text.find(token)
    if 0 <= at < text.find(',"payload":'):
        return f'{text[:at]},"seq":{seq},{text[at + len(token):]}'
    return event.with_seq(seq).encode()


_NATIVE = (str, int, bool, type(None))


def _json_native(value) -> bool:
    """True when ``value`` decodes from its JSON as itself (no tuple turning into a list, no key into a string)."""
    kind = type(value)
    if kind in _NATIVE:
        return True
    if kind is float:
        return math.isfinite(value)  # JSON has no inf or NaN
    if kind is dict:
        return not value or all(type(k) is str and _json_native(v) for k, v in value.items())
    if kind is list:
        return all(_json_native(v) for v in value)
    return False


class SQLiteEventLog:
    """An :class:`~memfold.core.ports.EventLog` stored in one SQLite file.

    Thread safety: each thread gets its own connection (``threading.local``),
    so a projector thread reads while caller threads append, without a Python
    lock; SQLite's file locks order the writers. ``close()`` closes every
    connection and must not race with calls still in flight. A process forked
    with an open log opens its own connections on first use.
    """

    def __init__(self, path: str | Path, *, partitions: int = 8, busy_timeout: float = 30.0):
        """Open (creating if needed) the log at ``path`` with ``partitions`` partitions.

        The partition count is fixed when the file is created, as in Kafka:
        opening an existing file with another count raises
        :class:`~memfold.core.errors.ConfigError`. A file that cannot be
        opened, or stays locked beyond ``busy_timeout`` seconds, raises
        :class:`~memfold.core.errors.LogUnavailableError`.
        """
        if partitions < 1:
            raise ConfigError(f"an event log needs at least 1 partition, got {partitions}")
        self._path = Path(path)
        self._partitions = partitions
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: dict[int, tuple[threading.Thread, sqlite3.Connection]] = {}
        self._connections_lock = threading.Lock()
        self._pid = os.getpid()
        self._inherited: list[sqlite3.Connection] = []
        self._closed = False
        self._keep = 0  # see keep_appended
        self._recent: dict[int, dict[int, Event]] = {}  # partition -> offset -> event
        self._recent_lock = threading.Lock()
        self._create_or_check()

    # ------------------------------------------------------------------ EventLog

    @property
    def partition_count(self) -> int:
        """Return the number of partitions, fixed when the file was created."""
        return self._partitions

    @property
    def path(self) -> Path:
        """Return the path of the SQLite file."""
        return self._path

    def partitions(self) -> list[int]:
        """Return the partition numbers, ascending: ``0 .. partition_count - 1``."""
        return list(range(self._partitions))

    def append(self, events: Sequence[Event]) -> list[Position]:
        """Append ``events`` as one transaction; return each event's position, in input order.

        1. Take the file's write lock (``BEGIN IMMEDIATE``), waiting up to the busy timeout.
        2. Look up which ``event_id``s are already stored: those are not
           appended again and their existing position is returned (idempotent
           re-append; a repeated id inside the batch gets the first one's position).
        3. Give every new event its partition (``partition_for(event.key, n)``),
           the partition's next offset, and its conversation's next ``seq``
           (the event's own ``seq`` is ignored); store the JSON with that ``seq``.
        4. Insert, advance the heads, commit. The batch is all or nothing.

        Raises :class:`~memfold.core.errors.LogUnavailableError` when the
        write lock cannot be taken in time (nothing appended), and
        :class:`~memfold.core.errors.AppendFailedError` naming the batch's
        event ids for any other failure (nothing of the batch appended;
        retrying is safe because appends are idempotent by ``event_id``).
        """
        if not events:
            return []
        conn = self._connection()
        event_ids = [event.event_id for event in events]
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LogUnavailableError(
                f"cannot take the write lock of event log {self._path} within {self._busy_timeout}s: {exc}; "
                "nothing was appended, retry later"
            ) from exc
        try:
            positions, kept = self._append_locked(conn, events)
            conn.execute("COMMIT")
        except BaseException as exc:
            self._rollback(conn)
            if isinstance(exc, sqlite3.Error):
                raise AppendFailedError(
                    f"append of {len(events)} event(s) to {self._path} failed and was rolled back: {exc}; "
                    "retry the append (it is idempotent by event_id)",
                    event_ids=event_ids,
                ) from exc
            raise
        if kept:
            self._remember(kept)
        return positions

    def keep_appended(self, limit: int) -> None:
        """Keep up to ``limit`` of the messages this object appends for its next read (0, the default: none).

        A projector in the same process then gets the very events that were
        validated and encoded instead of decoding their JSON again (about a
        quarter of its time in ``memfold serve``), and keeps up better.
        What a read takes, or reads from the file, or leaves behind it, is
        dropped; beyond ``limit`` the oldest of the fullest partition go.
        Off by default: the kept events are young objects the garbage
        collector walks while they wait, which cost a bulk ingest in a
        process with CPython's default collector more than the decoding
        saved (200,000 messages: 6,898 -> 5,288 messages/s).
        """
        with self._recent_lock:
            self._keep = max(0, limit)
            if not self._keep:
                self._recent = {}

    def _remember(self, kept: list[tuple[tuple[int, int], Event]]) -> None:
        with self._recent_lock:
            recent = self._recent
            for (partition, offset), event in kept:
                recent.setdefault(partition, {})[offset] = event
            excess = sum(map(len, recent.values())) - self._keep
            while excess > 0:  # the oldest of the fullest partition go first
                held = max(recent.values(), key=len)
                oldest = list(itertools.islice(held, excess))
                for offset in oldest:
                    del held[offset]
                excess -= len(oldest)

    def _take_recent(self, partition: int, start: int, limit: int) -> list[LogRecord]:
        records: list[LogRecord] = []
        held = self._recent.get(partition)
        if not held:
            return records
        with self._recent_lock:
            # Kept after a read had already taken them from the file (a commit and a read racing): of no use.
            for offset in list(itertools.takewhile(lambda o: o < start, held)):
                del held[offset]
            pop = held.pop
            for offset in range(start, start + limit):
                event = pop(offset, None)
                if event is None:
                    break
                records.append(LogRecord(Position(partition, offset), event))
        return records

    def read(self, partition: int, start: int, limit: int = 1000) -> list[LogRecord]:
        """Return up to ``limit`` records of ``partition`` starting *at* offset ``start``, in offset order.

        Only committed events are seen. Reading at or past the end returns
        ``[]``. Stored events of an older schema are upcast on decode; a row
        that decodes to no event is returned as an
        :class:`~memfold.core.unreadable.UnreadableRecord` at its offset
        (never skipped, never failing the rest of the read).
        """
        self._check_partition(partition)
        check_offsets(start, limit)
        records = self._take_recent(partition, start, limit)
        if len(records) == limit:
            return records
        start, limit = start + len(records), limit - len(records)
        with self._translate_read_errors("read"):
            rows = self._connection().execute(_READ, (partition, start, limit)).fetchall()
        expected = start
        for offset, event_type, body in rows:
            if offset != expected:
                raise LogCorruptionError(
                    f"event log {self._path} partition {partition} has a gap: expected offset {expected}, "
                    f"found {offset}"
                )
            records.append(LogRecord(Position(partition, offset), self._decoded(partition, offset, event_type, body)))
            expected += 1
        held = self._recent.get(partition)
        if rows and held:  # read from the file: what was kept of them is of no more use
            with self._recent_lock:
                for offset in range(start, expected):
                    held.pop(offset, None)
        return records

    def scan(self, partition: int, start: int, types: Collection[str], limit: int = 5000) -> tuple[list[LogRecord], int]:
        """Return the records of ``types`` among the next ``limit`` committed offsets from ``start``, and the offset after them.

        The type is a column: the other rows are filtered out in SQL, never
        decoded. A row of ``types`` that decodes to no event is returned as
        an :class:`~memfold.core.unreadable.UnreadableRecord`, as by :meth:`read`.
        """
        self._check_partition(partition)
        check_offsets(start, limit)
        wanted = sorted(set(types))
        with self._translate_read_errors("scan"):
            con = self._connection()
            head = con.execute("SELECT next_offset FROM partition_heads WHERE partition_no = ?", (partition,)).fetchone()
            stop = min(head[0] if head else 0, start + limit)
            if start >= stop:
                return [], start
            rows = con.execute(
                "SELECT offset_no, type, body FROM events WHERE partition_no = ? AND offset_no >= ? AND offset_no < ?"
                f" AND type IN ({', '.join('?' * len(wanted))}) ORDER BY offset_no",
                (partition, start, stop, *wanted),
            ).fetchall() if wanted else []
        return [LogRecord(Position(partition, o), self._decoded(partition, o, t, body)) for o, t, body in rows], stop

    def _decoded(self, partition: int, offset: int, event_type: str, body: str) -> Event | UnreadableRecord:
        """Return the event a row stores, or an :class:`UnreadableRecord` naming what the row says of it and why not."""
        try:
            return decode(body, event_type=event_type)
        except (EventDecodeError, TypeError, ValueError) as exc:  # a row no event decodes from, whatever it holds
            with self._translate_read_errors("read"):
                row = self._connection().execute(_IDENTITY, (partition, offset)).fetchone() or (None, None, None)
            return UnreadableRecord(Position(partition, offset), str(exc), event_id=row[0], stored_type=event_type,
                                    tenant_id=row[1], conversation_id=row[2])

    def find(self, event_ids: Sequence[str]) -> dict[str, Position]:
        """Return the position of each of ``event_ids`` already stored (ids not stored are absent)."""
        with self._translate_read_errors("look up events in"):
            return self._existing_positions(self._connection(), list(event_ids))

    def end_positions(self) -> dict[int, int]:
        """Return, per partition, the offset the next appended event will get (= its event count).

        Reads the heads table (one small query), so runners may poll it often.
        """
        with self._translate_read_errors("read the end positions of"):
            rows = self._connection().execute("SELECT partition_no, next_offset FROM partition_heads").fetchall()
        ends = dict.fromkeys(range(self._partitions), 0)
        ends.update(rows)
        return ends

    def close(self) -> None:
        """Close every connection this object opened. Idempotent."""
        with self._recent_lock:
            self._recent = {}
        with self._connections_lock:
            self._closed = True
            connections, self._connections = self._connections, {}
            if self._pid != os.getpid():
                return  # the parent's connections, inherited through fork: leave them alone
        for _thread, conn in connections.values():
            conn.close()

    def __enter__(self) -> SQLiteEventLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteEventLog({str(self._path)!r}, partitions={self._partitions})"

    # ------------------------------------------------------------------ append internals

    def _append_locked(self, conn: sqlite3.Connection, events: Sequence[Event]
                       ) -> tuple[list[Position], list[tuple[tuple[int, int], Event]]]:
        """Insert the new ones of ``events``; return every event's position and the messages to remember."""
        existing = self._existing_positions(conn, [event.event_id for event in events])
        new: dict[str, tuple[Event, int]] = {}  # event_id → (event, partition), first occurrence wins
        for event in events:
            if event.event_id not in existing and event.event_id not in new:
                new[event.event_id] = (event, partition_for(event.key, self._partitions))
        if not new:
            return [existing[event.event_id] for event in events], []

        conversations = {(event.tenant_id, event.conversation_id) for event, _ in new.values()}
        next_offset = dict(conn.execute("SELECT partition_no, next_offset FROM partition_heads").fetchall())
        last_seq = self._last_seqs(conn, conversations)
        rows = []
        kept = []
        assigned: dict[str, Position] = {}
        for event_id, (event, partition) in new.items():
            offset = next_offset[partition]
            next_offset[partition] = offset + 1
            conversation = (event.tenant_id, event.conversation_id)
            seq = last_seq.get(conversation, 0) + 1
            last_seq[conversation] = seq
            rows.append(
                (partition, offset, event_id, event.type, event.tenant_id, event.conversation_id, seq,
                 encode_with_seq(event, seq))
            )
            assigned[event_id] = Position(partition, offset)
            if self._keep and type(event) is MessageAppended and _json_native(event.payload.metadata):
                kept.append(((partition, offset), event if event.seq == seq else event.with_seq(seq)))
        conn.executemany(_INSERT_EVENT, rows)
        conn.executemany(_UPSERT_CONVERSATION, [(t, c, last_seq[(t, c)]) for t, c in conversations])
        touched_partitions = {partition for _, partition in new.values()}
        conn.executemany(_UPDATE_PARTITION, [(next_offset[p], p) for p in touched_partitions])
        existing.update(assigned)
        return [existing[event.event_id] for event in events], kept

    @staticmethod
    def _existing_positions(conn: sqlite3.Connection, event_ids: list[str]) -> dict[str, Position]:
        found: dict[str, Position] = {}
        unique = list(dict.fromkeys(event_ids))
        for i in range(0, len(unique), _CHUNK):
            chunk = unique[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT event_id, partition_no, offset_no FROM events WHERE event_id IN ({marks})"
            for event_id, partition, offset in conn.execute(query, chunk):
                found[event_id] = Position(partition, offset)
        return found

    @staticmethod
    def _last_seqs(conn: sqlite3.Connection, conversations: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        by_tenant: dict[str, list[str]] = {}
        for tenant_id, conversation_id in conversations:
            by_tenant.setdefault(tenant_id, []).append(conversation_id)
        found: dict[tuple[str, str], int] = {}
        # One tenant per query: "tenant = ? AND conversation IN (...)" searches the
        # primary key, where a row-value IN (VALUES ...) would scan the whole table.
        for tenant_id, conversation_ids in by_tenant.items():
            for i in range(0, len(conversation_ids), _CHUNK):
                chunk = conversation_ids[i : i + _CHUNK]
                query = (
                    "SELECT conversation_id, last_seq FROM conversation_heads"
                    f" WHERE tenant_id = ? AND conversation_id IN ({','.join('?' * len(chunk))})"
                )
                for conversation_id, seq in conn.execute(query, [tenant_id, *chunk]):
                    found[(tenant_id, conversation_id)] = seq
        return found

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction left to roll back (SQLite already aborted it)

    # ------------------------------------------------------------------ connections and schema

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise LogUnavailableError(f"event log {self._path} is closed; open a new SQLiteEventLog")
        local = self._local
        pid = os.getpid()
        if getattr(local, "pid", None) == pid:
            return local.conn
        conn = self._connect()
        with self._connections_lock:
            if self._pid != pid:
                # A forked child never uses its parent's connections (SQLite forbids
                # it); they stay referenced so garbage collection does not close them.
                self._inherited.extend(old for _thread, old in self._connections.values())
                self._connections, self._pid = {}, pid
            # Connections of ended threads are closed here, so a thread pool that
            # churns threads does not pile up file handles.
            for ident, (thread, old) in list(self._connections.items()):
                if not thread.is_alive():
                    old.close()
                    del self._connections[ident]
            self._connections[threading.get_ident()] = (threading.current_thread(), conn)
        local.conn, local.pid = conn, pid
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT).
            # check_same_thread=False only so close() may close other threads' connections;
            # each connection is otherwise used by its own thread alone.
            conn = sqlite3.connect(
                self._path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            enable_wal(conn, self._busy_timeout)
            conn.execute("PRAGMA synchronous=FULL")
            # Appends dirty many pages of the event_id index (ids are random): a larger
            # cache and fewer, larger checkpoints roughly double append throughput.
            conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT_PAGES}")
            return conn
        except (sqlite3.Error, OSError) as exc:
            raise LogUnavailableError(f"cannot open event log {self._path}: {exc}") from exc

    def _create_or_check(self) -> None:
        """Create the schema on first open; check the partition count on every open.

        Done under the write lock, so two processes creating the same file at
        once agree on one partition count.
        """
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self.close()
            raise LogUnavailableError(f"cannot open event log {self._path}: {exc}") from exc
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.executemany(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                [("partitions", str(self._partitions)), ("schema_version", str(SCHEMA_VERSION))],
            )
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            self._check_meta(meta)
            conn.executemany(
                "INSERT OR IGNORE INTO partition_heads (partition_no, next_offset) VALUES (?, 0)",
                [(p,) for p in range(self._partitions)],
            )
            conn.execute("COMMIT")
        except BaseException as exc:
            self._rollback(conn)
            self.close()
            if isinstance(exc, sqlite3.Error):
                raise LogUnavailableError(f"cannot open event log {self._path}: {exc}") from exc
            raise

    def _check_meta(self, meta: dict[str, str]) -> None:
        stored = int(meta["partitions"])
        if stored != self._partitions:
            raise ConfigError(
                f"event log {self._path} was created with {stored} partitions, not {self._partitions}; "
                f"the partition count is fixed at creation: open it with partitions={stored}"
            )
        version = int(meta["schema_version"])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"event log {self._path} has file schema {version}, newer than {SCHEMA_VERSION}; upgrade memfold"
            )

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._partitions:
            raise ValidationError(
                f"partition {partition} does not exist; event log {self._path} has partitions "
                f"0..{self._partitions - 1}",
                field="partition",
            )

    @contextmanager
    def _translate_read_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise LogUnavailableError(f"cannot {what} event log {self._path}: {exc}") from exc
