"""Kafka's default partitioner (murmur2 over the key bytes), so both log modes agree on partitions.

A port of ``org.apache.kafka.common.utils.Utils.murmur2`` and
``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % n``.
"""

from __future__ import annotations

from functools import lru_cache

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Return Kafka's murmur2 hash of ``data`` as a signed 32-bit int (what Java returns)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def partition_for(key: str, partitions: int) -> int:
    """Return the partition Kafka's default partitioner picks for ``key`` among ``partitions``."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions
