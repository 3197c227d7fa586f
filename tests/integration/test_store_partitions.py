"""The store's partition-wide operations a shard node and a replay group use: drop partitions, absorb parts."""

from __future__ import annotations

import pytest
from support.talk import talk

from memfold.core.errors import ProjectionError
from memfold.core.partitioner import partition_for
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.store import DuckDBProjectionStore

TABLES = ("conversations", "messages", "events", "summaries", "policy_state", "search_docs", "state_history")


def _count(store, table: str, conversation: str) -> int:
    return store.query(f"SELECT count(*) FROM {table} WHERE conversation_id = ?", [conversation])[1][0][0]


@pytest.fixture
def filled(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "d", partitions=4, policy="hierarchical",
                             hierarchical={"trigger_message_count": 6, "recent_message_count": 2})
    with MemoryEngine(settings) as engine:
        for conversation in ("c1", "c2", "c3", "c4"):
            talk(engine, conversation, 8)
    return settings


def test_dropping_a_partition_deletes_its_conversations_everywhere_and_its_position(filled):
    where = {c: partition_for(f"default/{c}", 4) for c in ("c1", "c2", "c3", "c4")}
    gone = where["c1"]
    kept = [c for c, p in where.items() if p != gone]
    assert kept, "pick conversations on more than one partition"
    store = DuckDBProjectionStore(filled.projection_path())
    try:
        before = {c: {t: _count(store, t, c) for t in TABLES} for c in kept}
        assert all(_count(store, t, "c1") for t in TABLES)
        assert store.drop_partitions({gone}) > 0
        assert gone not in store.position()
        assert all(_count(store, t, c) == 0 for t in TABLES for c, p in where.items() if p == gone)
        assert {c: {t: _count(store, t, c) for t in TABLES} for c in kept} == before
    finally:
        store.close()
    reopened = DuckDBProjectionStore(filled.projection_path(), read_only=True)
    try:
        assert gone not in reopened.position()  # the position went in the same transaction
    finally:
        reopened.close()


def test_absorbing_a_part_that_folded_the_same_partitions_is_refused_and_changes_nothing(filled, tmp_path):
    import shutil

    part = tmp_path / "part.duckdb"
    shutil.copy(filled.projection_path(), part)
    store = DuckDBProjectionStore(filled.projection_path())
    try:
        before = store.dump()
        with pytest.raises(ProjectionError, match="must be disjoint"):
            store.absorb([part])
        assert store.dump() == before
    finally:
        store.close()
