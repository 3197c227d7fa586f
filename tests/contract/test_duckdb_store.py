"""DuckDBProjectionStore passes the ProjectionStore contract: real DuckDB files in tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract.projection_store_contract import ProjectionStoreContract
from memfold.projections.store import DuckDBProjectionStore


class TestDuckDBProjectionStore(ProjectionStoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Iterator[Callable[..., DuckDBProjectionStore]]:
        opened: list[DuckDBProjectionStore] = []

        def make(name: str = "store") -> DuckDBProjectionStore:
            store = DuckDBProjectionStore(tmp_path / f"{name}.duckdb")
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()


def test_the_projector_keeps_a_bounded_number_of_conversations_and_folds_the_same(tmp_path: Path) -> None:
    """Fold state evicted from memory reloads from the store: a bound of 2 gives the unbounded projection."""
    from contract.projection_store_contract import records
    from memfold.core.settings import POLICY_NAMES, Settings
    from memfold.core.tokens import counter
    from memfold.engine.builders import fold_contexts
    from memfold.projections.projector import Projector

    policies = fold_contexts(Settings.load(None, policies=POLICY_NAMES))
    dumps = []
    for bound in (2, 1000):
        store = DuckDBProjectionStore(tmp_path / f"bound-{bound}.duckdb")
        projector = Projector(store, policies, counter(), max_conversations=bound)
        offset = 0
        for round_ in range(3):  # every conversation comes back after being evicted
            batch = []
            for c in range(5):
                batch += records(0, offset, 4, conversation=f"c{c}")
                offset += 4
            batch = [type(r)(r.position, r.event.model_copy(update={"event_id": f"{r.event.event_id}-{round_}"}))
                     for r in batch]
            changes, positions, _ = projector.project(batch)
            store.apply(changes, positions)
            projector.committed(changes)
            assert len(projector._conversations) <= bound
        dumps.append({t: rows for t, rows in store.dump().items() if t != "events"})
        store.close()
    assert dumps[0] == dumps[1]


def test_a_read_whose_cursor_was_taken_just_before_a_swap_reads_the_swapped_in_file(tmp_path: Path) -> None:
    """The race of a rebuild's swap: the reader took its cursor, the connection closed, then the query ran."""
    from contract.projection_store_contract import records
    from memfold.core.settings import Settings
    from memfold.core.tokens import counter
    from memfold.engine.builders import fold_contexts
    from memfold.projections.projector import Projector

    class SwapsAfterTheCursor(DuckDBProjectionStore):
        armed = False

        @property
        def connection(self):
            cursor = super().connection
            if self.armed:
                self.armed = False
                self.compact()  # the file is swapped under this reader, before its query
            return cursor

    store = SwapsAfterTheCursor(tmp_path / "store.duckdb")
    changes, positions, _ = Projector(store, fold_contexts(Settings.load(None)), counter()).project(records(0, 0, 6))
    store.apply(changes, positions)
    before = store.messages("default", "c1")
    store.armed = True
    assert store.messages("default", "c1") == before and len(before) == 6
    assert not store.armed  # the swap did happen inside the read
    store.close()


