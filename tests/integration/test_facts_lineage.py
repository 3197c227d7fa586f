"""The facts projection keeps a knowledge update's lineage: the superseded fact stays, dated and linked to its successor."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memfold.engine.engine import MemoryEngine
from memfold.engine.settings import Settings

MARCH = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
APRIL = datetime(2024, 4, 10, 9, 0, tzinfo=timezone.utc)
FILLER = ("Sounds good, thanks.", "Happy to help with that.")

COLUMNS = "key, value, stated_at, stated_in, introduced_by, introduced_seq, retired_by, superseded_by, fact_id"


def _messages(start: int, count: int, day: datetime, first: str | None = None) -> list[dict]:
    out = []
    for i in range(start, start + count):
        text = first if (first is not None and i == start) else FILLER[i % 2]
        out.append({
            "conversation_id": "c1", "role": "user" if i % 2 == 0 else "assistant", "content": text,
            "occurred_at": day + timedelta(minutes=i),
        })
    return out


def _lives_in(engine: MemoryEngine) -> list[dict]:
    cols, rows = engine.sql(
        f"SELECT {COLUMNS} FROM facts WHERE policy = 'hierarchical' AND conversation_id = 'c1' AND key = 'lives_in' "
        "ORDER BY stated_at"
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
        assert old["introduced_by"] != new["introduced_by"]  # learned from two summary versions
        assert old["introduced_seq"] < new["introduced_seq"]
        summaries = {r["summary_id"]: r for r in engine.summaries("c1", policy="hierarchical") if r["summary_id"]}
        assert summaries[new["introduced_by"]]["resolved_seq"] == new["introduced_seq"]
        before = engine.sql(f"SELECT {COLUMNS} FROM facts ORDER BY policy, key, value")
        engine.rebuild()
        assert engine.sql(f"SELECT {COLUMNS} FROM facts ORDER BY policy, key, value") == before
