"""The engine with the OpenAI summarizer, end to end over HTTP to a loopback OpenAI-compatible server."""

from __future__ import annotations

from fixtures.openai_server import model_says, server_error

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


def _settings(tmp_path, url: str, **summarizer) -> Settings:
    return Settings.load(
        None, data_dir=tmp_path / "d", policy="hierarchical", policies=("hierarchical", "rolling"),
        hierarchical={"trigger_message_count": 8, "recent_message_count": 4, "resummarize_every": 4},
        rolling={"message_threshold": 8, "recent_messages_to_keep": 4, "regeneration_threshold": 4},
        summarizer={"kind": "openai", "base_url": url, "api_key": "test-key", "max_retries": 1,
                    "backoff_base_s": 0.01, "timeout_s": 5, **summarizer},
    )


def _conversation(engine: MemoryEngine, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: checking the delivery window"
        if i == 0:
            text = "My order is #48213 and I paid $184.50 for it."
        engine.append_message("c1", role, text)
        engine.wait_idle(timeout=60)


def test_summaries_come_from_the_openai_client_over_http(tmp_path, openai_server):
    with MemoryEngine(_settings(tmp_path, openai_server.url)) as engine:
        _conversation(engine, 14)
        rows = engine.sql(
            "SELECT policy, summarizer, status, tokens_in > 0, tokens_out > 0 FROM summaries "
            "WHERE status = 'completed' ORDER BY policy"
        )[1]
        assert {r[0] for r in rows} == {"hierarchical", "rolling"}
        assert all(r[1] == "openai" and r[3] and r[4] for r in rows)
        paths = openai_server.paths()
        assert paths and all(p == "/v1/chat/completions" for p in paths)
        ctx = engine.context("c1", policy="hierarchical")
        facts = next(m for m in ctx if m.kind == "memory:facts").content
        assert "#48213" in facts and "184.50" in facts


def test_broken_json_and_server_errors_become_summary_failed_and_nothing_is_lost(tmp_path, openai_server):
    with MemoryEngine(_settings(tmp_path, openai_server.url)) as engine:
        _conversation(engine, 9)  # first hierarchical + rolling summaries succeed
        good = engine.context("c1", policy="hierarchical")
        openai_server.script(*[model_says("{not json")] * 2, *[server_error(500)] * 6)
        _conversation(engine, 6, start=9)
        failed = engine.sql("SELECT policy, error_type, reason FROM summaries WHERE status = 'failed'")[1]
        assert failed, "broken output must be recorded as SummaryFailed"
        assert {r[1] for r in failed} <= {"SummarizerOutputError", "SummarizerError"}
        assert all(r[2] for r in failed)
        # The previous summary stays in force and every message it does not cover is verbatim.
        after = engine.context("c1", policy="hierarchical")
        assert next(m for m in after if m.kind == "memory:facts").content == next(
            m for m in good if m.kind == "memory:facts"
        ).content
        verbatim = [m.index for m in after if m.kind in ("verbatim", "current")]
        assert verbatim[-1] == 14 and verbatim == list(range(verbatim[0], 15))
        assert len(engine.history("c1")) == 15


def test_a_policy_model_set_in_settings_is_the_model_the_client_asks_for(tmp_path, openai_server):
    settings = _settings(tmp_path, openai_server.url, model="default-model")
    settings = settings.model_copy(update={"hierarchical": settings.hierarchical.model_copy(update={"llm_model": "policy-model"})})
    # model_copy(update=...) marks the field as set, as memfold.toml or MEMFOLD_HIERARCHICAL__LLM_MODEL would.
    with MemoryEngine(settings) as engine:
        _conversation(engine, 10)
    models = {r.body.get("model") for r in openai_server.requests if r.path == "/v1/chat/completions"}
    assert models == {"policy-model", "default-model"}  # hierarchical asks for its own; rolling for the default


def test_the_default_policys_key_facts_reach_the_facts_table_from_a_models_text(tmp_path, openai_server):
    """sliding_window with the OpenAI summarizer: the model lists key facts in its text; they become dated facts rows."""
    settings = Settings.load(
        None, data_dir=tmp_path / "d", policy="sliding_window", policies=("sliding_window",),
        sliding_window={"rolling_window_size": 6, "summarize_after_seq": 3},
        summarizer={"kind": "openai", "base_url": openai_server.url, "api_key": "test-key", "max_retries": 1,
                    "backoff_base_s": 0.01, "timeout_s": 5},
    )
    with MemoryEngine(settings) as engine:
        _conversation(engine, 20)  # message 0 (order and amount) leaves the window long before the end
        rows = engine.sql(
            "SELECT key, value, stated_in, retired_by IS NULL FROM facts WHERE policy = 'sliding_window' ORDER BY key"
        )[1]
        assert ("order_id", "#48213", 0, True) in rows and ("amount", "$184.50", 0, True) in rows
        versions = engine.sql(
            "SELECT count(*) FROM summaries WHERE policy = 'sliding_window' AND status = 'completed'")[1][0][0]
        assert versions >= 3  # carried from version to version
        memory = next(m for m in engine.context("c1") if m.kind == "memory:summary").content
        assert "- order_id: #48213 (msg 0)" in memory


def test_rolling_and_topics_show_the_key_facts_a_model_lists_and_keep_them_as_facts_rows(tmp_path, openai_server):
    """Their prompt asks for "Key facts:" lines; the context shows them as one key_facts message, the table as rows."""
    settings = _settings(tmp_path, openai_server.url).model_copy(update={"policies": ("rolling", "topics")})
    with MemoryEngine(settings) as engine:
        _conversation(engine, 16)  # rolling summarizes; topics compacts the one topic past 12 messages
        for policy in ("rolling", "topics"):
            memory = {m.kind: m.content for m in engine.context("c1", policy=policy) if m.kind.startswith("memory:")}
            assert "- order_id: #48213" in memory["memory:key_facts"], policy
            assert "- amount: $184.50" in memory["memory:key_facts"], policy
            assert all("Key facts:" not in text for kind, text in memory.items() if kind != "memory:key_facts")
            rows = engine.sql("SELECT key, value, stated_in, retired_by IS NULL FROM facts WHERE policy = ? ORDER BY key",
                              [policy])[1]
            assert ("order_id", "#48213", 0, True) in rows, (policy, rows)


def test_a_fact_a_topics_newer_summary_drops_is_retired_in_the_facts_table_as_in_the_context(tmp_path, openai_server):
    settings = _settings(tmp_path, openai_server.url).model_copy(update={"policies": ("topics",), "policy": "topics"})
    order = "Key facts:\n- order_id: #48213 (msg 0)\n\nThe user paid for order #48213."  # message 0 is a topic of its own
    first = "Key facts:\n- phone: 555-0101 (msg 2)\n- window: 9-11 (msg 3)\n\nThe delivery window was checked."
    second = "Key facts:\n- window: 9-11 (msg 3)\n\nThe delivery window was checked again."
    openai_server.script(model_says(order), model_says(first), model_says(second))
    with MemoryEngine(settings) as engine:
        _conversation(engine, 16)  # the delivery topic is compacted past 12 messages: its first summary
        _conversation(engine, 8, start=16)  # and again: its second, without the phone
        rows = engine.summaries("c1", policy="topics")
        assert [(r["covers_from"], r["covers_to"]) for r in rows] == [(0, 1), (2, 10), (11, 19)]
        ids = [r["summary_id"] for r in rows]
        facts = engine.sql("SELECT key, value, introduced_by, retired_by FROM facts WHERE policy = 'topics' ORDER BY key")[1]
        assert facts == [("order_id", "#48213", ids[0], None), ("phone", "555-0101", ids[1], ids[2]),
                         ("window", "9-11", ids[1], None)]  # the other topic's fact stays live
        memory = next(m.content for m in engine.context("c1") if m.kind == "memory:key_facts")
        assert "- order_id: #48213" in memory and "- window: 9-11" in memory
        assert "555-0101" not in memory  # the table and the context agree
        assert engine.verify() == []  # a replay retires the same rows (the holdings come from the log's order)
        openai_server.script(model_says("The delivery window was checked a third time."))  # no facts at all
        _conversation(engine, 10, start=24)
        assert len(engine.summaries("c1", policy="topics")) == 4
        facts = engine.sql("SELECT key, retired_by FROM facts WHERE policy = 'topics' ORDER BY key")[1]
        third = engine.summaries("c1", policy="topics")[-1]["summary_id"]
        assert facts == [("order_id", None), ("phone", ids[2]), ("window", third)]
