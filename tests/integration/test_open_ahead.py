"""A projection file opened ahead on a thread is the store's connection; when it could not be, the store says why."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from memfold.core.errors import ProjectionBusyError
from memfold.projections import opening
from memfold.projections.store import DuckDBProjectionStore

HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
"""


def _store_file(tmp_path):
    path = tmp_path / "projections.duckdb"
    DuckDBProjectionStore(path).close()
    return path


def test_the_store_takes_the_connection_opened_ahead(tmp_path):
    path = _store_file(tmp_path)
    opening.open_ahead(path)
    thread, opened = opening._ahead[(str(path), False)]
    assert thread.name == "memfold-open-ahead"
    thread.join()
    store = DuckDBProjectionStore(path)
    try:
        assert store._con is opened["con"]  # not a second connection: the one opened ahead
        assert (str(path), False) not in opening._ahead  # taken once
        assert store.query("SELECT count(*) FROM messages")[1] == [(0,)]
    finally:
        store.close()


def test_a_file_another_process_holds_is_reported_as_without_opening_ahead(tmp_path):
    path = _store_file(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        opening.open_ahead(path)
        with pytest.raises(ProjectionBusyError, match="in use by another memfold process"):
            DuckDBProjectionStore(path, lock_wait_s=0.2)
        assert not [t for t in threading.enumerate() if t.name == "memfold-open-ahead"]
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    store = DuckDBProjectionStore(path)  # released: opened as usual
    store.close()
