"""Seed 004 (topics with decay): assignment, compaction + restore, the decay tables, eviction, stats; the fold laws are tests/contract/policy_contract.py."""

from __future__ import annotations

import base64
import gzip
import hashlib
import math
from datetime import UTC, datetime, timedelta

import pytest
from support.policy_kit import FoldDriver, fold_context, record, requests_of

from memfold.core.errors import ConfigError
from memfold.core.events import (
    ClockTicked,
    ClockTickedPayload,
    ConversationDeleted,
    Event,
    SummaryRequested,
    ToolCall,
    TopicAssigned,
    TopicCompacted,
    TopicEvicted,
)
from memfold.core.ports import FoldContext, MessageRecord
from memfold.core.settings import TopicsSettings
from memfold.core.tokens import MESSAGE_OVERHEAD
from memfold.projections import fold
from memfold.projections.policies import state_codec
from memfold.projections.policies import topics as tp
from memfold.projections.policies.topics import TopicsPolicy

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DAY = 86400
DIM = 32
POLICY = TopicsPolicy()

SEED_STATS_FIELDS = [
    "topic_id", "topic_title", "active_messages", "compressed_messages", "total_messages", "has_summary",
    "importance_score", "access_count", "memory_type", "half_life_days", "age_seconds", "inactive_seconds",
]


def bag_of_words(text: str) -> tuple[float, ...]:
    """A small deterministic embedder: words hashed into DIM buckets, unit length."""
    v = [0.0] * DIM
    for word in text.lower().split():
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return tuple(x / n for x in v)


def make_ctx(embed=bag_of_words, **overrides) -> FoldContext:
    return fold_context("topics", TopicsSettings(**overrides), embed=embed)


def basis(k: int) -> tuple[float, ...]:
    return tuple(1.0 if i == k else 0.0 for i in range(DIM))


class Conversation:
    """Builds MessageRecords with increasing indices; time is set per message in seconds from T0."""

    def __init__(self, conv: str = "c1"):
        self.conv = conv
        self.n = 0
        self.t = 0.0

    def __call__(self, role: str, content: str | None = None, *, topic: int | None = None, at: float | None = None,
                 importance: float | None = None, calls=(), answers: str | None = None) -> MessageRecord:
        if at is not None:
            self.t = at
        content = content if content is not None else f"{role} {self.n}"
        m = record(
            self.n,
            role,
            content,
            at=T0 + timedelta(seconds=self.t),
            conversation_id=self.conv,
            event_id=f"m-{self.conv}-{self.n}",
            importance=importance,
            embedding=basis(topic) if topic is not None else None,
            tool_calls=tuple(ToolCall(id=c, name="search") for c in calls),
            tool_call_id=answers,
        )
        self.n += 1
        self.t += 1
        return m


class Driver(FoldDriver):
    """Folds items one at a time like the projector, recording the log; answers requests on demand."""

    policy = POLICY
    latency_ms = 5
    fail_reason = "down"
    error_type = "SummarizerError"

    def feed(self, item) -> list[Event]:
        out = super().feed(item)
        assert self.state.outbox == ()  # every decided topic event was folded at once
        return out

    def requests(self, out=None) -> list[SummaryRequested]:
        return requests_of(self.derived if out is None else out)

    def tick(self, seconds: float):
        now = T0 + timedelta(seconds=seconds)
        return self.feed(ClockTicked(event_id=f"tick-{seconds}", tenant_id="t1", conversation_id=self.state.conversation_id,
                                     occurred_at=now, payload=ClockTickedPayload(now=now)))

    def topic(self, topic_id: str | None = None) -> tp.Topic:
        return next(t for t in self.state.topics if t.topic_id == (topic_id or self.state.active_topic_id))


def fill(d: Driver, c: Conversation, topic: int, n_user: int) -> list[Event]:
    out = []
    for _ in range(n_user):
        out += d.feed(c("user", topic=topic))
        out += d.feed(c("assistant"))
    return out


# --------------------------------------------------------------------------- assignment


