"""Deterministic identifiers and canonical hashing: the same inputs always give the same id."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any


def canonical_json(value: Any) -> str:
    """Return JSON with sorted keys and no whitespace: a stable text to hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(*parts: Any, length: int = 32) -> str:
    """Return a hex sha256 over the canonical JSON of ``parts``, cut to ``length`` characters."""
    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()[:length]


def new_event_id() -> str:
    """Return a fresh random id for a fact from outside (a message). Never called inside a fold."""
    return uuid.uuid4().hex
