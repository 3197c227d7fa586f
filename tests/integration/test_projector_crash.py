"""Projector crash safety: kill it anywhere, restart, and get exactly the uninterrupted projection."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memfold.core.events import MessageAppended, MessagePayload
from memfold.projections.store import DuckDBProjectionStore
from memfold.streams.logs import open_log

CHILD = Path(__file__).resolve().parents[1] / "support" / "project_child.py"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
WORDS = "order refund shipping invoice account password delivery address payment warranty".split()


def _write_log(path: Path, conversations: int = 12, per_conversation: int = 90) -> int:
    rnd = random.Random(7)
    log = open_log(f"sqlite:///{path}", partitions=4)
    events = []
    for n in range(per_conversation):
        for c in range(conversations):
            role = "user" if n % 2 == 0 else "assistant"
            text = f"{role} turn {n}: " + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 40)))
            if n == 0:
                text += f" my order is #{4000 + c} and the refund is ${50 + c}.00"
            events.append(
                MessageAppended(
                    event_id=f"m-{c}-{n}", tenant_id="acme", conversation_id=f"conv-{c}",
                    occurred_at=T0 + timedelta(minutes=n, seconds=c), payload=MessagePayload(role=role, content=text),
                )
            )
    for i in range(0, len(events), 500):
        log.append(events[i : i + 500])
    log.close()
    return len(events)


def _run_child(log: Path, store: Path, batch: int, crash_at: int) -> int:
    return subprocess.run(
        [sys.executable, str(CHILD), str(log), str(store), str(batch), str(crash_at)], capture_output=True, text=True
    ).returncode


def _dump(store_path: Path) -> dict:
    store = DuckDBProjectionStore(store_path, read_only=True)
    try:
        return store.dump()
    finally:
        store.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("reference")
    pristine = root / "pristine.sqlite"
    count = _write_log(pristine)
    log, store = root / "ref.sqlite", root / "ref.duckdb"
    shutil.copy(pristine, log)
    assert _run_child(log, store, 10_000, -1) == 0
    dump = _dump(store)
    assert len(dump["messages"]) == count
    return pristine, dump


def test_kill_inside_the_transaction_then_restart_gives_the_same_projection(reference, tmp_path):
    pristine, expected = reference
    log, store = tmp_path / "log.sqlite", tmp_path / "crash.duckdb"
    shutil.copy(pristine, log)
    for crash_at in (0, 2, 3):  # die inside successive transactions, restarting each time
        assert _run_child(log, store, 150, crash_at) == -9
    assert _run_child(log, store, 150, -1) == 0
    assert _dump(store) == expected


def test_kill_at_random_moments_then_restart_gives_the_same_projection(reference, tmp_path):
    pristine, expected = reference
    log, store = tmp_path / "log.sqlite", tmp_path / "random.duckdb"
    shutil.copy(pristine, log)
    rnd = random.Random(11)
    kills = 0
    env = {**os.environ, "MEMFOLD_TEST_PROGRESS": "1"}
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(log), str(store), str(rnd.choice([64, 100, 150])), "-1"],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        # Kill after a random number of transactions have started, a random few ms later:
        # sometimes inside a transaction, sometimes between two, always mid-projection.
        wanted = rnd.randint(1, 3)
        lines = 0
        while lines < wanted and proc.stdout.readline():
            lines += 1
        time.sleep(rnd.uniform(0.0, 0.05))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.communicate()
    assert _run_child(log, store, 500, -1) == 0
    assert _dump(store) == expected
    assert kills >= 1, "no run was interrupted; the test proved nothing"


def test_redelivered_records_change_nothing(reference, tmp_path):
    from memfold.core.settings import POLICY_NAMES, Settings
    from memfold.core.tokens import counter
    from memfold.engine.builders import fold_contexts
    from memfold.projections.projector import Projector

    pristine, expected = reference
    log_path, store_path = tmp_path / "log.sqlite", tmp_path / "redeliver.duckdb"
    shutil.copy(pristine, log_path)
    assert _run_child(log_path, store_path, 10_000, -1) == 0
    log = open_log(f"sqlite:///{log_path}", partitions=4)
    store = DuckDBProjectionStore(store_path)
    settings = Settings.load(None, policies=POLICY_NAMES, partitions=4)
    projector = Projector(store, fold_contexts(settings), counter())
    for partition in log.partitions():
        records = log.read(partition, 0, 400)  # already applied: must be a no-op
        changes, positions, decided = projector.project(records)
        assert len(changes) == 0 and positions == {} and decided == []
        store.apply(changes, positions)
    store.close()
    log.close()
    assert _dump(store_path) == expected
