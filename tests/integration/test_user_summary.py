"""The user's own summary across its conversations: asked on the log, answered by the summarizers (offline and an
OpenAI-compatible server), folded into user_summaries, read by the user part of the context, kept by rebuilds and
replays; a summarizer that fails leaves the notes in its place. Real SQLite log, DuckDB projection and summarizers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fixtures.openai_server import ok, server_error

from memfold.core.events import SummaryFailed, SummaryProduced, SummaryRequested
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.store import DuckDBProjectionStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_user_memory import APRIL, MARCH, _session  # noqa: E402

# One partition: a user summary reads the user's conversations on its request's partition, so both meet.
ONE_POLICY = {"policy": "hierarchical", "policies": ("hierarchical",), "partitions": 1}
TABLE = "SELECT policy, user_id, conversation_id, summary_id, text, covers, covers_summaries, produced_at " \
        "FROM user_summaries ORDER BY produced_at, summary_id"


def _log(engine: MemoryEngine) -> list:
    return [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 100_000)]


def _two_conversations(engine: MemoryEngine) -> None:
    engine.append_many(_session("mon", MARCH, "I live in Berlin and my order number is #4471."))
    engine.wait_idle(60)
    engine.append_many(_session("tue", APRIL, "Big news: I moved to Munich last week."))
    engine.wait_idle(60)


def _memory_message(engine: MemoryEngine, conversation: str) -> str:
    (memory,) = [m for m in engine.context(conversation, budget=4000, user_id="dana") if m.kind == "memory:user"]
    return memory.content


def test_two_conversations_of_a_user_get_a_user_summary_on_the_log_folded_and_read(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **ONE_POLICY)) as engine:
        _two_conversations(engine)
        events = _log(engine)
        asked = [e for e in events if isinstance(e, SummaryRequested) and e.payload.scope == "user"]
        made = [e for e in events if isinstance(e, SummaryProduced) and e.payload.scope == "user"]
        # Asked in the conversation whose summary triggered it: on its key, so on its partition.
        assert asked and {e.conversation_id for e in asked} == {"mon", "tue"}
        assert {e.payload.request_id for e in made} <= {e.payload.request_id for e in asked}
        assert all(e.key == f"default/{e.conversation_id}" for e in asked + made)
        mine = engine.user_memory("dana")["user_summary"]
        newest = max(made, key=lambda e: (e.occurred_at, e.payload.summary_id))
        assert mine["summary_id"] == newest.payload.summary_id and mine["text"] == newest.payload.text
        assert mine["conversation_id"] == "tue" and mine["covers"] == ["mon", "tue"]
        assert list(newest.payload.covers_conversations) == ["mon", "tue"]
        assert "Munich" in mine["text"] and "#4471" in mine["text"]
        # No policy folded it: the conversations' own summaries (the notes) are unchanged by it.
        notes = engine.user_memory("dana")["summary"]
        assert {n["conversation_id"] for n in notes} == {"mon", "tue"}
        assert all(n["summary_id"] != mine["summary_id"] for n in notes)
        # The user part of a new conversation: current facts, then the user's summary (not the notes).
        content = _memory_message(engine, "wed")
        assert "Summary of this user's conversations:" in content and "other conversations:\n- [conversation" \
            not in content
        assert content.index("lives_in: Munich") < content.index("Summary of this user's conversations:")
        first_line = next(line.strip() for line in mine["text"].splitlines() if line.strip())
        assert " ".join(first_line.split()) in content
        before = engine.sql(TABLE)[1]
        assert len(before) == len(made)
        engine.rebuild()
        assert engine.sql(TABLE)[1] == before
        assert engine.verify() == []
        report = engine.replay("same")
    assert report.run.model_calls == 0, "a replay under the same settings reads every summary from the cache"
    replayed = DuckDBProjectionStore(report.path / "projections.duckdb", read_only=True)
    try:
        assert replayed.query(TABLE)[1] == before
    finally:
        replayed.close()


def test_a_user_summary_through_an_openai_compatible_server(tmp_path, openai_server):
    settings = Settings.load(None, data_dir=tmp_path / "d", **ONE_POLICY, summarizer={
        "kind": "openai", "base_url": openai_server.url, "api_key": "test-key", "max_retries": 0})
    with MemoryEngine(settings) as engine:
        _two_conversations(engine)
        mine = engine.user_memory("dana")["user_summary"]
        assert mine is not None and mine["summarizer"] == "openai" and mine["covers"] == ["mon", "tue"]
        prompts = [json.dumps(r.body) for r in openai_server.requests if r.path.endswith("/chat/completions")]
        asked = [p for p in prompts if "Conversation mon (2024-03-01)" in p and "Conversation tue (2024-04-10)" in p]
        assert asked, "the user summary's prompt carries each conversation's summary, named and dated"
        assert mine["text"].startswith("Summary ") or "Key facts" in mine["text"], mine["text"]
        assert mine["text"].splitlines()[-1].strip() in _memory_message(engine, "wed")
        calls = len(openai_server.requests)
        engine.rebuild()  # the log holds the answers: nothing is asked again
        assert engine.user_memory("dana")["user_summary"] == mine
        assert len(openai_server.requests) == calls


def test_a_failing_summarizer_leaves_the_notes_in_the_user_part(tmp_path, openai_server):
    data = tmp_path / "d"
    # The conversations are summarized first (offline), no user summary asked.
    with MemoryEngine(Settings.load(None, data_dir=data, **ONE_POLICY, users={"summary_every": 0})) as engine:
        _two_conversations(engine)
        assert engine.user_memory("dana")["user_summary"] is None
        assert not [e for e in _log(engine) if getattr(e.payload, "scope", "") == "user"]
    # Then a model that answers one call (necessarily a conversation's: no user summary can be asked before
    # one) and fails every call after it: the user summaries that summary asks for fail.
    openai_server.script(ok(), *([server_error(503)] * 60))
    settings = Settings.load(None, data_dir=data, **ONE_POLICY, summarizer={
        "kind": "openai", "base_url": openai_server.url, "api_key": "test-key", "max_retries": 0})
    with MemoryEngine(settings) as engine:
        later = _session("tue", APRIL.replace(hour=12), "Also: my cat is called Zorbu.", count=12)
        engine.append_many(later)
        engine.wait_idle(60)
        events = _log(engine)
        assert [e for e in events if isinstance(e, SummaryProduced) and e.conversation_id == "tue"
                and e.payload.summarizer == "openai" and e.payload.scope == "conversation"]
        failed = [e for e in events if isinstance(e, SummaryFailed) and e.payload.scope == "user"]
        assert failed and failed[0].payload.error_type.startswith("Summarizer")
        assert not [e for e in events if isinstance(e, SummaryProduced) and e.payload.scope == "user"]
        assert engine.user_memory("dana")["user_summary"] is None
        content = _memory_message(engine, "wed")
        assert "lives_in: Munich" in content and "Summary of this user's other conversations:" in content
        assert "[conversation tue, 2024-04-10]" in content and "[conversation mon, 2024-03-01]" in content


def test_forgetting_one_conversation_shreds_every_user_summary_made_from_it(tmp_path):
    """A user summary made in another conversation of the user carries what the forgotten one said: its copy in
    the log (sealed under a key of its own), its projection rows and its summary cache entry all go."""
    import uuid

    from support.erasure_kit import SETTINGS, files_with, markers, plant

    from memfold.core.sealing import is_shredded

    data, user = tmp_path / "data", f"zquser{uuid.uuid4().hex[:10]}"
    gone, kept = markers("u1"), markers("u2")
    with MemoryEngine(Settings.load(None, data_dir=data, **{**SETTINGS, "partitions": 1})) as engine:
        for conversation, marks in (("u-1", gone), ("u-2", kept)):
            engine.append_message(conversation, "user", f"{marks['content']} I live in Leeds.", user_id=user)
            plant(engine, conversation, marks, turns=6)
        engine.wait_idle(120)
        made = [e for e in _log(engine) if isinstance(e, SummaryProduced) and e.payload.scope == "user"]
        from_gone = [e for e in made if "u-1" in e.payload.covers_conversations]
        assert from_gone and any(e.conversation_id == "u-2" for e in from_gone), "no user summary made in u-2 " \
            "from u-1: the proof would prove nothing"
        assert any(gone["content"] in e.payload.text for e in from_gone)
        engine.sql("CHECKPOINT", write=True)
    needles = {f"1{f}": v for f, v in gone.items()}
    assert files_with([data], needles)
    with MemoryEngine(Settings.load(None, data_dir=data, **{**SETTINGS, "partitions": 1})) as engine:
        engine.forget("u-1")
        engine.wait_idle(120)
        events = _log(engine)
        for e in events:  # every event, unsealed with the keys that still exist
            if isinstance(e, SummaryProduced) and "u-1" in (e.payload.covers_conversations or ()):
                assert is_shredded(e) or not e.payload.text, e.event_id
            assert gone["content"] not in e.model_dump_json(), (e.type, e.conversation_id)
        assert engine.sql("SELECT count(*) FROM user_summaries WHERE list_contains(covers, 'u-1')")[1] == [(0,)]
        assert engine.sql("SELECT count(*) FROM llm_cache WHERE list_contains(conversations, 'u-1')")[1] == [(0,)]
        mine = engine.user_memory(user)
        assert [c for c in mine["conversations"] if c["conversation_id"] == "u-1"] == []
        assert any(kept["content"] in r.content for r in engine.history("u-2"))
        assert engine.verify() == []
    assert files_with([data], needles) == {}


def test_a_user_summary_reads_the_users_conversations_on_its_own_partition(tmp_path):
    """What a node answering the request is sure to have folded, whatever else it folds: the same summary embedded,
    on a worker owning some partitions, after a rebalance, in a replay."""
    from memfold.core.events import conversation_key
    from memfold.core.partitioner import partition_for

    parts = 8
    home = partition_for(conversation_key("default", "mon"), parts)
    other = next(c for c in (f"tue-{i}" for i in range(100)) if partition_for(conversation_key("default", c), parts) != home)
    same = next(c for c in (f"wed-{i}" for i in range(100)) if partition_for(conversation_key("default", c), parts) == home)
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **{**ONE_POLICY, "partitions": parts})) as engine:
        engine.append_many(_session("mon", MARCH, "I live in Berlin and my order number is #4471."))
        engine.wait_idle(60)
        engine.append_many(_session(other, APRIL, "Big news: I moved to Munich last week."))
        engine.wait_idle(60)
        engine.append_many(_session(same, APRIL, "My new phone number is 0151 2345678."))
        engine.wait_idle(60)
        made = [e for e in _log(engine) if isinstance(e, SummaryProduced) and e.payload.scope == "user"]
        assert made
        for e in made:
            mine = partition_for(conversation_key("default", e.conversation_id), parts)
            assert {partition_for(conversation_key("default", c), parts) for c in e.payload.covers_conversations} \
                == {mine}, (e.conversation_id, e.payload.covers_conversations)
        assert any(set(e.payload.covers_conversations) == {"mon", same} for e in made)  # both of its partition
        # In force: the newest of each partition, together covering every conversation of the user.
        rows = engine.store.user_summaries("default", "dana", "hierarchical")
        assert {c for r in rows for c in r["covers"]} == {"mon", same, other}
        assert len(rows) == 2 and rows[0]["produced_at"] >= rows[1]["produced_at"]
        summary = _memory_message(engine, "next").split("Summary of this user's conversations:")[1]
        lines = [{" ".join(line.split()) for line in r["text"].splitlines() if line.strip()} for r in rows]
        for mine, theirs in ((lines[0], lines[1]), (lines[1], lines[0])):
            assert any(line in summary for line in mine - theirs), (mine - theirs, summary)  # each partition's own
