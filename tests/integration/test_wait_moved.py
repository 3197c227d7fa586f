"""wait_for on a partition this runner does not fold (a shard node's, moved away) ends at once with PartitionNotOwnedError."""

from __future__ import annotations

import threading

import pytest

from memfold.core.errors import PartitionNotOwnedError
from memfold.core.events import conversation_key
from memfold.core.partitioner import partition_for
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


def _in_partition(partition: int, partitions: int) -> str:
    return next(c for c in (f"c{i}" for i in range(1000)) if partition_for(conversation_key("default", c), partitions) == partition)


def test_a_wait_for_a_partition_not_folded_here_ends_at_once(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "d", partitions=2)
    with MemoryEngine(settings, start=False) as engine:
        engine.runner.own([0])
        position = engine.append_message(_in_partition(1, 2), "user", "hello")
        with pytest.raises(PartitionNotOwnedError) as raised:
            engine.wait_for(position, timeout=60)  # without the check: ProjectionLagTimeout after 60 s
        assert raised.value.partition == 1


def test_a_wait_ends_when_its_partition_is_taken_away_meanwhile(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "d", partitions=2)
    with MemoryEngine(settings, start=False) as engine:  # nothing folds: the wait cannot end by reaching it
        position = engine.append_message(_in_partition(1, 2), "user", "hello")
        outcome: list[BaseException] = []
        waiting = threading.Thread(target=lambda: _wait(engine, position, outcome))
        waiting.start()
        engine.runner.own([0])  # a rebalance gives partition 1 to another node
        waiting.join(60)
        assert not waiting.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], PartitionNotOwnedError)
        engine.runner.own([0, 1])
        engine.runner.run_once()
        engine.wait_for(position, timeout=60)  # folded here again: the plain wait returns
        assert [m.content for m in engine.history(_in_partition(1, 2))] == ["hello"]


def _wait(engine, position, outcome: list[BaseException]) -> None:
    try:
        engine.wait_for(position, timeout=60)
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        outcome.append(exc)
