"""Erasure by crypto-shredding: after ``forget`` no file in the data dir (and no Kafka record) holds the text."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from memfold.cli.main import main
from memfold.core.errors import ConfigError, UnknownConversationError
from memfold.core.events import MessageAppended, SummaryProduced
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.streams.keystore import SQLiteKeyStore
from memfold.streams.sqlite_log import SQLiteEventLog

LOW_TRIGGER = {"policy": "hierarchical", "policies": ("hierarchical",), "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 2}}



def _erased(engine, conversation_id: str, tenant_id: str = "default") -> bool:
    """True when reading the conversation is an unknown conversation and the projection holds none of it."""
    with pytest.raises(UnknownConversationError):
        engine.history(conversation_id, tenant_id=tenant_id)
    return engine.store.messages(tenant_id, conversation_id) == []

def _plant() -> str:
    return "zq" + uuid.uuid4().hex[:14]


def _talk(engine: MemoryEngine, conversation: str, plant: str, n: int = 14) -> None:
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"{role} turn {i}: the delivery of order #{4100 + i} moves to Friday"
        if i in (0, 5):
            text = f"My name is Dana {plant.title()}, write to {plant}@example.com; order #{plant.upper()} is late."
        engine.append_message(conversation, role, text)


def _files_with(root: Path, needle: str) -> list[str]:
    """Return every file under ``root`` whose raw bytes contain ``needle`` (any case, utf-8)."""
    hits = []
    forms = {needle.encode(), needle.upper().encode(), needle.title().encode()}
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if any(f in data for f in forms):
                hits.append(str(path.relative_to(root)))
    return hits


def _cached_text(engine: MemoryEngine) -> str:
    """Return what this process's text caches hold, as text: excerpts, traces, statements, summary line counts,
    the memory texts whose token counts the projector remembers."""
    from memfold.projections import excerpt, fact_extraction, salience

    made = engine.summarizer.inner.made  # the offline summarizer (made on first use), behind the summary cache
    line_counts = made._tokens._line_counts if made is not None else {}
    return repr((excerpt._CACHE, list(fact_extraction._TRACES), salience._STATEMENTS, list(line_counts),
                 list(engine.projector._plan_counts))).lower()


def _engine(data: Path, **kw) -> MemoryEngine:
    return MemoryEngine(Settings.load(None, data_dir=data, **LOW_TRIGGER, **kw))


def test_forget_leaves_no_trace_of_the_text_and_keeps_the_others(tmp_path):
    data = tmp_path / "data"
    secret, kept = _plant(), _plant()
    with _engine(data) as engine:
        _talk(engine, "secret", secret)
        _talk(engine, "kept", kept)
        engine.wait_idle(60)
        memory = " ".join(m.content for m in engine.context("secret") if m.kind.startswith("memory"))
        assert secret in memory.lower(), "the summary must carry the planted text for the test to mean anything"
        engine.sql("CHECKPOINT", write=True)
        before = _files_with(data, secret)
        assert "projections.duckdb" in before  # the scan sees plaintext where it is
        assert "events.sqlite" not in before and not any(h.startswith("events.sqlite") for h in before)
        kept_context = [m.as_dict() for m in engine.context("kept", budget=400)]
        kept_summaries = [(r["summary_id"], r["text"]) for r in engine.summaries("kept")]
        cache_rows = engine.sql("SELECT count(*) FROM llm_cache WHERE conversation_id = 'secret'")[1][0][0]
        assert cache_rows > 0

        from memfold.projections.excerpt import analysed

        analysed(engine.history("secret")[0])  # as a recall read excerpting it would (these turns are too short)
        assert secret in _cached_text(engine) and kept in _cached_text(engine)

        engine.forget("secret", reason="user request")

        assert _files_with(data, secret) == []
        assert secret not in _cached_text(engine)  # nor does this process keep it in memory for speed
        assert _erased(engine, "secret")
        assert engine.store.summary_rows("default", "secret", None) == []
        assert engine.sql("SELECT count(*) FROM llm_cache WHERE conversation_id = 'secret'")[1][0][0] == 0
        assert engine.sql("SELECT deleted FROM conversations WHERE conversation_id = 'secret'")[1] == [(True,)]
        types = [r[0] for r in engine.sql(
            "SELECT type FROM events WHERE conversation_id = 'secret' ORDER BY seq")[1]]
        assert types.count("MessageAppended") == 14 and types[-1] == "ConversationDeleted"
        assert [m.as_dict() for m in engine.context("kept", budget=400)] == kept_context
        assert [(r["summary_id"], r["text"]) for r in engine.summaries("kept")] == kept_summaries
        assert kept in " ".join(m.content for m in engine.context("kept")).lower()

    # The log still holds every event of the conversation, sealed with a destroyed key.
    log = SQLiteEventLog(data / "events.sqlite", partitions=8)
    try:
        events = [r.event for p in log.partitions() for r in log.read(p, 0, 10_000) if r.event.conversation_id == "secret"]
    finally:
        log.close()
    sealed = [e for e in events if isinstance(e, (MessageAppended, SummaryProduced))]
    assert sealed and all(e.payload.encrypted is not None for e in sealed)
    assert all(getattr(e.payload, "content", None) is None and not getattr(e.payload, "text", "") for e in sealed)
    keys = SQLiteKeyStore(data / "keys.sqlite")
    try:
        assert keys.key(sealed[0].payload.encrypted.key_id) is None
        assert len(keys.destroyed("default/secret")) == 1
    finally:
        keys.close()

    # A rebuild from the log afterwards shows the conversation existed and was erased, never its text.
    with _engine(data) as engine:
        engine.rebuild()
        assert _erased(engine, "secret")
        assert engine.sql("SELECT deleted FROM conversations WHERE conversation_id = 'secret'")[1] == [(True,)]
        assert [(r["summary_id"], r["text"]) for r in engine.summaries("kept")] == kept_summaries
    assert _files_with(data, secret) == []


def test_forget_from_the_cli(tmp_path, capsys):
    data = tmp_path / "data"
    plant = _plant()
    with _engine(data) as engine:
        _talk(engine, "c1", plant, n=4)
        engine.wait_idle(60)
    assert main(["--data-dir", str(data), "forget", "c1"]) == 0
    assert "forgot default/c1" in capsys.readouterr().out
    assert _files_with(data, plant) == []
    assert main(["--data-dir", str(data), "forget", " "]) == 2


def test_a_reset_projection_keeps_no_bytes_of_the_tables_it_dropped(tmp_path):
    """A rebuild resets the projection; a conversation forgotten before the refold reaches it again has nothing
    the fold could compact, so the reset itself must leave none of the old text in freed blocks (a flaky
    test_forget_from_the_cli caught it: the CLI's forget opened with other policies, a rebuild)."""
    data = tmp_path / "data"
    plant = _plant()
    with _engine(data) as engine:
        _talk(engine, "c1", plant, n=2)  # under the summary trigger: only projection tables hold the text
        engine.wait_idle(60)
        engine.sql("CHECKPOINT", write=True)
        assert _files_with(data, plant) == ["projections.duckdb"]
        with engine.runner.paused():  # no refold meanwhile
            engine.store.reset()
            engine.sql("CHECKPOINT", write=True)
            assert _files_with(data, plant) == []


def test_a_summary_that_comes_back_after_the_forget_lands_without_its_text(tmp_path):
    """A summary made while forget ran is sealed with a key made after the erasure: its text must not be projected."""
    from memfold.core.events import SummaryProducedPayload, utcnow
    from memfold.core.ids import new_event_id

    data = tmp_path / "data"
    plant = _plant()
    with _engine(data) as engine:
        _talk(engine, "c1", plant, n=4)
        engine.wait_idle(60)
        engine.forget("c1")
        late = SummaryProduced(
            event_id=new_event_id(), conversation_id="c1", occurred_at=utcnow(),
            payload=SummaryProducedPayload(
                summary_id="sum-late", request_id="req-late", policy="hierarchical",
                settings_hash=engine.policies["hierarchical"][1].settings_hash, covers_from=0, covers_to=3,
                text=f"The user said {plant}.", summarizer="offline", model="offline", prompt_hash="x",
            ),
        )
        engine.wait_for(engine.log.append([late])[0])
        assert engine.sql("SELECT payload FROM events WHERE event_id = ?", [late.event_id])[1] == [('{"erased": true}',)]
        engine.sql("CHECKPOINT", write=True)
    assert _files_with(data, plant) == []


def test_forget_needs_a_key_store_on_an_unsealed_log(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d")) as engine:
        engine.sealer = None  # what a deployment without a key store has
        with pytest.raises(ConfigError, match="keystore"):
            engine.forget("c1")


@pytest.mark.kafka
def test_forget_on_kafka_leaves_no_record_with_the_text(tmp_path, kafka_bootstrap):
    from kafka import KafkaConsumer, TopicPartition

    topic = f"memfold.forget.{uuid.uuid4().hex[:8]}"
    data, secret, kept = tmp_path / "data", _plant(), _plant()
    settings = dict(log=f"kafka://{kafka_bootstrap}", topic=topic, partitions=2, keystore=str(tmp_path / "keys.sqlite"))
    with _engine(data, **settings) as engine:
        _talk(engine, "secret", secret, n=8)
        _talk(engine, "kept", kept, n=8)
        engine.wait_idle(90)
        assert secret in " ".join(m.content for m in engine.context("secret")).lower()
        engine.forget("secret")
        assert _erased(engine, "secret")
        assert kept in " ".join(m.content for m in engine.context("kept")).lower()

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        parts = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        values: list[bytes] = []
        while sum(consumer.position(tp) for tp in parts) < sum(ends.values()):
            for batch in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in batch)
    finally:
        consumer.close()
    blob = b"\n".join(values)
    assert b'"conversation_id":"secret"' in blob and b"ConversationDeleted" in blob  # it existed, was erased
    assert secret.encode() not in blob and secret.upper().encode() not in blob
    assert b'"conversation_id":"kept"' in blob and kept.encode() not in blob  # sealed too, but readable with its key
    assert _files_with(data, secret) == [] and _files_with(tmp_path, secret) == []


@pytest.mark.kafka
def test_two_nodes_share_a_kafka_key_store_and_a_forget_on_one_shreds_on_both(tmp_path, kafka_bootstrap):
    import time

    from memfold.core.sealing import is_shredded

    topic = f"memfold.forget.{uuid.uuid4().hex[:8]}"
    a_dir, b_dir, secret, kept = tmp_path / "a", tmp_path / "b", _plant(), _plant()
    settings = dict(log=f"kafka://{kafka_bootstrap}", topic=topic, partitions=2)  # the default key store

    def messages(node: MemoryEngine, conversation: str) -> list:
        return [r.event for p in (0, 1) for r in node.log.read(p, 0, 1000)
                if r.event.conversation_id == conversation and isinstance(r.event, MessageAppended)]

    with _engine(a_dir, **settings) as a:
        assert a.settings.keystore_location() == f"kafka://{kafka_bootstrap}/{topic}.keys"
        _talk(a, "secret", secret, n=8)
        _talk(a, "kept", kept, n=8)
        a.wait_idle(90)
        b = MemoryEngine(Settings.load(None, data_dir=b_dir, **LOW_TRIGGER, **settings), role="projector")
        try:
            b.wait_idle(90)
            # Node b unseals a's content with the key from the shared topic (it has no key file of its own).
            assert secret in " ".join(m.content for m in b.context("secret")).lower()
            assert not any(is_shredded(e) for e in messages(b, "secret"))
            a.forget("secret")
            deadline = time.monotonic() + 60  # b re-reads the key topic at most a second after its last read
            while not all(is_shredded(e) for e in messages(b, "secret")):
                assert time.monotonic() < deadline, "node b still unseals the forgotten conversation"
                time.sleep(0.1)
            b.wait_idle(90)
            assert _erased(b, "secret") and _erased(a, "secret")
            assert kept in " ".join(m.content for m in b.context("kept")).lower()  # its key is intact
        finally:
            b.close()
    assert _files_with(a_dir, secret) == [] and _files_with(b_dir, secret) == []


def test_a_node_that_folds_another_process_s_forget_empties_its_text_caches(tmp_path):
    from memfold.core.events import ConversationDeleted, ConversationDeletedPayload, utcnow
    from memfold.core.ids import new_event_id

    secret = _plant()
    with _engine(tmp_path / "data") as engine:
        _talk(engine, "secret", secret)
        engine.wait_idle(60)
        assert secret in _cached_text(engine)
        deleted = ConversationDeleted(event_id=new_event_id(), tenant_id="default", conversation_id="secret",
                                      occurred_at=utcnow(), payload=ConversationDeletedPayload(reason=None))
        engine.wait_for(engine.log.append([deleted])[0], 30)  # appended as another process's forget does
        assert secret not in _cached_text(engine)
