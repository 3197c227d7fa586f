"""The ProjectionStore contract: rows and positions together, positions forward, reset, open requests, the summarizer's reads.

Subclass :class:`ProjectionStoreContract` and provide a ``make_store``
fixture returning a factory ``make_store(name="store")`` that opens (or
reopens, for the same name) a store; stores are closed at teardown. The
changes applied are built by the real projector from real events, as the
runner builds them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from memfold.core.errors import ProjectionError
from memfold.core.events import MessageAppended, MessagePayload, SummaryProduced, SummaryRequested
from memfold.core.ports import ProjectionStore
from memfold.core.positions import LogRecord, Position
from memfold.core.settings import Settings
from memfold.core.tokens import counter
from memfold.engine.builders import fold_contexts
from memfold.engine.worker import answer, build_input
from memfold.projections.offline_summarizer import OfflineSummarizer
from memfold.projections.projector import Projector

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def records(partition: int, start: int, count: int, conversation: str = "c1") -> list[LogRecord]:
    """Return ``count`` messages of one conversation at consecutive offsets of ``partition``."""
    return [
        LogRecord(
            Position(partition, start + i),
            MessageAppended(
                event_id=f"{conversation}-{start + i}", conversation_id=conversation, seq=start + i + 1,
                occurred_at=T0 + timedelta(minutes=start + i),
                payload=MessagePayload(role="user" if i % 2 == 0 else "assistant", content=f"message {start + i} order 42"),
            ),
        )
        for i in range(count)
    ]


class ProjectionStoreContract:
    make_store: Callable[..., ProjectionStore]

    def projector(self, store: ProjectionStore, **settings) -> Projector:
        return Projector(store, fold_contexts(Settings.load(None, **settings)), counter())

    def fold(self, store: ProjectionStore, batch: list[LogRecord], **settings) -> list[SummaryRequested]:
        changes, positions, decided = self.projector(store, **settings).project(batch)
        store.apply(changes, positions)
        return decided

    def test_a_new_store_has_applied_nothing(self, make_store):
        store = make_store()
        assert store.position() == {}
        assert not store.has_reached(Position(0, 0))

    def test_apply_advances_positions_with_the_rows(self, make_store):
        store = make_store()
        self.fold(store, records(2, 0, 5))
        assert store.position() == {2: 5}
        assert store.has_reached(Position(2, 4)) and not store.has_reached(Position(2, 5))
        assert not store.has_reached(Position(0, 0))
        assert [m.index for m in store.messages("default", "c1")] == [0, 1, 2, 3, 4]

    def test_positions_and_rows_survive_reopening(self, make_store):
        store = make_store("kept")
        self.fold(store, records(1, 0, 3))
        store.close()
        again = make_store("kept")
        assert again.position() == {1: 3}
        assert len(again.messages("default", "c1")) == 3

    def test_a_failed_apply_leaves_neither_rows_nor_positions(self, make_store):
        store = make_store()
        self.fold(store, records(0, 0, 2))
        changes, positions, _ = self.projector(store).project(records(0, 2, 3))
        positions[0] = 2**70  # beyond BIGINT: the positions write fails after the rows were written
        with pytest.raises(ProjectionError):
            store.apply(changes, positions)
        assert store.position() == {0: 2}
        assert len(store.messages("default", "c1")) == 2
        self.fold(store, records(0, 2, 3))  # and the store still works
        assert store.position() == {0: 5}

    def test_positions_never_move_backwards(self, make_store):
        store = make_store()
        self.fold(store, records(0, 0, 4))
        changes, _, _ = self.projector(store).project([])
        with pytest.raises(ProjectionError):
            store.apply(changes, {0: 2})
        assert store.position() == {0: 4}

    def test_reset_forgets_rows_and_positions(self, make_store):
        store = make_store()
        self.fold(store, records(3, 0, 4))
        store.reset()
        assert store.position() == {} and store.messages("default", "c1") == []
        self.fold(store, records(3, 0, 4))
        assert store.position() == {3: 4}

    def test_open_requests_are_the_decided_ones_without_an_outcome(self, make_store):
        store = make_store()
        # rolling asks for a summary within 8 messages with these knobs; the request comes back from the log.
        knobs = {"policies": ("rolling",), "policy": "rolling",
                 "rolling": {"message_threshold": 3, "recent_messages_to_keep": 1}}
        decided = self.fold(store, records(1, 0, 8), **knobs)
        assert decided, "the policy should have asked for a summary"
        request = decided[0].with_seq(9)
        changes, positions, _ = self.projector(store, **knobs).project([LogRecord(Position(1, 8), request)])
        store.apply(changes, positions)
        assert [r.event_id for r in store.open_request_events()] == [request.event_id]
        assert [r.event_id for r in store.open_request_events([1])] == [request.event_id]
        assert store.open_request_events([0, 2]) == []
        assert store.outcomes([request.event_id, "req-unknown"]) == {request.event_id: "processing"}

    def test_the_summarizer_reads_messages_at_indices_summaries_and_outcomes(self, make_store):
        """What the summarizer worker reads (streams.worker.build_input): messages by index, a summary by id, one outcome."""
        store = make_store()
        knobs = {"policies": ("rolling",), "policy": "rolling",
                 "rolling": {"message_threshold": 3, "recent_messages_to_keep": 1}}
        decided = self.fold(store, records(0, 0, 8), **knobs)
        assert [m.index for m in store.messages_at("default", "c1", [6, 2, 99, 4])] == [2, 4, 6]
        assert store.messages_at("default", "c1", []) == []
        assert store.messages_at("default", "nobody", [0]) == []
        request = decided[0].with_seq(9)
        assert store.outcome(request.event_id) is None  # decided, not yet folded back from the log
        settings = Settings.load(None, **knobs)
        outcome = answer(request, build_input(request, store, store, settings), OfflineSummarizer())
        assert isinstance(outcome, SummaryProduced)
        changes, positions, _ = self.projector(store, **knobs).project(
            [LogRecord(Position(0, 8), request), LogRecord(Position(0, 9), outcome.with_seq(10))])
        store.apply(changes, positions)
        assert store.outcome(request.event_id) == "completed"
        assert store.outcome("req-unknown") is None
        row = store.summary(outcome.payload.summary_id)
        assert row is not None and row["text"] == outcome.payload.text and row["request_id"] == request.event_id
        assert store.summary("sum-unknown") is None
