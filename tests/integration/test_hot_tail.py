"""The in-memory hot tail answers context reads exactly as the DuckDB store would, or not at all."""

from __future__ import annotations

import random

import pytest

from memfold.core.errors import UnknownConversationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


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
    from memfold.core.events import ConversationDeleted, utcnow

    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d")) as engine:
        for i in range(5):
            engine.append_message("gone", "user", f"message {i}")
        engine.wait_idle()
        assert engine.projector.tail.window(("default", "gone"), 0, None)
        engine.log.append([ConversationDeleted(event_id="del-1", conversation_id="gone", occurred_at=utcnow())])
        engine.wait_idle()
        assert engine.projector.tail.window(("default", "gone"), 0, None) is None
        with pytest.raises(UnknownConversationError):
            engine.context("gone")
        assert engine.store.messages("default", "gone") == []


def test_context_in_memory_says_when_a_read_needs_no_store_query(tmp_path):
    """What the service relies on to compute a read on its event loop (no store query, no sleep, no model call)."""
    data = tmp_path / "d"
    policies = ("sliding_window", "hierarchical", "topics")
    with MemoryEngine(Settings.load(None, data_dir=data, policies=policies)) as engine:
        for i in range(30):
            engine.append_message("c", "user" if i % 2 == 0 else "assistant", f"turn {i} about the Porto invoice")
        engine.wait_idle()
        assert engine.context_in_memory("c")  # folded here: state, recall index and tail are in memory
        first = [m.as_dict() for m in engine.context("c", budget=500)]
        # hierarchical may wait for a pending summary (lazy_timeout_ms 2000 by default): never in memory only
        engine.context("c", budget=500, policy="hierarchical")
        assert not engine.context_in_memory("c", policy="hierarchical")
        assert not engine.context_in_memory("never-written")
        # topics names the current topic's messages one by one and reads them from the store
        engine.context("c", budget=500, policy="topics")
        assert engine.plan("c", policy="topics").verbatim_indices
        assert not engine.context_in_memory("c", policy="topics")
    with MemoryEngine(Settings.load(None, data_dir=data, policies=policies)) as reopened:
        assert not reopened.context_in_memory("c")  # a new process holds nothing yet: the first read loads
        assert [m.as_dict() for m in reopened.context("c", budget=500)] == first
        # What the first read fetched is kept (projections.read_cache): the next read asks no query.
        assert reopened.context_in_memory("c")
        assert [m.as_dict() for m in reopened.context("c", budget=500)] == first
        reopened.append_message("c", "user", "and one more about Porto")
        reopened.wait_idle()
        assert reopened.context_in_memory("c")
        after = [m.as_dict() for m in reopened.context("c", budget=500)]
        assert after[-1]["content"] == "and one more about Porto"
    with MemoryEngine(Settings.load(None, data_dir=data, policies=policies)) as fresh:
        assert [m.as_dict() for m in fresh.context("c", budget=500)] == after  # nothing stale was kept


def test_a_read_that_raced_a_commit_keeps_nothing_stale(tmp_path):
    """A cold read's store answer is kept only if no batch of its conversation committed while it was read."""
    data = tmp_path / "d"
    with MemoryEngine(Settings.load(None, data_dir=data)) as engine:
        for i in range(12):
            engine.append_message("c", "user" if i % 2 == 0 else "assistant", f"turn {i} about the Porto invoice")
        engine.wait_idle()
    with MemoryEngine(Settings.load(None, data_dir=data)) as engine:
        projector, key = engine.projector, ("default", "c")
        # A reader notes the versions and reads the store ...
        tail_version, state_version = projector.tail.version(key), projector._cold_states.version(key)
        recent = engine.store.recent_messages("default", "c", 0, None)
        state = projector.store.policy_state_json("sliding_window", *key)
        # ... while a batch of the conversation commits ...
        engine.append_message("c", "user", "turn 12: the invoice number is INV-2207")
        engine.wait_idle()
        assert projector.tail.version(key) != tail_version  # the commit moved both versions on
        assert projector._cold_states.version(key) != state_version
        projector.tail.drop(key)  # as after an eviction: the tail no longer holds it
        # ... so what it read is refused, and the next read answers from the store, new message and all.
        assert not projector.tail.seed(key, recent, tail_version)
        assert not projector._cold_states.put(("sliding_window", *key), key, state, state_version)
        context = engine.context("c", budget=2000)
        assert context[-1].content == "turn 12: the invoice number is INV-2207"
        assert projector.state("sliding_window", *key).last_index == 12