def test_similar_messages_join_a_topic_and_dissimilar_ones_open_a_new_one():
    d, c = Driver(make_ctx()), Conversation()
    long = "Tell me about the billing plans " + "x" * 100
    d.feed(c("user", long, topic=0))
    first = d.topic()
    assert first.title == long[:80] and first.access_count == 0 and first.message_count == 1
    d.feed(c("assistant"))
    d.feed(c("user", "more billing", topic=0, at=100))
    t = d.topic()
    assert t.topic_id == first.topic_id and t.access_count == 1 and t.message_count == 3
    assert t.last_active_at == T0 + timedelta(seconds=100)
    d.feed(c("user", "weather?", topic=1))
    assert len(d.state.topics) == 2 and d.state.active_topic_id != first.topic_id
    assert d.topic().title == "weather?"


def test_similarity_must_exceed_the_threshold():
    d, c = Driver(make_ctx()), Conversation()
    d.feed(c("user", "a", topic=0))
    near = MessageRecord(**{**_fields(c("user", "b")), "embedding": _unit(0.71)})
    far = MessageRecord(**{**_fields(c("user", "c")), "embedding": _unit(0.69)})
    d.feed(near)
    assert len(d.state.topics) == 1
    d.feed(far)
    assert len(d.state.topics) == 2


def _unit(cos: float) -> tuple[float, ...]:
    return (cos, math.sqrt(1 - cos * cos)) + (0.0,) * (DIM - 2)


def _fields(m: MessageRecord) -> dict:
    return {f: getattr(m, f) for f in m.__slots__}


def test_topic_ids_are_content_hashes_and_replays_match():
    ids = []
    for _ in range(2):
        d, c = Driver(make_ctx()), Conversation()
        fill(d, c, 0, 2)
        fill(d, c, 1, 1)
        ids.append([t.topic_id for t in d.state.topics])
    assert ids[0] == ids[1] and len(set(ids[0])) == 2 and all(i.startswith("topic-") for i in ids[0])


def test_embedding_comes_from_ctx_when_not_recorded():
    d, c = Driver(make_ctx()), Conversation()
    d.feed(c("user", "python packaging wheels setuptools"))
    d.feed(c("user", "python packaging wheels setuptools build"))
    assert len(d.state.topics) == 1 and d.topic().access_count == 1
    d.feed(c("user", "best hiking trails near the alps"))
    assert len(d.state.topics) == 2


def test_the_real_local_embedder_when_present():
    embedders = pytest.importorskip("memfold.projections.embedders")
    local = embedders.LocalHashEmbedder(dimensions=256)
    d, c = Driver(make_ctx(embed=lambda text: local.embed([text])[0])), Conversation()
    d.feed(c("user", "how do I reset my router password"))
    d.feed(c("user", "how do I reset my router password please"))
    assert d.topic().access_count == 1


def test_no_embedder_is_a_config_error():
    d, c = Driver(make_ctx(embed=None)), Conversation()
    with pytest.raises(ConfigError, match="embedder"):
        d.feed(c("user", "hello"))
    d.feed(c("user", "recorded", topic=3))  # a recorded embedding needs no embedder
    assert len(d.state.topics) == 1


def test_assistant_system_and_tool_messages_follow_the_topic():
    d, c = Driver(make_ctx()), Conversation()
    d.feed(c("assistant", "Hi! How can I help?"))  # before any topic
    assert d.plan().fallback == "no_topic" and d.plan().verbatim_from == 0
    d.feed(c("user", topic=0))
    assert [r.index for r in d.topic().messages] == [0, 1]  # the greeting joins the first topic
    d.feed(c("assistant", "", calls=("k1",)))
    d.feed(c("tool", "result", answers="k1"))
    d.feed(c("assistant", "done"))
    d.feed(c("user", topic=1))
    d.feed(c("system", "note"))
    t0, t1 = d.state.topics
    assert [r.index for r in t0.messages] == [0, 1, 2, 3, 4]
    assert [r.index for r in t1.messages] == [5, 6]
    p = d.plan()
    assert p.memory == () and p.verbatim_indices == (5, 6) and p.fallback is None


# --------------------------------------------------------------------------- compaction


