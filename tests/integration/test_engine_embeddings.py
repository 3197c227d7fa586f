"""Remote embeddings for the topics policy are computed at append time, recorded on the event, never refetched."""

from __future__ import annotations

from fixtures.openai_server import server_error

from memfold.core.events import MessageAppended
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


def _settings(tmp_path, url: str) -> Settings:
    return Settings.load(
        None, data_dir=tmp_path / "d", policies=("topics",), policy="topics",
        embedder={"kind": "openai", "base_url": url, "api_key": "k", "model": "text-embedding-3-small",
                  "dimensions": 64, "timeout_s": 5},
        summarizer={"max_retries": 0, "backoff_base_s": 0.0},
    )


def test_embeddings_are_recorded_once_and_replays_do_not_call_the_endpoint(tmp_path, openai_server):
    with MemoryEngine(_settings(tmp_path, openai_server.url)) as engine:
        for i, text in enumerate(["my laptop battery drains fast", "the laptop battery drains quickly",
                                  "what is the refund policy for shoes"]):
            engine.append_message("c", "user", text)
            engine.append_message("c", "assistant", f"answer {i}")
        engine.wait_idle()
        calls = [r for r in openai_server.requests if r.path.endswith("/embeddings")]
        assert len(calls) == 3
        stored = [r.event for p in engine.log.partitions() for r in engine.log.read(p, 0, 100)
                  if isinstance(r.event, MessageAppended) and r.event.payload.role == "user"]
        assert all(e.payload.embedding and len(e.payload.embedding) == 64 for e in stored)
        assert {e.payload.metadata["embedding_source"] for e in stored} == {"openai"}
        before = engine.store.dump()
        engine.rebuild()
        assert len([r for r in openai_server.requests if r.path.endswith("/embeddings")]) == 3
        assert engine.store.dump() == before
        topics = engine.sql("SELECT count(*) FROM policy_rows WHERE policy = 'topics' AND tbl = 'topics'")[1][0][0]
        assert topics >= 1


def test_an_embedder_outage_still_accepts_the_message(tmp_path, openai_server):
    with MemoryEngine(_settings(tmp_path, openai_server.url)) as engine:
        openai_server.script(server_error(503))
        position = engine.append_message("c", "user", "hello while the embedder is down")
        engine.wait_for(position)
        assert [m.content for m in engine.history("c")] == ["hello while the embedder is down"]
        event = engine.log.read(position.partition, position.offset, 1)[0].event
        assert event.payload.metadata["embedding_source"].startswith("local (fallback")
        assert len(event.payload.embedding) == 64
