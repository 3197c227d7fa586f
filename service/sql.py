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
from typing import Any

import duckdb

from memfold.engine.errors import ValidationError

TABLES = ("conversations", "messages", "summaries", "facts", "events")
_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def run_tenant_sql(store, tenant_id: str, query: str, limit: int) -> tuple[list[str], list[list[Any]], bool]:
    """Run one read-only ``query`` over ``tenant_id``'s tables; return (columns, rows, truncated).

    Raises :class:`ValidationError` for anything but one SELECT/EXPLAIN
    statement, or when DuckDB rejects the query (the message says why).
    """
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise ValidationError(f"the query does not parse: {exc}", field="query") from exc
    if len(statements) != 1 or statements[0].type not in _ALLOWED:
        raise ValidationError("send exactly one read-only statement (SELECT, WITH ... SELECT or EXPLAIN)", field="query")
    named = [t for t in TABLES if re.search(rf"\b{t}\b", query, re.IGNORECASE)]
    scratch = duckdb.connect(":memory:", config={"enable_external_access": False})
    try:
        cursor = store.connection
        for table in named:
            scratch.register(table, cursor.sql(f"SELECT * FROM {table} WHERE tenant_id = ?", params=[tenant_id]).to_arrow_table())
        try:
            result = scratch.execute(query)
            columns = [d[0] for d in result.description or ()]
            rows = result.fetchmany(limit + 1)
        except duckdb.Error as exc:
            raise ValidationError(f"query failed: {exc}", field="query") from exc
    finally:
        scratch.close()
    return columns, [list(r) for r in rows[:limit]], len(rows) > limit
