"""Replay groups: a replay's source fold split over several processes by partition, merged into its namespace.

The merged namespace must equal a single-process replay of the same log
with the same settings, row for row (every table ``verify`` compares), on
the embedded SQLite log and on a Kafka topic; ``diff`` must read it.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from support.talk import talk

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.replay import VERIFIED_TABLES
from memfold.engine.replay_group import split

SETTINGS = {"policy": "hierarchical", "policies": ("hierarchical", "rolling"), "partitions": 4,
            "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 3}}
WHAT_IF = {"hierarchical.trigger_message_count": 10, "hierarchical.resummarize_every": 4}
CONVERSATIONS = ("c1", "c2", "c3", "c4", "c5")


# Measured, not folded: how long a summarizer call took (wall clock), in columns and in event payloads.
TIMINGS = {"latency_ms", "generation_time_ms"}


def _tables(report) -> dict[str, list[tuple]]:
    """Return every table verify compares, timings left out, rows in a canonical order."""
    con = duckdb.connect(str(report.path / "projections.duckdb"), read_only=True)
    try:
        out = {}
        for table in VERIFIED_TABLES:
            cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in TIMINGS]
            rows = con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM {table}").fetchall()
            rows = [tuple(_untimed(v) if c in ("payload", "state", "states", "row") and v else v
                          for c, v in zip(cols, r)) for r in rows]
            out[table] = sorted(rows, key=lambda r: tuple("" if v is None else str(v) for v in r))
        return out
    finally:
        con.close()


def _untimed(text: str) -> str:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMINGS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(json.loads(text)), sort_keys=True)


def _fill(engine: MemoryEngine) -> None:
    for i, conversation in enumerate(CONVERSATIONS):
        talk(engine, conversation, 12 + 2 * i, first_order=100 * i)
    used = [p for p, end in engine.log.end_positions().items() if end]
    assert len(used) >= 2, "the conversations must span several partitions"


def _same(settings: Settings, root: Path) -> None:
    """Replay the filled data dir in one process and, from a copy of it, in two: the namespaces must be equal.

    From copies: the summary cache lives in the data dir, and a second replay in one dir would answer from
    what the first cached (``cached`` and latencies differ, not the memory).
    """
    import shutil

    shutil.copytree(settings.data_dir, root / "two")
    for overrides, label in (({}, "same"), (WHAT_IF, "whatif")):
        reports, diffs = [], []
        for data_dir, processes in ((settings.data_dir, 1), (root / "two", 2)):
            with MemoryEngine(settings.model_copy(update={"data_dir": data_dir})) as engine:
                reports.append(engine.replay(label, overrides=overrides, processes=processes))
                diffs.append(engine.diff_replay(label).as_dict())
                assert engine.verify() == []
        one, two = reports
        assert two.status == "ready" and two.run.folded == one.run.folded > 0
        assert (two.run.answered, two.run.side_events) == (one.run.answered, one.run.side_events)
        first, second = _tables(one), _tables(two)
        assert first["messages"] and first["summaries"]
        for table in VERIFIED_TABLES:
            assert first[table] == second[table], table
        assert not (two.path / "parts").exists()
        assert diffs[0] == diffs[1]


def test_split_balances_partitions_by_work_and_skips_done_ones():
    parts = split({0: 100, 1: 10, 2: 60, 3: 50, 4: 0}, {1: 10}, 2)
    assert parts == [{0: 100}, {2: 60, 3: 50}]
    assert split({0: 5}, {}, 4) == [{0: 5}]


def test_an_embedded_replay_in_two_processes_equals_one_process(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "one", **SETTINGS)
    with MemoryEngine(settings) as engine:
        _fill(engine)
    _same(settings, tmp_path)


@pytest.mark.kafka
def test_a_kafka_replay_in_two_processes_equals_one_process(kafka_bootstrap, tmp_path):
    import uuid

    settings = Settings.load(None, data_dir=tmp_path / "node", log=f"kafka://{kafka_bootstrap}",
                             topic=f"memfold.group.{uuid.uuid4().hex[:10]}", **SETTINGS)
    with MemoryEngine(settings) as engine:
        _fill(engine)
    _same(settings, tmp_path)
