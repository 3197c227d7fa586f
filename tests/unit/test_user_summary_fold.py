"""When the fold asks for the user's summary, and that folding the same log again (another order of partitions,
a fresh projection) asks the same requests and keeps the same user summary rows. Real projector, DuckDB store and
offline summarizer; the log is a list per partition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memfold.core.events import Event, MessageAppended, MessagePayload, SummaryRequested
from memfold.core.positions import LogRecord, Position
from memfold.core.settings import Settings
from memfold.core.tokens import counter
from memfold.engine.builders import fold_contexts
from memfold.engine.worker import FoldedSource, answer, build_input
from memfold.projections.fold import user_summary_due
from memfold.projections.offline_summarizer import OfflineSummarizer
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)
PARTITION = {"a": 0, "b": 1}
TABLES = ("conversations", "summaries", "user_summaries", "user_notes", "user_facts")


def _settings(every: int) -> Settings:
    return Settings.load(None, policy="hierarchical", policies=("hierarchical",), users={"summary_every": every},
                         hierarchical={"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 2})


def _messages(conversation: str, day: int, first: str, count: int = 14) -> list[MessageAppended]:
    return [MessageAppended(
        event_id=f"{conversation}-{i}", conversation_id=conversation, occurred_at=T0 + timedelta(days=day, minutes=i),
        payload=MessagePayload(role="user" if i % 2 == 0 else "assistant", user_id="dana" if i == 0 else None,
                               content=first if i == 0 else f"Noted, item {i} of {conversation}."),
    ) for i in range(count)]


class _Log:
    """Partitions of events with their seqs, as the log assigns them."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[Event]] = {0: [], 1: []}
        self._seq: dict[str, int] = {}
        self._ids: set[str] = set()

    def append(self, events: list[Event]) -> None:
        for e in events:
            if e.event_id in self._ids:
                continue
            self._ids.add(e.event_id)
            self._seq[e.conversation_id] = self._seq.get(e.conversation_id, 0) + 1
            self.partitions[PARTITION[e.conversation_id]].append(e.with_seq(self._seq[e.conversation_id]))

    def records(self, partition: int, start: int = 0) -> list[LogRecord]:
        return [LogRecord(Position(partition, start + i), e) for i, e in enumerate(self.partitions[partition][start:])]


def _fold(store: DuckDBProjectionStore, projector: Projector, records: list[LogRecord]) -> list[SummaryRequested]:
    changes, positions, decided = projector.project(records)
    store.apply(changes, positions)
    projector.committed(changes)
    return decided


def _live(path: Path, settings: Settings) -> tuple[_Log, DuckDBProjectionStore]:
    """Run log, fold and summarizer to rest: each batch's requests answered at once (the runner and worker's loop)."""
    store = DuckDBProjectionStore(path)
    projector = Projector(store, fold_contexts(settings), counter(settings.encoding))
    inputs = FoldedSource(projector.tail, store, partition_count=1)  # one partition: both conversations meet
    projector.listeners.append(inputs.committed)
    summarizer = OfflineSummarizer()
    log = _Log()
    log.append([*_messages("a", 0, "I live in Berlin and my order number is #4471.")])
    log.append([*_messages("b", 40, "Big news: I moved to Munich last week.")])
    done = {0: 0, 1: 0}
    while any(done[p] < len(log.partitions[p]) for p in done):
        batch = [r for p in (0, 1) for r in log.records(p, done[p])]
        done = {p: len(log.partitions[p]) for p in done}
        decided = _fold(store, projector, batch)
        log.append(decided)
        log.append([answer(r, build_input(r, inputs, inputs, settings), summarizer) for r in decided])
    return log, store


def test_the_nth_summary_of_a_users_conversation_asks_for_the_users_summary():
    assert [n for n in range(1, 8) if user_summary_due(n, 3)] == [3, 6]
    assert not any(user_summary_due(n, 0) for n in range(8)) and not user_summary_due(0, 1)


def test_the_fold_asks_for_the_user_summary_every_nth_summary_and_a_refold_in_another_order_agrees(tmp_path):
    settings = _settings(2)
    log, store = _live(tmp_path / "live.duckdb", settings)
    events = [e for p in (0, 1) for e in log.partitions[p]]
    own = {c: [e for e in events if e.type == "SummaryProduced" and e.conversation_id == c
               and e.payload.scope == "conversation"] for c in ("a", "b")}
    asked = [e for e in events if isinstance(e, SummaryRequested) and e.payload.scope == "user"]
    assert all(len(own[c]) >= 2 for c in own), "too few summaries for the trigger to be tested"
    # Every second summary of each conversation, and only those, named by it, on its conversation's stream.
    for c in ("a", "b"):
        expected = [s.payload.summary_id for i, s in enumerate(own[c], 1) if i % 2 == 0]
        assert [r.causation_id for r in asked if r.conversation_id == c] == expected
    assert all(r.payload.base_summary_id is None for r in asked)
    assert all(r.payload.token_cap == settings.users.summary_token_cap and r.payload.covers_to == -1 for r in asked)
    rows = store.dump(TABLES)
    assert rows["user_summaries"], "no user summary folded"
    newest = max(rows["user_summaries"], key=lambda r: (r[9], r[4]))
    assert newest[3] == "b" and list(newest[7]) == ["a", "b"]  # made in b, over a's and b's summaries
    assert store.user_summaries("default", "dana")[0]["summary_id"] == newest[4]
    store.close()

    # The same log folded again, partition 1 first, in one batch each: the same requests, the same rows.
    fresh = DuckDBProjectionStore(tmp_path / "again.duckdb")
    projector = Projector(fresh, fold_contexts(settings), counter(settings.encoding))
    decided = _fold(fresh, projector, log.records(1)) + _fold(fresh, projector, log.records(0))
    assert {r.event_id for r in decided if r.payload.scope == "user"} == {r.event_id for r in asked}
    assert fresh.dump(TABLES) == rows
    fresh.close()


def test_no_user_summary_is_asked_when_summary_every_is_0(tmp_path):
    log, store = _live(tmp_path / "off.duckdb", _settings(0))
    events = [e for p in (0, 1) for e in log.partitions[p]]
    assert [e for e in events if e.type == "SummaryProduced"]
    assert not [e for e in events if getattr(e.payload, "scope", None) == "user"]
    assert store.dump(("user_summaries",))["user_summaries"] == []
    store.close()
