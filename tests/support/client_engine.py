"""A client-role engine over a real SQLite log in tmp_path (validation and appends, no projection), and its log."""

from __future__ import annotations

import pytest

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


@pytest.fixture()
def engine(tmp_path):
    # A client appends and validates only: the log is real, no projection is needed here.
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data"), role="client") as eng:
        yield eng


def stored(engine) -> list:
    """Every event the engine's log holds, partition by partition."""
    return [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 100_000)]
