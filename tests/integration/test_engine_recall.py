"""Recall end to end: the engine fills the budget from a BM25 projection in DuckDB, rebuilt identically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
T0 = datetime(2024, 1, 8, 18, 0, tzinfo=UTC)
SMALL_TALK = ["How was your weekend?", "Pretty quiet, mostly reading.", "Any plans for the evening?",
              "Maybe a walk if the rain stops.", "Did you watch the game?", "Only the second half."]


def conversation(n: int = 404) -> list[dict]:
    out = []
    for i in range(n):
        content = f"{SMALL_TALK[i % len(SMALL_TALK)]} (turn {i})"
        if i == 60:
            content = "Big news: I adopted a greyhound called Biscuit from the shelter in Leeds."
        out.append({"conversation_id": "c", "role": "user" if i % 2 == 0 else "assistant", "content": content,
                    "created_at": (T0 + timedelta(hours=6 * i)).isoformat()})
    return out


def run(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    proc = subprocess.run([MEMFOLD, "--data-dir", str(data_dir), *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_context_fills_the_budget_recalls_by_query_and_survives_a_rebuild(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "d", policy="hierarchical", policies=("hierarchical",))
    with MemoryEngine(settings) as engine:
        engine.append_many(conversation())
        engine.wait_idle(timeout=120)
        ctx = engine.context("c", budget=4000)
        used = sum(m.tokens for m in ctx)
        assert 3800 < used <= 4000, "the budget left after memory and recent messages goes to older messages"
        ctx = engine.context("c", budget=1500, query="What did I adopt from the shelter?")
        assert sum(m.tokens for m in ctx) <= 1500
        recalled = [m for m in ctx if m.kind == "recalled"]
        said = "Big news: I adopted a greyhound called Biscuit from the shelter in Leeds."
        assert sum(m.content.count(said) for m in ctx) == 1, "the shelter turn is in the context, once"
        memory = "\n".join(m.content for m in ctx if m.kind.startswith("memory:"))
        if said in memory:  # the narrative quotes it whole, under the day it was said: recall does not repeat it
            assert memory.index("[2024-01-23]") < memory.index(said) and 60 not in [m.index for m in recalled]
        else:
            biscuit = next(m for m in recalled if m.index == 60)
            assert biscuit.content.startswith("[2024-01-23]\n"), "created_at given at ingest dates the recalled message"
        answer = next(m for m in recalled if m.index == 61)  # the answer after the question comes with it
        assert answer.content.startswith("[2024-01-24]\n"), "created_at given at ingest dates the recalled message"
        assert [m.index for m in recalled] == sorted(m.index for m in recalled)
        live = engine.store.dump(("search_docs",))
        assert len(live["search_docs"]) >= 404
        n_docs, = engine.sql("SELECT count(*) FROM search_postings WHERE term = 'greyhound' AND kind = 'message'")[1][0]
        assert n_docs == 1
        hits = engine.search("c", "greyhound Biscuit")
        assert hits[0].kind == "message" and hits[0].idx == 60
        assert {h.kind for h in hits} <= {"message", "summary", "fact"}
        summaries = engine.search("c", "greyhound Biscuit weekend", kinds=("summary", "fact"), policy="hierarchical")
        assert all(h.kind in ("summary", "fact") and h.policy == "hierarchical" for h in summaries)
        engine.rebuild()
        assert engine.store.dump(("search_docs",)) == live
        assert [m.as_dict() for m in engine.context("c", budget=1500, query="What did I adopt from the shelter?")] == \
            [m.as_dict() for m in ctx]


def test_cli_query_shows_recalled_messages_with_tokens_and_dates(tmp_path):
    data = tmp_path / "data"
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in conversation(120)) + "\n")
    run(data, "ingest", str(path), "--quiet")
    out = json.loads(run(data, "context", "c", "--budget", "500", "--query", "greyhound name?", "--json",
                         "--format", "compact").stdout)["messages"]
    assert sum(m["tokens"] for m in out) <= 500
    recalled = [m for m in out if m["kind"] == "recalled"]
    assert recalled[0]["index"] == 60 and recalled[0]["occurred_at"].startswith("2024-01-23")
    human = run(data, "context", "c", "--budget", "500", "--query", "greyhound name?").stdout
    assert "recalled" in human and "Biscuit" in human
