"""Time travel: a conversation's fold state as of an earlier point of the log, from the projection's history.

The projector snapshots every policy's state of a conversation (and its
counters) after each event whose ``seq`` is a multiple of
:data:`SNAPSHOT_EVERY`, in the ``state_history`` table, in the same
transaction as the rows. The state as of ``seq`` S is the newest snapshot at
or before S, folded forward with the conversation's events after it (fewer
than ``SNAPSHOT_EVERY``, read back from the ``events`` table) by the very
:func:`~memfold.projections.fold.fold_event` the projector runs: the same
state the live projection had right after S, without replaying the log.
Snapshots are taken at fixed seqs, so a rebuild writes the same rows.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memfold.core.errors import ValidationError
from memfold.core.events import MessageAppended, decode_dict
from memfold.core.ports import FoldContext, Policy
from memfold.core.positions import Position
from memfold.projections.fold import ConversationCounters, fold_event
from memfold.projections.policies import state_codec
from memfold.projections.store import DuckDBProjectionStore

SNAPSHOT_EVERY = 8  # an as-of read folds at most 7 events (about 0.3 ms each)

def snapshot_due(seq: int) -> bool:
    """True when the state after the event at ``seq`` is snapshotted (a pure function of seq: rebuilds agree)."""
    return seq % SNAPSHOT_EVERY == 0


def snapshot_row(tenant_id: str, conversation_id: str, seq: int, counters: ConversationCounters,
                 states: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``state_history`` row for a conversation's state after the event at ``seq``."""
    return {
        "tenant_id": tenant_id, "conversation_id": conversation_id, "seq": seq,
        "message_count": counters.message_count, "token_count": counters.token_count, "deleted": counters.deleted,
        "states": json.dumps({name: state_codec.to_builtins(s) for name, s in states.items()}, sort_keys=True),
    }


class _Conversation:
    """One conversation's history in memory: its events (seq order) and its snapshots."""

    __slots__ = ("partition", "seqs", "offsets", "rows", "snap_seqs", "snaps", "deleted")

    def __init__(self) -> None:
        self.partition: int | None = None
        self.seqs: list[int] = []
        self.offsets: list[int] = []
        self.rows: list[tuple] = []  # (type, seq, occurred_at, event_id, schema_version, causation_id, payload, tokens)
        self.snap_seqs: list[int] = []
        self.snaps: list[tuple] = []  # (message_count, token_count, deleted, states json)
        self.deleted = False

    def add_event(self, partition: int, offset: int, row: tuple) -> bool:
        if self.seqs and row[1] <= self.seqs[-1]:
            return True  # loaded from the store after its batch committed
        if self.seqs and row[1] != self.seqs[-1] + 1:
            return False
        self.partition = partition
        self.seqs.append(row[1])
        self.offsets.append(offset)
        self.rows.append(row)
        self.deleted = self.deleted or row[0] == "ConversationDeleted"
        return True

    def add_snapshot(self, seq: int, snap: tuple) -> None:
        if not self.snap_seqs or seq > self.snap_seqs[-1]:
            self.snap_seqs.append(seq)
            self.snaps.append(snap)