def test_compaction_requests_a_summary_then_moves_old_messages_to_the_compressed_store():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 6)  # 12 messages: not more than 12
    assert d.requests() == []
    out = d.feed(c("user", topic=0))  # 13th
    [req] = d.requests(out)
    p = req.payload
    assert p.input_indices == tuple(range(9)) and (p.covers_from, p.covers_to) == (0, 8)
    assert p.topic_id == d.topic().topic_id and p.base_summary_id is None and p.kind == "text"
    # While the summary is being made nothing is hidden.
    assert d.plan().verbatim_indices == tuple(range(13)) and d.plan().memory == ()
    d.feed(c("assistant"))
    assert d.requests() == [req]  # one in flight per topic
    d.produce(req, "billing talk")
    t = d.topic()
    assert [r.index for r in t.messages] == [9, 10, 11, 12, 13]
    assert t.compressed_count == 9 and t.summary_id == fold.summary_id_for(p.request_id)
    plan = d.plan()
    assert [m.content for m in plan.memory] == ["Topic summary: billing talk"]
    assert plan.memory[0].kind == "topic_summary" and plan.verbatim_indices == (9, 10, 11, 12, 13)
    assert tp.topic_history(d.state) == list(range(14))
    assert tp.topic_history(d.state, include_compressed=False) == [9, 10, 11, 12, 13]


def test_compressed_store_is_the_seed_format_and_deterministic():
    refs = [tp.MessageRef(index=i, role="user", timestamp=1234567890.0 + i) for i in range(10)]
    blob = tp.compress_refs(refs)
    raw = base64.b64decode(blob)
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\x00\x00\x00\x00"  # gzip, mtime 0
    assert gzip.decompress(raw).startswith(b'[{"answers":null,"calls":[],"index":0,"role":"user","timestamp":1234567890.0}')
    assert tp.decompress_refs(blob) == refs and tp.compress_refs(refs) == blob
    assert tp.decompress_refs(None) == []


def test_second_compaction_builds_on_the_first_summary():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 6)
    [r1] = d.requests(d.feed(c("user", topic=0)))
    d.produce(r1, "S1")
    out = []
    while not d.requests(out):
        out = d.feed(c("assistant")) + d.feed(c("user", topic=0))
    [r2] = d.requests(out)
    assert r2.payload.base_summary_id == fold.summary_id_for(r1.payload.request_id)
    assert r2.payload.input_indices == (9, 10, 11, 12, 13, 14, 15, 16, 17)
    d.produce(r2, "S2")
    t = d.topic()
    assert t.compressed_count == 18 and [r.index for r in tp.decompress_refs(t.compressed)] == list(range(18))
    assert d.plan().memory[0].content == "Topic summary: S2"


@pytest.mark.parametrize("outcome", ["failed", "empty"])
def test_a_failed_or_empty_summary_hides_nothing_and_is_not_requested_again(outcome):
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 6)
    [r1] = d.requests(d.feed(c("user", topic=0)))
    out = d.fail(r1) if outcome == "failed" else d.produce(r1, "  ")
    assert d.requests(out) == []
    t = d.topic()
    assert len(t.messages) == 13 and t.compressed is None and t.summary_text is None
    assert d.plan().verbatim_indices == tuple(range(13)) and d.plan().memory == ()
    assert POLICY.decide(d.state, d.ctx, r1) == []
    d.tick(10)  # other causes do not re-ask either
    assert d.requests() == [r1]
    [r2] = d.requests(d.feed(c("assistant")))  # the input set changed: ask again
    assert r2.payload.input_indices == tuple(range(10))


def test_compaction_never_splits_a_tool_group():
    d, c = Driver(make_ctx()), Conversation()
    for _ in range(3):
        d.feed(c("user", topic=0))
        d.feed(c("assistant"))
    d.feed(c("user", topic=0))  # 6
    d.feed(c("assistant", "", calls=("a", "b")))  # 7
    d.feed(c("tool", "ra", answers="a"))  # 8
    d.feed(c("tool", "rb", answers="b"))  # 9
    d.feed(c("assistant"))  # 10
    d.feed(c("user", topic=0))  # 11
    [req] = d.requests(d.feed(c("assistant")))  # 12: 13 messages, keep 4 → cut at 9 would split 7..9
    assert req.payload.input_indices == tuple(range(7))


