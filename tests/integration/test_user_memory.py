"""Memory across a user's conversations: the user on every input path, the user projection, context, search,
audit, time travel and erasure of a user, on the real SQLite log and DuckDB projection."""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memfold.cli.ingest import ingest_file
from memfold.core.errors import UnknownConversationError, UnknownUserError, UserConflictError, ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.erasure_kit import SETTINGS, files_with, markers, plant, run_child  # noqa: E402

MARCH = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
APRIL = datetime(2024, 4, 10, 9, 0, tzinfo=UTC)
MAY = datetime(2024, 5, 20, 9, 0, tzinfo=UTC)
FILLER = ("Sounds good, thanks.", "Happy to help with that.")


def _session(conversation: str, day: datetime, first: str, *, user: str | None = "dana", count: int = 22,
             tenant: str = "default") -> list[dict]:
    """``count`` turns from ``day``: ``first`` said by the user, then filler (enough for hierarchical to summarize)."""
    out = []
    for i in range(count):
        m = {"conversation_id": conversation, "tenant_id": tenant, "role": "user" if i % 2 == 0 else "assistant",
             "content": first if i == 0 else FILLER[i % 2], "occurred_at": day + timedelta(minutes=i)}
        if user is not None:
            m["user_id"] = user
        out.append(m)
    return out


def _engine(data: Path, **extra) -> MemoryEngine:
    return MemoryEngine(Settings.load(None, data_dir=data, **{"policy": "hierarchical", **extra}))


# --------------------------------------------------------------------------- step 1: the user on every input path


def test_user_id_is_accepted_on_every_engine_input_path_and_sealed_in_the_log(tmp_path):
    source = tmp_path / "chat.jsonl"
    secret_user = f"zquser{uuid.uuid4().hex[:10]}"
    source.write_text(json.dumps({"conversation_id": "c3", "role": "user", "content": "from a file",
                                  "user_id": secret_user}) + "\n")
    with _engine(tmp_path / "data") as engine:
        engine.wait_for(engine.append_message("c1", "user", "hello", user_id=secret_user))
        engine.append_many([{"conversation_id": "c2", "role": "user", "content": "hi", "user_id": secret_user}])
        assert ingest_file(engine, source, progress=False).accepted == 1
        engine.wait_for(engine.append_message("c4", "user", "no user here"))
        engine.wait_idle(60)
        assert {c["conversation_id"] for c in engine.user_memory(secret_user)["conversations"]} == {"c1", "c2", "c3"}
        assert engine.user_of("c4") is None
        # The log's copy is sealed with the content: the user id is not readable in the SQLite file.
        engine.sql("CHECKPOINT", write=True)
    log_files = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and p.name.startswith("events.sqlite")]
    assert log_files and files_with(log_files, {"user": secret_user}) == {}


@pytest.mark.parametrize("bad", ["", "   ", "a/b", "x" * 201, 7])
def test_a_bad_user_id_is_a_validation_error_naming_the_field(tmp_path, bad):
    with _engine(tmp_path / "data") as engine:
        with pytest.raises(ValidationError) as failure:
            engine.append_many([{"conversation_id": "c", "role": "user", "content": "hi", "user_id": bad}])
        assert failure.value.field == "user_id"
        assert engine.log.end_positions() == {p: 0 for p in engine.log.end_positions()}


def test_a_conversation_belongs_to_one_user(tmp_path):
    with _engine(tmp_path / "data") as engine:
        engine.append_message("c", "user", "I am Dana", user_id="dana")
        # Not folded yet: the engine knows what it appended.
        with pytest.raises(UserConflictError) as failure:
            engine.append_message("c", "user", "I am Eve", user_id="eve")
        assert (failure.value.owner, failure.value.user_id, failure.value.field) == ("dana", "eve", "user_id")
        engine.wait_idle(60)
        ends = engine.log.end_positions()
        with pytest.raises(UserConflictError):  # folded: the projection knows it
            engine.append_many([{"conversation_id": "c", "role": "user", "content": "x", "user_id": "eve"}])
        with pytest.raises(UserConflictError):  # within one batch, nothing of it is written
            engine.append_many([{"conversation_id": "d", "role": "user", "content": "x", "user_id": "eve"},
                                {"conversation_id": "d", "role": "user", "content": "y", "user_id": "dana"}])
        assert engine.log.end_positions() == ends
        engine.wait_for(engine.append_message("c", "user", "no user named: still Dana's"))
        engine.wait_for(engine.append_message("c", "user", "Dana again", user_id="dana"))
        assert engine.user_of("c") == "dana" and len(engine.history("c")) == 3


