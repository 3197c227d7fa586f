"""The partitioner is Kafka's: murmur2 matches the Java client, partition_for matches kafka-python's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from memfold.core.events import conversation_key
from memfold.core.partitioner import murmur2, partition_for

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_KNOWN = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def signed32(value: int) -> int:
    """Return the 32-bit pattern ``value`` as Java's signed int (kafka-python returns it unsigned)."""
    return value - (1 << 32) if value & 0x80000000 else value


class _Cluster:
    """The three questions DefaultPartitioner asks a cluster, answered for one topic of ``n`` partitions."""

    def __init__(self, topic: str, n: int):
        self._topic, self._partitions = topic, set(range(n))

    def topics(self) -> set[str]:
        return {self._topic}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions


def kafka_python_partition(key: str, n: int) -> int:
    serialized = key.encode("utf-8")
    return DefaultPartitioner().partition("memfold.events", key, serialized, None, None, _Cluster("memfold.events", n))


@pytest.mark.parametrize(("data", "expected"), KAFKA_KNOWN, ids=[d.decode() for d, _ in KAFKA_KNOWN])
def test_murmur2_matches_the_java_client(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert signed32(kafka_python_murmur2(data)) == expected  # the reference used below is itself right


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=80))
def test_murmur2_matches_kafka_python_on_any_bytes(data: bytes) -> None:
    assert murmur2(data) == signed32(kafka_python_murmur2(data))
    assert -(2**31) <= murmur2(data) < 2**31


@settings(max_examples=500, deadline=None)
@given(tenant=st.text(min_size=1, max_size=30), conversation=st.text(min_size=1, max_size=60), n=st.integers(1, 1024))
def test_partition_for_matches_kafka_pythons_default_partitioner(tenant: str, conversation: str, n: int) -> None:
    key = conversation_key(tenant, conversation)
    assert partition_for(key, n) == kafka_python_partition(key, n)
    assert 0 <= partition_for(key, n) < n


def test_partition_for_matches_on_many_keys_and_counts() -> None:
    keys = [conversation_key(f"tenant-{t}", f"conversation-{c}") for t in range(7) for c in range(300)]
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 32, 100):
        assert [partition_for(k, n) for k in keys] == [kafka_python_partition(k, n) for k in keys]
        if n > 1:  # murmur2 spreads conversations over every partition
            assert set(partition_for(k, n) for k in keys) == set(range(n))


def test_partition_for_handles_negative_hashes_like_kafka() -> None:
    # toPositive(h) = h & 0x7fffffff, not abs(h): they differ for negative hashes
    key = "foobar"
    assert murmur2(key.encode()) < 0
    assert partition_for(key, 1000) == (-790332482 & 0x7FFFFFFF) % 1000 == kafka_python_partition(key, 1000)
    assert partition_for(key, 1000) != abs(-790332482) % 1000


def test_partition_for_is_stable_for_a_given_key() -> None:
    assert [partition_for("acme/c-1", 8) for _ in range(3)] == [partition_for("acme/c-1", 8)] * 3


@pytest.mark.parametrize("n", [0, -1])
def test_partition_for_needs_at_least_one_partition(n: int) -> None:
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        partition_for("acme/c-1", n)
