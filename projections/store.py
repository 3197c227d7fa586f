"""The DuckDB projection store: tables, one-transaction apply with log positions, and reads.

Every write goes through :meth:`DuckDBProjectionStore.apply`, which inserts a
batch of row changes *and* the log positions they cover in one transaction:
after a crash the store holds either the whole batch and its positions or
neither, so a restarted projector resumes exactly where the data ends.
DuckDB allows one writing process per file; a second process gets
:class:`ProjectionBusyError` (or opens the file read-only).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import msgspec

from memfold.core.errors import ProjectionError
from memfold.core.events import PRIVATE_FIELDS, SummaryRequested, ToolCall, decode_dict
from memfold.core.ids import content_hash
from memfold.core.ports import MessageRecord
from memfold.core.positions import Position
from memfold.projections.dense import DENSE_DDL
from memfold.projections.opening import connect
from memfold.projections.retrieval import SEARCH_COLUMNS, SEARCH_DDL, new_columns
from memfold.projections.summary_cache import CACHE_TABLE_DDL, CACHE_TABLE_MIGRATIONS
from memfold.projections.user_memory import USER_FACT_COLUMNS, StatedFact, fold_user_facts
from memfold.projections.views import view_ddl

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_DDL = [
    """CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS positions (
        partition INTEGER PRIMARY KEY, next_offset BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS events (
        "partition" INTEGER, "offset" BIGINT, event_id VARCHAR, type VARCHAR, schema_version INTEGER,
        tenant_id VARCHAR, conversation_id VARCHAR, seq BIGINT, occurred_at TIMESTAMPTZ,
        causation_id VARCHAR, payload JSON)""",
    """CREATE TABLE IF NOT EXISTS conversations (
        tenant_id VARCHAR, conversation_id VARCHAR, "partition" INTEGER,
        message_count BIGINT, last_seq BIGINT, token_count BIGINT,
        first_at TIMESTAMPTZ, last_at TIMESTAMPTZ, deleted BOOLEAN,
        PRIMARY KEY (tenant_id, conversation_id))""",
    """CREATE TABLE IF NOT EXISTS messages (
        tenant_id VARCHAR, conversation_id VARCHAR, idx BIGINT, seq BIGINT, event_id VARCHAR,
        role VARCHAR, content VARCHAR, tokens INTEGER, cum_tokens BIGINT,
        model_variant VARCHAR, name VARCHAR, tool_calls JSON, tool_call_id VARCHAR,
        importance DOUBLE, metadata JSON, occurred_at TIMESTAMPTZ,
        "partition" INTEGER, "offset" BIGINT)""",
    """CREATE TABLE IF NOT EXISTS summaries (
        request_id VARCHAR PRIMARY KEY, summary_id VARCHAR, policy VARCHAR,
        tenant_id VARCHAR, conversation_id VARCHAR,
        base_summary_id VARCHAR, covers_from BIGINT, covers_to BIGINT,
        input_from BIGINT, input_to BIGINT, window_start BIGINT, topic_id VARCHAR,
        kind VARCHAR, status VARCHAR, text VARCHAR, facts JSON,
        summarizer VARCHAR, model VARCHAR, prompt_hash VARCHAR, settings_hash VARCHAR,
        tokens_in INTEGER, tokens_out INTEGER, latency_ms INTEGER, cached BOOLEAN,
        reason VARCHAR, error_type VARCHAR, requested_seq BIGINT, resolved_seq BIGINT,
        requested_at TIMESTAMPTZ)""",
    # One row per (key, value) a policy's summaries carried. Lineage: stated_at (event time: the stating
    # message's timestamp) and stated_in (its index); introduced_by / introduced_seq (learned: the summary
    # version that first carried it and that summary's log seq); retired_by (the summary that dropped it,
    # or the TopicEvicted event of the topic that held it); superseded_by (fact_id of the later value of the
    # same key that replaced it).
    """CREATE TABLE IF NOT EXISTS facts (
        policy VARCHAR, tenant_id VARCHAR, conversation_id VARCHAR,
        key VARCHAR, value VARCHAR, category VARCHAR,
        introduced_by VARCHAR, retired_by VARCHAR)""",
    # A MessageRetracted marks its message: every read below leaves retracted rows out.
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS retracted BOOLEAN DEFAULT false",
    "ALTER TABLE facts ADD COLUMN IF NOT EXISTS fact_id VARCHAR",
    "ALTER TABLE facts ADD COLUMN IF NOT EXISTS stated_at TIMESTAMPTZ",
    "ALTER TABLE facts ADD COLUMN IF NOT EXISTS stated_in BIGINT",
    "ALTER TABLE facts ADD COLUMN IF NOT EXISTS introduced_seq BIGINT",
    "ALTER TABLE facts ADD COLUMN IF NOT EXISTS superseded_by VARCHAR",
    """CREATE TABLE IF NOT EXISTS policy_state (
        policy VARCHAR, tenant_id VARCHAR, conversation_id VARCHAR, state JSON,
        PRIMARY KEY (policy, tenant_id, conversation_id))""",
    # The token counts of the texts the state's context plan counts, by text_digest: a read process plans
    # with them instead of loading the tokenizer (projector.Projector, MemoryEngine._read_plan).
    "ALTER TABLE policy_state ADD COLUMN IF NOT EXISTS plan_tokens JSON",
    """CREATE TABLE IF NOT EXISTS policy_rows (
        policy VARCHAR, tbl VARCHAR, tenant_id VARCHAR, conversation_id VARCHAR, row JSON)""",
    *SEARCH_DDL,
    # Fold-state snapshots every few events of a conversation, for time travel (projections.time_travel).
    """CREATE TABLE IF NOT EXISTS state_history (
        tenant_id VARCHAR, conversation_id VARCHAR, seq BIGINT, message_count BIGINT, token_count BIGINT,
        deleted BOOLEAN, states JSON)""",
    # User memory (projections.user_memory): a conversation belongs to at most one user (the first its messages
    # name); user_facts and user_notes are refolded, in the batch's transaction, for every user it touched.
    "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS user_id VARCHAR",
    """CREATE TABLE IF NOT EXISTS user_facts (
        policy VARCHAR, tenant_id VARCHAR, user_id VARCHAR, key VARCHAR, value VARCHAR, category VARCHAR,
        conversation_id VARCHAR, stated_in BIGINT, stated_at TIMESTAMPTZ, fact_id VARCHAR,
        superseded_by VARCHAR, superseded_in VARCHAR, "current" BOOLEAN)""",
    # Per conversation of a user and policy, its newest completed summary's text: the user's summary.
    """CREATE TABLE IF NOT EXISTS user_notes (
        policy VARCHAR, tenant_id VARCHAR, user_id VARCHAR, conversation_id VARCHAR, summary_id VARCHAR,
        text VARCHAR, covers_to BIGINT, stated_at TIMESTAMPTZ)""",
    # The user's own summary (a SummaryProduced of scope "user"), one row per version: made on the stream of
    # ``conversation_id`` (one of the user's), standing for the conversation summaries ``covers_summaries``
    # of the conversations ``covers``. The newest per policy (produced_at, then summary_id) is the user's.
    """CREATE TABLE IF NOT EXISTS user_summaries (
        policy VARCHAR, tenant_id VARCHAR, user_id VARCHAR, conversation_id VARCHAR, summary_id VARCHAR,
        request_id VARCHAR, text VARCHAR, covers VARCHAR[], covers_summaries VARCHAR[], produced_at TIMESTAMPTZ,
        summarizer VARCHAR, model VARCHAR)""",
    # Summaries of scope "user" (the user's summary) share the request/outcome rows; their text is in user_summaries.
    "ALTER TABLE summaries ADD COLUMN IF NOT EXISTS scope VARCHAR DEFAULT 'conversation'",
    "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS user_summary_counts VARCHAR",
    # Log records no event decodes from (engine.unreadable): folded past, kept here for the operator.
    """CREATE TABLE IF NOT EXISTS poison_events (
        "partition" INTEGER, "offset" BIGINT, event_id VARCHAR, stored_type VARCHAR,
        tenant_id VARCHAR, conversation_id VARCHAR, error VARCHAR, seen_at TIMESTAMPTZ,
        PRIMARY KEY ("partition", "offset"))""",
]

_MESSAGE_COLUMNS = (
    "tenant_id", "conversation_id", "idx", "seq", "event_id", "role", "content", "tokens", "cum_tokens",
    "model_variant", "name", "tool_calls", "tool_call_id", "importance", "metadata", "occurred_at",
    "partition", "offset",
)
_EVENT_COLUMNS = (
    "partition", "offset", "event_id", "type", "schema_version", "tenant_id", "conversation_id", "seq",
    "occurred_at", "causation_id", "payload",
)
_SUMMARY_REQUEST_COLUMNS = (
    "request_id", "policy", "tenant_id", "conversation_id", "base_summary_id", "covers_from",
    "covers_to", "input_from", "input_to", "window_start", "topic_id", "kind", "status", "settings_hash",
    "requested_seq", "requested_at", "scope",
)



def _schema() -> tuple[str, ...]:
    """Return every statement that makes a projection file's tables, migrations and views, in order."""
    return (*_DDL, CACHE_TABLE_DDL, *CACHE_TABLE_MIGRATIONS, *DENSE_DDL, *view_ddl())


# The hash of the schema statements, recorded in store_meta ('schema') once they ran: an engine opening a
# file of the same schema runs none of them (~18 ms of every CLI command's ~40 statements).
SCHEMA_HASH = content_hash(*_schema(), length=16)


def _schema_of(con: duckdb.DuckDBPyConnection) -> tuple[str | None, bool]:
    """Return the schema hash a projection file records (None: a new file, or one from before the hash) and
    whether it records its column types."""
    try:
        rows = dict(con.execute("SELECT key, value FROM store_meta WHERE key IN ('schema', 'column_types')").fetchall())
    except duckdb.CatalogException:
        return None, False
    return rows.get("schema"), "column_types" in rows


class Changes(msgspec.Struct):
    """Row changes for one transaction, built by the projector; columns are plain lists."""

    events: dict[str, list[Any]] = msgspec.field(default_factory=lambda: {c: [] for c in _EVENT_COLUMNS})
    messages: dict[str, list[Any]] = msgspec.field(default_factory=lambda: {c: [] for c in _MESSAGE_COLUMNS})
    conversations: dict[tuple[str, str], dict[str, Any]] = msgspec.field(default_factory=dict)
    summary_requests: list[dict[str, Any]] = msgspec.field(default_factory=list)
    summary_results: list[dict[str, Any]] = msgspec.field(default_factory=list)
    fact_inserts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    fact_retirements: list[tuple[str, str, str, str, str, str]] = msgspec.field(default_factory=list)
    fact_supersessions: list[tuple[str, str, str, str, str, str]] = msgspec.field(default_factory=list)
    policy_states: dict[tuple[str, str, str], str] = msgspec.field(default_factory=dict)
    plan_tokens: dict[tuple[str, str, str], str] = msgspec.field(default_factory=dict)  # same keys: counts' JSON
    policy_rows: dict[tuple[str, str, str], dict[str, list[dict[str, Any]]]] = msgspec.field(default_factory=dict)
    search: dict[str, list[Any]] = msgspec.field(default_factory=new_columns)  # search_docs rows (projections.retrieval)
    deleted: set[tuple[str, str]] = msgspec.field(default_factory=set)
    erased: set[tuple[str, str]] = msgspec.field(default_factory=set)  # deleted ones whose text was stored
    retracted: list[tuple[str, str, str]] = msgspec.field(default_factory=list)  # (tenant, conversation, message event_id)
    state_history: list[dict[str, Any]] = msgspec.field(default_factory=list)  # fold-state snapshots (projections.time_travel)
    records: list[MessageRecord] = msgspec.field(default_factory=list)  # for the hot tail, not written
    # poison_events rows: records that could not be decoded, folded past (partition, offset, ids known, error)
    poison: list[dict[str, Any]] = msgspec.field(default_factory=list)
    users: set[tuple[str, str]] = msgspec.field(default_factory=set)  # (tenant, user) whose user memory is refolded
    user_summaries: list[dict[str, Any]] = msgspec.field(default_factory=list)  # user_summaries rows (user-scope summaries)
    # (tenant, summary_id) of user summaries this batch erased (made from a conversation forgotten): the engine
    # destroys their keys, so their copy in the log is shredded too (written by _write).
    shredded_user_summaries: set[tuple[str, str]] = msgspec.field(default_factory=set)
    # Conversations not written by the batch whose context changed with it: the other conversations of a
    # user whose conversation it wrote (their contexts hold its memory and recall). Set once committed.
    related: set[tuple[str, str]] = msgspec.field(default_factory=set)
    # Conversations whose row and policy states the store held when the batch was folded: written with an
    # UPDATE (the others with an upsert). A hint for speed only: a row it names that is gone is inserted.
    stored: set[tuple[str, str]] = msgspec.field(default_factory=set)

    def __len__(self) -> int:
        return len(self.events["event_id"])


def _read_again_after_a_swap(method):
    """Run a read once more if the file was swapped under it (compaction, rebuild, promote).

    A reader may take its cursor just before :meth:`DuckDBProjectionStore._swap_in`
    closes the connection and run its query just after: DuckDB then raises
    ``ConnectionException``. The swap is a moment, so the read is repeated on
    the reopened file; an error with no swap in between is raised as it is.
    """

    @functools.wraps(method)
    def read(self, *args, **kwargs):
        generation = self._generation
        try:
            return method(self, *args, **kwargs)
        except duckdb.Error:
            if self._generation == generation and self._open.is_set():
                raise
            return method(self, *args, **kwargs)

    return read


class DuckDBProjectionStore:
    """Projection tables in one DuckDB file. Thread-safe: each thread uses its own cursor."""

    def __init__(self, path: str | Path, *, read_only: bool = False, lock_wait_s: float = 5.0):
        self.path = Path(path)
        self.read_only = read_only
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise ProjectionError(f"no projection at {self.path}: run a command that ingests first")
        self._con = connect(self.path, read_only, lock_wait_s)
        self._local = threading.local()
        self._generation = 0
        self._open = threading.Event()
        self._open.set()
        self._write_lock = threading.Lock()
        # Held while a snapshot reads (write_parquet): a file rewrite waits for it, as DuckDB cannot
        # CHECKPOINT under an open transaction, and a swap would close the connection it reads from.
        self._copying = threading.Lock()
        schema, typed = _schema_of(self._con) if not read_only else (SCHEMA_HASH, True)
        if schema != SCHEMA_HASH:  # a file made by this memfold needs no DDL
            for ddl in _schema():
                self._con.execute(ddl)
            self._con.execute(
                "INSERT OR IGNORE INTO store_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
            )
            self._con.execute("INSERT INTO store_meta VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE SET "
                              "value = excluded.value", [SCHEMA_HASH])
        if schema != SCHEMA_HASH or not typed:
            self._con.execute("INSERT INTO store_meta VALUES ('column_types', ?) ON CONFLICT (key) DO UPDATE SET "
                              "value = excluded.value", [json.dumps(self._column_types(), sort_keys=True)])
        self._positions = {p: o for p, o in self._con.execute("SELECT * FROM positions").fetchall()}

    # ----------------------------------------------------------------- plumbing

    @functools.cached_property
    def _types(self) -> dict[str, dict[str, str]]:
        """Return ``{table: {column: DuckDB type}}`` of this file's tables: what a batch's columns are cast to.

        Recorded in ``store_meta`` with the schema they belong to (reading DuckDB's catalog for them took
        ~5 ms of every process that writes); a file opened read-only from before that record has them read here.
        """
        rows = self._con.execute("SELECT value FROM store_meta WHERE key = 'column_types'").fetchall()
        return json.loads(rows[0][0]) if rows else self._column_types()

    def _column_types(self) -> dict[str, dict[str, str]]:
        """Return ``{table: {column: DuckDB type}}`` from DuckDB's catalog."""
        types: dict[str, dict[str, str]] = {}
        for table, column, data_type in self._con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
            "AND NOT internal"
        ).fetchall():
            types.setdefault(table, {})[column] = data_type
        return types

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """Return this thread's cursor on the store (for the summary cache and ad-hoc SQL)."""
        if not self._open.is_set():
            self._open.wait(15.0)  # the file is being swapped (compaction, rebuild): it reopens in milliseconds
        cur = getattr(self._local, "cur", None)
        if cur is None or self._local.generation != self._generation:  # a compaction reopened the file
            cur = self._con.cursor()
            self._local.cur = cur
            self._local.generation = self._generation
        return cur

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """Return a new cursor on the current file (the summary cache takes one per call)."""
        if not self._open.is_set():
            self._open.wait(15.0)
        return self._con.cursor()

    def write_lock(self) -> threading.Lock:
        """Return the lock every write of this store holds: a writer beside the projector (the dense index) takes it too.

        While it is held no batch, erase or file swap is written.
        """
        return self._write_lock

    def close(self) -> None:
        """Checkpoint and close the store; further calls fail.

        The explicit CHECKPOINT writes the write-ahead log into the file
        before closing, so the ``.duckdb`` file alone holds everything (a
        copy of it is a complete backup). DuckDB's own checkpoint at close
        was skipped now and then while summarizer pool threads still held
        cursors, leaving a ``.wal`` beside the file.
        """
        if not self.read_only:
            try:
                self._con.execute("CHECKPOINT")
            except duckdb.Error as exc:
                log.warning("could not checkpoint %s before closing (its .wal file keeps the rest): %s", self.path, exc)
        try:
            self._con.close()
        except duckdb.Error:
            pass

    @_read_again_after_a_swap
    def meta(self, key: str) -> str | None:
        """Return a ``store_meta`` value, or None."""
        rows = self.connection.execute("SELECT value FROM store_meta WHERE key = ?", [key]).fetchall()
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a ``store_meta`` value."""
        self.connection.execute(
            "INSERT INTO store_meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value]
        )

    def reset(self) -> None:
        """Drop every projection table and position, keeping ``llm_cache`` and ``dense_vectors``; the next apply starts at offset 0.

        This is how a projection is rebuilt from the log (new policies or
        settings): projections are disposable, cached model outputs are not.
        The file is then rewritten (:meth:`compact`): DuckDB frees dropped
        tables' blocks without overwriting them, and a conversation forgotten
        before the fold reaches it again would leave its old text there (the
        fold then never sees it had text in this file, so it has nothing to
        compact).
        """
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        cur = self.connection
        with self._write_lock:
            cur.execute("DROP VIEW IF EXISTS search_postings")
            for table in ("positions", "events", "conversations", "messages", "summaries", "facts", "policy_state",
                          "policy_rows", "search_docs", "state_history", "poison_events", "user_facts", "user_notes",
                          "user_summaries"):
                cur.execute(f"DROP TABLE IF EXISTS {table}")
            for ddl in (*_DDL, *view_ddl()):
                cur.execute(ddl)
            self._positions = {}
        self.compact()

    # ----------------------------------------------------------------- positions

    def position(self) -> dict[int, int]:
        """Return, per partition, the next offset to apply (offsets below it are applied)."""
        return dict(self._positions)

    def has_reached(self, position: Position) -> bool:
        """True once the event *at* ``position`` has been applied."""
        return self._positions.get(position.partition, 0) > position.offset

    # ----------------------------------------------------------------- writes

    def apply(self, changes: Changes, positions: dict[int, int]) -> None:
        """Write ``changes`` and advance ``positions`` (partition → next offset) in ONE transaction.

        Steps: (1) begin; (2) insert events and messages as Arrow batches;
        (3) upsert conversations, summaries, facts, policy state; (4) write the
        positions; (5) commit. On any error roll back and raise
        :class:`ProjectionError`; the store is then exactly as before the call.
        A position behind the stored one is refused (positions only move forward).
        """
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        behind = {p: o for p, o in positions.items() if o < self._positions.get(p, 0)}
        if behind:
            raise ProjectionError(
                f"positions may only move forward: {behind} is behind the stored "
                f"{ {p: self._positions[p] for p in behind} } (a runner folded records twice?)"
            )
        cur = self.connection
        with self._write_lock:
            try:
                cur.execute("BEGIN TRANSACTION")
                self._write(cur, changes)
                if positions:
                    _upsert(cur, self._types, "positions", [{"partition": p, "next_offset": o} for p, o in positions.items()],
                            ("partition",), lambda row: row["partition"] in self._positions)
                cur.execute("COMMIT")
            except Exception as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    self._reopen()  # DuckDB invalidated the database (an I/O error such as a full disk)
                if isinstance(exc, duckdb.Error):
                    raise ProjectionError(f"projection write failed and was rolled back: {exc}") from exc
                raise
            self._positions.update(positions)

    @_read_again_after_a_swap
    def poison_events(self) -> list[dict[str, Any]]:
        """Return the log records the fold passed over because no event decodes from them, in log order.

        Each row: ``partition``, ``offset``, what the log knew of the record
        (``event_id``, ``stored_type``, ``tenant_id``, ``conversation_id``,
        each None when unknown), the decode ``error`` and when the fold
        first met it (``seen_at``).
        """
        cur = self.connection.execute('SELECT * FROM poison_events ORDER BY "partition", "offset"')
        return _dicts(cur)

    def _write(self, cur: duckdb.DuckDBPyConnection, ch: Changes) -> None:
        # First: the stored rows of conversations this batch deletes. The projector took the batch's
        # own rows from before each deletion out already; rows after it (a reopen) are written below.
        types = self._types
        for tenant_id, conversation_id in ch.deleted:
            ch.shredded_user_summaries.update(_user_summaries_from(cur, tenant_id, conversation_id))
            _erase(cur, tenant_id, conversation_id)
        for row in ch.poison:
            cur.execute(
                'INSERT INTO poison_events ("partition", "offset", event_id, stored_type, tenant_id, conversation_id, '
                "error, seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, now()) ON CONFLICT DO NOTHING",
                [row["partition"], row["offset"], row["event_id"], row["stored_type"], row["tenant_id"],
                 row["conversation_id"], row["error"]],
            )
        if ch.events["event_id"]:
            _insert(cur, types, "events", ch.events)
        if ch.messages["event_id"]:
            _insert(cur, types, "messages", ch.messages)
        if ch.search["doc_id"]:
            _insert(cur, types, "search_docs", ch.search)
        for tenant_id, conversation_id, event_id in ch.retracted:  # after the inserts: same-batch messages too
            key = [tenant_id, conversation_id, event_id]
            cur.execute("UPDATE messages SET retracted = true WHERE tenant_id = ? AND conversation_id = ? AND event_id = ?", key)
            cur.execute("DELETE FROM search_docs WHERE tenant_id = ? AND conversation_id = ? AND kind = 'message' "
                        "AND doc_id = ?", key)
        if ch.state_history:
            _insert(cur, types, "state_history", _columns(ch.state_history))
        if ch.conversations:
            _upsert(cur, types, "conversations", list(ch.conversations.values()), ("tenant_id", "conversation_id"),
                    lambda row: (row["tenant_id"], row["conversation_id"]) in ch.stored)
        if ch.summary_requests:
            _insert(cur, types, "summaries", _columns(ch.summary_requests, _SUMMARY_REQUEST_COLUMNS), verb="INSERT OR IGNORE")
        # One UPDATE ... FROM per outcome shape: row-by-row UPDATEs cost milliseconds each in DuckDB.
        shapes: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for result in ch.summary_results:
            shapes.setdefault(tuple(result), []).append(result)
        for cols, rows in shapes.items():
            relation, params = _relation(types["summaries"], _columns(rows))
            sets = ", ".join(f"{c} = _sres.{c}" for c in cols if c != "request_id")
            cur.execute(f"UPDATE summaries SET {sets} FROM {relation} AS _sres WHERE summaries.request_id = _sres.request_id",
                        params)
        for policy, tenant_id, conversation_id, key, value, retired_by in ch.fact_retirements:
            cur.execute(
                "UPDATE facts SET retired_by = ? WHERE policy = ? AND tenant_id = ? AND conversation_id = ? "
                "AND key = ? AND value = ? AND retired_by IS NULL",
                [retired_by, policy, tenant_id, conversation_id, key, value],
            )
        for policy, tenant_id, conversation_id, key, value, superseded_by in ch.fact_supersessions:
            cur.execute(
                "UPDATE facts SET superseded_by = ? WHERE policy = ? AND tenant_id = ? AND conversation_id = ? "
                "AND key = ? AND value = ? AND superseded_by IS NULL",
                [superseded_by, policy, tenant_id, conversation_id, key, value],
            )
        if ch.fact_inserts:
            _insert(cur, types, "facts", _columns(ch.fact_inserts))
        if ch.policy_states:
            _upsert(cur, types, "policy_state", [
                {"policy": k[0], "tenant_id": k[1], "conversation_id": k[2], "state": state,
                 "plan_tokens": ch.plan_tokens.get(k)} for k, state in ch.policy_states.items()
            ], ("policy", "tenant_id", "conversation_id"), lambda row: (row["tenant_id"], row["conversation_id"]) in ch.stored)
        if ch.policy_rows:
            keys = list(ch.policy_rows)
            relation, params = _relation(types["policy_rows"], {
                name: [k[i] for k in keys] for i, name in enumerate(("policy", "tenant_id", "conversation_id"))})
            # One DELETE for the batch: a statement per conversation costs DuckDB a millisecond each.
            cur.execute(
                f"DELETE FROM policy_rows USING {relation} AS _pkeys WHERE policy_rows.policy = _pkeys.policy "
                "AND policy_rows.tenant_id = _pkeys.tenant_id AND policy_rows.conversation_id = _pkeys.conversation_id",
                params,
            )
            rows: dict[str, list[str]] = {"policy": [], "tbl": [], "tenant_id": [], "conversation_id": [], "row": []}
            for (policy, tenant_id, conversation_id), tables in ch.policy_rows.items():
                for tbl_name, tbl_rows in tables.items():
                    for r in tbl_rows:
                        rows["policy"].append(policy)
                        rows["tbl"].append(tbl_name)
                        rows["tenant_id"].append(tenant_id)
                        rows["conversation_id"].append(conversation_id)
                        rows["row"].append(json.dumps(r, sort_keys=True, default=str))
            if rows["row"]:
                _insert(cur, types, "policy_rows", rows)
        if ch.user_summaries:
            _insert(cur, types, "user_summaries", _columns(ch.user_summaries),
                    "WHERE summary_id NOT IN (SELECT summary_id FROM user_summaries)")
            # One made (in flight) from a conversation forgotten meanwhile goes at once, with its key.
            late = cur.execute(
                "SELECT DISTINCT u.tenant_id, u.summary_id FROM user_summaries u JOIN conversations c ON "
                "c.tenant_id = u.tenant_id AND list_contains(u.covers, c.conversation_id) WHERE c.deleted"
            ).fetchall()
            for tenant_id, summary_id in late:
                _scrub_user_summaries(cur, tenant_id, "summary_id = ?", [summary_id])
                ch.shredded_user_summaries.add((tenant_id, summary_id))
        for tenant_id, user_id in sorted(ch.users):  # last: it reads the facts and summaries written above
            _refold_user(cur, types, tenant_id, user_id)

    def erase(self, tenant_id: str, conversation_id: str, *, fold_states: bool = False) -> int:
        """Delete every content row of a conversation again (rows a late writer added); return how many went.

        ``fold_states`` deletes its policy fold states too, in the same
        transaction (a replay namespace that has not folded the deletion yet
        keeps memory text there; the fold rebuilds them from the log).
        """
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        cur = self.connection
        with self._write_lock:
            try:
                cur.execute("BEGIN TRANSACTION")
                count = 0
                if fold_states:
                    count = cur.execute("DELETE FROM policy_state WHERE tenant_id = ? AND conversation_id = ?",
                                        [tenant_id, conversation_id]).fetchone()[0]
                count += _erase(cur, tenant_id, conversation_id)
                if count:
                    _owe_compaction(cur)
                cur.execute("COMMIT")
                return count
            except duckdb.Error as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    self._reopen()  # DuckDB invalidated the database (an I/O error such as a full disk)
                raise ProjectionError(f"cannot erase {tenant_id}/{conversation_id}: {exc}") from exc

    def absorb(self, parts: Sequence[str | Path]) -> int:
        """Insert every row of other projection files that folded *other partitions* into this one; one transaction.

        A replay group folds disjoint partitions into a file per process
        (:mod:`memfold.engine.replay_group`); this merges them. Their
        ``store_meta`` is not copied (this file keeps its own). Raises
        :class:`ProjectionError` and changes nothing when a part holds a
        position this file already has (the partitions are not disjoint).
        Returns how many rows were inserted.
        """
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        cur = self.connection
        count = 0
        aliases = [f"part{i}" for i in range(len(parts))]
        with self._write_lock:
            attached = []
            try:
                for alias, path in zip(aliases, parts):  # outside the transaction: DuckDB attaches there only
                    cur.execute(f"ATTACH '{Path(path)}' AS {alias} (READ_ONLY)")
                    attached.append(alias)
                mine = {r[0] for r in cur.execute("SELECT table_name FROM information_schema.tables WHERE "
                                                  "table_catalog = current_database() AND table_type = 'BASE TABLE'"
                                                  ).fetchall()}
                cur.execute("BEGIN TRANSACTION")
                for alias, path in zip(aliases, parts):
                    clash = cur.execute(f"SELECT p.partition FROM {alias}.positions p JOIN positions m "
                                        "USING (partition) WHERE m.next_offset > 0 AND p.next_offset > 0").fetchall()
                    if clash:
                        raise ProjectionError(f"{path} folded partitions {sorted(r[0] for r in clash)} that this "
                                              "projection holds already: a replay group's parts must be disjoint")
                    tables = [r[0] for r in cur.execute(
                        "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? "
                        "AND table_type = 'BASE TABLE'", [alias]
                    ).fetchall() if r[0] != "store_meta" and r[0] in mine]
                    for table in sorted(tables):
                        if table == "positions":
                            cur.execute(f"DELETE FROM positions WHERE partition IN (SELECT partition FROM {alias}.positions)")
                        conflict = "OR IGNORE " if table == "llm_cache" else ""  # content-addressed: same key, same entry
                        count += cur.execute(
                            f"INSERT {conflict}INTO {table} BY NAME SELECT * FROM {alias}.{table}").fetchone()[0]
                cur.execute("COMMIT")
            except (duckdb.Error, ProjectionError) as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # no transaction was open (the attach failed)
                if isinstance(exc, ProjectionError):
                    raise
                raise ProjectionError(f"cannot merge the replay group's parts into {self.path}: {exc}") from exc
            finally:
                for alias in attached:
                    try:
                        cur.execute(f"DETACH {alias}")
                    except duckdb.Error:
                        self._reopen()
                        break
            self._positions = {p: o for p, o in cur.execute("SELECT * FROM positions").fetchall()}
        return count

    def drop_partitions(self, partitions: Iterable[int]) -> int:
        """Delete every row of the conversations of ``partitions``, and their positions, in one transaction.

        A shard node that loses partitions stops holding them: if they come
        back, it folds them again from offset 0 (nothing stale is kept).
        Returns how many rows went.
        """
        wanted = sorted(set(partitions))
        if not wanted:
            return 0
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        cur = self.connection
        marks = ", ".join("?" for _ in wanted)
        count = 0
        with self._write_lock:
            try:
                cur.execute("BEGIN TRANSACTION")
                cur.execute(f"CREATE TEMP TABLE dropped AS SELECT tenant_id, conversation_id FROM conversations "
                            f"WHERE partition IN ({marks})", wanted)
                tables = {r[0] for r in cur.execute("SELECT table_name FROM information_schema.tables WHERE "
                                                    "table_catalog = current_database() AND table_type = 'BASE TABLE'"
                                                    ).fetchall()}
                for table in ("summaries", "facts", "policy_state", "policy_rows", "search_docs", "state_history",
                              "llm_cache", "dense_vectors", "messages", "events"):
                    if table in tables:
                        count += cur.execute(f"DELETE FROM {table} WHERE (tenant_id, conversation_id) IN "
                                             "(SELECT tenant_id, conversation_id FROM dropped)").fetchone()[0]
                for table in ("events", "poison_events", "conversations", "positions"):
                    count += cur.execute(f'DELETE FROM {table} WHERE "partition" IN ({marks})', wanted).fetchone()[0]
                cur.execute("DROP TABLE dropped")
                cur.execute("COMMIT")
            except duckdb.Error as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    self._reopen()
                raise ProjectionError(f"cannot drop partitions {wanted} from {self.path}: {exc}") from exc
            for p in wanted:
                self._positions.pop(p, None)
        return count

    def compact(self) -> None:
        """Rewrite the DuckDB file so that deleted rows leave no bytes behind, then reopen it.

        DuckDB frees the blocks of deleted rows without overwriting them, so
        an erased conversation's text would stay readable in the file; the
        erasing transaction records that a rewrite is owed
        (:meth:`compaction_owed`), and this clears it once done. Steps:
        (1) copy every table into a fresh file beside this one; (2) close the
        connection; (3) atomically rename the fresh file over this one;
        (4) reopen. Callers hold every writer still (the runner paused); a
        read racing steps 2..4 runs again on the reopened file.
        """
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        fresh = self.path.with_name(self.path.name + ".compact")
        fresh.unlink(missing_ok=True)
        with self._write_lock, self._copying:
            try:
                self._con.execute("CHECKPOINT")
                self._con.execute(f"ATTACH '{fresh.as_posix()}' AS memfold_compact")
                catalog = self._con.execute("SELECT current_database()").fetchone()[0]
                self._con.execute(f'COPY FROM DATABASE "{catalog}" TO memfold_compact')
                self._con.execute("DETACH memfold_compact")
            except duckdb.Error as exc:  # a full disk, say: the half-written copy goes, the debt stays on record
                try:
                    self._con.execute("DETACH DATABASE IF EXISTS memfold_compact")
                except duckdb.Error:
                    self._reopen()  # DuckDB invalidated the database (a failed checkpoint is fatal to it)
                fresh.unlink(missing_ok=True)
                fresh.with_name(fresh.name + ".wal").unlink(missing_ok=True)
                raise ProjectionError(f"cannot compact the projection {self.path}: {exc}") from exc
            self._swap_in(fresh)
            self._con.execute("DELETE FROM store_meta WHERE key = ?", [COMPACTION_OWED])

    def compaction_owed(self) -> bool:
        """True while rows were erased and the file not yet rewritten: their bytes may still be in freed blocks."""
        return self.meta(COMPACTION_OWED) is not None

    def copy_rows_from(self, other: DuckDBProjectionStore, table: str) -> None:
        """Add ``other``'s rows of ``table`` that this store lacks (by primary key): a model's results carried over."""
        rows = other.connection.sql(f"SELECT * FROM {table}").to_arrow_table()
        self.connection.register("_carried", rows)
        try:
            self.connection.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM _carried")
        finally:
            self.connection.unregister("_carried")

    def replace_with(self, other: DuckDBProjectionStore) -> None:
        """Make ``other`` (a projection built beside this one, then closed by this call) this store's file.

        Steps: (1) checkpoint and close ``other``; (2) close this connection;
        (3) atomically rename the other file over this one; (4) reopen. Readers
        never see an empty projection: before the rename they read the old
        rows, after it the new ones (a read racing steps 2..4 runs again on the reopened file).
        """
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        with self._write_lock, self._copying:
            try:
                other.connection.execute("CHECKPOINT")
            except duckdb.Error as exc:
                raise ProjectionError(f"cannot checkpoint {other.path}: {exc}") from exc
            other.close()
            self._swap_in(other.path)

    def _reopen(self) -> None:
        """Open the file again after DuckDB invalidated the connection (a fatal I/O error such as a full disk).

        Every committed transaction is in the file or its WAL; the reopened
        connection reads them back. Caller holds the write lock.
        """
        self._open.clear()
        try:
            try:
                self._con.close()
            except duckdb.Error:
                pass
            self._con = connect(self.path, False, 5.0)
            self._generation += 1
            self._positions = {p: o for p, o in self._con.execute("SELECT * FROM positions").fetchall()}
        finally:
            self._open.set()

    def _swap_in(self, fresh: Path) -> None:
        """Replace this file with ``fresh`` and reopen (caller holds the write lock).

        New cursors wait until the file is reopened; the connection closes as
        soon as no reader is inside a query (DuckDB refuses to close a busy one).
        """
        self._open.clear()
        try:
            deadline = time.monotonic() + 10.0
            while True:
                try:
                    self._con.close()
                    break
                except duckdb.Error:
                    if time.monotonic() > deadline:
                        raise ProjectionError(f"readers kept {self.path} busy for 10 s; the swap was not done") from None
                    time.sleep(0.001)
            os.replace(fresh, self.path)
            self.path.with_name(self.path.name + ".wal").unlink(missing_ok=True)
            self._con = connect(self.path, False, 5.0)
            self._generation += 1
            self._positions = {p: o for p, o in self._con.execute("SELECT * FROM positions").fetchall()}
        finally:
            self._open.set()

    # ----------------------------------------------------------------- reads

    @_read_again_after_a_swap
    def conversation(self, tenant_id: str, conversation_id: str) -> dict[str, Any] | None:
        """Return the ``conversations`` row as a dict, or None."""
        cur = self.connection
        row = cur.execute(
            "SELECT * FROM conversations WHERE tenant_id = ? AND conversation_id = ?", [tenant_id, conversation_id]
        ).fetchall()
        if not row:
            return None
        return dict(zip([d[0] for d in cur.description], row[0]))

    @_read_again_after_a_swap
    def conversations_and_states(
        self, keys: Sequence[tuple[str, str]]
    ) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[tuple[str, str, str], str], dict[str, int]]:
        """Return the ``conversations`` rows, every policy state of ``keys`` and the token counts recorded
        with those states' context plans (text digest -> tokens, :meth:`plan_tokens`), in two queries.

        A point query costs milliseconds in DuckDB; the projector prefetches
        each batch's unseen conversations with this instead.
        """
        if not keys:
            return {}, {}, {}
        cur = self.connection
        relation, params = _relation({"t": "VARCHAR", "c": "VARCHAR"},
                                     {"t": [k[0] for k in keys], "c": [k[1] for k in keys]})
        cur.execute(f"SELECT conversations.* FROM conversations JOIN {relation} AS _keys ON tenant_id = _keys.t "
                    "AND conversation_id = _keys.c", params)
        cols = [d[0] for d in cur.description]
        convs = {}
        for row in cur.fetchall():
            rec = dict(zip(cols, row))
            convs[(rec["tenant_id"], rec["conversation_id"])] = rec
        states, counts = {}, {}
        for p, t, c, st, plan in cur.execute(
            f"SELECT policy, tenant_id, conversation_id, state, plan_tokens FROM policy_state JOIN {relation} "
            "AS _keys ON tenant_id = _keys.t AND conversation_id = _keys.c", params,
        ).fetchall():
            states[(p, t, c)] = st
            if plan:
                counts.update(json.loads(plan))
        return convs, states, counts

    @_read_again_after_a_swap
    def policy_state_json(self, policy: str, tenant_id: str, conversation_id: str) -> str | None:
        """Return the persisted JSON state of ``policy`` for a conversation, or None."""
        row = self.connection.execute(
            "SELECT state FROM policy_state WHERE policy = ? AND tenant_id = ? AND conversation_id = ?",
            [policy, tenant_id, conversation_id],
        ).fetchall()
        return row[0][0] if row else None

    @_read_again_after_a_swap
    def plan_tokens(self, policy: str, tenant_id: str, conversation_id: str) -> dict[str, int]:
        """Return the token counts the fold recorded for the state's context plan (text digest -> tokens)."""
        row = self.connection.execute(
            "SELECT plan_tokens FROM policy_state WHERE policy = ? AND tenant_id = ? AND conversation_id = ?",
            [policy, tenant_id, conversation_id],
        ).fetchall()
        return json.loads(row[0][0]) if row and row[0][0] else {}

    @_read_again_after_a_swap
    def messages(self, tenant_id: str, conversation_id: str, start: int = 0, end: int | None = None) -> list[MessageRecord]:
        """Return messages with ``start <= index <= end`` (``end`` None = to the last), in index order.

        Like every message read here, leaves retracted messages out (their indices are gaps).
        """
        sql = f"SELECT {_READ_COLS} FROM messages WHERE tenant_id = ? AND conversation_id = ? AND idx >= ? AND NOT retracted"
        params: list[Any] = [tenant_id, conversation_id, start]
        if end is not None:
            sql += " AND idx <= ?"
            params.append(end)
        return _records(self.connection.execute(sql + " ORDER BY idx", params).fetchall())

    @_read_again_after_a_swap
    def messages_at(self, tenant_id: str, conversation_id: str, indices: Sequence[int]) -> list[MessageRecord]:
        """Return the messages at exactly ``indices``, in index order."""
        if not indices:
            return []
        sql = (
            f"SELECT {_READ_COLS} FROM messages WHERE tenant_id = ? AND conversation_id = ? "
            "AND idx IN (SELECT unnest(?::BIGINT[])) AND NOT retracted ORDER BY idx"
        )
        return _records(self.connection.execute(sql, [tenant_id, conversation_id, list(indices)]).fetchall())

    @_read_again_after_a_swap
    def recent_messages(
        self, tenant_id: str, conversation_id: str, start: int, token_budget: int | None
    ) -> list[MessageRecord]:
        """Return messages from index ``start`` on, limited to the newest ones within ``token_budget``.

        Uses the precomputed running ``cum_tokens`` so the read costs what it
        returns, not the conversation's length. The newest message is always
        included; callers trim further (tool groups, the current message).
        """
        if token_budget is None:
            return self.messages(tenant_id, conversation_id, start)
        sql = (
            "WITH conv AS (SELECT max(cum_tokens) AS total, max(idx) AS last FROM messages "
            "WHERE tenant_id = ? AND conversation_id = ? AND NOT retracted) "
            f"SELECT {_READ_COLS} FROM messages, conv WHERE tenant_id = ? AND conversation_id = ? AND idx >= ? AND NOT retracted "
            "AND (cum_tokens - tokens >= conv.total - ? OR idx = conv.last) ORDER BY idx"
        )
        rows = self.connection.execute(
            sql, [tenant_id, conversation_id, tenant_id, conversation_id, start, token_budget]
        ).fetchall()
        return _records(rows)

    @_read_again_after_a_swap
    def search_rows(self, tenant_id: str, conversation_id: str) -> list[tuple[Any, ...]]:
        """Return a conversation's ``search_docs`` rows (columns as ``retrieval.SEARCH_COLUMNS``), in insertion order."""
        return self.connection.execute(
            f"SELECT {', '.join(SEARCH_COLUMNS)} FROM search_docs WHERE tenant_id = ? AND conversation_id = ? ORDER BY rowid",
            [tenant_id, conversation_id],
        ).fetchall()

    @_read_again_after_a_swap
    def messages_before(
        self, tenant_id: str, conversation_id: str, start: int, end: int, token_budget: int | None
    ) -> list[MessageRecord]:
        """Return :meth:`recent_messages` as it read when the conversation had ``end`` messages (index < ``end``)."""
        if end <= start:
            return []
        if token_budget is None:
            return self.messages(tenant_id, conversation_id, start, end - 1)
        sql = (
            "WITH last AS (SELECT cum_tokens AS total FROM messages WHERE tenant_id = ? AND conversation_id = ? AND idx = ?) "
            f"SELECT {_READ_COLS} FROM messages, last WHERE tenant_id = ? AND conversation_id = ? AND idx >= ? AND NOT retracted "
            "AND idx < ? AND (cum_tokens - tokens >= last.total - ? OR idx = ?) ORDER BY idx"
        )
        key = [tenant_id, conversation_id]
        rows = self.connection.execute(sql, [*key, end - 1, *key, start, end, token_budget, end - 1]).fetchall()
        return _records(rows)

    @_read_again_after_a_swap
    def summary_rows(self, tenant_id: str, conversation_id: str, policy: str | None = None) -> list[dict[str, Any]]:
        """Return the conversation's summary chain (every request and its outcome), oldest first."""
        sql = "SELECT * FROM summaries WHERE tenant_id = ? AND conversation_id = ?"
        params: list[Any] = [tenant_id, conversation_id]
        if policy:
            sql += " AND policy = ?"
            params.append(policy)
        cur = self.connection
        rows = cur.execute(sql + " ORDER BY policy, requested_seq", params).fetchall()
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in rows]

    @_read_again_after_a_swap
    def summary(self, summary_id: str) -> dict[str, Any] | None:
        """Return one produced summary row by its summary id, or None."""
        cur = self.connection
        row = cur.execute("SELECT * FROM summaries WHERE summary_id = ?", [summary_id]).fetchall()
        return dict(zip([d[0] for d in cur.description], row[0])) if row else None

    @_read_again_after_a_swap
    def outcome(self, request_id: str) -> str | None:
        """Return the status of a summary request ('processing', 'completed', 'failed') or None if unseen."""
        row = self.connection.execute("SELECT status FROM summaries WHERE request_id = ?", [request_id]).fetchall()
        return row[0][0] if row else None

    @_read_again_after_a_swap
    def outcomes(self, request_ids: Sequence[str]) -> dict[str, str]:
        """Return the status of each known request id (one query for many; unseen ids are absent)."""
        if not request_ids:
            return {}
        relation, params = _relation({"rid": "VARCHAR"}, {"rid": list(request_ids)})
        return dict(self.connection.execute(
            f"SELECT request_id, status FROM summaries JOIN {relation} AS _rids ON request_id = _rids.rid", params,
        ).fetchall())

    @_read_again_after_a_swap
    def open_requests(self) -> list[dict[str, Any]]:
        """Return summary requests still 'processing' (no outcome folded yet), oldest first."""
        cur = self.connection
        rows = cur.execute("SELECT * FROM summaries WHERE status = 'processing' ORDER BY requested_seq").fetchall()
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in rows]

    @_read_again_after_a_swap
    def open_request_events(self, partitions: Sequence[int] | None = None) -> list[SummaryRequested]:
        """Return the ``SummaryRequested`` events still 'processing' (of ``partitions``; None = all), in log order.

        Usually there are none (every engine start asks): that is answered
        from ``summaries`` alone, without reading the ``events`` table.
        """
        cur = self.connection
        if not cur.execute("SELECT 1 FROM summaries WHERE status = 'processing' LIMIT 1").fetchall():
            return []
        sql = (
            "SELECT e.event_id, e.type, e.schema_version, e.tenant_id, e.conversation_id, e.seq, e.occurred_at, "
            "e.causation_id, e.payload FROM summaries s JOIN events e ON e.event_id = s.request_id "
            "WHERE s.status = 'processing'"
        )
        params: list[Any] = []
        if partitions is not None:
            sql += ' AND e."partition" IN (SELECT unnest(?::INTEGER[]))'
            params.append(list(partitions))
        rows = cur.execute(sql + ' ORDER BY e."partition", e."offset"', params).fetchall()
        keys = ("event_id", "type", "schema_version", "tenant_id", "conversation_id", "seq", "occurred_at",
                "causation_id", "payload")
        out = []
        for row in rows:
            raw = dict(zip(keys, row))
            raw["payload"] = json.loads(raw["payload"])
            out.append(decode_dict(raw))
        return out  # type: ignore[return-value]

    @_read_again_after_a_swap
    def fact_rows(self, policy: str, tenant_id: str, conversation_id: str) -> list[tuple[str, str, str, str | None, str | None]]:
        """Return (key, value, fact_id, superseded_by, retired_by) of a conversation's facts, oldest first.

        A (key, value) that came back after it was replaced has several rows; the newest comes last.
        """
        return self.connection.execute(
            "SELECT key, value, fact_id, superseded_by, retired_by FROM facts WHERE policy = ? AND tenant_id = ? "
            "AND conversation_id = ? ORDER BY introduced_seq NULLS FIRST, key, value",
            [policy, tenant_id, conversation_id],
        ).fetchall()

    @_read_again_after_a_swap
    def topic_fact_holdings(
        self, policy: str, tenant_id: str, conversation_id: str
    ) -> tuple[dict[str, set[tuple[str, str]]], set[str]]:
        """Return, per live topic, the (key, value) facts its latest completed summary holds as current; and the evicted topics.

        An evicted topic (a ``TopicEvicted`` event of the policy) holds nothing.
        """
        cur = self.connection
        evicted = {t for (t,) in cur.execute(
            "SELECT payload->>'topic_id' FROM events WHERE type = 'TopicEvicted' AND tenant_id = ? "
            "AND conversation_id = ? AND payload->>'policy' = ?", [tenant_id, conversation_id, policy]).fetchall()}
        rows = cur.execute(
            "SELECT topic_id, facts FROM summaries WHERE policy = ? AND tenant_id = ? AND conversation_id = ? "
            "AND topic_id IS NOT NULL AND status = 'completed' ORDER BY resolved_seq",
            [policy, tenant_id, conversation_id],
        ).fetchall()
        held: dict[str, set[tuple[str, str]]] = {}
        for topic_id, facts in rows:  # the latest summary of each topic comes last
            if topic_id not in evicted:
                held[topic_id] = {(f["key"], f["value"]) for f in json.loads(facts or "[]") if f.get("superseded_by") is None}
        return held, evicted

    # ----------------------------------------------------------------- user memory reads

    @_read_again_after_a_swap
    def conversation_owner(self, tenant_id: str, conversation_id: str) -> tuple[bool, str | None]:
        """Return whether the projection holds the conversation, and its user (None: no user named, or forgotten)."""
        rows = self.connection.execute(
            "SELECT user_id FROM conversations WHERE tenant_id = ? AND conversation_id = ?", [tenant_id, conversation_id]
        ).fetchall()
        return (True, rows[0][0]) if rows else (False, None)

    @_read_again_after_a_swap
    def user_conversations(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """Return the user's live conversations (id, message_count, first_at, last_at), most recently active first."""
        cur = self.connection.execute(
            "SELECT conversation_id, message_count, first_at, last_at FROM conversations WHERE tenant_id = ? "
            "AND user_id = ? AND NOT coalesce(deleted, false) ORDER BY last_at DESC, conversation_id",
            [tenant_id, user_id],
        )
        return _dicts(cur)

    @_read_again_after_a_swap
    def user_facts(self, tenant_id: str, user_id: str, policy: str | None = None) -> list[dict[str, Any]]:
        """Return the user's ``user_facts`` rows (every statement, with lineage), by policy, key and statement order."""
        where, params = _user_scope(tenant_id, user_id, policy)
        cur = self.connection.execute(
            f"SELECT {', '.join(_q(c) for c in USER_FACT_COLUMNS)} FROM user_facts WHERE {where} "
            "ORDER BY policy, key, stated_at NULLS FIRST, conversation_id, stated_in NULLS FIRST, value", params,
        )
        return _dicts(cur)

    @_read_again_after_a_swap
    def user_notes(self, tenant_id: str, user_id: str, policy: str | None = None) -> list[dict[str, Any]]:
        """Return the newest summary text of each of the user's conversations (per policy), newest conversation first."""
        where, params = _user_scope(tenant_id, user_id, policy)
        cur = self.connection.execute(
            f"SELECT policy, conversation_id, summary_id, text, covers_to, stated_at AS at FROM user_notes WHERE {where} "
            "ORDER BY stated_at DESC, conversation_id", params,
        )
        return _dicts(cur)

    @_read_again_after_a_swap
    def user_summaries(self, tenant_id: str, user_id: str, policy: str | None = None,
                       as_of: datetime | None = None) -> list[dict[str, Any]]:
        """Return the user's summaries in force: per policy and log partition, the newest ``user_summaries`` row
        (made by ``as_of``, if given), newest first within a policy.

        A user summary reads the user's conversations on the partition it was
        asked on, so together these cover every conversation of the user.
        Newest is event time (``produced_at``), ties by summary id: a function
        of the rows, whatever order partitions delivered them in.
        """
        where, params = "u.tenant_id = ? AND u.user_id = ?", [tenant_id, user_id]
        if policy is not None:
            where, params = where + " AND u.policy = ?", [*params, policy]
        if as_of is not None:
            where += " AND u.produced_at <= ?"
            params.append(as_of)
        cur = self.connection.execute(
            "SELECT u.policy, u.conversation_id, u.summary_id, u.text, u.covers, u.covers_summaries, u.produced_at, "
            "u.summarizer, u.model FROM user_summaries u LEFT JOIN conversations c ON c.tenant_id = u.tenant_id "
            f"AND c.conversation_id = u.conversation_id WHERE {where} "
            'QUALIFY row_number() OVER (PARTITION BY u.policy, c."partition" '
            "ORDER BY u.produced_at DESC, u.summary_id DESC) = 1 "
            "ORDER BY u.policy, u.produced_at DESC, u.summary_id DESC", params,
        )
        return _dicts(cur)

    @_read_again_after_a_swap
    def user_notes_as_of(self, tenant_id: str, user_id: str, policy: str, as_of: datetime) -> list[dict[str, Any]]:
        """Return, per conversation of the user, its newest completed summary of ``policy`` dated by ``as_of``.

        What a user summary asked at ``as_of`` reads (the worker): the
        ``user_notes`` a fold that had reached that time would hold, oldest
        conversation first (dated by the newest message each covers).
        """
        cur = self.connection.execute(
            "SELECT policy, conversation_id, summary_id, text, covers_to, stated_at AS at FROM ("
            + _NOTES.format(extra="AND s.policy = ? AND m.occurred_at <= ?") + ") ORDER BY \"at\", conversation_id",
            [tenant_id, user_id, policy, as_of],
        )
        return _dicts(cur)

    @_read_again_after_a_swap
    def stated_facts(self, tenant_id: str, user_id: str) -> list[StatedFact]:
        """Return the facts rows the user fold reads (:func:`~memfold.projections.user_memory.fold_user_facts`)."""
        return _stated_facts(self.connection, tenant_id, user_id)

    def erase_user(self, tenant_id: str, user_id: str) -> int:
        """Delete a user's user-memory rows (its conversations are erased one by one); return how many went."""
        if self.read_only:
            raise ProjectionError("this projection is open read-only")
        cur = self.connection
        with self._write_lock:
            try:
                cur.execute("BEGIN TRANSACTION")
                count = 0
                for table in ("user_facts", "user_notes", "user_summaries"):
                    count += cur.execute(f"DELETE FROM {table} WHERE tenant_id = ? AND user_id = ?",
                                         [tenant_id, user_id]).fetchone()[0]
                count += cur.execute("UPDATE conversations SET user_id = NULL WHERE tenant_id = ? AND user_id = ?",
                                     [tenant_id, user_id]).fetchone()[0]
                if count:
                    _owe_compaction(cur)
                cur.execute("COMMIT")
                return count
            except duckdb.Error as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    self._reopen()
                raise ProjectionError(f"cannot erase the memory of user {user_id!r}: {exc}") from exc

    @_read_again_after_a_swap
    def conversation_page(self, tenant_id: str, limit: int, offset: int) -> list[dict[str, Any]]:
        """Return a page of the tenant's live conversations, most recently active first (retracted messages not counted)."""
        _, rows = self.query(
            "SELECT c.conversation_id, c.message_count - coalesce(r.retracted, 0), c.token_count, c.first_at, c.last_at "
            "FROM conversations c LEFT JOIN (SELECT conversation_id, count(*) AS retracted FROM messages "
            "WHERE tenant_id = ? AND retracted GROUP BY conversation_id) r USING (conversation_id) "
            "WHERE c.tenant_id = ? AND NOT coalesce(c.deleted, false) ORDER BY c.last_at DESC, c.conversation_id "
            "LIMIT ? OFFSET ?",
            [tenant_id, tenant_id, limit, offset],
        )
        keys = ("conversation_id", "message_count", "token_count", "first_at", "last_at")
        return [dict(zip(keys, r)) for r in rows]

    def conversation_ids_after(self, tenant_id: str, after: str, limit: int) -> list[str]:
        """Return up to ``limit`` ids of the tenant's live conversations after ``after``, in id order."""
        _, rows = self.query(
            "SELECT conversation_id FROM conversations WHERE tenant_id = ? AND NOT coalesce(deleted, false) "
            "AND conversation_id > ? ORDER BY conversation_id LIMIT ?", [tenant_id, after, limit])
        return [r[0] for r in rows]

    def summary_status_counts(self) -> dict[str, tuple[int, float]]:
        """Return ``{status: (summaries, total latency ms)}`` over every summary request."""
        _, rows = self.query("SELECT status, count(*), coalesce(sum(latency_ms), 0) FROM summaries GROUP BY status")
        return {status: (count, latency) for status, count, latency in rows}

    def query(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run ``sql`` and return (column names, rows). Driver errors become :class:`ProjectionError`."""
        cur = self.connection
        try:
            cur.execute(sql, params or [])
            if cur.description is None:
                return [], []
            return [d[0] for d in cur.description], cur.fetchall()
        except duckdb.Error as exc:
            raise ProjectionError(f"query failed: {exc}") from exc

    def read_query(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run ``sql`` if every statement in it only reads (SELECT, EXPLAIN); else raise :class:`ProjectionError`.

        The statement types come from DuckDB's own parser, so a write hidden
        after a ``;`` or in a CTE is found as DuckDB would run it.
        """
        try:
            kinds = [st.type for st in self.connection.extract_statements(sql)]
        except duckdb.Error as exc:
            raise ProjectionError(f"query failed: {exc}") from exc
        writes = sorted({k.name for k in kinds if k not in _READ_STATEMENTS})
        if writes:
            raise ProjectionError(
                f"this SQL is read-only; the query has a {', '.join(writes)} statement. The projection is derived "
                "from the log: change memory by appending, retracting or forgetting, not by writing rows"
            )
        return self.query(sql, params)

    def write_parquet(self, directory: str | Path, tables: Sequence[SnapshotTable]) -> dict[str, Any]:
        """Write each of ``tables`` as hive-partitioned Parquet under ``directory/<name>/``, all from ONE read transaction.

        Every table is read at the same instant (DuckDB's snapshot
        isolation), so the row counts and positions returned agree with each
        other whatever the projector commits meanwhile; the projector is not
        blocked; a file rewrite (compaction, rebuild) waits for the copy to end. A table with no rows is written as one empty file with its
        columns, so a reader's glob always finds it. Returns ``{"rows":
        {table: count}, "positions": {partition: next_offset}, "meta": {...}}``.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        with self._copying:
            return self._write_parquet(out, tables)

    def _write_parquet(self, out: Path, tables: Sequence[SnapshotTable]) -> dict[str, Any]:
        cur = self.cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
            rows: dict[str, int] = {}
            for t in tables:
                target = (out / t.name).as_posix().replace("'", "''")
                select = f"SELECT * {t.extra} FROM ({t.select})"
                count = cur.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
                rows[t.name] = count
                if count and t.partition_by:
                    cur.execute(f"COPY ({select}) TO '{target}' (FORMAT PARQUET, COMPRESSION ZSTD, "
                                f"PARTITION_BY ({', '.join(t.partition_by)}), WRITE_PARTITION_COLUMNS true)")
                else:
                    (out / t.name).mkdir(parents=True, exist_ok=True)
                    cur.execute(f"COPY ({select}) TO '{target}/data_0.parquet' (FORMAT PARQUET, COMPRESSION ZSTD)")
            positions = {int(p): int(o) for p, o in cur.execute("SELECT * FROM positions").fetchall()}
            meta = dict(cur.execute("SELECT key, value FROM store_meta").fetchall())
            cur.execute("COMMIT")
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                cur.execute("ROLLBACK")
            raise ProjectionError(f"cannot write a snapshot of {self.path} to {out}: {exc}") from exc
        finally:
            cur.close()
        return {"rows": rows, "positions": positions, "meta": meta}

    @_read_again_after_a_swap
    def dump(self, tables: Iterable[str] = ("events", "conversations", "messages", "summaries", "facts", "policy_state", "policy_rows", "search_docs", "positions", "user_facts", "user_notes", "user_summaries")) -> dict[str, list[tuple[Any, ...]]]:
        """Return every row of ``tables`` in a canonical order (for determinism and parity checks)."""
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table in tables:
            cur = self.connection
            cur.execute(f"SELECT * FROM {table}")
            rows = cur.fetchall()
            out[table] = sorted(rows, key=lambda r: tuple("" if v is None else str(v) for v in r))
        return out


class SnapshotTable(msgspec.Struct, frozen=True):
    """One table of a Parquet snapshot: the rows of ``select`` plus ``extra`` columns, partitioned by ``partition_by``."""

    name: str
    select: str
    partition_by: tuple[str, ...] = ()
    extra: str = ""


_BY_TENANT = ("tenant_id",)
_BY_TENANT_DATE = ("tenant_id", "date")


def _day(column: str) -> str:
    return f", CAST(timezone('UTC', {column}) AS DATE) AS date"


# Every projection table, the settings the projection was folded with, and the documented audit views
# (memory_stuck_processing is left out: it compares with the time of the query).
SNAPSHOT_TABLES: tuple[SnapshotTable, ...] = (
    SnapshotTable("events", "SELECT * FROM events", _BY_TENANT_DATE, _day("occurred_at")),
    SnapshotTable("conversations", "SELECT * FROM conversations", _BY_TENANT),
    SnapshotTable("messages", "SELECT * FROM messages", _BY_TENANT_DATE, _day("occurred_at")),
    SnapshotTable("summaries", "SELECT * FROM summaries", _BY_TENANT_DATE, _day("requested_at")),
    SnapshotTable("facts", "SELECT * FROM facts", _BY_TENANT),
    SnapshotTable("policy_state", "SELECT * FROM policy_state", _BY_TENANT),
    SnapshotTable("policy_rows", "SELECT * FROM policy_rows", _BY_TENANT),
    SnapshotTable("state_history", "SELECT * FROM state_history", _BY_TENANT),
    SnapshotTable("search_docs", "SELECT * FROM search_docs", _BY_TENANT),
    SnapshotTable("poison_events", "SELECT * FROM poison_events"),
    SnapshotTable("positions", "SELECT * FROM positions"),
    SnapshotTable("settings", "SELECT key, value FROM store_meta"),
    SnapshotTable("memory_version_chain", "SELECT * FROM memory_version_chain", _BY_TENANT),
    SnapshotTable("memory_window_progression", "SELECT * FROM memory_window_progression", _BY_TENANT),
    SnapshotTable("memory_generation_time", "SELECT * FROM memory_generation_time"),
)

class SnapshotReader:
    """Read-only SQL over a Parquet snapshot directory: each table a view over its files; no DuckDB file, no lock."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory)
        self._con = duckdb.connect(":memory:")
        for table in SNAPSHOT_TABLES:
            if (self.path / table.name).is_dir():
                glob = (self.path / table.name).as_posix().replace("'", "''") + "/**/*.parquet"
                self._con.execute(f"CREATE VIEW {table.name} AS SELECT * FROM read_parquet('{glob}', "
                                  "hive_partitioning = false)")

    def read_query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run ``sql`` if it only reads (as :meth:`DuckDBProjectionStore.read_query`); return (columns, rows)."""
        try:
            kinds = [st.type for st in self._con.extract_statements(sql)]
            if any(k not in _READ_STATEMENTS for k in kinds):
                raise ProjectionError("this SQL is read-only: a snapshot is a copy of the projection, not a place to write")
            cur = self._con.execute(sql)
            if cur.description is None:
                return [], []
            return [d[0] for d in cur.description], cur.fetchall()
        except duckdb.Error as exc:
            raise ProjectionError(f"query failed: {exc}") from exc

    def close(self) -> None:
        self._con.close()


_READ_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})

_READ_COLS = (
    "tenant_id, conversation_id, idx, seq, event_id, role, content, tokens, occurred_at, model_variant, "
    "name, tool_calls, tool_call_id, importance, metadata"
)


def _records(rows: list[tuple[Any, ...]]) -> list[MessageRecord]:
    out = []
    for r in rows:
        tool_calls = tuple(ToolCall(**tc) for tc in json.loads(r[11])) if r[11] and r[11] != "[]" else ()
        out.append(
            MessageRecord(
                tenant_id=r[0], conversation_id=r[1], index=r[2], seq=r[3], event_id=r[4], role=r[5],
                content=r[6] or "", tokens=r[7], occurred_at=r[8], model_variant=r[9], name=r[10],
                tool_calls=tool_calls, tool_call_id=r[12], importance=r[13],
                metadata=json.loads(r[14]) if r[14] and r[14] != "{}" else {},
            )
        )
    return out


ERASED_PAYLOAD = '{"erased": true}'
# store_meta key set by the transaction that erased rows, cleared once the file was rewritten without them.
COMPACTION_OWED = "compaction_owed"


def _user_summaries_from(cur: duckdb.DuckDBPyConnection, tenant_id: str, conversation_id: str) -> list[tuple[str, str]]:
    """Return (tenant, summary_id) of every user summary made from (or on the stream of) a conversation."""
    return cur.execute(
        "SELECT tenant_id, summary_id FROM user_summaries WHERE tenant_id = ? AND (conversation_id = ? "
        "OR list_contains(covers, ?))", [tenant_id, conversation_id, conversation_id]).fetchall()


def _scrub_user_summaries(cur: duckdb.DuckDBPyConnection, tenant_id: str, where: str, params: list[Any]) -> int:
    """Delete the tenant's user summaries matching ``where`` and scrub their events' content; return rows changed."""
    ids = [r[0] for r in cur.execute(f"SELECT summary_id FROM user_summaries WHERE tenant_id = ? AND {where}",
                                     [tenant_id, *params]).fetchall()]
    if not ids:
        return 0
    count = cur.execute("DELETE FROM user_summaries WHERE tenant_id = ? AND list_contains(?, summary_id)",
                        [tenant_id, ids]).fetchone()[0]
    return count + cur.execute(
        "UPDATE events SET payload = ? WHERE tenant_id = ? AND list_contains(?, event_id) AND payload::VARCHAR <> ?",
        [ERASED_PAYLOAD, tenant_id, ids, ERASED_PAYLOAD]).fetchone()[0]


def _erase(cur: duckdb.DuckDBPyConnection, tenant_id: str, conversation_id: str) -> int:
    """Delete a forgotten conversation's rows; keep the envelope of its events, content scrubbed.

    What stays is what an audit needs to show the conversation existed and
    was erased: its ``conversations`` row (``deleted``) and its events' types,
    seqs and times. Message, summary and fact text goes, and so do the
    summary cache entries built from it.
    """
    key = [tenant_id, conversation_id]
    count = 0
    for table in ("messages", "summaries", "facts", "policy_rows", "search_docs", "state_history", "llm_cache",
                  "dense_vectors", "user_facts", "user_notes", "user_summaries"):
        count += cur.execute(f"DELETE FROM {table} WHERE tenant_id = ? AND conversation_id = ?", key).fetchone()[0]
    # A user summary made in another conversation of the user stood for this one's summary too: it goes,
    # and so does a summary cache entry made from several conversations (a user summary's) this one among them.
    count += _scrub_user_summaries(cur, tenant_id, "list_contains(covers, ?)", [conversation_id])
    count += cur.execute("DELETE FROM llm_cache WHERE tenant_id = ? AND list_contains(conversations, ?)",
                         key).fetchone()[0]
    # Whose conversation it was goes too: the conversations row stays as the audit record, without its user.
    count += cur.execute("UPDATE conversations SET user_id = NULL WHERE tenant_id = ? AND conversation_id = ? "
                         "AND user_id IS NOT NULL", key).fetchone()[0]
    private = ", ".join(f"'{t}'" for t in PRIVATE_FIELDS)
    count += cur.execute(
        "UPDATE events SET payload = ? WHERE tenant_id = ? AND conversation_id = ? "
        f"AND type IN ({private}) AND payload::VARCHAR <> ?",
        [ERASED_PAYLOAD, *key, ERASED_PAYLOAD],
    ).fetchone()[0]
    if count:
        _owe_compaction(cur)
    return count


_STATED_FACTS = (
    "SELECT f.policy, f.key, f.value, f.category, f.conversation_id, f.stated_in, f.stated_at, f.fact_id, "
    "coalesce(f.stated_at, s.requested_at) FROM facts f "
    "JOIN conversations c ON c.tenant_id = f.tenant_id AND c.conversation_id = f.conversation_id "
    "LEFT JOIN summaries s ON s.summary_id = f.introduced_by AND s.tenant_id = f.tenant_id "
    "AND s.conversation_id = f.conversation_id "
    # A fact a later summary dropped is no statement; one retired because a newer value came is lineage.
    "WHERE c.tenant_id = ? AND c.user_id = ? AND NOT coalesce(c.deleted, false) "
    "AND (f.retired_by IS NULL OR f.superseded_by IS NOT NULL)"
)


def _stated_facts(cur: duckdb.DuckDBPyConnection, tenant_id: str, user_id: str) -> list[StatedFact]:
    return [StatedFact(*row) for row in cur.execute(_STATED_FACTS, [tenant_id, user_id]).fetchall()]


# Per conversation of a user and policy, its newest completed conversation summary with text (a user_notes
# row); ``extra`` narrows it (a policy, a time).
_NOTES = (
    "SELECT s.policy, c.tenant_id, c.user_id, s.conversation_id, s.summary_id, s.text, "
    "s.covers_to, m.occurred_at AS stated_at FROM summaries s JOIN conversations c ON c.tenant_id = s.tenant_id "
    "AND c.conversation_id = s.conversation_id LEFT JOIN messages m ON m.tenant_id = s.tenant_id "
    "AND m.conversation_id = s.conversation_id AND m.idx = s.covers_to WHERE c.tenant_id = ? AND c.user_id = ? "
    "AND NOT coalesce(c.deleted, false) AND s.status = 'completed' AND s.topic_id IS NULL "
    "AND coalesce(s.scope, 'conversation') = 'conversation' AND coalesce(s.text, '') <> '' {extra} "
    "QUALIFY row_number() OVER (PARTITION BY s.policy, s.conversation_id ORDER BY s.resolved_seq DESC) = 1"
)


def _refold_user(cur: duckdb.DuckDBPyConnection, types: dict[str, dict[str, str]], tenant_id: str,
                 user_id: str) -> None:
    """Rewrite a user's ``user_facts`` and ``user_notes`` from its conversations' rows (inside the batch's transaction)."""
    key = [tenant_id, user_id]
    cur.execute("DELETE FROM user_facts WHERE tenant_id = ? AND user_id = ?", key)
    cur.execute("DELETE FROM user_notes WHERE tenant_id = ? AND user_id = ?", key)
    rows = fold_user_facts(tenant_id, user_id, _stated_facts(cur, tenant_id, user_id))
    if rows:
        _insert(cur, types, "user_facts", _columns(rows, USER_FACT_COLUMNS))
    # Dated by the newest message it covers: event time, so a rebuild folding in other batches agrees.
    cur.execute("INSERT INTO user_notes " + _NOTES.format(extra=""), key)
    # A user summary standing for a conversation forgotten since is no one's summary any more (whichever
    # came first in the log, the summary or the deletion: both refold the user).
    cur.execute(
        "DELETE FROM user_summaries u WHERE u.tenant_id = ? AND u.user_id = ? AND EXISTS (SELECT 1 FROM "
        "conversations c WHERE c.tenant_id = u.tenant_id AND list_contains(u.covers, c.conversation_id) "
        "AND coalesce(c.deleted, false))", key,
    )


def _owe_compaction(cur: duckdb.DuckDBPyConnection) -> None:
    """Record, in the erasing transaction, that the file must be rewritten: a crash or a full disk keeps the debt."""
    cur.execute("INSERT INTO store_meta VALUES (?, '1') ON CONFLICT (key) DO UPDATE SET value = '1'", [COMPACTION_OWED])


def _q(col: str) -> str:
    return f'"{col}"'


def _columns(rows: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """Return dict rows that share their keys (``names``, or the first row's) as columns."""
    return {name: [r[name] for r in rows] for name in (names or rows[0])}


def _relation(types: dict[str, str], columns: dict[str, list[Any]]) -> tuple[str, list[Any]]:
    """Return ``(SELECT ..., parameters)``: equal-length ``columns`` as rows DuckDB reads from one list
    parameter per column, each cast to its type in ``types``.

    One statement whatever the row count, and no Arrow (pyarrow and numpy cost a
    process ~0.06 s to import): a batch of a few rows is written in well under a
    millisecond; 20,000 rows in ~0.1 s.
    """
    parts = ", ".join(f"unnest(?::{types[name]}[]) AS {_q(name)}" for name in columns)
    return f"(SELECT {parts})", list(columns.values())


def _insert(cur: duckdb.DuckDBPyConnection, types: dict[str, dict[str, str]], table: str,
            columns: dict[str, list[Any]], tail: str = "", *, verb: str = "INSERT") -> None:
    """Insert ``columns`` into ``table`` (typed by its own columns), ``tail`` after the SELECT (ON CONFLICT ...)."""
    relation, params = _relation(types[table], columns)
    cols = ", ".join(_q(c) for c in columns)
    cur.execute(f"{verb} INTO {table} ({cols}) SELECT {cols} FROM {relation} AS _rows {tail}", params)


def _upsert(cur: duckdb.DuckDBPyConnection, types: dict[str, dict[str, str]], table: str,
            rows: list[dict[str, Any]], key: tuple[str, ...], stored: Callable[[dict[str, Any]], bool]) -> None:
    """Write ``rows`` (one per distinct ``key``) into ``table``, replacing the rows of the same key.

    The rows ``stored`` says the table holds go in one ``UPDATE ... FROM``, the others in one
    ``INSERT ... ON CONFLICT DO UPDATE``: the upsert cost DuckDB 3-9 ms a statement on a file just
    opened where the UPDATE of existing keys costs ~1-2 ms (a one-message append), and a batch of new
    conversations (ingest, replay) is written as before. ``stored`` decides the speed only: when the
    UPDATE finds fewer rows than it was given, those rows are upserted too.
    """
    known: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    for row in rows:
        (known if stored(row) else other).append(row)
    if known:
        columns = _columns(known)
        relation, params = _relation(types[table], columns)
        sets = ", ".join(f"{_q(c)} = _rows.{_q(c)}" for c in columns if c not in key)
        match = " AND ".join(f"{table}.{_q(k)} = _rows.{_q(k)}" for k in key)
        (updated,) = cur.execute(f"UPDATE {table} SET {sets} FROM {relation} AS _rows WHERE {match}", params).fetchone()
        if updated < len(known):
            other = known + other
    if other:
        columns = _columns(other)
        sets = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in columns if c not in key)
        _insert(cur, types, table, columns, f"ON CONFLICT ({', '.join(_q(k) for k in key)}) DO UPDATE SET {sets}")


def _dicts(cur: Any) -> list[dict[str, Any]]:
    """Return the rows of an executed cursor as dicts keyed by column name."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _user_scope(tenant_id: str, user_id: str, policy: str | None) -> tuple[str, list[Any]]:
    """Return the WHERE clause and parameters selecting a user's rows (of one policy, when given)."""
    where, params = "tenant_id = ? AND user_id = ?", [tenant_id, user_id]
    if policy is not None:
        where, params = where + " AND policy = ?", [*params, policy]
    return where, params
