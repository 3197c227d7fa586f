"""The content-addressed summary cache: a real DuckDB file, the real openai client, the loopback server."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import duckdb
import msgspec
import pytest
from fixtures.openai_server import server_error

from memfold.core.errors import SummarizerError
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.core.settings import Settings, SummarizerSettings
from memfold.projections.offline_summarizer import OfflineSummarizer
from memfold.projections.openai_summarizer import OpenAISummarizer
from memfold.projections.summarizers import build_summarizer
from memfold.projections.summary_cache import CachingSummarizer

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def conversation(*items: tuple[str, str], tenant: str = "t") -> tuple[MessageRecord, ...]:
    return tuple(
        MessageRecord(tenant_id=tenant, conversation_id="c", index=i, seq=i + 1, event_id=f"e{i}", role=role,
                      content=content, tokens=0, occurred_at=T0)
        for i, (role, content) in enumerate(items)
    )


CHAT = conversation(("user", "Cancel order #1234 please"), ("assistant", "Done, refund of $50 issued."))
REQUEST = SummaryInput(policy="hierarchical", kind="facts", messages=CHAT, token_cap=200)


def openai_summarizer(server) -> OpenAISummarizer:
    settings = SummarizerSettings(kind="openai", model="gpt-test", base_url=server.url, api_key="k", max_retries=0)
    return OpenAISummarizer(settings)


@pytest.fixture
def db(tmp_path):
    conn = duckdb.connect(str(tmp_path / "projections.duckdb"))
    yield conn
    conn.close()


def test_second_identical_call_is_a_hit_without_any_request(openai_server, db):
    cache = CachingSummarizer(openai_summarizer(openai_server), db)
    first = cache.summarize(REQUEST)
    assert len(openai_server.requests) == 1 and first.cached is False
    second = cache.summarize(REQUEST)
    assert len(openai_server.requests) == 1  # zero new requests
    assert second.cached is True
    assert msgspec.structs.replace(second, cached=False) == first
    assert cache.stats() == {"hits": 1, "misses": 1, "errors": 0}
    assert cache.name == "openai"


def test_any_change_to_the_input_misses(openai_server, db):
    cache = CachingSummarizer(openai_summarizer(openai_server), db)
    cache.summarize(REQUEST)
    variants = [
        msgspec.structs.replace(REQUEST, messages=CHAT + (msgspec.structs.replace(CHAT[0], index=2, content="One more thing"),)),
        msgspec.structs.replace(REQUEST, messages=(msgspec.structs.replace(CHAT[0], content="Cancel order #1235 please"), CHAT[1])),
        msgspec.structs.replace(REQUEST, token_cap=201),
        msgspec.structs.replace(REQUEST, messages=conversation(("user", "Cancel order #1234 please"),
                                                           ("assistant", "Done, refund of $50 issued."), tenant="other")),
    ]
    for i, variant in enumerate(variants, start=2):
        assert cache.summarize(variant).cached is False
        assert len(openai_server.requests) == i
    assert cache.stats()["misses"] == 1 + len(variants) and cache.stats()["hits"] == 0


def test_model_and_hosted_prompt_version_are_part_of_the_key(openai_server, db):
    chunked = SummaryInput(policy="chunked", kind="text", prompt_format="chunked", messages=CHAT,
                           prompt_id="pmpt_x", prompt_version="1")
    cache = CachingSummarizer(openai_summarizer(openai_server), db)
    cache.summarize(chunked)
    cache.summarize(msgspec.structs.replace(chunked, prompt_version="2"))
    assert [r.body["prompt"]["version"] for r in openai_server.requests] == ["1", "2"]
    other_model = CachingSummarizer(
        OpenAISummarizer(SummarizerSettings(kind="openai", model="gpt-other", base_url=openai_server.url, api_key="k")), db
    )
    other_model.summarize(REQUEST)
    CachingSummarizer(openai_summarizer(openai_server), db).summarize(REQUEST)
    assert len(openai_server.requests) == 4
    assert cache.key(REQUEST) != other_model.key(REQUEST)


def test_failures_are_not_cached(openai_server, db):
    cache = CachingSummarizer(openai_summarizer(openai_server), db)
    openai_server.script(server_error(500))
    with pytest.raises(SummarizerError):
        cache.summarize(REQUEST)
    assert db.execute("SELECT count(*) FROM llm_cache").fetchone() == (0,)
    out = cache.summarize(REQUEST)
    assert out.cached is False and len(openai_server.requests) == 2
    assert db.execute("SELECT count(*) FROM llm_cache").fetchone() == (1,)


def test_the_cache_survives_reopening_the_file(openai_server, tmp_path):
    path = str(tmp_path / "p.duckdb")
    conn = duckdb.connect(path)
    first = CachingSummarizer(openai_summarizer(openai_server), conn).summarize(REQUEST)
    conn.close()
    conn = duckdb.connect(path)
    try:
        again = CachingSummarizer(openai_summarizer(openai_server), conn).summarize(REQUEST)
        assert again.cached is True and len(openai_server.requests) == 1
        assert again.facts == first.facts and again.text == first.text
        summarizer, model, phash, output = conn.execute(
            "SELECT summarizer, model, prompt_hash, output FROM llm_cache"
        ).fetchone()
        assert (summarizer, model, phash) == ("openai", "gpt-test", first.prompt_hash)
        assert json.loads(output)["facts"][0] == {"key": "order_id", "value": "#1234", "category": "ENTITY"}
    finally:
        conn.close()


def test_offline_summarizer_through_the_factory_cache(tmp_path):
    conn = duckdb.connect(str(tmp_path / "p.duckdb"))
    try:
        summarizer = build_summarizer(Settings(), cache_conn=conn)
        assert isinstance(summarizer, CachingSummarizer) and summarizer.inner.made is None  # made on first use
        a, b = summarizer.summarize(REQUEST), summarizer.summarize(REQUEST)
        assert isinstance(summarizer.inner.made, OfflineSummarizer)
        assert (a.cached, b.cached) == (False, True) and a.facts == b.facts and a.text == b.text
        assert summarizer.stats()["hits"] == 1
    finally:
        conn.close()


def test_a_broken_cache_costs_calls_not_summaries(openai_server, tmp_path):
    conn = duckdb.connect(str(tmp_path / "p.duckdb"))
    cache = CachingSummarizer(openai_summarizer(openai_server), conn)
    conn.execute("DROP TABLE llm_cache")  # the store was reset under us
    out = cache.summarize(REQUEST)
    assert out.facts and out.cached is False
    assert cache.stats()["errors"] == 2  # the read and the write failed; the summary did not
    conn.close()