# --------------------------------------------------------------------------- step 2: the user projection


def _three_sessions(engine: MemoryEngine) -> None:
    engine.append_many(_session("mon", MARCH, "I live in Berlin and my order number is #4471."))
    engine.wait_idle(60)
    engine.append_many(_session("tue", APRIL, "Big news: I moved to Munich last week."))
    engine.wait_idle(60)


def test_a_later_value_in_another_conversation_supersedes_with_lineage_and_a_rebuild_agrees(tmp_path):
    with _engine(tmp_path / "data") as engine:
        _three_sessions(engine)
        memory = engine.user_memory("dana")
        current = {f["key"]: f for f in memory["facts"]}
        assert current["lives_in"]["value"] == "Munich" and current["lives_in"]["conversation_id"] == "tue"
        assert current["lives_in"]["stated_at"] == APRIL and current["lives_in"]["stated_in"] == 0
        assert current["order_id"]["value"] == "#4471" and current["order_id"]["conversation_id"] == "mon"
        (berlin,) = [s for s in memory["statements"] if s["value"] == "Berlin"]
        assert berlin["conversation_id"] == "mon" and berlin["stated_at"] == MARCH and not berlin["current"]
        assert berlin["superseded_by"] == current["lives_in"]["fact_id"] and berlin["superseded_in"] == "tue"
        assert {n["conversation_id"] for n in memory["summary"]} == {"mon", "tue"}
        before = engine.sql("SELECT * FROM user_facts ORDER BY ALL")
        notes = engine.sql("SELECT * FROM user_notes ORDER BY ALL")
        assert len([r for r in before[1] if r[0] == "hierarchical"]) == 3  # Berlin, Munich, #4471
        engine.rebuild()
        assert engine.sql("SELECT * FROM user_facts ORDER BY ALL") == before
        assert engine.sql("SELECT * FROM user_notes ORDER BY ALL") == notes
        assert engine.verify() == []
        engine.sql("UPDATE user_facts SET value = 'Hamburg' WHERE value = 'Munich'", write=True)
        assert [d.table for d in engine.verify()] == ["user_facts"]  # verify covers the user projection


def test_audit_and_time_travel_of_a_user(tmp_path):
    with _engine(tmp_path / "data") as engine:
        _three_sessions(engine)
        trail = engine.audit_user("dana")
        berlin = next(f for f in trail["facts"] if f["value"] == "Berlin")
        assert (berlin["conversation_id"], berlin["superseded_by_value"], berlin["superseded_in"]) == (
            "mon", "Munich", "tue")
        assert [c["conversation_id"] for c in trail["conversations"]] == ["tue", "mon"]
        then = engine.user_memory("dana", as_of=MARCH + timedelta(days=2))
        assert {f["key"]: f["value"] for f in then["facts"]}["lives_in"] == "Berlin"
        assert [c["conversation_id"] for c in then["conversations"]] == ["mon"]
        assert {f["key"]: f["value"] for f in engine.user_memory("dana", as_of=MAY)["facts"]}["lives_in"] == "Munich"
        with pytest.raises(ValidationError):
            engine.user_memory("dana", as_of=datetime(2024, 3, 5))  # naive: which zone?
        with pytest.raises(UnknownUserError):
            engine.user_memory("nobody")


# --------------------------------------------------------------------------- step 3: context