def test_a_batch_that_continues_known_conversations_and_starts_new_ones_writes_both(tmp_path: Path) -> None:
    """Conversations, policy states and positions are updated where their key is stored and inserted where not.

    The second batch folds in a new process's projector: c1 continues (rows updated), c2 and
    partition 1 are new (rows inserted), in one apply.
    """
    from contract.projection_store_contract import records
    from memfold.core.settings import POLICY_NAMES, Settings
    from memfold.core.tokens import counter
    from memfold.engine.builders import fold_contexts
    from memfold.projections.projector import Projector

    def projector(store: DuckDBProjectionStore) -> Projector:
        return Projector(store, fold_contexts(Settings.load(None, policies=POLICY_NAMES)), counter())

    first, second = records(0, 0, 3), records(0, 3, 4) + records(1, 0, 2, conversation="c2")
    store = DuckDBProjectionStore(tmp_path / "store.duckdb")
    store.apply(*projector(store).project(first)[:2])
    first_state = {p: store.policy_state_json(p, "default", "c1") for p in POLICY_NAMES}
    store.close()

    store = DuckDBProjectionStore(tmp_path / "store.duckdb")
    store.apply(*projector(store).project(second)[:2])
    assert store.position() == {0: 7, 1: 2}
    assert store.conversation("default", "c1")["message_count"] == 7
    assert store.conversation("default", "c2")["message_count"] == 2
    assert [m.index for m in store.messages("default", "c1")] == list(range(7))
    for policy in POLICY_NAMES:
        assert store.policy_state_json(policy, "default", "c2") is not None
        assert store.policy_state_json(policy, "default", "c1") != first_state[policy]
    assert store.query("SELECT count(*) FROM conversations")[1] == [(2,)]
    assert store.query("SELECT count(*) FROM policy_state")[1] == [(2 * len(POLICY_NAMES),)]
    store.close()

    # The same batches into one store in one go give the same rows.
    whole = DuckDBProjectionStore(tmp_path / "whole.duckdb")
    whole.apply(*projector(whole).project(first + second)[:2])
    again = DuckDBProjectionStore(tmp_path / "store.duckdb", read_only=True)
    tables = ("conversations", "policy_state", "positions", "messages", "policy_rows")
    assert whole.dump(tables) == again.dump(tables)
    whole.close()
    again.close()


def test_a_new_process_writes_no_policy_rows_for_a_fold_that_leaves_them(tmp_path: Path) -> None:
    """The projector knows the rows stored with the states it loads: an unchanged table is not rewritten."""
    from contract.projection_store_contract import records
    from memfold.core.settings import Settings
    from memfold.core.tokens import counter
    from memfold.engine.builders import fold_contexts
    from memfold.projections.projector import Projector

    def projector(store: DuckDBProjectionStore) -> Projector:
        return Projector(store, fold_contexts(Settings.load(None, policies=("sliding_window", "topics"))), counter())

    store = DuckDBProjectionStore(tmp_path / "store.duckdb")
    changes, positions, _ = projector(store).project(records(0, 0, 3))
    store.apply(changes, positions)
    stored = store.query("SELECT * FROM policy_rows ORDER BY ALL")[1]
    assert {key[0] for key in changes.policy_rows} == {"sliding_window", "topics"}

    changes, positions, _ = projector(store).project(records(0, 3, 1))  # a new process's projector
    store.apply(changes, positions)
    assert "sliding_window" not in {key[0] for key in changes.policy_rows}  # its memory rows stay as they were
    assert "topics" in {key[0] for key in changes.policy_rows}  # the topic grew by a message
    after = store.query("SELECT * FROM policy_rows ORDER BY ALL")[1]
    assert [r for r in after if r[0] == "sliding_window"] == [r for r in stored if r[0] == "sliding_window"]
    store.close()


def test_the_stored_hint_decides_only_how_rows_are_written(tmp_path: Path) -> None:
    """Changes.stored names conversations written with an UPDATE: one that is not there is inserted all the
    same, and one that is there but not named is updated all the same."""
    from contract.projection_store_contract import records
    from memfold.core.settings import Settings
    from memfold.core.tokens import counter
    from memfold.engine.builders import fold_contexts
    from memfold.projections.projector import Projector

    store = DuckDBProjectionStore(tmp_path / "store.duckdb")
    projector = Projector(store, fold_contexts(Settings.load(None)), counter())
    changes, positions, _ = projector.project(records(0, 0, 2))
    changes.stored.add(("default", "c1"))  # wrong: the store has never seen c1
    store.apply(changes, positions)
    projector.committed(changes)
    assert store.conversation("default", "c1")["message_count"] == 2
    assert store.policy_state_json("sliding_window", "default", "c1") is not None

    changes, positions, _ = projector.project(records(0, 2, 3))
    assert ("default", "c1") in changes.stored  # written by the apply above
    changes.stored.clear()  # wrong the other way: the row is there
    store.apply(changes, positions)
    assert store.conversation("default", "c1")["message_count"] == 5
    assert store.query("SELECT count(*) FROM conversations")[1] == [(1,)]
    store.close()
