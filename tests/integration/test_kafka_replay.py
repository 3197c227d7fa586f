"""Replays on the Kafka log (real local broker): own positions from offset 0, nothing on live topics until promote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from support.talk import talk

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.store import DuckDBProjectionStore

pytestmark = pytest.mark.kafka

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
SETTINGS = {"policy": "hierarchical", "policies": ("hierarchical",), "partitions": 3,
            "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 3}}
WIDE = {"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6}


def _records_per_topic(bootstrap: str) -> dict[str, int]:
    """Return the number of records ever written to every topic of the broker (internal ones included)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, exclude_internal_topics=False)
    try:
        parts = [TopicPartition(t, p) for t in consumer.topics()
                 for p in consumer.partitions_for_topic(t) or ()]
        ends = consumer.end_offsets(parts)
    finally:
        consumer.close()
    out: dict[str, int] = {}
    for tp, end in ends.items():
        out[tp.topic] = out.get(tp.topic, 0) + end
    return out


def _talk(engine: MemoryEngine, conversation: str, n: int) -> None:
    talk(engine, conversation, n, first_order=700, name_conversation=True, timeout=120)


@pytest.fixture(scope="module")
def live(kafka_bootstrap, tmp_path_factory):
    """An engine folding and summarizing a fresh topic in-process (the embedded pipeline over the Kafka log).

    Shared by the module's tests; the promote test, which changes the live settings, runs last.
    """
    settings = Settings.load(None, data_dir=tmp_path_factory.mktemp("kafka-replay") / "live", log=f"kafka://{kafka_bootstrap}",
                             topic=f"memfold.replay.{uuid.uuid4().hex[:10]}", **SETTINGS)
    engine = MemoryEngine(settings)
    try:
        _talk(engine, "c1", 20)
        _talk(engine, "c2", 10)
        yield engine
    finally:
        engine.close()


def test_replay_reads_the_topic_from_the_start_and_writes_nothing_live(live, kafka_bootstrap):
    topic, before, dump = live.settings.topic, _records_per_topic(kafka_bootstrap), live.store.dump()
    ends = live.log.end_positions()
    same = live.replay("same")
    # Its own positions: from offset 0 of every partition to the end, stored with its own rows.
    assert same.run.folded == sum(ends.values()) and same.head == ends
    replica = DuckDBProjectionStore(same.path / "projections.duckdb", read_only=True)
    try:
        stored = replica.position()
        assert {p: stored.get(p, 0) for p in ends} == ends
        assert replica.dump() == dump  # the live settings fold to the live projection
    finally:
        replica.close()
    wide = live.replay("wide", overrides=WIDE)
    assert wide.run.side_events > 0 and wide.run.answered > 0  # its own summaries: in its side log only
    assert live.verify() == []
    assert _records_per_topic(kafka_bootstrap) == before, "a replay wrote to a topic of the broker"
    assert before[topic] == sum(ends.values())
    assert live.store.dump() == dump


def test_cli_replay_on_a_projector_node(live, kafka_bootstrap, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    config = tmp_path / "memfold.toml"
    config.write_text('policy = "hierarchical"\npolicies = ["hierarchical"]\npartitions = 3\n[hierarchical]\n'
                      "trigger_message_count = 6\nrecent_message_count = 2\nresummarize_every = 3\n")
    node = ["--data-dir", str(tmp_path / "node"), "--config", str(config)]
    url, topic = f"kafka://{kafka_bootstrap}", live.settings.topic

    def cli(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([MEMFOLD, *node, *args], capture_output=True, text=True, timeout=180,
                              env=env | {"MEMFOLD_TOPIC": topic})
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return proc

    cli("project", "--log", url, "--until-caught-up")
    before = _records_per_topic(kafka_bootstrap)
    report = json.loads(cli("replay", "--name", "wide", "--quiet", "--json",
                            *(f"--set={k}={v}" for k, v in WIDE.items())).stdout)
    assert report["status"] == "ready" and report["run"]["folded"] == sum(live.log.end_positions().values())
    listed = json.loads(cli("replays", "--json").stdout)
    assert [r["name"] for r in listed] == ["wide"] and listed[0]["lag"] == 0
    assert _records_per_topic(kafka_bootstrap) == before


def test_promote_appends_settings_changed_to_the_live_topic(live, kafka_bootstrap):
    live.replay("wide", overrides=WIDE)
    topic, before = live.settings.topic, _records_per_topic(kafka_bootstrap)
    position = live.promote("wide")
    after = _records_per_topic(kafka_bootstrap)
    (record,) = live.log.read(position.partition, position.offset, 1)
    assert record.event.type == "SettingsChanged" and record.event.payload.settings["replay"] == "wide"
    assert after[topic] > before[topic]  # SettingsChanged and the replay's summary events
    assert {t: n for t, n in after.items() if t != topic} == {t: n for t, n in before.items() if t != topic}
    assert live.settings.hierarchical.trigger_message_count == 12
    assert live.verify() == []  # live now is what the log folds to under the promoted settings
