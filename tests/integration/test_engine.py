"""MemoryEngine end to end in embedded mode: SQLite log, DuckDB projection, offline summarizer."""

from __future__ import annotations

import pytest

from memfold.core.errors import EmptyContentError, MessageTooLargeError, UnknownRoleError, ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


def _engine(tmp_path, **overrides) -> MemoryEngine:
    overrides = {"policy": "hierarchical", "policies": ("hierarchical",), **overrides}
    return MemoryEngine(Settings.load(None, data_dir=tmp_path / "data", **overrides))


def _talk(engine: MemoryEngine, conversation: str, n: int, tenant: str = "default"):
    positions = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"{role} message {i} about the delivery schedule and invoices"
        if i == 0:
            text = "Hi, my name is Dana Whitfield and my order number is #48213. I was charged $184.50."
        if i == 2:
            text = "We agreed: refund of $184.50 within 14 days provided the item is returned unused."
        positions.append(engine.append_message(conversation, role, text, tenant_id=tenant))
    return positions


def test_read_your_writes_and_history_order(tmp_path):
    with _engine(tmp_path) as engine:
        positions = _talk(engine, "c1", 8)
        engine.wait_for(positions[-1], timeout=30)
        history = engine.history("c1")
        assert [m.index for m in history] == list(range(8))
        assert [m.seq for m in history] == list(range(1, 9))
        assert history[0].content.startswith("Hi, my name is Dana")
        assert all(m.tokens > 4 for m in history)


def test_wait_for_returns_only_once_the_batch_is_in_memory_too(tmp_path):
    """The store says an event is applied before the projector's memory and listeners have it: waiting covers both."""
    import threading
    import time

    with _engine(tmp_path) as engine:
        engine.wait_for(engine.append_message("c1", "user", "warm up"), timeout=30)
        handed_on = threading.Event()

        def slow_listener(changes) -> None:  # as the erasure of text caches, or a compact, can be
            time.sleep(0.5)
            handed_on.set()

        engine.projector.listeners.append(slow_listener)
        position = engine.append_message("c1", "user", "My order number is #48213.")
        engine.wait_for(position, timeout=30)
        assert handed_on.is_set(), "wait_for returned while the batch's listeners were still running"
        assert "#48213" in engine.context("c1")[-1].content


def test_context_below_trigger_is_take_last_within_budget(tmp_path):
    with _engine(tmp_path) as engine:
        positions = _talk(engine, "c1", 9)
        engine.wait_for(positions[-1])
        full = engine.context("c1")
        assert [m.kind for m in full][-1] == "current"
        assert len(full) == 9
        budget = sum(m.tokens for m in full[-3:])
        trimmed = engine.context("c1", budget=budget)
        assert [m.content for m in trimmed] == [m.content for m in full[-3:]]


def test_long_conversation_keeps_early_facts_in_memory(tmp_path):
    with _engine(tmp_path) as engine:
        _talk(engine, "c1", 60)
        engine.wait_idle(timeout=60)
        # The narrative may fill max_narrative_tokens (500) with salient statements; facts come on top.
        context = engine.context("c1", budget=1000)
        memory = [m for m in context if m.kind.startswith("memory")]
        assert memory, "above the trigger the hierarchical policy must put memory in the context"
        text = " ".join(m.content for m in memory)
        assert "#48213" in text and "184.50" in text
        assert sum(m.tokens for m in context) <= 1000 or len(context) == len(memory) + 1
        chain = engine.summaries("c1", policy="hierarchical")
        assert chain and all(r["status"] in ("completed", "superseded") for r in chain)
        assert chain[-1]["status"] == "completed"


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"conversation_id": "c", "role": "robot", "content": "hi"}, UnknownRoleError),
        ({"conversation_id": "c", "role": "user", "content": "   "}, EmptyContentError),
        ({"conversation_id": "c", "role": "user", "content": "x" * 2001}, MessageTooLargeError),
        ({"conversation_id": "", "role": "user", "content": "hi"}, ValidationError),
        ({"conversation_id": "c", "role": "tool", "content": "42"}, ValidationError),
    ],
)
def test_invalid_messages_are_rejected_and_nothing_is_written(tmp_path, message, error):
    with _engine(tmp_path, max_message_chars=2000) as engine:
        engine.append_message("c", "user", "first")
        before = engine.log.end_positions()
        with pytest.raises(error) as info:
            engine.append_many([{"conversation_id": "c", "role": "user", "content": "fine"}, message])
        assert info.value.line == 2
        assert engine.log.end_positions() == before


def test_token_limit_is_enforced(tmp_path):
    with _engine(tmp_path, max_message_tokens=50) as engine:
        with pytest.raises(MessageTooLargeError) as info:
            engine.append_message("c", "user", "word " * 200)
        assert info.value.unit == "tokens" and info.value.limit == 50


def test_reopen_serves_the_same_context(tmp_path):
    with _engine(tmp_path) as engine:
        _talk(engine, "c1", 40)
        engine.wait_idle()
        before = [m.as_dict() for m in engine.context("c1", budget=800)]
    with _engine(tmp_path) as engine:
        after = [m.as_dict() for m in engine.context("c1", budget=800)]
    assert after == before


def test_tenants_are_separate_conversations(tmp_path):
    with _engine(tmp_path) as engine:
        _talk(engine, "same-id", 3, tenant="a")
        last = _talk(engine, "same-id", 5, tenant="b")[-1]
        engine.wait_for(last)
        assert len(engine.history("same-id", tenant_id="a")) == 3
        assert len(engine.history("same-id", tenant_id="b")) == 5


