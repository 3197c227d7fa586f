"""A log record that could not be decoded: what readers get in its place, so one bad record never fails a whole read."""

from __future__ import annotations

import msgspec

from memfold.core.positions import Position


class UnreadableRecord(msgspec.Struct, frozen=True):
    """Stands *at* ``position`` for a stored record no event type decodes (older version, a bug, bytes written by hand).

    A log's ``read`` returns it as the ``event`` of that position's
    :class:`~memfold.core.positions.LogRecord`; it is no event (no event
    type names it, nothing appends it) and folds nothing. The projector
    records it in the ``poison_events`` table and moves past it.
    ``tenant_id`` / ``conversation_id`` / ``event_id`` are what the log
    knows of the record without decoding it (``None`` when it does not);
    ``error`` says why it could not be read.
    """

    position: Position
    error: str
    event_id: str | None = None
    stored_type: str | None = None
    tenant_id: str | None = None
    conversation_id: str | None = None

    @property
    def payload(self) -> None:
        """None: no payload can be read (code that looks for sealed content finds none)."""
        return None

    @property
    def key(self) -> str | None:
        """Return the conversation key ``tenant/conversation`` when the log knows both, else None."""
        if self.tenant_id is None or self.conversation_id is None:
            return None
        return f"{self.tenant_id}/{self.conversation_id}"