def test_an_open_tool_call_stays_with_the_recent_messages():
    refs = tuple(tp.MessageRef(index=i, role="user", timestamp=0.0) for i in range(10)) + (
        tp.MessageRef(index=10, role="assistant", timestamp=0.0, calls=("x",)),
    ) + tuple(tp.MessageRef(index=i, role="assistant", timestamp=0.0) for i in range(11, 14))
    assert tp.compaction_cut(refs, 4, {}) == 10
    assert tp.compaction_cut(refs, 2, {"x": "t"}) == 10
    assert tp.compaction_cut(refs[:11], 0, {"x": "t"}) == 10


def test_restore_on_access_brings_compressed_messages_back():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 6)
    [r1] = d.requests(d.feed(c("user", topic=0)))
    d.produce(r1, "S1")
    a = d.state.active_topic_id
    d.feed(c("assistant"))  # 13
    d.feed(c("user", topic=0))  # 14: continuing the active topic restores nothing
    assert d.topic(a).compressed_count == 9
    d.feed(c("assistant"))  # 15
    [cold] = d.requests(d.feed(c("user", topic=1)))  # 16: topic A is left, so it is compacted whole
    assert cold.payload.topic_id == a and cold.payload.input_indices == tuple(range(9, 16))
    assert cold.payload.base_summary_id == fold.summary_id_for(r1.payload.request_id)
    d.produce(cold, "S1b")
    assert d.topic(a).compressed_count == 16 and d.topic(a).messages == ()
    d.feed(c("assistant"))  # 17
    out = d.feed(c("user", topic=0, at=5000))  # 18: back to topic A
    t = d.topic(a)
    assert t.compressed is None and t.compressed_count == 0
    assert [r.index for r in t.messages] == list(range(16)) + [18]  # merged in order
    plan = d.plan()
    assert plan.verbatim_indices == tuple(range(16)) + (18,) and plan.memory[-1].content == "Topic summary: S1b"
    by_topic = {r.payload.topic_id: r for r in d.requests(out)}
    b = d.state.topics[1].topic_id
    assert set(by_topic) == {a, b} and by_topic[b].payload.input_indices == (16, 17)  # topic B is left now
    r2 = by_topic[a]  # over the limit again: compact with the previous summary as base
    assert r2.payload.base_summary_id == fold.summary_id_for(cold.payload.request_id)
    assert r2.payload.input_indices == tuple(range(13))


# --------------------------------------------------------------------------- earlier topics carry their content


def test_a_topic_left_behind_is_compacted_whole_and_its_summary_carried_in_the_context():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 2)  # 0-3 on topic A
    a = d.state.active_topic_id
    [ra] = d.requests(d.feed(c("user", topic=1)))  # 4: topic B; A is left
    assert ra.payload.topic_id == a and ra.payload.input_indices == (0, 1, 2, 3)
    assert ra.payload.token_cap == TopicsSettings().summary_token_cap and ra.payload.base_summary_id is None
    [compacted] = d.produce(ra, "Priya marries in Lisbon on June 14th; gift under $300.")
    assert (compacted.payload.compacted_through, compacted.payload.kept_recent) == (3, 0)
    assert d.topic(a).messages == () and d.topic(a).compressed_count == 4
    d.feed(c("assistant"))  # 5
    [rb] = d.requests(d.feed(c("user", topic=2, at=DAY)))  # 6: topic C, the next day
    d.produce(rb, "Biscuit the beagle eats puppy kibble.")
    p = d.plan()
    assert [m.kind for m in p.memory] == ["topics"]
    assert p.memory[0].content == (
        "Earlier topics of this conversation:\n\n"
        "[2025-01-01] Priya marries in Lisbon on June 14th; gift under $300.\n\n"
        "[2025-01-01] Biscuit the beagle eats puppy kibble."
    )
    assert p.memory[0].tokens == tp_count(p.memory[0].content)
    assert p.verbatim_indices == (6,) and p.notes["earlier_topics"] == [a, rb.payload.topic_id]


