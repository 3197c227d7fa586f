"""The topics policy's context carries what was said in every topic, through the engine and the offline summarizer."""

from __future__ import annotations

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

# Four unrelated topics (the local hash embedder keeps them apart), then a fifth question.
TALK = [
    ("My sister Priya is getting married in Lisbon on June 14th, and I need a gift under $300.",
     "A handmade ceramic set from Vista Alegre fits under $300."),
    ("I adopted a beagle puppy named Biscuit last Saturday; what food should he eat?",
     "Puppy kibble with DHA, three meals a day, suits a beagle like Biscuit."),
    ("Our team migrates the billing service to Postgres 16 before the April 2nd deadline.",
     "Plan a dual-write phase and a cutover window for the Postgres 16 migration."),
    ("I am training for the Berlin marathon in September, running 45 km a week now.",
     "Raise the weekly distance by 10% and add one long run for Berlin."),
]
SAID = [("Priya", "Lisbon", "June 14th", "$300"), ("Biscuit", "beagle"), ("Postgres 16", "April 2nd"),
        ("Berlin", "45 km")]


def ingested(tmp_path, talk) -> MemoryEngine:
    """An engine (topics) holding ``talk`` as user/assistant turns, then a fifth question, summarized."""
    settings = Settings.load(None, data_dir=tmp_path / "data", policies=("topics",), policy="topics")
    messages = []
    for user, assistant in talk:
        messages += [{"conversation_id": "c1", "role": "user", "content": user},
                     {"conversation_id": "c1", "role": "assistant", "content": assistant}]
    messages.append({"conversation_id": "c1", "role": "user", "content": "What should I pack for a weekend in Oslo?"})
    engine = MemoryEngine(settings)
    engine.append_many(messages)
    engine.wait_idle(timeout=60)
    return engine


def test_every_topic_is_in_the_context_within_budget(tmp_path):
    with ingested(tmp_path, TALK) as engine:
        assert len(engine.plan("c1").notes["earlier_topics"]) == 4
        for budget in (800, 2000):
            context = engine.context("c1", budget=budget)
            assert sum(m.tokens for m in context) <= budget
            memory = [m for m in context if m.kind.startswith("memory:")]
            assert [m.kind for m in memory] == ["memory:key_facts", "memory:topics"] and context[-1].kind == "current"
            text = "\n".join(m.content for m in memory)  # the memory alone, whatever recall adds after it
            missing = [w for words in SAID for w in words if w not in text]
            assert not missing, f"the context lost {missing}"


def test_each_topics_facts_are_rows_of_the_facts_table_and_a_later_topic_retires_only_what_it_replaces(tmp_path):
    talk = TALK[:2] + [("Update: my sister Priya is getting married in Lisbon on June 21st instead.",
                        "Noted: Lisbon on June 21st.")] + TALK[2:]
    with ingested(tmp_path, talk) as engine:
        _, rows = engine.sql("SELECT key, value, retired_by IS NULL AS live, superseded_by IS NOT NULL AS replaced, "
                             "stated_in FROM facts WHERE policy = 'topics' ORDER BY stated_in, key")
        live = {key: value for key, value, is_live, _, _ in rows if is_live}
        assert live["sister_name"] == "Priya" and live["deadline"] == "April 2nd"  # two topics' facts, both live
        assert ("priya_date", "June 14th", False, True, 0) in rows  # replaced by the later topic's date
        assert live["priya_date"] == "June 21st"
        memory = next(m.content for m in engine.context("c1", budget=2000) if m.kind == "memory:key_facts")
        assert "- priya_date: June 21st" in memory and "June 14th" not in memory  # one topic: its lineage is the table's
        assert all(f"- {key}: {value}" in memory for key, value in live.items())  # the table and the context agree


