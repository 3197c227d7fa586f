"""The policy fold over a key-value table: what the faust policy agent keeps per partition and conversation.

No faust here: :class:`PolicyFolder` reads and plans writes against any
mapping with ``get`` (a faust ``Table`` in the worker, a dict in tests), so
its re-delivery and duplicate rules are tested without a broker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from memfold.engine.events import Event, MessageAppended
from memfold.engine.ports import FoldContext, Policy
from memfold.engine.tokens import TokenCounter
from memfold.projections.fold import ConversationCounters, fold_event

PARSED_STATES = 20_000  # parsed policy states kept in memory (the table holds them all as JSON)
_NEW_CONVERSATION = {"offset": -1, "seq": 0, "message_count": 0, "token_count": 0, "deleted": False}


def partition_key(partition: int) -> str:
    return f"part|{partition}"


def conversation_key(key: str) -> str:
    return f"conv|{key}"


def state_key(policy: str, key: str) -> str:
    return f"state|{policy}|{key}"


def id_key(partition: int, event_id: str) -> str:
    return f"id|{partition}|{event_id}"


class PolicyFolder:
    """Fold topic records into the policies with :func:`~memfold.projections.fold.fold_event`, via a table.

    Table layout (one table: every write for a record goes to the record's
    changelog partition, in the order written):

    - ``state|policy|tenant/conversation`` → ``{"offset", "state"}``: the
      policy's state JSON (as the projector stores it) and the last offset
      folded into it; written only when the state changed;
    - ``id|partition|event_id`` → the first offset of that event id, so a
      re-appended duplicate is dropped exactly as :class:`KafkaEventLog` drops
      it on read;
    - ``conv|tenant/conversation`` → ``{"offset", "seq", "message_count",
      "token_count", "deleted"}``: the conversation's counters (``seq`` as
      the log assigns it on read) and its last folded offset;
    - ``part|partition`` → the last offset folded in the partition: every
      offset is folded once, in order (the caller fills any gap from the log).

    Each value carries the offset it is current through and the writes of one
    record come in that order, so a crash between any two of them leaves
    nothing folded twice: a re-folded record skips every key already past it.
    """

    def __init__(self, table: Any, policies: Mapping[str, tuple[Policy, FoldContext]], counter: TokenCounter):
        self.table = table
        self.policies = policies
        self.counter = counter
        self._parsed: OrderedDict[str, tuple[int, BaseModel]] = OrderedDict()  # table key -> (offset, state)
        self.folded = 0
        self.skipped = 0
        self.filled = 0

    def position(self, partition: int) -> int:
        """Return the last offset folded in ``partition`` (-1 before the first)."""
        stored = self.table.get(partition_key(partition))
        return -1 if stored is None else stored

    def plan(self, partition: int, offset: int, event: Event) -> tuple[list[Event], dict[str, Any]]:
        """Fold the record at ``partition``/``offset`` (the one after :meth:`position`); return (events to append, writes).

        Pure apart from reading the table. The caller appends the events
        (deterministic ids) first, then applies the writes in order, so a
        crash in between plans the same events again. A record repeating an
        earlier event id, or already folded into the conversation (a crash
        before ``part|`` was written), only advances the partition.
        """
        key = event.key
        conv = self.table.get(conversation_key(key)) or _NEW_CONVERSATION
        first = self.table.get(id_key(partition, event.event_id))
        if offset <= conv["offset"] or (first is not None and first < offset):
            self.skipped += 1
            return [], {partition_key(partition): offset}
        event = event.with_seq(conv["seq"] + 1)
        tokens = self.counter.count_message(event.payload.content or "") if isinstance(event, MessageAppended) else 0
        pending = {name: pc for name, pc in self.policies.items() if self._state_offset(name, key) < offset}
        folded = fold_event(
            event,
            ConversationCounters(conv["message_count"], conv["token_count"], conv["deleted"]),
            pending,
            lambda name: self._state(name, event),
            tokens=tokens,
        )
        writes: dict[str, Any] = {}
        for name, state in folded.states.items():
            if state != self._state(name, event):
                writes[state_key(name, key)] = {"offset": offset, "state": state.model_dump_json()}
                self._remember(state_key(name, key), offset, state)
        writes[id_key(partition, event.event_id)] = offset
        c = folded.counters
        writes[conversation_key(key)] = {
            "offset": offset, "seq": event.seq, "message_count": c.message_count,
            "token_count": c.token_count, "deleted": c.deleted,
        }
        writes[partition_key(partition)] = offset
        self.folded += 1
        return list(folded.requests), writes

    def stats(self) -> str:
        """Return one line of counters."""
        return (
            f"folded {self.folded} events ({self.skipped} repeats skipped, "
            f"{self.filled} read from the log where faust skipped them)"
        )

    def _state_offset(self, policy: str, key: str) -> int:
        stored = self.table.get(state_key(policy, key))
        return -1 if stored is None else stored["offset"]

    def _state(self, policy: str, event: Event) -> BaseModel:
        tkey = state_key(policy, event.key)
        stored = self.table.get(tkey)
        impl = self.policies[policy][0]
        if stored is None:
            return impl.initial(event.tenant_id, event.conversation_id)
        cached = self._parsed.get(tkey)
        if cached is not None and cached[0] == stored["offset"]:
            self._parsed.move_to_end(tkey)
            return cached[1]
        state = impl.State.model_validate_json(stored["state"])
        self._remember(tkey, stored["offset"], state)
        return state

    def _remember(self, tkey: str, offset: int, state: BaseModel) -> None:
        self._parsed[tkey] = (offset, state)
        self._parsed.move_to_end(tkey)
        if len(self._parsed) > PARSED_STATES:
            self._parsed.popitem(last=False)