def test_every_live_topics_key_facts_are_one_facts_message_latest_stated_value_per_key():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 2)  # 0-3: topic A
    a = d.state.active_topic_id
    [ra] = d.requests(d.feed(c("user", topic=1)))  # 4: topic B; A is compacted
    d.produce(ra, "Key facts:\n- order_number: #4417 (msg 0)\n- phone: +1 720-555-0100 (msg 2)\nSummary: Order talk.")
    d.feed(c("assistant"))  # 5
    [rb] = d.requests(d.feed(c("user", topic=2, at=DAY)))  # 6: topic C, the next day; B is compacted
    d.produce(rb, "Key facts:\n- phone: +1 415-555-0153 (msg 4)\nSummary: New phone.")
    assert d.topic(a).facts[0].stated_in == 0 and d.topic(a).facts[0].stated_at == T0
    p = d.plan()
    assert [m.kind for m in p.memory] == ["key_facts", "topics"]
    assert p.memory[0].content == (
        "[2025-01-01]\n- order_number: #4417\n- phone: +1 415-555-0153 (was: +1 720-555-0100)"
    )
    assert "Key facts" not in p.memory[1].content and "- phone" not in p.memory[1].content  # said once
    assert p.notes["facts"] == 2
    assert tp.topic_facts(d.state) == tp.topic_facts(state_codec.decode(tp.State, state_codec.encode(d.state)))


def test_a_fact_the_user_takes_back_in_another_topic_leaves_the_key_facts_and_a_later_one_is_shown():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 2)  # 0-3: topic A
    [ra] = d.requests(d.feed(c("user", topic=1)))  # 4: topic B; A is compacted
    d.produce(ra, "Key facts:\n- order_number: #4417 (msg 0)\n- phone: +1 720-555-0100 (msg 2)\nSummary: Order talk.")
    d.feed(c("assistant"))  # 5
    d.feed(c("user", "Please forget my phone number, email me at ana@example.com instead.", topic=1))  # 6, topic B
    assert d.state.retractions == (("phone", 6),)
    assert [f.key for f in tp.topic_facts(d.state)] == ["order_number"]  # A's summary still lists the phone
    assert "720-555-0100" not in d.plan().memory[0].content
    [rb] = d.requests(d.feed(c("user", "My phone is +1 415-555-0153 after all.", topic=2)))  # 7: topic C
    d.produce(rb, "Key facts:\n- email: ana@example.com (msg 6)\nSummary: The user took the phone back.")
    assert [f.key for f in tp.topic_facts(d.state)] == ["order_number", "email"]  # said with the retraction: kept
    [rc] = d.requests(d.feed(c("user", topic=3)))  # 8: topic D; C is compacted
    d.produce(rc, "Key facts:\n- phone: +1 415-555-0153 (msg 7)\nSummary: A new phone.")
    assert {f.key: f.value for f in tp.topic_facts(d.state)} == {
        "order_number": "#4417", "email": "ana@example.com", "phone": "+1 415-555-0153"}  # stated after: shown
    assert tp.topic_facts(d.state) == tp.topic_facts(state_codec.decode(tp.State, state_codec.encode(d.state)))


def test_an_evicted_topics_facts_go_with_it():
    d, c = Driver(make_ctx(max_topics=2)), Conversation()
    fill(d, c, 0, 1)
    [r0] = d.requests(d.feed(c("user", topic=1)))
    d.produce(r0, "Key facts:\n- order_number: #4417 (msg 0)\nSummary: old topic")
    assert [f.value for f in tp.topic_facts(d.state)] == ["#4417"]
    d.feed(c("user", topic=2, at=10 * DAY))
    d.feed(c("user", topic=3, at=10 * DAY))
    assert d.state.topics[0].evicted and tp.topic_facts(d.state) == ()
    assert all(m.kind != "key_facts" for m in d.plan().memory)


def test_returning_to_an_earlier_topic_restores_it_and_leaves_it_out_of_the_earlier_topics():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 1)
    a = d.state.active_topic_id
    [ra] = d.requests(d.feed(c("user", topic=1)))
    d.produce(ra, "A talk")
    d.feed(c("assistant"))
    d.feed(c("user", topic=0))  # back to A: restored, active, its summary is the seed's topic summary
    p = d.plan()
    assert [m.content for m in p.memory] == ["Topic summary: A talk"]
    assert p.verbatim_indices == (0, 1, 4) and d.state.active_topic_id == a