def test_an_evicted_topics_facts_rows_are_retired_by_its_eviction_as_the_context_drops_them(tmp_path):
    from datetime import UTC, datetime, timedelta

    settings = Settings.load(None, data_dir=tmp_path / "data", policies=("topics",), policy="topics",
                             topics={"max_topics": 2})
    start = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    messages = []
    for day, (user, assistant) in enumerate(TALK[:3]):  # ten days apart: the oldest topic decays first
        at = start + timedelta(days=10 * day)
        messages += [{"conversation_id": "c1", "role": "user", "content": user, "occurred_at": at},
                     {"conversation_id": "c1", "role": "assistant", "content": assistant,
                      "occurred_at": at + timedelta(minutes=1)}]
    with MemoryEngine(settings) as engine:
        for i in range(0, len(messages), 2):  # a live chat: each topic's summary comes before its eviction
            engine.append_many(messages[i:i + 2])
            engine.wait_idle(timeout=60)
        _, evicted = engine.sql("SELECT event_id, payload->>'topic_id' FROM events WHERE type = 'TopicEvicted'")
        assert evicted  # the oldest topics decayed
        _, rows = engine.sql("SELECT key, value, retired_by FROM facts WHERE policy = 'topics' ORDER BY stated_in, key")
        gone = {key: value for key, value, retired_by in rows if retired_by in {e for e, _ in evicted}}
        assert gone.get("sister_name") == "Priya"  # the first topic's facts went with it
        live = {key: value for key, value, retired_by in rows if retired_by is None}
        memory = "\n".join(m.content for m in engine.context("c1", budget=2000) if m.kind == "memory:key_facts")
        assert "Priya" not in memory and all(f"- {key}: {value}" in memory for key, value in live.items())
        assert engine.verify() == []


def test_an_answer_for_a_topic_evicted_meanwhile_gives_no_facts_rows(tmp_path):
    """An import: the oldest topics decay before their summaries come back; no memory ever holds those facts."""
    from datetime import UTC, datetime, timedelta

    settings = Settings.load(None, data_dir=tmp_path / "data", policies=("topics",), policy="topics",
                             topics={"max_topics": 2})
    start = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    messages = [{"conversation_id": "c1", "role": role, "content": text, "occurred_at": start + timedelta(days=10 * day)}
                for day, pair in enumerate(TALK[:3]) for role, text in zip(("user", "assistant"), pair)]
    with MemoryEngine(settings) as engine:
        engine.append_many(messages)
        engine.wait_idle(timeout=60)
        _, order = engine.sql("SELECT type FROM events WHERE type IN ('TopicEvicted', 'SummaryProduced') ORDER BY seq")
        assert [t for (t,) in order][:2] == ["TopicEvicted", "TopicEvicted"] and ("SummaryProduced",) in order
        assert engine.sql("SELECT count(*) FROM facts")[1] == [(0,)]
        assert all(m.kind != "memory:key_facts" for m in engine.context("c1", budget=2000))


def test_a_fact_taken_back_in_another_topic_is_retired_by_that_message_and_a_rebuild_agrees(tmp_path):
    talk = [("I adopted a beagle puppy named Biscuit; the vet can call me on +1 415-555-0153.",
             "Puppy kibble with DHA suits Biscuit; the vet has +1 415-555-0153.")] + TALK[2:]
    with ingested(tmp_path, talk) as engine:
        query = ("SELECT key, value, retired_by FROM facts WHERE policy = 'topics' AND value LIKE '%415-555-0153%' "
                 "ORDER BY key, value")
        _, before = engine.sql(query)
        assert before and all(retired is None for *_, retired in before)  # the puppy topic's phone: live
        engine.append_many([
            {"conversation_id": "c1", "role": "user", "content": "Please forget my phone number, the vet has email."},
            {"conversation_id": "c1", "role": "assistant", "content": "Done, no more calls."},
        ])
        engine.wait_idle(timeout=60)
        taking_back = engine.history("c1")[-2]
        _, after = engine.sql(query)
        assert [(key, retired) for key, _, retired in after] == [(key, taking_back.event_id) for key, _, _ in before]
        memory = next(m.content for m in engine.context("c1", budget=2000) if m.kind == "memory:key_facts")
        assert "415-555-0153" not in memory  # the table and the context agree
        _, rows = engine.sql("SELECT * FROM facts ORDER BY fact_id")
        engine.rebuild()
        assert engine.sql("SELECT * FROM facts ORDER BY fact_id")[1] == rows
