"""sliding_window after a bulk ingest and a rebuild, through the embedded engine and the offline summarizer."""

from __future__ import annotations

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.policies.sliding_window import window_range

N = 400


def _chat(n: int) -> list[dict]:
    out = []
    for i in range(n):
        if i % 2 == 0:
            text = f"Round {i // 2}: I booked table {i} at Mario's for the {i % 28 + 1}th, can you remind me?"
        else:
            text = f"Noted: table {i - 1} at Mario's on the {(i - 1) % 28 + 1}th."
        out.append({"conversation_id": "c1", "role": "user" if i % 2 == 0 else "assistant", "content": text})
    return out


def test_bulk_ingest_catches_up_to_the_window_and_a_rebuild_agrees(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "data", policies=("sliding_window",), policy="sliding_window")
    window = settings.policy_settings("sliding_window").rolling_window_size
    with MemoryEngine(settings) as engine:
        engine.append_many(_chat(N))  # one batch, like a backfill: every round end arrives before memory 1 is made
        engine.wait_idle(timeout=120)
        start, _ = window_range(N - 1, window)
        done = [r for r in engine.summaries("c1", policy="sliding_window") if r["status"] == "completed"]
        newest = max(done, key=lambda r: r["covers_to"])
        assert newest["covers_to"] + 1 >= start, f"newest completed memory ends at {newest['covers_to']}"
        assert len(done) <= 1 + N // window  # caught up in a few steps, not one per round
        plan = engine.plan("c1")
        assert plan.fallback is None and plan.notes["memory_id"] == newest["summary_id"]
        context = engine.context("c1")
        verbatim = [m for m in context if m.kind in ("verbatim", "current")]
        assert len(verbatim) <= window and context[0].content.startswith("[Previous context: ")
        assert f"table {N - 2}" in context[0].content or f"table {N - 2}" in " ".join(m.content for m in verbatim)

        before = engine.store.dump()
        engine.rebuild()  # a replay folds the recorded answers and decides the same catch-up
        assert engine.store.dump() == before
