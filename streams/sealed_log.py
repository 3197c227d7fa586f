"""An ``EventLog`` that seals content on append and unseals it on read (crypto-shredding).

Wraps any backend (SQLite file, Kafka topic): only ciphertext ever reaches
the log, so erasing a conversation is destroying its data key; the log
itself stays immutable. Readers get plaintext while the key lives and the
sealed event (see :func:`memfold.core.sealing.is_shredded`) after.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from memfold.core.errors import EventDecodeError
from memfold.core.events import Event
from memfold.core.ports import EventLog, KeepsAppended
from memfold.core.positions import LogRecord, Position
from memfold.core.sealing import Sealer
from memfold.core.unreadable import UnreadableRecord
from memfold.streams.keystore import open_keystore


class SealedLog:
    """``EventLog`` over ``inner`` with content sealed by ``sealer``; every other call passes through."""

    def __init__(self, inner: EventLog, sealer: Sealer):
        self.inner = inner
        self.sealer = sealer

    @property
    def partition_count(self) -> int:
        return self.inner.partition_count

    def append(self, events: Sequence[Event]) -> list[Position]:
        """Seal ``events`` (keys are created durably first), then append them to the inner log."""
        return self.inner.append(self.sealer.seal(events))

    def read(self, partition: int, start: int, limit: int = 1000) -> list[LogRecord]:
        """Return the inner log's records *at* ``start`` onwards, content unsealed where keys live.

        A record whose sealed content does not authenticate (tampered bytes)
        is read as an :class:`UnreadableRecord` in its place, like a record
        that does not decode: one bad record never fails the whole read.
        """
        return [self._unsealed(r) for r in self.inner.read(partition, start, limit)]

    def scan(self, partition: int, start: int, types: Collection[str], limit: int = 5000) -> tuple[list[LogRecord], int]:
        """The inner log's scan, the records found unsealed (the others are never decoded, let alone unsealed)."""
        records, after = self.inner.scan(partition, start, types, limit)
        return [self._unsealed(r) for r in records], after

    def _unsealed(self, record: LogRecord) -> LogRecord:
        event = record.event
        if isinstance(event, UnreadableRecord):
            return record
        try:
            return LogRecord(record.position, self.sealer.unseal(event))
        except EventDecodeError as exc:
            return LogRecord(record.position, UnreadableRecord(
                record.position, str(exc), event_id=event.event_id, stored_type=event.type,
                tenant_id=event.tenant_id, conversation_id=event.conversation_id,
            ))

    def partitions(self) -> list[int]:
        return self.inner.partitions()

    def end_positions(self) -> dict[int, int]:
        return self.inner.end_positions()

    def find(self, event_ids: Sequence[str]) -> dict[str, Position]:
        return self.inner.find(event_ids)

    def keep_appended(self, limit: int) -> None:
        """Have the wrapped log keep what is appended for its next read, where it can (:class:`KeepsAppended`)."""
        if isinstance(self.inner, KeepsAppended):
            self.inner.keep_appended(limit)

    def close(self) -> None:
        """Close the inner log and the key store."""
        try:
            self.inner.close()
        finally:
            self.sealer.keys.close()


def sealed(log: EventLog, keystore: str | None) -> tuple[EventLog, Sealer | None]:
    """Return ``log`` sealing content with the key store at ``keystore``, and its sealer; as is when None."""
    if keystore is None:
        return log, None
    if keystore.startswith("kafka://"):  # shared by every node of a Kafka deployment
        from memfold.streams.kafka_keystore import open_kafka_keystore

        sealer = Sealer(open_kafka_keystore(keystore))
        return SealedLog(log, sealer), sealer
    sealer = Sealer(open_keystore(keystore))
    return SealedLog(log, sealer), sealer