class HistoryCache:
    """Conversations being time-travelled, in memory: their events and state snapshots.

    Loaded from the store (two queries) the first time a conversation is
    read as of a point, then extended by each committed batch, so an as-of
    read never waits on DuckDB. LRU over conversations; thread-safe.
    """

    def __init__(self, store: DuckDBProjectionStore, max_conversations: int = 16):
        self.store = store
        self.max_conversations = max_conversations
        self._convs: dict[tuple[str, str], _Conversation] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget everything (after a failed transaction or a rebuild)."""
        with self._lock:
            self._convs.clear()

    def extend(self, ch: Any) -> None:
        """Follow a committed :class:`~memfold.projections.store.Changes` for the conversations held."""
        with self._lock:
            if not self._convs:
                return
            ev = ch.events
            tokens = dict(zip(ch.messages["event_id"], ch.messages["tokens"]))
            for i, (t, c) in enumerate(zip(ev["tenant_id"], ev["conversation_id"])):
                conv = self._convs.get((t, c))
                if conv is None:
                    continue
                row = (ev["type"][i], ev["seq"][i], ev["occurred_at"][i], ev["event_id"][i], ev["schema_version"][i],
                       ev["causation_id"][i], ev["payload"][i], tokens.get(ev["event_id"][i]))
                if not conv.add_event(ev["partition"][i], ev["offset"][i], row):
                    del self._convs[(t, c)]  # a gap (a restart in between): reload on next use
            for snap in ch.state_history:
                conv = self._convs.get((snap["tenant_id"], snap["conversation_id"]))
                if conv is not None:
                    conv.add_snapshot(snap["seq"], (snap["message_count"], snap["token_count"], snap["deleted"], snap["states"]))
            for key in ch.deleted:
                self._convs.pop(key, None)

    def conversation(self, key: tuple[str, str]) -> _Conversation:
        with self._lock:
            conv = self._convs.pop(key, None)
            if conv is None:
                conv = self._load(key)
                while len(self._convs) >= self.max_conversations:
                    self._convs.pop(next(iter(self._convs)))
            self._convs[key] = conv
            return conv

    def _load(self, key: tuple[str, str]) -> _Conversation:
        conv = _Conversation()
        _cols, rows = self.store.query(
            'SELECT e."partition", e."offset", e.type, e.seq, e.occurred_at, e.event_id, e.schema_version, '
            "e.causation_id, e.payload, m.tokens FROM events e LEFT JOIN messages m ON m.event_id = e.event_id "
            "AND m.tenant_id = e.tenant_id AND m.conversation_id = e.conversation_id "
            "WHERE e.tenant_id = ? AND e.conversation_id = ? ORDER BY e.seq", list(key))
        for r in rows:
            conv.add_event(r[0], r[1], r[2:])
        _cols, snaps = self.store.query(
            "SELECT seq, message_count, token_count, deleted, states FROM state_history "
            "WHERE tenant_id = ? AND conversation_id = ? ORDER BY seq", list(key))
        for r in snaps:
            conv.add_snapshot(r[0], r[1:])
        return conv


def seq_as_of(history: _Conversation, key: tuple[str, str], as_of: Position | datetime) -> int:
    """Return the conversation's last ``seq`` as of ``as_of`` (0 when nothing of it came before).

    - a :class:`Position`: every event of the conversation *at* or before it
      (the conversation's partition; another partition is an error);
    - a ``datetime``: the conversation as it was right after the last message
      said at or before that time was appended (summaries appended after that
      message are not in it, even if they cover earlier messages).
    """
    if isinstance(as_of, Position):
        if history.partition is not None and history.partition != as_of.partition:
            raise ValidationError(
                f"{key[0]}/{key[1]} lives in partition {history.partition}, not {as_of.partition}: "
                f"give a position in partition {history.partition} (or a timestamp)", field="as_of")
        at = bisect.bisect_right(history.offsets, as_of.offset)
        return history.seqs[at - 1] if at else 0
    if isinstance(as_of, datetime):
        if as_of.tzinfo is None:
            raise ValidationError("as_of timestamp needs a time zone (e.g. 2026-03-02T09:00:00+00:00)", field="as_of")
        return max((r[1] for r in history.rows if r[0] == "MessageAppended" and r[2] <= as_of), default=0)
    raise ValidationError(f"as_of must be a log Position or a datetime, not {type(as_of).__name__}", field="as_of")


def state_as_of(
    history: _Conversation,
    policies: Mapping[str, tuple[Policy, FoldContext]],
    key: tuple[str, str],
    seq: int,
) -> tuple[ConversationCounters, dict[str, Any]]:
    """Return the conversation's counters and every policy's state right after the event at ``seq``.

    Steps: (1) the newest snapshot at or before ``seq`` (else the initial
    state); (2) fold the events after it up to ``seq`` with ``fold_event``.
    A forgotten conversation has no history to show: it reads as deleted.
    """
    if history.deleted:
        return ConversationCounters(deleted=True), {name: impl.initial(*key) for name, (impl, _c) in policies.items()}
    at = bisect.bisect_right(history.snap_seqs, seq)
    if at:
        since = history.snap_seqs[at - 1]
        messages, tokens, deleted, raw = history.snaps[at - 1]
        counters = ConversationCounters(messages, tokens, deleted)
        stored = json.loads(raw)
        states = {name: state_codec.from_builtins(impl.State, stored[name]) if name in stored else impl.initial(*key)
                  for name, (impl, _ctx) in policies.items()}
    else:
        since, counters = 0, ConversationCounters()
        states = {name: impl.initial(*key) for name, (impl, _ctx) in policies.items()}
    lo, hi = bisect.bisect_right(history.seqs, since), bisect.bisect_right(history.seqs, seq)
    for type_, seq_, occurred_at, event_id, version, causation_id, payload, tokens in history.rows[lo:hi]:
        event = decode_dict({
            "event_id": event_id, "type": type_, "schema_version": version, "tenant_id": key[0],
            "conversation_id": key[1], "seq": seq_, "occurred_at": occurred_at, "causation_id": causation_id,
            "payload": json.loads(payload),
        })
        folded = fold_event(event, counters, policies, states.__getitem__,
                            tokens=(tokens or 0) if isinstance(event, MessageAppended) else 0)
        counters = folded.counters
        states.update(folded.states)
    return counters, states
