"""Read-only SQL over one tenant's projection tables (POST /v1/sql).

The statement never runs on the projection itself: the tenant's rows of each
table it names are handed (as Arrow, zero-copy) to a fresh in-memory DuckDB
with file access disabled, and the statement runs there. So a query cannot
see another tenant's rows (they are not in that database), cannot write the
projection (it is not attached) and cannot read files. The cost is one scan
of the tenant's rows per named table: fine for analytics, not a hot path.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import duckdb

from memfold.core.errors import SqlTimeoutError, ValidationError

# What each table shows a tenant: its own rows, never a retracted message (its content is withdrawn) and
# no event payloads of message events (an unsealed copy of the content, retracted or not). Other tables
# (llm_cache, policy state, positions, search indexes) are never registered: a query naming them fails.
_VIEWS = {
    "conversations": "SELECT * FROM conversations WHERE tenant_id = ?",
    "messages": "SELECT * EXCLUDE (retracted) FROM messages WHERE tenant_id = ? AND NOT coalesce(retracted, false)",
    "summaries": "SELECT * FROM summaries WHERE tenant_id = ?",
    "facts": "SELECT * FROM facts WHERE tenant_id = ?",
    "events": "SELECT * REPLACE (CASE WHEN type = 'MessageAppended' THEN NULL ELSE payload END AS payload) "
              "FROM events WHERE tenant_id = ?",
}
TABLES = tuple(_VIEWS)
_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def run_tenant_sql(store, tenant_id: str, query: str, limit: int,
                   timeout_s: float = 10.0) -> tuple[list[str], list[list[Any]], bool]:
    """Run one read-only ``query`` over ``tenant_id``'s tables; return (columns, rows, truncated).

    Raises :class:`ValidationError` for anything but one SELECT/EXPLAIN
    statement, or when DuckDB rejects the query (the message says why), and
    :class:`SqlTimeoutError` when it runs longer than ``timeout_s`` (0: no limit): it is interrupted.
    """
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise ValidationError(f"the query does not parse: {exc}", field="query") from exc
    if len(statements) != 1 or statements[0].type not in _ALLOWED:
        raise ValidationError("send exactly one read-only statement (SELECT, WITH ... SELECT or EXPLAIN)", field="query")
    named = [t for t in TABLES if re.search(rf"\b{t}\b", query, re.IGNORECASE)]
    scratch = duckdb.connect(":memory:", config={"enable_external_access": False})
    timer = None
    if timeout_s and timeout_s > 0:
        timer = threading.Timer(timeout_s, scratch.interrupt)  # DuckDB stops the running query at its next check
        timer.daemon = True
    try:
        cursor = store.connection
        for table in named:
            scratch.register(table, cursor.sql(_VIEWS[table], params=[tenant_id]).to_arrow_table())
        try:
            if timer is not None:
                timer.start()
            result = scratch.execute(query)
            columns = [d[0] for d in result.description or ()]
            rows = result.fetchmany(limit + 1)
        except duckdb.InterruptException as exc:
            raise SqlTimeoutError(
                f"the query ran longer than {timeout_s:g} s and was stopped; narrow it (a WHERE, a LIMIT) or ask "
                "the operator for a longer MEMFOLD_SQL_TIMEOUT_S", field="query") from exc
        except duckdb.Error as exc:
            raise ValidationError(f"query failed: {exc}", field="query") from exc
    finally:
        if timer is not None:
            timer.cancel()
        scratch.close()
    return columns, [list(r) for r in rows[:limit]], len(rows) > limit

