"""Log positions and the records a log hands out."""

from __future__ import annotations

import msgspec

from memfold.core.errors import ValidationError
from memfold.core.events import Event


class Position(msgspec.Struct, frozen=True, order=True):
    """Where an event sits in the log: ``offset`` within ``partition`` (Kafka's terms).

    Offsets start at 0 and grow by one per event within a partition. Positions
    in different partitions are not causally ordered; compare only within one.
    A store "has reached" a position when it has applied the event *at* it.
    """

    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"


class LogRecord(msgspec.Struct, frozen=True):
    """One event as read from the log, with the position it was read *at*."""

    position: Position
    event: Event


def check_offsets(start: int, limit: int) -> None:
    """Raise a ``ValidationError`` for a read or scan starting before offset 0 or asking for fewer than one record."""
    if start < 0:
        raise ValidationError(f"start offset must be >= 0, got {start}", field="start")
    if limit < 1:
        raise ValidationError(f"limit must be >= 1, got {limit}", field="limit")
