"""Split a benchmark's conversations into a tuning half and a held-out half, by a hash of their id.

Rules and recall constants are tuned on the tuning half only; every figure
the docs report is the held-out half's, so a change that fits the data it
was tuned on shows up as a gap between the halves instead of as progress.
The split depends on nothing but the id (sha256, first byte's parity), so it
is the same on every machine and for every run, and a conversation never
moves between halves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TypeVar

HALVES = ("tuning", "held-out", "all")
T = TypeVar("T")


def half_of(conversation_id: str) -> str:
    """Return ``"tuning"`` or ``"held-out"``: the half ``conversation_id`` belongs to."""
    return "held-out" if hashlib.sha256(conversation_id.encode()).digest()[0] % 2 else "tuning"


def select(items: Iterable[T], half: str, key: Callable[[T], str]) -> list[T]:
    """Return the ``items`` whose id (``key(item)``) is in ``half`` (``"all"``: every item), in order."""
    if half not in HALVES:
        raise ValueError(f"unknown half {half!r}: one of {', '.join(HALVES)}")
    return [item for item in items if half == "all" or half_of(key(item)) == half]
