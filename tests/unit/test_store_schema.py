"""A projection file records the hash of its schema statements; opening one of another schema runs them again."""

from __future__ import annotations

import json

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


def test_the_column_types_batches_are_cast_to_are_recorded_with_the_schema(tmp_path):
    path = tmp_path / "p.duckdb"
    store = DuckDBProjectionStore(path)
    try:
        catalog = store._column_types()
        assert catalog["messages"]["retracted"] == "BOOLEAN" and "llm_cache" in catalog and "dense_vectors" in catalog
        assert json.loads(store.meta("column_types")) == catalog
        assert store._types == catalog
    finally:
        store.close()
    con = duckdb.connect(str(path))  # a file from before the record
    con.execute("DELETE FROM store_meta WHERE key = 'column_types'")
    con.close()
    store = DuckDBProjectionStore(path, read_only=True)  # read-only: the types are read from the catalog
    try:
        assert store.meta("column_types") is None
        assert store._types == catalog
    finally:
        store.close()
    store = DuckDBProjectionStore(path)  # a writer records them
    try:
        assert json.loads(store.meta("column_types")) == catalog
    finally:
        store.close()
