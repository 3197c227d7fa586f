"""A projection file records the hash of its schema statements; opening one of another schema runs them again."""

from __future__ import annotations

import duckdb

from memfold.projections.store import SCHEMA_HASH, DuckDBProjectionStore


def test_a_new_file_records_its_schema_and_an_older_one_is_migrated_on_open(tmp_path):
    path = tmp_path / "p.duckdb"
    DuckDBProjectionStore(path).close()
    con = duckdb.connect(str(path))
    assert con.execute("SELECT value FROM store_meta WHERE key = 'schema'").fetchall() == [(SCHEMA_HASH,)]
    # A file from an older memfold: a column its migrations add is missing.
    con.execute("ALTER TABLE messages DROP COLUMN retracted")
    con.execute("UPDATE store_meta SET value = 'older' WHERE key = 'schema'")
    con.close()
    DuckDBProjectionStore(path).close()
    con = duckdb.connect(str(path))
    columns = {r[0] for r in con.execute("DESCRIBE messages").fetchall()}
    assert "retracted" in columns
    assert con.execute("SELECT value FROM store_meta WHERE key = 'schema'").fetchall() == [(SCHEMA_HASH,)]
    con.close()


def test_a_file_of_this_schema_runs_no_statement(tmp_path):
    path = tmp_path / "p.duckdb"
    DuckDBProjectionStore(path).close()
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE messages DROP COLUMN retracted")  # a schema statement would add it back
    con.close()
    DuckDBProjectionStore(path).close()
    con = duckdb.connect(str(path))
    assert "retracted" not in {r[0] for r in con.execute("DESCRIBE messages").fetchall()}
    con.close()