def test_context_of_a_new_conversation_carries_the_users_memory_and_recall_within_budget(tmp_path):
    with _engine(tmp_path / "data") as engine:
        _three_sessions(engine)
        # Another user and another tenant say things that must never reach Dana's context.
        engine.append_many(_session("eve-1", MARCH, "zqeve I live in Paris, order #9999.", user="eve"))
        engine.append_many(_session("t2-1", MARCH, "zqtenant I live in Rome, order #8888.", tenant="t2"))
        engine.wait_idle(60)
        engine.wait_for(engine.append_message("wed", "user", "Where do I live, and what was my order number?",
                                              user_id="dana"))
        for budget in (300, 2000, 8000):
            context = engine.context("wed", budget=budget)
            assert sum(m.tokens for m in context) <= budget
            assert context[-1].kind == "current"
            text = "\n".join(m.content for m in context)
            assert "zqeve" not in text and "zqtenant" not in text and "Paris" not in text and "Rome" not in text
        context = engine.context("wed", budget=2000)
        kinds = [m.kind for m in context]
        assert kinds == ["memory:user", "user_recalled", "current"], kinds
        memory = context[0].content
        assert "- lives_in: Munich (conversation tue, 2024-04-10)" in memory
        assert "- order_id: #4471 (conversation mon, 2024-03-01)" in memory and "Berlin" not in memory.split(
            "Summary")[0]
        assert "[conversation mon, 2024-03-01] user: I live in Berlin and my order number is #4471." in context[1].content
        assert sum(m.tokens for m in context if m.kind in ("memory:user", "user_recalled")) <= 2000 * 0.25
        # A conversation without a user, and user_share 0, read as before.
        engine.wait_for(engine.append_message("solo", "user", "Where do I live?"))
        assert [m.kind for m in engine.context("solo", budget=2000)] == ["current"]
    with _engine(tmp_path / "data", context={"user_share": 0}) as engine:
        assert [m.kind for m in engine.context("wed", budget=2000)] == ["current"]


def test_a_new_conversation_of_a_user_never_exceeds_its_budget(tmp_path):
    with _engine(tmp_path / "data") as engine:
        long_turn = "I keep my bike, a blue Gazelle with order #7781, in Leeds; " * 20
        for k in range(6):
            engine.append_many(_session(f"s{k}", MARCH + timedelta(days=k), f"Session {k}: {long_turn}"))
        engine.wait_idle(60)
        for budget in (40, 90, 150, 300, 700, 1500, 4000):
            context = engine.context("new", budget=budget, query="where is my bike, order #7781?", user_id="dana")
            assert sum(m.tokens for m in context) <= budget, budget
            assert all(m.kind in ("memory:user", "user_recalled") for m in context)
        # More than the share alone (0.25 of 4,000): a new conversation gives the user part what it does not use.
        assert sum(m.tokens for m in context) > 4000 * 0.25


def test_the_conversations_own_memory_keeps_priority(tmp_path):
    with _engine(tmp_path / "data") as engine:
        _three_sessions(engine)
        engine.append_many(_session("wed", MAY, "My new order is #5150 and my email is dana@example.com."))
        engine.wait_idle(60)
        engine.wait_for(engine.append_message("wed", "user", "What is my order number?", user_id="dana"))
        full = engine.context("wed", budget=4000)
        own = [m for m in full if m.kind.startswith("memory:") and m.kind != "memory:user"]
        assert own and full.index(own[-1]) < [m.kind for m in full].index("memory:user")
        # With a budget that only fits the conversation's own part, the user part gives way.
        fixed = sum(m.tokens for m in own) + full[-1].tokens
        tight = engine.context("wed", budget=fixed)
        assert [m.kind for m in tight if m.kind in ("memory:user", "user_recalled")] == []
        assert [m.kind for m in tight if m.kind.startswith("memory:")] == [m.kind for m in own]


# --------------------------------------------------------------------------- step 4: search and erasure


def test_search_across_a_users_conversations_only(tmp_path):
    with _engine(tmp_path / "data") as engine:
        _three_sessions(engine)
        engine.append_many(_session("eve-1", MARCH, "My order number is #9999.", user="eve"))
        engine.wait_idle(60)
        hits = engine.search_user("dana", "order number")
        assert hits[0]["conversation_id"] == "mon" and "#4471" in hits[0]["content"]
        assert all(h["conversation_id"] in ("mon", "tue") for h in hits)
        with pytest.raises(UnknownUserError):
            engine.search_user("dana", "order", tenant_id="t2")


# One partition: the user summary reads the user's conversations on its request's partition, so u-1 and u-2 meet.
ONE_PARTITION = {**SETTINGS, "partitions": 1}


