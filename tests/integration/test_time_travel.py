"""Time travel: the context as of a log position or a time equals what ``context`` returned at that moment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memfold.cli.main import main
from memfold.core.errors import ValidationError
from memfold.core.positions import Position
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
SETTINGS = {
    "policy": "hierarchical",
    "policies": ("hierarchical", "rolling", "sliding_window", "chunked"),
    "hierarchical": {"trigger_message_count": 8, "recent_message_count": 3, "resummarize_every": 3},
    "rolling": {"message_threshold": 10, "recent_messages_to_keep": 4, "regeneration_threshold": 5},
    "chunked": {"chunk_summarize_threshold": 300, "prompt_token_budget": 250, "summary_token_cap": 60},
}
POLICIES = SETTINGS["policies"]
BUDGETS = (None, 4000, 220)


def _text(i: int) -> str:
    topics = [f"order #{5000 + i} was charged ${20 + i}.50", f"the courier lost parcel {i}",
              f"my email is user{i}@example.com", f"we agreed to refund within {i % 20 + 1} days"]
    return f"turn {i}: {topics[i % 4]} and the invoice mentions the warehouse in Leeds"


def test_contexts_as_of_positions_equal_what_was_read_during_ingestion(tmp_path):
    recorded = []
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)) as engine:
        for i in range(46):
            pos = engine.append_message("c1", "user" if i % 2 == 0 else "assistant", _text(i),
                                        occurred_at=T0 + timedelta(minutes=i))
            engine.append_message("other", "user", f"noise {i}")  # another conversation interleaves in the log
            if i % 4 == 3:
                engine.wait_idle(60)
                applied = engine.store.position()[pos.partition] - 1
                at = Position(pos.partition, applied)
                for policy in POLICIES:
                    for budget in BUDGETS:
                        recorded.append((at, policy, budget, [m.as_dict() for m in engine.context("c1", policy=policy, budget=budget)]))
        engine.wait_idle(60)
        assert engine.summaries("c1", policy="hierarchical"), "the test must cross summaries"
        for at, policy, budget, expected in recorded:
            got = [m.as_dict() for m in engine.context("c1", policy=policy, budget=budget, as_of=at)]
            assert got == expected, (at, policy, budget)
        # A rebuilt projection answers the same (snapshots are taken at fixed seqs).
        engine.rebuild()
        for at, policy, budget, expected in recorded[::7]:
            assert [m.as_dict() for m in engine.context("c1", policy=policy, budget=budget, as_of=at)] == expected


def test_as_of_a_time_and_errors(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)) as engine:
        # One batch: every message is in the log before any summary they trigger.
        positions = engine.append_many(
            [{"conversation_id": "c1", "role": "user", "content": _text(i), "occurred_at": T0 + timedelta(minutes=i)}
             for i in range(12)]
        )
        engine.wait_idle(60)
        then = engine.context("c1", as_of=T0 + timedelta(minutes=4, seconds=30))
        assert then[-1].content == _text(4) and all(_text(5) not in m.content for m in then)
        assert engine.context("c1", as_of=T0 - timedelta(days=1)) == []
        last = Position(positions[0].partition, engine.store.position()[positions[0].partition] - 1)
        assert engine.context("c1", as_of=last) == engine.context("c1")
        at_last_message = engine.context("c1", as_of=positions[-1])  # before the summaries it triggered
        assert not any(m.kind.startswith("memory") for m in at_last_message)
        assert any(m.kind.startswith("memory") for m in engine.context("c1"))
        other = Position((positions[0].partition + 1) % engine.settings.partitions, 0)
        with pytest.raises(ValidationError, match="partition"):
            engine.context("c1", as_of=other)
        with pytest.raises(ValidationError, match="time zone"):
            engine.context("c1", as_of=datetime(2026, 5, 4, 8, 3))


def test_cli_context_as_of(tmp_path, capsys):
    data = tmp_path / "d"
    with MemoryEngine(Settings.load(None, data_dir=data)) as engine:
        positions = [engine.append_message("c1", "user", _text(i), occurred_at=T0 + timedelta(minutes=i)) for i in range(5)]
        engine.wait_idle(60)
    assert main(["--data-dir", str(data), "context", "c1", "--json", "--as-of", str(positions[2])]) == 0
    out = capsys.readouterr().out
    assert _text(2) in out and _text(3) not in out
    assert main(["--data-dir", str(data), "context", "c1", "--json", "--as-of", "2026-05-04T08:01:00+00:00"]) == 0
    out = capsys.readouterr().out
    assert _text(1) in out and _text(2) not in out
    assert main(["--data-dir", str(data), "context", "c1", "--as-of", "yesterday"]) == 2
