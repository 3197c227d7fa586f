"""Promote in distributed mode (real local broker): a worker and projector nodes adopt the settings promoted on the log.

One topic, one worker (every partition), one projector node serving reads,
a client appending; each node has its own data dir and a configuration
with the old settings. Promote runs on the projector node (where the
replay is); the worker adopts the ``SettingsChanged`` from the log.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from memfold.core.errors import ConfigError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.kafka_worker import PartitionWorker
from memfold.streams.ownership import StaticPartitions

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SETTINGS = {"policy": "hierarchical", "policies": ("hierarchical",), "partitions": 3,
            "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 3}}
WIDE = {"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6}


def _until(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still waiting after {timeout}s for {what}"
        time.sleep(0.05)


def _settle(worker: MemoryEngine, projector: MemoryEngine) -> None:
    """Wait until the worker has folded and answered everything and the projector has folded it all."""
    while True:
        ends = projector.log.end_positions()
        worker.wait_idle(120)
        projector.wait_idle(120)
        if projector.log.end_positions() == ends:
            return


@pytest.fixture
def cluster(kafka_bootstrap, tmp_path):
    topic = f"memfold.promote.{uuid.uuid4().hex[:10]}"

    def settings(node: str) -> Settings:  # every node is configured with the old settings
        return Settings.load(None, data_dir=tmp_path / node, log=f"kafka://{kafka_bootstrap}", topic=topic, **SETTINGS)

    client = MemoryEngine(settings("client"), role="client")
    worker = MemoryEngine(settings("worker"), role="worker")
    loop = PartitionWorker(worker.runner, worker.worker, StaticPartitions(range(3), 3))
    thread = threading.Thread(target=loop.run, name="test-worker", daemon=True)
    thread.start()
    projector = MemoryEngine(settings("projector"), role="projector")
    nodes = {"client": client, "worker": worker, "projector": projector, "settings": settings}
    try:
        yield nodes
    finally:
        loop.stop()
        thread.join(30)
        for engine in (nodes["projector"], worker, client, *nodes.get("more", ())):
            engine.close()


def _say(client: MemoryEngine, conversation: str, first: int, n: int, nodes: dict) -> None:
    for i in range(first, first + n):
        client.append_message(conversation, "user" if i % 2 == 0 else "assistant",
                              f"turn {i}: order #{700 + i} for {conversation} ships from Leeds for ${i}.99")
        if i % 5 == 4:
            _settle(nodes["worker"], nodes["projector"])
    _settle(nodes["worker"], nodes["projector"])


def test_promote_reaches_the_worker_and_projector_nodes_through_the_log(cluster):
    client, worker, projector = cluster["client"], cluster["worker"], cluster["projector"]
    _say(client, "c1", 0, 20, cluster)
    _say(client, "c2", 0, 10, cluster)
    assert projector.verify() == []  # the distributed projection is what the log folds to
    report = projector.replay("wide", overrides=WIDE)
    assert report.status == "ready" and report.run.answered > 0
    with pytest.raises(ConfigError, match="projector node"):
        worker.promote("wide")  # workers take settings from the log, never promote

    reads: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            reads.append(len(projector.context("c1")))

    reader = threading.Thread(target=read, name="test-reader", daemon=True)
    reader.start()
    try:
        position = projector.promote("wide")
        assert projector.settings.hierarchical.trigger_message_count == 12
        _until(lambda: worker.settings.hierarchical.trigger_message_count == 12, "the worker to adopt the settings")
    finally:
        stop.set()
        reader.join(30)
    assert reads and min(reads) > 0, "a read saw an empty projection"
    # Reads stop before more messages arrive: a read racing the fold of a conversation whose state is not cached
    # yet can put a stale state into the projector's cache (projections/projector.py, Projector.state).
    _say(client, "c1", 20, 8, cluster)  # summarized by the worker under the promoted settings
    (record,) = projector.log.read(position.partition, position.offset, 1)
    assert record.event.type == "SettingsChanged" and record.event.payload.settings["replay"] == "wide"

    found = projector.verify()  # equal to a fresh fold of the log under the promoted settings
    assert not found, "\n".join(f"{d.table}: only live {d.only_live}\nonly replay {d.only_replay}" for d in found)
    # A node started later with the old settings in its configuration folds with the log's.
    fresh = MemoryEngine(cluster["settings"]("fresh"), role="projector")
    cluster["more"] = [fresh]
    assert fresh.settings.hierarchical.trigger_message_count == 12
    fresh.wait_idle(120)
    fresh_dump, live_dump = fresh.store.dump(), projector.store.dump()
    for table, rows in live_dump.items():
        assert fresh_dump[table] == rows, (table, set(rows) ^ set(fresh_dump[table]))
    assert fresh_dump.keys() == live_dump.keys()
    newest = projector.store.query(
        "SELECT max(covers_to) FROM summaries WHERE conversation_id = 'c1' AND status = 'completed' "
        "AND settings_hash = ?", [projector.settings.settings_hash("hierarchical")])[1][0][0]
    assert newest is not None and newest >= 20, newest  # new messages summarized under the promoted settings