def test_earlier_topics_are_chosen_by_priority_within_the_memory_cap():
    words = " ".join(["fact"] * 40)  # 40 tokens per summary
    ctx = make_ctx(memory_token_cap=120)
    d, c = Driver(ctx), Conversation()
    importance = [1.0, 0.2, 0.9, 0.1, 0.8]
    for k, imp in enumerate(importance):
        for r in d.requests(d.feed(c("user", f"topic {k}", topic=k, importance=imp))):
            d.produce(r, f"T{r.payload.input_indices[0] // 2} {words}")
        d.feed(c("assistant"))
    d.feed(c("user", "now", topic=9))
    for r in d.requests():
        if d.topic(r.payload.topic_id).processing_request_id == r.payload.request_id:
            d.produce(r, f"T{r.payload.input_indices[0] // 2} {words}")
    [memory] = d.plan().memory
    blocks = memory.content.split("\n\n")[1:]
    assert [b.split()[1] for b in blocks] == ["T0", "T2"]  # the two most important fit, in the order they began
    assert memory.tokens <= 120 + MESSAGE_OVERHEAD
    assert POLICY.plan(d.state, make_ctx(memory_token_cap=0)).memory == ()  # 0: the seed's active topic only


def test_without_room_for_earlier_topics_leaving_a_topic_compacts_nothing():
    d, c = Driver(make_ctx(memory_token_cap=0)), Conversation()
    fill(d, c, 0, 2)
    assert d.requests(d.feed(c("user", topic=1))) == []  # the seed's rule only
    fill(d, c, 1, 6)
    [req] = d.requests()  # topic B past the limit: compacted as the seed says
    assert req.payload.input_indices == tuple(range(4, 13)) and d.plan().memory == ()


def test_evicted_topics_are_not_carried():
    d, c = Driver(make_ctx(max_topics=2)), Conversation()
    fill(d, c, 0, 1)
    [r0] = d.requests(d.feed(c("user", topic=1)))
    d.produce(r0, "old topic")
    d.feed(c("user", topic=2, at=10 * DAY))
    d.feed(c("user", topic=3, at=10 * DAY))
    assert d.state.topics[0].evicted and "old topic" not in " ".join(m.content for m in d.plan().memory)


def tp_count(text: str) -> int:
    return make_ctx().count_tokens(text) + MESSAGE_OVERHEAD


# --------------------------------------------------------------------------- decay tables


@pytest.mark.parametrize("days,expected", [(0, 1.0), (1, 0.5), (2, 0.25), (3, 0.125), (4, 0.0625), (5, 0.03125)])
def test_short_term_decay_table(days, expected):
    s = TopicsSettings()
    topic = tp.Topic(topic_id="t", title="t", created_at=T0, last_active_at=T0, importance=1.0, access_count=0)
    assert tp.priority(topic, T0 + timedelta(days=days), s) == expected
    assert (expected < s.eviction_priority) == (days == 5)


@pytest.mark.parametrize("days,expected", [(0, 1.0), (16, 0.5), (32, 0.25), (48, 0.125), (64, 0.0625), (80, 0.03125)])
def test_long_term_decay_table(days, expected):
    s = TopicsSettings()
    topic = tp.Topic(topic_id="t", title="t", created_at=T0, last_active_at=T0, importance=1.0, access_count=20)
    assert tp.priority(topic, T0 + timedelta(days=days), s) == expected
    assert (expected < s.eviction_priority) == (days == 80)


@pytest.mark.parametrize(
    "accesses,days,kind",
    [(0, 1, "short-term"), (4, 1, "short-term"), (5, 2, "long-term"), (9, 2, "long-term"), (10, 4, "long-term"),
     (14, 4, "long-term"), (15, 8, "long-term"), (19, 8, "long-term"), (20, 16, "long-term"), (24, 16, "long-term"),
     (25, 30, "long-term"), (100, 30, "long-term"), (10**6, 30, "long-term")],
)
def test_consolidation_table(accesses, days, kind):
    s = TopicsSettings()
    assert tp.half_life_seconds(accesses, s) == days * DAY
    assert tp.memory_type(accesses, s) == kind


