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
