"""The facts projection keeps a knowledge update's lineage: the superseded fact stays, dated and linked to its successor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

MARCH = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
APRIL = datetime(2024, 4, 10, 9, 0, tzinfo=UTC)
FILLER = ("Sounds good, thanks.", "Happy to help with that.")

COLUMNS = "key, value, stated_at, stated_in, introduced_by, introduced_seq, retired_by, superseded_by, fact_id"


def _messages(start: int, count: int, day: datetime, first: str | None = None, conversation: str = "c1") -> list[dict]:
    out = []
    for i in range(start, start + count):
        text = first if (first is not None and i == start) else FILLER[i % 2]
        out.append({
            "conversation_id": conversation, "role": "user" if i % 2 == 0 else "assistant", "content": text,
            "occurred_at": day + timedelta(minutes=i),
        })
    return out


def _lives_in(engine: MemoryEngine, conversation: str = "c1") -> list[dict]:
    cols, rows = engine.sql(
        f"SELECT {COLUMNS} FROM facts WHERE policy = 'hierarchical' AND conversation_id = ? AND key = 'lives_in' "
        "ORDER BY stated_at", [conversation],
    )
    return [dict(zip(cols, r)) for r in rows]


def test_a_later_fact_supersedes_an_earlier_one_with_lineage_and_a_rebuild_gives_the_same_rows(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data", policy="hierarchical")) as engine:
        engine.append_many(_messages(0, 22, MARCH, "I live in Berlin and my deadline is March 29."))
        engine.wait_idle(timeout=60)
        (berlin,) = _lives_in(engine)
        assert berlin["value"] == "Berlin" and berlin["superseded_by"] is None
        engine.append_many(_messages(22, 20, APRIL, "Big news: I moved to Munich last week."))
        engine.wait_idle(timeout=60)
        old, new = _lives_in(engine)
        assert (old["value"], new["value"]) == ("Berlin", "Munich")
        assert old["stated_at"] == MARCH and old["stated_in"] == 0  # event time: when the user said it
        assert new["stated_at"] == APRIL + timedelta(minutes=22) and new["stated_in"] == 22
        assert old["superseded_by"] == new["fact_id"] and new["superseded_by"] is None
        assert old["retired_by"] == new["introduced_by"] and new["retired_by"] is None  # replaced, kept, not current
        assert old["introduced_by"] != new["introduced_by"]  # learned from two summary versions
        assert old["introduced_seq"] < new["introduced_seq"]
        summaries = {r["summary_id"]: r for r in engine.summaries("c1", policy="hierarchical") if r["summary_id"]}
        assert summaries[new["introduced_by"]]["resolved_seq"] == new["introduced_seq"]
        before = engine.sql(f"SELECT {COLUMNS} FROM facts ORDER BY policy, key, value")
        engine.rebuild()
        assert engine.sql(f"SELECT {COLUMNS} FROM facts ORDER BY policy, key, value") == before


def test_both_values_stated_before_one_summary_keep_the_lineage_too(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data", policy="hierarchical")) as engine:
        messages = _messages(0, 22, MARCH, "I live in Berlin.", conversation="c2")
        messages[4] = {**messages[4], "content": "Update: I moved to Munich.", "occurred_at": APRIL}
        engine.append_many(messages)
        engine.wait_idle(timeout=60)
        old, new = _lives_in(engine, "c2")
        assert (old["value"], old["stated_at"], new["value"], new["stated_at"]) == ("Berlin", MARCH, "Munich", APRIL)
        assert old["introduced_by"] == new["introduced_by"] == old["retired_by"]  # learned replaced, at once
        assert old["superseded_by"] == new["fact_id"] and new["retired_by"] is None and new["superseded_by"] is None
        context = engine.context("c2")
        facts = next(m.content for m in context if m.kind == "memory:facts")
        assert "- lives_in: Munich (was: Berlin)" in facts and "[2024-04-10]" in facts