@pytest.mark.parametrize(
    "accesses,survival_days", [(0, 5), (5, 10), (10, 20), (15, 40), (20, 80), (25, 150)]
)
def test_consolidation_survival_time(accesses, survival_days):
    """The table's 'survival time to <5%': importance 1.0 falls below 0.05 between 4.32 and 5 half-lives."""
    s = TopicsSettings()
    topic = tp.Topic(topic_id="t", title="t", created_at=T0, last_active_at=T0, importance=1.0, access_count=accesses)
    assert tp.priority(topic, T0 + timedelta(days=survival_days), s) < 0.05
    assert tp.priority(topic, T0 + timedelta(days=survival_days * 0.8), s) > 0.05


def build_topics(d: Driver, c: Conversation, first_at: float, others_at: float, *, accesses: int = 0) -> str:
    """Topic 0 (importance 1.0, ``accesses`` matches) at ``first_at``, then 20 more topics at ``others_at``."""
    d.feed(c("user", topic=0, at=first_at, importance=1.0))
    for _ in range(accesses):
        d.feed(c("user", topic=0, at=first_at, importance=1.0))
    old = d.state.active_topic_id
    for k in range(1, 21):
        d.feed(c("user", topic=k, at=others_at))
    return old


@pytest.mark.parametrize("days,evicted", [(4, False), (5, True)])
def test_short_term_topic_is_evicted_after_five_days(days, evicted):
    d, c = Driver(make_ctx()), Conversation()
    old = build_topics(d, c, 0, days * DAY)
    rows = {r["topic_id"]: r for r in tp.topic_rows(d.state)}
    assert rows[old]["evicted"] is evicted
    assert sum(not r["evicted"] for r in rows.values()) == (20 if evicted else 21)
    events = [e for e in d.derived if isinstance(e, TopicEvicted)]
    assert [e.payload.topic_id for e in events] == ([old] if evicted else [])
    if evicted:
        assert events[0].payload.priority == 0.03125 and rows[old]["priority"] == 0.03125
        assert d.topic(old).messages == () and d.topic(old).embedding is None


@pytest.mark.parametrize("days,evicted", [(64, False), (80, True)])
def test_long_term_topic_survives_sixteen_times_longer(days, evicted):
    d, c = Driver(make_ctx()), Conversation()
    build_topics(d, c, 0, days * DAY, accesses=20)
    assert tp.topic_rows(d.state)[0]["half_life_days"] == 16.0
    assert tp.topic_rows(d.state)[0]["evicted"] is evicted


def test_clock_ticks_decay_topics_but_never_the_active_one():
    d, c = Driver(make_ctx()), Conversation()
    for k in range(21):
        d.feed(c("user", topic=k, at=0))
    d.tick(10 * DAY)
    live = [t for t in d.state.topics if not t.evicted]
    assert [t.topic_id for t in live] == [d.state.active_topic_id]
    d.tick(DAY)  # time never goes backwards
    assert d.state.now == T0 + timedelta(days=10)


def test_eviction_waits_until_there_are_more_than_max_topics():
    d, c = Driver(make_ctx()), Conversation()
    for k in range(20):
        d.feed(c("user", topic=k, at=0))
    d.tick(30 * DAY)
    assert all(not t.evicted for t in d.state.topics)


def test_importance_defaults_and_explicit_values():
    d, c = Driver(make_ctx()), Conversation()
    d.feed(c("user", topic=0))
    assert d.topic().importance == 0.5
    d.feed(c("user", topic=0, importance=0.9))
    assert d.topic().importance == 0.9
    d.feed(c("user", topic=0))
    assert d.topic().importance == 0.9


def test_an_answer_for_an_evicted_topic_is_dropped():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 6)
    [req] = d.requests(d.feed(c("user", topic=0)))
    old = d.state.active_topic_id
    for k in range(1, 21):
        d.feed(c("user", topic=k, at=10 * DAY))
    assert d.topic(old).evicted
    s = d.state
    assert d.produce(req, "late") == [] and d.state == s


# --------------------------------------------------------------------------- stats and rows