def test_token_counts_are_recorded_at_append_and_read_back_by_every_fold(tmp_path):
    """Counted once, at validation: the log's event carries the count; the fold (live and rebuilt) reads it."""
    from memfold.core.events import MessagePayload

    with _engine(tmp_path) as engine:
        said = engine.validate({"conversation_id": "c1", "role": "user", "content": "my order number is #48213"})
        assert said.payload.tokens == {"cl100k_base": engine.counter.count("my order number is #48213")}
        # Recorded counts are taken as they are (a deliberately odd one shows it is read, not recounted);
        # a count under another encoding is not this engine's: it counts.
        odd = said.model_copy(update={"event_id": "odd", "payload": MessagePayload(
            role="user", content="recorded as 1000 tokens", tokens={"cl100k_base": 1000})})
        other = said.model_copy(update={"event_id": "other", "payload": MessagePayload(
            role="user", content="recorded under another encoding", tokens={"o200k_base": 1000})})
        positions = engine.append_events([said, odd, other])
        engine.wait_for(positions[-1], timeout=30)
        stored = [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 100)]
        assert {e.event_id: e.payload.tokens for e in stored} == {
            said.event_id: said.payload.tokens, "odd": {"cl100k_base": 1000}, "other": {"o200k_base": 1000}}
        expected = [said.payload.tokens["cl100k_base"] + 4, 1004,
                    engine.counter.count("recorded under another encoding") + 4]
        assert [m.tokens for m in engine.history("c1")] == expected
        engine.rebuild(timeout=60)
        assert [m.tokens for m in engine.history("c1")] == expected


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_script_that_never_closes_its_engine_exits_cleanly_and_keeps_what_it_appended(tmp_path, ending):
    """Open engines close at exit: before, a daemon thread inside DuckDB aborted the process (status 134)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        from memfold.engine.engine import MemoryEngine
        from memfold.core.settings import Settings
        engine = MemoryEngine(Settings.load(None, data_dir={str(tmp_path / "data")!r}))
        engine.append_many([{{"conversation_id": "c1", "role": "user", "content": f"order #{{i}} ships Friday"}}
                            for i in range(40)])
        engine.context("c1", budget=500)
        if {ending == "raises"}:
            raise RuntimeError("the script failed")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == (1 if ending == "raises" else 0), done.stderr
    assert "FATAL" not in done.stderr and "terminate called" not in done.stderr
    assert ("RuntimeError: the script failed" in done.stderr) == (ending == "raises")
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data")) as engine:
        engine.wait_idle(timeout=60)
        assert [m.content for m in engine.history("c1")] == [f"order #{i} ships Friday" for i in range(40)]


def test_wait_idle_never_returns_with_a_request_read_but_not_yet_handed_to_the_summarizer(tmp_path):
    """A crash trial caught it: wait_idle trusted one caught-up reading, and its own step read new requests.

    A runner step that reads a short batch holding requests commits them but
    hands them to the worker only after a later read comes back empty. Here
    the first "caught up" answer is stale (as an end-of-log read racing the
    runner's outbox append could be), so wait_idle's own step is the one that
    reads the request: wait_idle must not return until it is answered.
    """
    settings = Settings.load(None, data_dir=tmp_path / "data", policy="hierarchical", policies=("hierarchical",))
    with MemoryEngine(settings, start=False) as engine:
        engine.worker.start()
        _talk(engine, "c1", 30)
        engine.runner.run_once()  # folds the messages; the requests they decide are appended after them, unread
        assert engine.runner.lag() > 0, "30 messages should have decided a summary request"
        real, calls = engine.runner.caught_up, []

        def first_answer_stale() -> bool:
            calls.append(1)
            if len(calls) == 1:
                return True
            if len(calls) == 2:
                engine.runner.start()  # the background loop folds the outcomes from here on
            return real()

        engine.runner.caught_up = first_answer_stale
        engine.wait_idle(timeout=60)
        chain = engine.summaries("c1", policy="hierarchical")
        assert chain and all(r["status"] != "processing" for r in chain), chain
        assert engine.runner.handed_over()


def test_a_serving_processs_hooks_hold_for_every_projector_its_engine_builds(tmp_path):
    from memfold.projections.projector import PAUSE_EVERY, ServingHooks

    paused: list[int] = []
    hooks = ServingHooks(relate_users=True, pause=lambda: paused.append(1))
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d"), hooks=hooks) as engine:
        for i in range(PAUSE_EVERY):
            engine.append_message("c1", "user", f"note {i}", user_id="u1")
        engine.append_message("c2", "user", "other", user_id="u1")
        engine.wait_idle()
        assert paused  # the fold let reads go first every PAUSE_EVERY events
        first = engine.projector
        with engine.switching, engine.runner.paused():
            engine.switch_settings(engine.settings)  # what a promote, adopt or rebuild ends with
        assert engine.projector is not first
        assert engine.projector.relate_users and engine.projector.pause is hooks.pause


def test_a_client_takes_the_owners_it_is_given_and_switches_settings_without_a_projection(tmp_path):
    from memfold.core.errors import UserConflictError

    settings = Settings.load(None, data_dir=tmp_path / "d")
    with MemoryEngine(settings, role="client", owners=lambda tenant, conversation: "ana") as client:
        with pytest.raises(UserConflictError, match="belongs to user 'ana'"):
            client.append_message("c1", "user", "hello", user_id="bob")
        client.switch_settings(settings.model_copy(update={"max_message_tokens": 5}))
        assert client.settings.max_message_tokens == 5 and client.store is None
