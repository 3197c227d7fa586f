"""Shard nodes on a real broker: projector nodes folding a subset of the partitions, fixed or by consumer group.

The union of the shards must equal a full replica of the same topic; a
group node that takes over a SIGKILLed node's partitions must end equal to
a full replica (nothing lost, nothing applied twice).
"""

from __future__ import annotations

import duckdb
import pytest
from support.shard_kit import NodeProcess, partitions_of, project, union
from support.worker_kit import Topic, conversation, interleaved, new_topic, projection, settings_for

pytestmark = pytest.mark.kafka

CONVERSATIONS = ("support-4711", "travel-2208", "saas-3390", "insurance-5172", "tech-8821")


def _messages(per: int):
    return interleaved(*(conversation(c, per) for c in CONVERSATIONS))


def _conversations(path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT DISTINCT conversation_id FROM messages").fetchall()}
    finally:
        con.close()


def test_static_shards_fold_disjoint_halves_whose_union_is_a_full_replica(kafka_bootstrap, tmp_path):
    settings = settings_for(new_topic(), tmp_path / "reader", 4)
    topic = Topic(kafka_bootstrap, settings)
    messages = _messages(8)
    try:
        topic.log.append(messages)
    finally:
        topic.close()
    assert partitions_of(messages, 4) & {0, 1} and partitions_of(messages, 4) & {2, 3}, "pick conversations on both halves"
    project(kafka_bootstrap, settings.topic, 4, tmp_path / "full")
    out = project(kafka_bootstrap, settings.topic, 4, tmp_path / "a", "--partitions", "0,1")
    project(kafka_bootstrap, settings.topic, 4, tmp_path / "b", "--partitions", "2,3")
    assert "lag 0" in out
    a, b = tmp_path / "a" / "projections.duckdb", tmp_path / "b" / "projections.duckdb"
    held_a, held_b = _conversations(a), _conversations(b)
    assert held_a and held_b and not held_a & held_b
    assert held_a | held_b == set(CONVERSATIONS)
    assert union(projection(a), projection(b)) == projection(tmp_path / "full" / "projections.duckdb")


def test_a_partition_list_that_does_not_fit_the_topic_is_refused(kafka_bootstrap, tmp_path):
    import subprocess

    from support.shard_kit import MEMFOLD, node_env

    settings = settings_for(new_topic(), tmp_path / "reader", 4)
    done = subprocess.run(
        [MEMFOLD, "project", "--log", f"kafka://{kafka_bootstrap}", "--data-dir", str(tmp_path / "n"),
         "--until-caught-up", "--partitions", "3,4"], capture_output=True, text=True, timeout=120,
        env=node_env(settings.topic, 4),
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "do not fit a log of 4 partitions" in done.stderr


def test_a_group_node_takes_over_a_killed_nodes_partitions_and_ends_equal_to_a_full_replica(kafka_bootstrap, tmp_path):
    settings = settings_for(new_topic(), tmp_path / "reader", 4)
    topic = Topic(kafka_bootstrap, settings)
    first, rest = _messages(10)[:24], _messages(10)[24:]
    group = ["--group", f"g-{settings.topic}"]
    a = NodeProcess(kafka_bootstrap, settings.topic, 4, tmp_path / "a", tmp_path / "a.log", *group)
    b = None
    try:
        topic.log.append(first)
        a.wait_caught_up([0, 1, 2, 3], 0)
        b = NodeProcess(kafka_bootstrap, settings.topic, 4, tmp_path / "b", tmp_path / "b.log", *group)
        # The group splits the partitions: each node folds two.
        b.wait_for_line(lambda ln: "assigned [" in ln and "owning [" in ln and "owning []" not in ln, "an assignment")
        a.wait_for_line(lambda ln: "revoked [" in ln, "a revocation")
        a.wait_for_line(lambda ln: "dropped partitions [" in ln, "the revoked partitions' rows deleted")
        mark = len(b.text())
        a.kill()
        # b takes a's partitions once a's session times out, folds them from 0 (its file never held them).
        topic.log.append(rest)
        b.wait_caught_up([0, 1, 2, 3], mark)
        assert b.terminate() == 0, b.text()[-3000:]
    finally:
        for node in (a, b):
            if node is not None:
                node.close()
        topic.close()
    project(kafka_bootstrap, settings.topic, 4, tmp_path / "full")
    assert projection(tmp_path / "b" / "projections.duckdb") == projection(tmp_path / "full" / "projections.duckdb")
    assert "Traceback" not in (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
