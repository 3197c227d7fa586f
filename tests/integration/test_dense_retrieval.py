"""Dense retrieval end to end: vectors made outside the fold through the real openai client, fused with BM25.

The loopback OpenAI-compatible server answers ``/v1/embeddings``; the
paraphrase test gives it a deterministic embedder that knows a few synonyms
(sister ~ sibling, relocated ~ move, Porto ~ city), which BM25 cannot know.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from datetime import UTC, datetime, timedelta

from fixtures.openai_server import server_error
from support.waiting import wait_until

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

T0 = datetime(2024, 1, 8, 18, 0, tzinfo=UTC)
SMALL_TALK = ["How was your weekend?", "Pretty quiet, mostly reading.", "Any plans for the evening?",
              "Maybe a walk if the rain stops.", "Did you watch the game?", "Only the second half."]
FACT = "My sister Ana relocated to Porto last spring."
QUESTION = "Which city did my sibling move to?"
CONCEPTS = {"sister": "SIBLING", "sibling": "SIBLING", "brother": "SIBLING", "relocated": "MOVE", "move": "MOVE",
            "moved": "MOVE", "porto": "CITY", "city": "CITY", "lisbon": "CITY"}
FUNCTION_WORDS = {"my", "to", "the", "did", "which", "how", "was", "your", "you", "a", "if", "any", "for", "of", "turn"}


def concept_vector(text: str, dimensions: int) -> list[float]:
    """A bag of concepts, hashed: deterministic, and paraphrases through CONCEPTS meet."""
    vec = [0.0] * dimensions
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in FUNCTION_WORDS:
            continue
        concept = CONCEPTS.get(word, word)
        vec[int(hashlib.sha256(concept.encode()).hexdigest(), 16) % dimensions] += 1.0
    if not any(vec):
        vec[0] = 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


def conversation(n: int = 120, fact_at: int = 10) -> list[dict]:
    out = []
    for i in range(n):
        content = FACT if i == fact_at else f"{SMALL_TALK[i % len(SMALL_TALK)]} (turn {i})"
        out.append({"conversation_id": "c", "role": "user" if i % 2 == 0 else "assistant", "content": content,
                    "created_at": (T0 + timedelta(hours=6 * i)).isoformat()})
    return out


def settings(tmp_path, url: str) -> Settings:
    return Settings.load(
        None, data_dir=tmp_path / "d", retrieval={"embedder": "openai"},
        embedder={"base_url": url, "api_key": "k", "model": "text-embedding-3-small", "dimensions": 64, "timeout_s": 5},
        summarizer={"max_retries": 0, "backoff_base_s": 0.0},
    )


def embedding_inputs(server) -> list[list[str]]:
    return [r.body["input"] for r in server.requests if r.path.endswith("/embeddings")]


def recalled(ctx) -> list[int]:
    return [m.index for m in ctx if m.kind == "recalled"]


def test_dense_recall_finds_a_paraphrase_bm25_misses(tmp_path, openai_server):
    openai_server.embed = concept_vector
    with MemoryEngine(settings(tmp_path, openai_server.url)) as engine:
        engine.append_many(conversation())
        engine.wait_idle(timeout=60)
        lexical = engine.context("c", budget=600, query=QUESTION, dense=False)
        fused = engine.context("c", budget=600, query=QUESTION)
        assert sum(m.tokens for m in fused) <= 600
        assert 10 not in recalled(lexical), "BM25 shares no term with the fact"
        assert 10 in recalled(fused), "the fused ranking recalls the paraphrased fact"
        assert 10 not in [h.idx for h in engine.search("c", QUESTION, kinds=("message",))]


def test_vectors_are_made_once_outside_the_fold_and_a_rebuild_keeps_them(tmp_path, openai_server):
    messages = conversation(40)
    messages[20]["content"] = messages[26]["content"] = "ok"  # the same text is embedded once
    with MemoryEngine(settings(tmp_path, openai_server.url)) as engine:
        engine.append_many(messages)
        engine.wait_idle(timeout=60)
        inputs = embedding_inputs(openai_server)
        assert sorted(t for batch in inputs for t in batch) == sorted({m["content"] for m in messages})
        assert all(len(batch) <= 64 for batch in inputs)
        _, rows = engine.sql("SELECT idx, content_hash = sha256(m.content), len(vector) FROM dense_vectors "
                             "JOIN messages m USING (tenant_id, conversation_id, idx) ORDER BY idx")
        assert rows == [(i, True, 64) for i in range(40)], "one vector per message, keyed by its content's sha256"

        engine.context("c", budget=500, query="plans for the evening")
        engine.context("c", budget=500, query="plans for the evening")
        assert len(embedding_inputs(openai_server)) == len(inputs) + 1, "a query is embedded once, then cached"

        before = engine.store.dump(("dense_vectors",))
        calls = len(embedding_inputs(openai_server))
        engine.rebuild()
        assert engine.store.dump(("dense_vectors",)) == before
        assert len(embedding_inputs(openai_server)) == calls, "a rebuild calls no embedder"

        engine.forget("c")
        assert engine.sql("SELECT count(*) FROM dense_vectors")[1] == [(0,)], "forgetting erases the vectors too"


def test_a_promote_keeps_a_vector_for_every_message_and_embeds_nothing_twice(tmp_path, openai_server):
    """Rebuild, promote and adopt share one swap: the vectors are carried over and what lacks one is embedded."""
    with MemoryEngine(settings(tmp_path, openai_server.url)) as engine:
        engine.append_many(conversation(40))
        engine.wait_idle(timeout=60)
        before = engine.store.dump(("dense_vectors",))
        calls = len(embedding_inputs(openai_server))
        engine.replay("wide", overrides={"sliding_window.rolling_window_size": 8})
        engine.promote("wide")
        engine.append_many([{"conversation_id": "c", "role": "user", "content": "one more thing after the promote",
                             "created_at": (T0 + timedelta(days=30)).isoformat()}])
        engine.wait_idle(timeout=60)
        wait_until(lambda: engine.sql("SELECT count(*) FROM dense_vectors")[1] == [(41,)], timeout=30,
                   message="a vector for the message appended after the promote")
        _, missing = engine.sql("SELECT idx FROM messages m WHERE NOT EXISTS (SELECT 1 FROM dense_vectors v "
                                "WHERE v.conversation_id = m.conversation_id AND v.idx = m.idx)")
        assert missing == [], "every message keeps its vector across the promote"
        after = engine.store.dump(("dense_vectors",))
        assert all(row in after[table] for table, rows in before.items() for row in rows), "the vectors carried over"
        new_inputs = [t for batch in embedding_inputs(openai_server)[calls:] for t in batch]
        assert new_inputs == ["one more thing after the promote"], "the promote embedded nothing again"


def test_an_embedder_outage_at_query_time_serves_the_bm25_context(tmp_path, openai_server, caplog):
    openai_server.embed = concept_vector
    with MemoryEngine(settings(tmp_path, openai_server.url)) as engine:
        engine.append_many(conversation())
        engine.wait_idle(timeout=60)
        lexical = engine.context("c", budget=600, query="walk in the rain", dense=False)
        openai_server.script(server_error(503))
        with caplog.at_level(logging.WARNING, logger="memfold.dense"):
            served = engine.context("c", budget=600, query="walk in the rain")
        assert served == lexical
        assert any("recalling by BM25 only" in r.getMessage() for r in caplog.records)
        assert 10 in recalled(engine.context("c", budget=600, query=QUESTION)), "dense recall is back with the embedder"
