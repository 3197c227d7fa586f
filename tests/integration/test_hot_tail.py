"""The in-memory hot tail answers context reads exactly as the DuckDB store would, or not at all."""

from __future__ import annotations

import random

from memfold.engine.engine import MemoryEngine
from memfold.engine.settings import Settings


def test_every_tail_answer_equals_the_store_answer(tmp_path):
    rnd = random.Random(5)
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d")) as engine:
        for i in range(400):
            words = " ".join(rnd.choice(["refund", "order", "ship", "label", "box", "card"]) for _ in range(rnd.randint(1, 60)))
            engine.append_message("c", "user" if i % 2 == 0 else "assistant", f"{i}: {words}")
        engine.wait_idle()
        answered = 0
        for _ in range(400):
            start = rnd.randint(0, 420)
            budget = rnd.choice([None, 0, 5, 50, 300, 1000, 3000, 20000])
            hot = engine.projector.tail.window(("default", "c"), start, budget)
            cold = engine.store.recent_messages("default", "c", start, budget)
            if hot is not None:
                answered += 1
                assert [m.index for m in hot] == [m.index for m in cold], (start, budget)
                assert [m.content for m in hot] == [m.content for m in cold]
        assert answered > 100, "the tail should answer most recent-window reads"
        # Reads through the engine give the same context whichever path serves them.
        via_tail = [m.as_dict() for m in engine.context("c", budget=800)]
        engine.projector.tail.clear()
        assert [m.as_dict() for m in engine.context("c", budget=800)] == via_tail


def test_a_deleted_conversation_leaves_the_tail(tmp_path):
    from memfold.engine.events import ConversationDeleted, utcnow

    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d")) as engine:
        for i in range(5):
            engine.append_message("gone", "user", f"message {i}")
        engine.wait_idle()
        assert engine.projector.tail.window(("default", "gone"), 0, None)
        engine.log.append([ConversationDeleted(event_id="del-1", conversation_id="gone", occurred_at=utcnow())])
        engine.wait_idle()
        assert engine.projector.tail.window(("default", "gone"), 0, None) is None
        assert engine.context("gone") == []
        assert engine.history("gone") == []
