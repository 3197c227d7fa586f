"""Replays: rebuilding a projection from the log is deterministic and calls no model; the cache answers repeats."""

from __future__ import annotations

import shutil
from pathlib import Path

from memfold.core.events import MessageAppended
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine

SAMPLE = Path(__file__).resolve().parents[2] / "cli" / "data" / "sample.jsonl"


def _ingest_sample(engine: MemoryEngine) -> None:
    from memfold.cli.ingest import ingest_file

    report = ingest_file(engine, SAMPLE, progress=False)
    assert report.accepted > 600 and not report.rejected
    engine.wait_idle(timeout=300)


def test_rebuild_from_the_log_is_identical_and_calls_no_model(tmp_path):
    settings = Settings.load(None, data_dir=tmp_path / "d", policies=POLICY_NAMES)
    with MemoryEngine(settings) as engine:
        _ingest_sample(engine)
        before = engine.store.dump()
        produced = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed'")[1][0][0]
        assert produced > 10
        calls = engine.worker.calls
        engine.rebuild()
        assert engine.worker.calls == calls, "a replay of unchanged history must not call the summarizer"
        assert engine.store.dump() == before
    # A fresh process folds the same log into the same projection too.
    with MemoryEngine(settings) as engine:
        engine.rebuild()
        assert engine.worker.calls == 0
        assert engine.store.dump() == before


def test_changed_settings_rebuild_on_open_and_keep_the_other_policies_identical(tmp_path):
    base = Settings.load(None, data_dir=tmp_path / "d", policy="hierarchical", policies=("hierarchical", "rolling"))
    with MemoryEngine(base) as engine:
        _ingest_sample(engine)
        hier = engine.sql("SELECT * FROM summaries WHERE policy = 'hierarchical' ORDER BY request_id")[1]
    changed = base.model_copy(update={"rolling": base.rolling.model_copy(update={"recent_messages_to_keep": 6})})
    with MemoryEngine(changed) as engine:
        engine.wait_idle(timeout=300)
        assert engine.sql("SELECT * FROM summaries WHERE policy = 'hierarchical' ORDER BY request_id")[1] == hier
        hashes = {r[0] for r in engine.sql("SELECT DISTINCT settings_hash FROM summaries WHERE policy = 'rolling'")[1]}
        assert changed.settings_hash("rolling") in hashes  # new requests under the new settings
        ctx = engine.context("support-4711", tenant_id="acme", policy="rolling", budget=4000)
        summary = [m for m in ctx if m.kind.startswith("memory")]
        assert summary, "the rolling projection under new settings must have a summary in force"


def test_cache_answers_a_replay_of_the_same_messages_without_model_calls(tmp_path, openai_server):
    def settings(d: Path) -> Settings:
        return Settings.load(
            None, data_dir=d, policy="hierarchical", policies=("hierarchical",),
            summarizer={"kind": "openai", "base_url": openai_server.url, "api_key": "test-key", "max_retries": 0},
        )

    first = tmp_path / "first"
    with MemoryEngine(settings(first)) as engine:
        _ingest_sample(engine)
        messages = [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 100_000)
                    if isinstance(r.event, MessageAppended)]
        produced = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed' AND NOT cached")[1][0][0]
    calls = len(openai_server.requests)
    assert produced > 0 and calls >= produced
    # Same messages (same ids and timestamps) in a new log; the old projection file brings its llm_cache along.
    assert not (first / "projections.duckdb.wal").exists(), "a closed store is checkpointed: the file alone holds the cache"
    second = tmp_path / "second"
    second.mkdir()
    shutil.copy(first / "projections.duckdb", second / "projections.duckdb")
    with MemoryEngine(settings(second)) as engine:
        engine.rebuild()
        engine.append_events(sorted(messages, key=lambda e: (e.occurred_at, e.event_id)))
        engine.wait_idle(timeout=300)
        cached = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed' AND cached")[1][0][0]
        fresh = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed' AND NOT cached")[1][0][0]
    assert len(openai_server.requests) == calls, "every summary of the replay must come from the cache"
    assert cached > 0 and fresh == 0