def test_forget_user_leaves_no_byte_of_the_user_or_their_conversations(tmp_path):
    data = tmp_path / "data"
    user = f"zquser{uuid.uuid4().hex[:10]}"
    m1, m2, k = markers("u1"), markers("u2"), markers("k")
    with MemoryEngine(Settings.load(None, data_dir=data, **ONE_PARTITION)) as engine:
        for conversation, marks, owner in (("u-1", m1, user), ("u-2", m2, user), ("kept", k, "other")):
            engine.append_message(conversation, "user", f"{marks['content']} I live in Leeds.", user_id=owner)
            plant(engine, conversation, marks, turns=6)
        engine.wait_idle(120)
        assert engine.user_memory(user)["facts"], "no user fact to erase: the proof would prove nothing"
        # The user's own summary carries what both conversations said (sealed in the log under the key of
        # the conversation it was asked in): its words must go too.
        mine = engine.user_memory(user)["user_summary"]
        assert mine is not None and set(mine["covers"]) == {"u-1", "u-2"}
        assert m1["content"] in mine["text"] or m2["content"] in mine["text"], mine["text"]
        engine.replay("before")
        engine.sql("CHECKPOINT", write=True)
    needles = {"user": user, **{f"1{f}": v for f, v in m1.items()}, **{f"2{f}": v for f, v in m2.items()}}
    assert files_with([data], needles)  # planted where erasure has to reach
    with MemoryEngine(Settings.load(None, data_dir=data, **ONE_PARTITION)) as engine:
        assert sorted(engine.forget_user(user)) == ["u-1", "u-2"]
        with pytest.raises(UnknownUserError):
            engine.user_memory(user)
        for gone in ("u-1", "u-2"):
            with pytest.raises(UnknownConversationError):
                engine.history(gone)
            assert engine.store.messages("default", gone) == []
        assert engine.sql("SELECT count(*) FROM user_summaries WHERE user_id = ?", [user])[1] == [(0,)]
        assert engine.verify() == []
        engine.replay("after")
        kept = engine.history("kept")
        assert any(k["content"] in r.content for r in kept) and engine.user_memory("other")["conversations"]
    assert files_with([data], needles) == {}




def _planted_user(root: Path) -> tuple[Path, Path, str, dict[str, str]]:
    """A data dir with two conversations of a fresh user and one of another, every field marked, all folded."""
    data, user = root / "data", f"zquser{uuid.uuid4().hex[:10]}"
    m1, m2, k = markers("u1"), markers("u2"), markers("k")
    with MemoryEngine(Settings.load(None, data_dir=data, **SETTINGS)) as engine:
        for conversation, marks, owner in (("u-1", m1, user), ("u-2", m2, user), ("kept", k, "other")):
            engine.append_message(conversation, "user", f"{marks['content']} I live in Leeds.", user_id=owner)
            plant(engine, conversation, marks, turns=4)
        engine.wait_idle(120)
        engine.replay("standing")  # a namespace the killed forget has to reach too
    settings_file = root / "settings.json"
    settings_file.write_text(json.dumps(SETTINGS))
    needles = {"user": user, **{f"1{f}": v for f, v in m1.items()}, **{f"2{f}": v for f, v in m2.items()}}
    assert files_with([data], needles)
    return data, settings_file, user, needles


def _forget_user_child(data: Path, settings_file: Path, user: str, kill_after: float | None = None):
    return run_child("forget-user", data, settings_file, user, kill_after=kill_after)


def test_a_forget_user_killed_at_random_points_is_finished_by_the_next(tmp_path):
    data, settings_file, user, needles = _planted_user(tmp_path / "probe")
    started = time.monotonic()
    done = _forget_user_child(data, settings_file, user)
    window = time.monotonic() - started  # how long one run takes: the window the kills are spread over
    assert done.returncode == 0, done.stderr
    assert files_with([data], needles) == {}
    rng = random.Random(46)
    for trial in range(2):
        data, settings_file, user, needles = _planted_user(tmp_path / f"trial{trial}")
        _forget_user_child(data, settings_file, user, kill_after=rng.uniform(0.05, 0.5 * window))
        cut_short = bool(list((data / "erasures").glob("user-*.json")))
        again = _forget_user_child(data, settings_file, user)
        if cut_short:
            assert again.returncode == 0, again.stderr
        else:  # the killed run had finished: nothing keeps the user's id to say it ever existed
            assert again.returncode == 1 and "UnknownUserError" in again.stderr, again.stderr
        assert files_with([data], needles) == {}, f"trial {trial}"
        assert not list((data / "erasures").glob("*.json")), "an erasure is still recorded as pending"
        with MemoryEngine(Settings.load(None, data_dir=data, **SETTINGS)) as engine:
            assert engine.verify() == []
            for conversation in ("u-1", "u-2"):
                assert engine.audit(conversation)["conversation"]["status"] == "erased"
            assert engine.user_memory("other")["conversations"]