def test_get_topic_stats_has_exactly_the_seed_fields_and_the_seed_example():
    refs = tuple(tp.MessageRef(index=i, role="user", timestamp=0.0) for i in range(8, 12))
    topic = tp.Topic(
        topic_id="abc123", title="Discussion about features", created_at=T0,
        last_active_at=T0 + timedelta(seconds=3480), importance=0.5, access_count=15, message_count=12,
        messages=refs, compressed=tp.compress_refs([tp.MessageRef(index=i, role="user", timestamp=0.0) for i in range(8)]),
        compressed_count=8, summary_id="sum-1", summary_text="features",
    )
    state = tp.State(tenant_id="t1", conversation_id="user123", topics=(topic,), active_topic_id="abc123",
                     now=T0 + timedelta(seconds=3600))
    assert tp.get_topic_stats(state) == {
        "topic_id": "abc123",
        "topic_title": "Discussion about features",
        "active_messages": 4,
        "compressed_messages": 8,
        "total_messages": 12,
        "has_summary": True,
        "importance_score": 0.5,
        "access_count": 15,
        "memory_type": "long-term",
        "half_life_days": 8.0,
        "age_seconds": 3600,
        "inactive_seconds": 120,
    }
    later = tp.get_topic_stats(state, T0 + timedelta(seconds=7200))
    assert (later["age_seconds"], later["inactive_seconds"]) == (7200, 3720)
    assert tp.get_topic_stats(tp.State(tenant_id="t", conversation_id="c")) == {}


def test_stats_and_rows_from_a_folded_conversation():
    d, c = Driver(make_ctx(max_messages_per_topic=6, recent_message_keep=2)), Conversation()
    fill(d, c, 0, 3)
    [req] = d.requests(d.feed(c("user", topic=0, at=600)))
    d.produce(req)
    stats = tp.get_topic_stats(d.state)
    assert list(stats) == SEED_STATS_FIELDS
    assert (stats["active_messages"], stats["compressed_messages"], stats["total_messages"]) == (2, 5, 7)
    assert (stats["access_count"], stats["memory_type"], stats["half_life_days"]) == (3, "short-term", 1.0)
    assert (stats["age_seconds"], stats["inactive_seconds"], stats["has_summary"]) == (600, 0, True)
    [row] = POLICY.rows(d.state)["topics"]
    assert {k: row[k] for k in ("message_count", "compressed_count", "access_count", "importance", "half_life_days",
                                "priority", "evicted", "active")} == {
        "message_count": 7, "compressed_count": 5, "access_count": 3, "importance": 0.5, "half_life_days": 1.0,
        "priority": 0.5, "evicted": False, "active": True,
    }
    assert row["last_active_at"] == (T0 + timedelta(seconds=600)).isoformat()


def test_rows_use_the_settings_the_state_was_folded_with():
    d, c = Driver(make_ctx(base_half_life_seconds=3600.0)), Conversation()
    d.feed(c("user", topic=0))
    assert tp.topic_rows(d.state)[0]["half_life_days"] == 1 / 24


# --------------------------------------------------------------------------- audit events, idempotency, deletion


def test_topic_events_are_emitted_once_with_deterministic_ids():
    d, c = Driver(make_ctx()), Conversation()
    out = d.feed(c("user", topic=0))
    [assigned] = out
    assert isinstance(assigned, TopicAssigned)
    assert assigned.payload.created and assigned.payload.message_index == 0 and assigned.payload.similarity is None
    assert assigned.causation_id == "m-c1-0" and assigned.payload.settings_hash == d.ctx.settings_hash
    assert d.feed(c("assistant")) == []
    [again] = d.feed(c("user", topic=0))
    assert not again.payload.created and again.payload.similarity == pytest.approx(1.0)
    fill(d, c, 0, 5)
    [req] = d.requests()
    [compacted] = d.produce(req)
    assert isinstance(compacted, TopicCompacted)
    assert (compacted.payload.compacted_through, compacted.payload.kept_recent) == (8, 4)
    s = d.state
    for e in (assigned, again, compacted):  # back from the log
        assert d.feed(e) == [] and d.state == s
    d2, c2 = Driver(make_ctx()), Conversation()
    assert d2.feed(c2("user", topic=0))[0].event_id == assigned.event_id


def test_a_deletion_leaves_no_topic_rows_or_stats():
    d, c = Driver(make_ctx()), Conversation()
    fill(d, c, 0, 7)
    d.feed(ConversationDeleted(event_id="del", tenant_id="t1", conversation_id="c1", occurred_at=T0))
    assert d.state.deleted and d.state.topics == ()
    assert tp.topic_rows(d.state) == [] and tp.get_topic_stats(d.state) == {}
