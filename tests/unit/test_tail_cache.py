"""The hot tail's bounds: per conversation, conversations, and messages in all (memory flat with history)."""

from __future__ import annotations

from datetime import UTC, datetime

from memfold.core.ports import MessageRecord
from memfold.projections.tail import TailCache

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def msgs(conversation: str, start: int, count: int) -> list[MessageRecord]:
    return [
        MessageRecord("t", conversation, i, i + 1, f"{conversation}-{i}", "user", f"message {i}", 5, T0)
        for i in range(start, start + count)
    ]


def test_total_bound_evicts_least_recently_extended_conversations():
    tail = TailCache(max_messages=50, max_total=100)
    tail.extend(msgs("a", 0, 40))
    tail.extend(msgs("b", 0, 40))
    tail.extend(msgs("a", 40, 5))  # a is extended again: b is now the least recent
    tail.extend(msgs("c", 0, 40))
    assert len(tail) <= 100
    assert tail.window(("t", "b"), 0, None) is None  # evicted: the caller asks the store
    assert [m.index for m in tail.window(("t", "a"), 0, None)] == list(range(45))
    assert [m.index for m in tail.window(("t", "c"), 0, None)] == list(range(40))
    assert len(tail) == 85


def test_per_conversation_bound_keeps_a_suffix_and_the_count_follows_drops():
    tail = TailCache(max_messages=10, max_total=1000)
    tail.extend(msgs("a", 0, 25))
    assert len(tail) == 10
    assert tail.window(("t", "a"), 0, None) is None  # the start is before the suffix kept
    assert [m.index for m in tail.window(("t", "a"), 15, None)] == list(range(15, 25))
    tail.extend(msgs("b", 0, 3))
    tail.drop(("t", "a"))
    assert len(tail) == 3
    tail.clear()
    assert len(tail) == 0


def test_a_single_conversation_larger_than_the_total_bound_is_kept_whole():
    tail = TailCache(max_messages=300, max_total=100)
    tail.extend(msgs("a", 0, 150))
    assert [m.index for m in tail.window(("t", "a"), 0, None)] == list(range(150))


def test_a_seed_is_kept_only_when_nothing_of_its_conversation_changed_since_its_version():
    tail = TailCache(max_messages=10, max_total=1000)
    key = ("t", "a")
    version = tail.version(key)
    assert tail.seed(key, msgs("a", 20, 15), version)  # a reader's store answer, kept as a suffix
    assert [m.index for m in tail.window(key, 25, None)] == list(range(25, 35))
    assert not tail.seed(key, msgs("a", 30, 5), tail.version(key))  # held already
    tail.drop(key)
    stale = tail.version(key)
    tail.extend(msgs("a", 35, 1))  # a batch commits between the reader's store query and its seed
    tail.drop(key)  # (and the tail lost it again)
    assert not tail.seed(key, msgs("a", 20, 15), stale)
    gap = msgs("a", 0, 3) + msgs("a", 4, 2)  # a retracted message leaves a gap: never a tail
    assert not tail.seed(key, gap, tail.version(key))
    cleared = tail.version(key)
    tail.clear()
    assert not tail.seed(key, msgs("a", 0, 3), cleared)
    assert tail.seed(key, msgs("a", 0, 3), tail.version(key))


def test_an_eviction_refuses_a_seed_read_before_it():
    tail = TailCache(max_messages=10, max_total=10)
    version = tail.version(("t", "a"))
    tail.extend(msgs("a", 0, 10))
    tail.extend(msgs("b", 0, 10))  # a is evicted
    assert tail.window(("t", "a"), 0, None) is None
    assert not tail.seed(("t", "a"), msgs("a", 0, 5), version)
