"""Fold log records into row changes and policy state; collect the requests policies decide.

The projector is the same code in every mode: the embedded runner calls it
on records read from the SQLite log, a projector node on records from Kafka.
It keeps per-conversation fold state in memory (loaded from the store on
first use) and hands :class:`~memfold.projections.store.Changes` plus the new
positions to the store, which commits both in one transaction.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec
from pydantic import BaseModel

from memfold.core.events import (
    PRIVATE_FIELDS,
    ConversationDeleted,
    Event,
    MessageAppended,
    MessageRetracted,
    SummaryFailed,
    SummaryProduced,
    SummaryRequested,
    TopicEvicted,
)
from memfold.core.ports import FoldContext, MessageRecord, Policy, PolicyTables
from memfold.core.positions import LogRecord
from memfold.core.sealing import is_shredded, seal_scope
from memfold.core.tokens import MESSAGE_OVERHEAD, TokenCounter, text_digest
from memfold.core.unreadable import UnreadableRecord
from memfold.projections import retrieval, time_travel
from memfold.projections.fold import ConversationCounters, fold_event, user_summary_due, user_summary_request
from memfold.projections.fold_text import retracts
from memfold.projections.policies import state_codec
from memfold.projections.policies._topic_memory import taken_back
from memfold.projections.read_cache import ColdReads
from memfold.projections.store import ERASED_PAYLOAD, Changes, DuckDBProjectionStore
from memfold.projections.tail import TailCache
from memfold.projections.user_context import UserReads


class _Conversation(msgspec.Struct):
    partition: int
    message_count: int = 0
    last_seq: int = 0
    token_count: int = 0
    first_at: Any = None
    last_at: Any = None
    deleted: bool = False
    user_id: str | None = None  # the first user its messages named: a conversation belongs to at most one
    # Per policy, the summaries folded here while it belonged to a user: every ``user_summary_every``-th
    # asks for the user's summary.
    user_summary_counts: dict[str, int] = msgspec.field(default_factory=dict)
    stored: bool = False  # the store holds its row (and its policy states): Changes.stored

    @classmethod
    def from_row(cls, row: dict[str, Any] | None, partition: int) -> _Conversation:
        """Return the counters of a ``conversations`` row, or fresh ones for a new conversation."""
        if row is None:
            return cls(partition=partition)
        return cls(
            partition=row["partition"], message_count=row["message_count"], last_seq=row["last_seq"],
            token_count=row["token_count"], first_at=row["first_at"], last_at=row["last_at"], deleted=row["deleted"],
            user_id=row.get("user_id"),
            user_summary_counts=json.loads(row["user_summary_counts"]) if row.get("user_summary_counts") else {},
            stored=True,
        )


# Memory texts whose token counts the projector remembers between batches (then it starts over).
PLAN_COUNT_MEMO = 4096
PAUSE_EVERY = 16  # folded events between two calls of Projector.pause (~2 ms of the fold)


class ServingHooks(msgspec.Struct, frozen=True):
    """What a process serving reads beside the fold asks of every projector built for it (the service's).

    ``relate_users``: each commit names, in ``Changes.related``, the other
    conversations of the users it touched (their contexts hold those users'
    memory and recall), for a cache of contexts. ``pause``: called every
    :data:`PAUSE_EVERY` folded events, where the fold lets waiting reads go
    first; it must not touch the fold's data and may block for a moment.
    """

    relate_users: bool = False
    pause: Callable[[], None] | None = None


NO_HOOKS = ServingHooks()  # a projector not built for a serving process


class Projector:
    """Turn log records into row changes + policy state; one instance per store."""

    def __init__(
        self,
        store: DuckDBProjectionStore,
        policies: dict[str, tuple[Policy, FoldContext]],
        counter: TokenCounter,
        *,
        max_conversations: int = 20_000,
        hooks: ServingHooks = NO_HOOKS,
    ):
        self.store = store
        self.max_conversations = max_conversations
        self.policies = policies
        # Policies with tables of their own (PolicyTables): their rows after each batch, and whether they hold topics.
        self._tables = {name: impl for name, (impl, _) in policies.items() if isinstance(impl, PolicyTables)}
        self.counter = counter
        self._plan_counts: dict[str, int] = {}  # memory text -> tokens, for _plan_tokens
        self._recorded_counts: dict[str, int] = {}  # text digest -> tokens, as recorded with the states loaded
        self.tail = TailCache()
        self.search = retrieval.SearchIndex(store.search_rows, store.messages)
        self.history = time_travel.HistoryCache(store)
        self.users = UserReads(store, counter.count)  # conversations' users and users' memory, for reads
        self.relate_users = hooks.relate_users
        self.pause = hooks.pause
        # Called with each batch's Changes once durable (the dense index queues its messages to embed).
        self.listeners: list[Callable[[Changes], None]] = []
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._states: dict[tuple[str, str, str], BaseModel] = {}
        # States a read fetched for a conversation the fold holds none of (a restart, an evicted conversation):
        # kept until a batch touching the conversation commits (read_cache), so the next read asks no query.
        self._cold_states: ColdReads[BaseModel] = ColdReads()
        # (policy, tenant, conversation) -> (key, value) -> [fact_id, superseded_by, retired_by] of its newest row
        self._facts: dict[tuple[str, str, str], dict[tuple[str, str], list[str | None]]] = {}
        # Per topic (topics policy), the facts its latest summary holds (a topic's next summary retires what it
        # dropped, its eviction what it held), and the topics evicted.
        self._holdings: dict[tuple[str, str, str], tuple[dict[str, set[tuple[str, str]]], set[str]]] = {}
        # (policy, tenant, conversation) -> the policy rows last handed to the store: unchanged rows are not rewritten
        self._rows: dict[tuple[str, str, str], dict[str, list[dict[str, Any]]]] = {}

    # ----------------------------------------------------------------- state access

    def holds_state(self, policy: str, tenant_id: str, conversation_id: str) -> bool:
        """True when :meth:`state` answers from memory (no store query)."""
        key = (policy, tenant_id, conversation_id)
        return key in self._states or key in self._cold_states

    def stored(self, tenant_id: str, conversation_id: str) -> bool | None:
        """Return True when the conversation holds messages here, False when it was forgotten, None when never folded."""
        conv = self._conversations.get((tenant_id, conversation_id))
        if conv is not None:
            return not conv.deleted
        row = self.store.conversation(tenant_id, conversation_id)
        return None if row is None else not row.get("deleted")

    def drop_text_caches(self) -> None:
        """Forget the memory texts whose token counts this projector remembers (an erasure: their content)."""
        self._plan_counts.clear()

    def _plan_tokens(self, policy: str, state: BaseModel) -> str:
        """Return the JSON of the token counts ``state``'s context plan counts, by :func:`text_digest`.

        Recorded with the state, so a process that only reads plans with them
        and never loads the tokenizer. A memory text unchanged since the last
        batch is counted from :attr:`_plan_counts`, and one unchanged since
        the state was stored from the counts recorded with it: neither is
        encoded again.
        """
        impl, ctx = self.policies[policy]
        counts: dict[str, int] = {}
        memo, recorded = self._plan_counts, self._recorded_counts

        def count(text: str) -> int:
            n = memo.get(text)
            digest = text_digest(text)
            if n is None:
                if len(memo) >= PLAN_COUNT_MEMO:
                    memo.clear()
                n = recorded.get(digest)
                memo[text] = n = self.counter.count(text) if n is None else n
            counts[digest] = n
            return n

        impl.plan(state, msgspec.structs.replace(ctx, count_tokens=count))
        return json.dumps(counts, sort_keys=True)

    def state(self, policy: str, tenant_id: str, conversation_id: str) -> BaseModel:
        """Return the current fold state of ``policy`` for a conversation (initial if none)."""
        key = (policy, tenant_id, conversation_id)
        state = self._states.get(key)
        if state is not None:
            return state
        state = self._cold_states.get(key)
        if state is not None:
            return state
        conv = (tenant_id, conversation_id)
        version = self._cold_states.version(conv)
        impl, _ = self.policies[policy]
        raw = self.store.policy_state_json(policy, tenant_id, conversation_id)
        state = state_codec.decode(impl.State, raw) if raw else impl.initial(tenant_id, conversation_id)
        if conv in self._conversations:  # bounded with it
            # setdefault, never assignment: a reader's load from the store must not overwrite the
            # newer state a batch being folded put there meanwhile (a verify caught count 20 vs 25).
            return self._states.setdefault(key, state)
        self._cold_states.put(key, conv, state, version)  # kept unless a batch of it committed meanwhile
        return state

    def recent_messages(
        self, tenant_id: str, conversation_id: str, start: int, budget: int | None
    ) -> list[MessageRecord]:
        """Return :meth:`DuckDBProjectionStore.recent_messages` from the hot tail when it can answer exactly.

        Otherwise from the store; the tail then keeps what was read (or the
        newest message alone, when nothing from ``start`` on is left: the
        memory covers every turn) unless a batch of the conversation
        committed meanwhile (:meth:`TailCache.seed`), like :meth:`state`.
        """
        key = (tenant_id, conversation_id)
        hot = self.tail.window(key, start, budget)
        if hot is not None:
            return hot
        version = self.tail.version(key)
        recent = self.store.recent_messages(tenant_id, conversation_id, start, budget)
        if not self.tail.holds(key):
            newest = recent or (self.store.recent_messages(tenant_id, conversation_id, 0, 0) if start > 0 else [])
            self.tail.seed(key, newest, version)
        return recent

    def drop_reads(self, key: tuple[str, str]) -> None:
        """Forget what reads keep of a conversation (its hot tail and cold-read states): an erasure calls it."""
        self.tail.drop(key)
        self._cold_states.invalidate([key])

    def committed(self, changes: Changes) -> None:
        """Note that ``changes`` are durable: their messages join the hot tail read by ``context``.

        When they erased a conversation that had content, the store file is
        rewritten (:meth:`DuckDBProjectionStore.compact`) before returning.
        """
        # A retraction leaves a gap in the conversation's messages: its caches reload from the store.
        gone = changes.deleted | {(t, c) for t, c, _ in changes.retracted} if changes.retracted else changes.deleted
        for key in gone:
            self.tail.drop(key)
            self.search.drop(key)
        if changes.erased:
            self.store.compact()  # DuckDB leaves deleted rows' bytes in freed blocks
        self._cold_states.invalidate({*changes.conversations, *((t, c) for _, t, c in changes.policy_states), *gone})
        records = [r for r in changes.records if (r.tenant_id, r.conversation_id) not in gone]
        self.tail.extend(records)
        self.search.extend(changes.search, records)
        self.history.extend(changes)
        self.users.committed(changes)
        if self.relate_users:
            owners = {(t, row["user_id"]) for (t, _), row in changes.conversations.items() if row.get("user_id")}
            for tenant_id, user_id in sorted(owners | changes.users):
                changes.related.update((tenant_id, c) for c in self.users.memory(tenant_id, user_id).conversations)
        for key in changes.conversations:
            if key in self._conversations:
                self._conversations[key].stored = True
        self._bound(changes.conversations)
        for listener in self.listeners:
            listener(changes)

    def _bound(self, touched: Iterable[tuple[str, str]]) -> None:
        """Keep at most ``max_conversations`` conversations' fold state in memory, least recently folded out.

        Only committed state is evicted (it reloads from the store on next
        use), so memory stays flat however many conversations the log holds.
        """
        convs = self._conversations
        for key in touched:  # most recently folded last
            conv = convs.pop(key, None)
            if conv is not None:
                convs[key] = conv
        excess = len(convs) - self.max_conversations
        if excess > 0:
            for key in list(itertools.islice(convs, excess)):
                self._drop(key)

    def forget(self) -> None:
        """Drop every in-memory cache; they reload from the store (after a failed transaction)."""
        self.tail.clear()
        self.search.clear()
        self.history.clear()
        self.users.clear()
        self._cold_states.clear()
        self._conversations.clear()
        self._states.clear()
        self._facts.clear()
        self._holdings.clear()
        self._rows.clear()

    def forget_partitions(self, partitions: set[int]) -> None:
        """Drop the cached state of conversations living in ``partitions`` (given up to another worker)."""
        for key in [key for key, conv in self._conversations.items() if conv.partition in partitions]:
            self._drop(key)
            self.tail.drop(key)
            self.search.drop(key)
        self._cold_states.clear()  # a conversation of those partitions read cold: another worker folds it now

    def _drop(self, key: tuple[str, str]) -> None:
        del self._conversations[key]
        for name in self.policies:
            self._states.pop((name, *key), None)
            self._facts.pop((name, *key), None)
            self._holdings.pop((name, *key), None)
            self._rows.pop((name, *key), None)

    def _conversation(self, tenant_id: str, conversation_id: str, partition: int) -> _Conversation:
        key = (tenant_id, conversation_id)
        conv = self._conversations.get(key)
        if conv is None:
            conv = _Conversation.from_row(self.store.conversation(tenant_id, conversation_id), partition)
            self._conversations[key] = conv
        return conv

    def _prefetch(self, keys: dict[tuple[str, str], int]) -> None:
        """Load the conversations (and their policy states) this batch touches, in two queries."""
        missing = [k for k in keys if k not in self._conversations]
        if not missing:
            return
        rows, states, counts = self.store.conversations_and_states(missing)
        if len(self._recorded_counts) + len(counts) > PLAN_COUNT_MEMO:
            self._recorded_counts.clear()
        self._recorded_counts.update(counts)
        for key in missing:
            row = rows.get(key)
            self._conversations[key] = _Conversation.from_row(row, keys[key])
            for name, (impl, _ctx) in self.policies.items():
                skey = (name, *key)
                if skey not in self._states:
                    raw = states.get(skey)
                    self._states[skey] = state_codec.decode(impl.State, raw) if raw else impl.initial(*key)
                    if raw and name in self._tables:  # the rows stored with it: a fold that leaves them writes none
                        self._rows[skey] = self._tables[name].rows(self._states[skey])
                if row is None:
                    # A conversation the store has never seen has no facts and no topics yet: a query
                    # each would ask for nothing (one per conversation, a tenth of a replay's time).
                    self._facts.setdefault(skey, {})
                    if name in self._tables and self._tables[name].holds_topics:
                        self._holdings.setdefault(skey, ({}, set()))

    def _active_facts(self, policy: str, tenant_id: str, conversation_id: str) -> dict[tuple[str, str], list[str | None]]:
        key = (policy, tenant_id, conversation_id)
        facts = self._facts.get(key)
        if facts is None:
            facts = {(k, v): [fid, sup, ret] for k, v, fid, sup, ret in self.store.fact_rows(policy, tenant_id, conversation_id)}
            self._facts[key] = facts
        return facts

    # ----------------------------------------------------------------- the fold

    def project(self, records: Sequence[LogRecord]) -> tuple[Changes, dict[int, int], list[Event]]:
        """Fold ``records`` (one partition or several, each in offset order).

        Returns the row changes, the positions to store with them (partition →
        next offset), and the requests policies decided, to append to the log
        *after* the changes commit. Records before the store's position are
        skipped, so re-delivery is a no-op. An
        :class:`~memfold.core.unreadable.UnreadableRecord` folds nothing:
        it becomes a ``poison_events`` row (``Changes.poison``) and the
        position moves past it, so one bad record stops nothing else. Caller
        must call :meth:`forget` if the store rejects the changes.
        """
        ch = Changes()
        applied = self.store.position()
        positions: dict[int, int] = {}
        decided: list[Event] = []
        touched_states: set[tuple[str, str, str]] = set()
        touched_convs: set[tuple[str, str]] = set()
        user_convs: set[tuple[str, str]] = set()  # conversations whose user memory changes with this batch
        fresh = [
            r for r in records if r.position.offset >= max(applied.get(r.position.partition, 0), positions.get(r.position.partition, 0))
        ]
        self._prefetch({(r.event.tenant_id, r.event.conversation_id): r.position.partition for r in fresh
                        if type(r.event) is not UnreadableRecord})
        # Token counts: recorded on the message at append (validation); the rest counted in one pass.
        encoding = self.counter.encoding_name
        uncounted = [r.event.payload.content or "" for r in fresh
                     if isinstance(r.event, MessageAppended) and encoding not in r.event.payload.tokens]
        token_iter = iter(self.counter.count_many(uncounted))
        pause = self.pause
        for i, record in enumerate(fresh):
            if pause is not None and not i % PAUSE_EVERY:
                pause()
            event = record.event
            part, offset = record.position.partition, record.position.offset
            if offset < positions.get(part, 0):
                continue
            positions[part] = offset + 1
            if type(event) is UnreadableRecord:
                ch.poison.append({
                    "partition": part, "offset": offset, "event_id": event.event_id, "stored_type": event.stored_type,
                    "tenant_id": event.tenant_id, "conversation_id": event.conversation_id, "error": event.error,
                })
                continue
            conv_key = (event.tenant_id, event.conversation_id)
            conv = self._conversation(event.tenant_id, event.conversation_id, part)
            shredded = is_shredded(event)
            if shredded and seal_scope(event) == event.key:
                conv.deleted = True  # its conversation's key was destroyed: it was forgotten, fold nothing of it
            self._event_row(ch, record, erased=conv.deleted or shredded)
            touched_convs.add(conv_key)
            conv.last_seq = max(conv.last_seq, event.seq)
            if conv.first_at is None:
                conv.first_at = event.occurred_at
            conv.last_at = max(conv.last_at, event.occurred_at) if conv.last_at else event.occurred_at
            if isinstance(event, MessageAppended):
                counted = event.payload.tokens.get(encoding)
                tokens = (next(token_iter) if counted is None else counted) + MESSAGE_OVERHEAD
            else:
                tokens = 0
            had_text = conv.message_count > 0
            if isinstance(event, MessageAppended) and event.payload.user_id is not None and conv.user_id is None \
                    and not conv.deleted:
                # The first user named owns the conversation; appends naming another are refused (the engine
                # checks at append), and one that slipped through (two writers at once) leaves it as it is.
                conv.user_id = event.payload.user_id
                user_convs.add(conv_key)
            folded = fold_event(
                event,
                ConversationCounters(conv.message_count, conv.token_count, conv.deleted),
                self.policies,
                lambda name, conv_key=conv_key: self.state(name, *conv_key),
                tokens=tokens,
            )
            conv.message_count, conv.token_count = folded.counters.message_count, folded.counters.token_count
            conv.deleted = folded.counters.deleted
            if folded.message is not None:
                self._message_row(ch, folded.message, conv.token_count, record)
                ch.records.append(folded.message)
                m = folded.message
                retrieval.add_doc(ch.search, m.tenant_id, m.conversation_id, "message", m.event_id, m.index, m.content)
                if m.role == "user":
                    self._facts_taken_back(ch, event, m.index, folded.states)
            elif isinstance(event, (SummaryRequested, SummaryProduced, SummaryFailed)):
                self._summary_row(ch, event, erased=conv.deleted)
                # Facts and search docs only from summaries a policy folded here: one made under other
                # settings (the live log read by a replay, a log from before a settings change) is audit only.
                if isinstance(event, SummaryProduced) and event.payload.policy in folded.states:
                    policy = event.payload.policy
                    self._facts_diff(ch, event, self._retractions(policy, folded.states[policy]))
                    _index_summary(ch, event)
                    user_convs.add(conv_key)
                    if conv.user_id is not None and not conv.deleted:
                        decided.extend(self._user_summary_asked(conv, event))
                elif isinstance(event, SummaryProduced) and event.payload.scope == "user":
                    # Shredded: made from a conversation forgotten since (its own key is destroyed).
                    if conv.user_id is not None and not conv.deleted and not is_shredded(event):
                        ch.user_summaries.append(_user_summary_row(event, conv.user_id))
                        user_convs.add(conv_key)
            elif isinstance(event, TopicEvicted) and self._folded_here(event.payload, folded.states):
                self._facts_evicted(ch, event)
            elif isinstance(event, ConversationDeleted):
                if conv.user_id is not None:  # its user's memory loses what it taught; then it is no one's
                    ch.users.add((event.tenant_id, conv.user_id))
                    conv.user_id = None
                conv.user_summary_counts = {}
                ch.deleted.add(conv_key)
                if had_text:  # its text was in this file: rewrite it once the deletion commits
                    ch.erased.add(conv_key)
                _drop_pending_rows(ch, conv_key)
                retrieval.drop_conversation(ch.search, conv_key)
                for policy in self.policies:
                    self._facts.pop((policy, *conv_key), None)
                    self._holdings.pop((policy, *conv_key), None)
                    self._rows.pop((policy, *conv_key), None)  # the store erases them: write the next ones
            elif isinstance(event, MessageRetracted) and not conv.deleted:
                ch.retracted.append((*conv_key, event.payload.retracted_event_id))
            for name, state in folded.states.items():
                key = (name, *conv_key)
                self._states[key] = state
                touched_states.add(key)
            if time_travel.snapshot_due(event.seq) and not folded.counters.deleted:
                ch.state_history.append(time_travel.snapshot_row(
                    *conv_key, event.seq, folded.counters, {name: self.state(name, *conv_key) for name in self.policies}
                ))
            decided.extend(folded.requests)
        # Facts a user's message took back (topics) or a topic's eviction retired change the user memory too.
        user_convs.update((r[1], r[2]) for r in ch.fact_retirements)
        for conv_key in touched_convs:
            c = self._conversations[conv_key]
            ch.conversations[conv_key] = {
                "tenant_id": conv_key[0], "conversation_id": conv_key[1], "partition": c.partition,
                "message_count": c.message_count, "last_seq": c.last_seq, "token_count": c.token_count,
                "first_at": c.first_at, "last_at": c.last_at, "deleted": c.deleted, "user_id": c.user_id,
                "user_summary_counts": json.dumps(c.user_summary_counts, sort_keys=True)
                if c.user_summary_counts else None,
            }
            if c.stored:
                ch.stored.add(conv_key)
            if c.user_id is not None and conv_key in user_convs:
                ch.users.add((conv_key[0], c.user_id))
        for key in touched_states:
            state = self._states[key]
            ch.policy_states[key] = state_codec.encode(state)
            ch.plan_tokens[key] = self._plan_tokens(key[0], state)
            tables = self._tables.get(key[0])
            if tables is not None:
                new_rows = tables.rows(state)
                if self._rows.get(key) != new_rows:  # most events leave a policy's rows as they were
                    ch.policy_rows[key] = self._rows[key] = new_rows
        return ch, positions, decided

    # ----------------------------------------------------------------- rows

    @staticmethod
    def _event_row(ch: Changes, record: LogRecord, erased: bool = False) -> None:
        """Add the ``events`` row of ``record``; content that comes after its conversation was erased is left out."""
        e = record.event
        cols = ch.events
        cols["partition"].append(record.position.partition)
        cols["offset"].append(record.position.offset)
        cols["event_id"].append(e.event_id)
        cols["type"].append(e.type)
        cols["schema_version"].append(e.schema_version)
        cols["tenant_id"].append(e.tenant_id)
        cols["conversation_id"].append(e.conversation_id)
        cols["seq"].append(e.seq)
        cols["occurred_at"].append(e.occurred_at)
        cols["causation_id"].append(e.causation_id)
        if erased and e.type in PRIVATE_FIELDS:
            cols["payload"].append(ERASED_PAYLOAD)  # as the erasure left the earlier ones
            return
        payload = e.payload  # what model_dump_json() returns, without its per-call keyword handling
        cols["payload"].append(type(payload).__pydantic_serializer__.to_json(payload).decode())

    @staticmethod
    def _message_row(ch: Changes, m: Any, cum_tokens: int, record: LogRecord) -> None:
        cols = ch.messages
        cols["tenant_id"].append(m.tenant_id)
        cols["conversation_id"].append(m.conversation_id)
        cols["idx"].append(m.index)
        cols["seq"].append(m.seq)
        cols["event_id"].append(m.event_id)
        cols["role"].append(m.role)
        cols["content"].append(m.content)
        cols["tokens"].append(m.tokens)
        cols["cum_tokens"].append(cum_tokens)
        cols["model_variant"].append(m.model_variant)
        cols["name"].append(m.name)
        cols["tool_calls"].append(json.dumps([tc.model_dump() for tc in m.tool_calls]) if m.tool_calls else "[]")
        cols["tool_call_id"].append(m.tool_call_id)
        cols["importance"].append(m.importance)
        cols["metadata"].append(json.dumps(dict(m.metadata), sort_keys=True) if m.metadata else "{}")
        cols["occurred_at"].append(m.occurred_at)
        cols["partition"].append(record.position.partition)
        cols["offset"].append(record.position.offset)

    def _user_summary_asked(self, conv: _Conversation, event: SummaryProduced) -> list[SummaryRequested]:
        """Count a summary of a user's conversation; return the request for the user's summary when it is due.

        Decided from the conversation's own stream (its user, its summaries),
        so every mode and every replay asks the same requests.
        """
        policy = event.payload.policy
        ctx = self.policies[policy][1]
        count = conv.user_summary_counts.get(policy, 0) + 1
        conv.user_summary_counts[policy] = count
        return [user_summary_request(ctx, event)] if user_summary_due(count, ctx.user_summary_every) else []

    def _folded_here(self, payload: Any, states: dict[str, Any]) -> bool:
        """True when the policy that decided ``payload`` folded it here, under the settings in force."""
        policy = self.policies.get(payload.policy)
        return payload.policy in states and policy is not None and policy[1].settings_hash == payload.settings_hash

    def _topic_holdings(self, conv: tuple[str, str, str]) -> tuple[dict[str, set[tuple[str, str]]], set[str]]:
        holdings = self._holdings.get(conv)
        if holdings is None:
            holdings = self._holdings[conv] = self.store.topic_fact_holdings(*conv)
        return holdings

    def _retractions(self, policy: str, state: Any) -> tuple[tuple[str, int], ...]:
        """Return what the user took back that ``policy``'s ``state`` keeps (a policy with tables says; others keep none)."""
        tables = self._tables.get(policy)
        return () if tables is None else tables.retractions(state)

    def _facts_taken_back(self, ch: Changes, event: Event, index: int, states: dict[str, Any]) -> None:
        """Retire the live facts rows the user's message ``index`` takes back, in a policy whose memory drops them at once.

        That is topics: its ``State.retractions`` leaves a fact the user took
        back in any topic out of the context, while the summary of the topic
        that holds it may never come again. ``retired_by`` is the message's
        event id. (Other policies drop such a fact with their next summary,
        which retires its row then.) Every live row was stated before: rows
        come from summaries of earlier messages.
        """
        for name, state in states.items():
            stems = [stem for stem, at in self._retractions(name, state) if at == index]
            if not stems:
                continue
            conv = (name, event.tenant_id, event.conversation_id)
            rows = self._active_facts(*conv)
            pending = _pending_facts(ch, conv)
            for kv in sorted(rows):
                row = rows[kv]
                if row[2] is None and any(retracts(stem, kv[0]) for stem in stems):
                    _retire(ch, conv, kv, row, pending, event.event_id)

    def _facts_evicted(self, ch: Changes, event: TopicEvicted) -> None:
        """Retire the facts rows only an evicted topic held: its memory is gone, its facts with it.

        ``retired_by`` is the ``TopicEvicted`` event's id (no summary dropped them).
        """
        p = event.payload
        conv = (p.policy, event.tenant_id, event.conversation_id)
        holdings, evicted = self._topic_holdings(conv)
        evicted.add(p.topic_id)
        held = holdings.pop(p.topic_id, set())
        others = set().union(*holdings.values())
        rows = self._active_facts(*conv)
        pending = _pending_facts(ch, conv)
        for kv in sorted(held - others):
            row = rows.get(kv)
            if row is not None and row[2] is None:
                _retire(ch, conv, kv, row, pending, event.event_id)

    @staticmethod
    def _summary_row(ch: Changes, event: Event, erased: bool = False) -> None:
        """Add the ``summaries`` row of a request or its outcome.

        A summary that comes back for a conversation already erased (it was
        being made while ``forget`` ran; its content is sealed with a key made
        after the erasure, so it reads back) is recorded without its text and
        facts: nothing of an erased conversation may land in the projection.
        """
        p = event.payload
        if isinstance(event, SummaryRequested):
            ch.summary_requests.append(
                {
                    "request_id": p.request_id, "policy": p.policy, "tenant_id": event.tenant_id,
                    "conversation_id": event.conversation_id,
                    "base_summary_id": p.base_summary_id, "covers_from": p.covers_from, "covers_to": p.covers_to,
                    "input_from": p.input_from, "input_to": p.input_to, "window_start": p.window_start,
                    "topic_id": p.topic_id, "kind": p.kind, "status": "processing",
                    "settings_hash": p.settings_hash, "requested_seq": event.seq, "requested_at": event.occurred_at,
                    "scope": p.scope,
                }
            )
        elif isinstance(event, SummaryProduced):
            # A user summary's text is kept in user_summaries only (with its user, erased with it).
            erased = erased or p.scope == "user"
            ch.summary_results.append(
                {
                    "request_id": p.request_id, "summary_id": p.summary_id, "status": "completed",
                    "text": None if erased else p.text,
                    "facts": "[]" if erased else json.dumps([f.model_dump(mode="json") for f in p.facts]),
                    "summarizer": p.summarizer, "model": p.model, "prompt_hash": p.prompt_hash,
                    "tokens_in": p.tokens_in, "tokens_out": p.tokens_out, "latency_ms": p.latency_ms,
                    "cached": p.cached, "resolved_seq": event.seq,
                }
            )
        else:
            ch.summary_results.append(
                {
                    "request_id": p.request_id, "status": "superseded" if p.error_type == "Superseded" else "failed",
                    "reason": p.reason,
                    "error_type": p.error_type, "summarizer": p.summarizer or None, "model": p.model or None,
                    "latency_ms": p.latency_ms, "resolved_seq": event.seq,
                }
            )

    def _facts_diff(self, ch: Changes, event: SummaryProduced, retractions: tuple[tuple[str, int], ...] = ()) -> None:
        """Fold a summary's facts into ``facts`` rows (the bi-temporal lineage of what memory held).

        1. A current fact with no live row gets a row (``introduced_by`` this
           summary); a superseded one listed as lineage gets one only if its
           (key, value) never had a row, born retired and superseded.
        2. A live row whose (key, value) is not a current fact of this summary
           is retired by it (``retired_by``); when its key now has another
           value it is also marked ``superseded_by`` that value's ``fact_id``
           (the immediate successor when the summary lists the lineage).
        A topic's summary (``topic_id`` set) holds that topic's facts only: it
        retires the live rows of the keys it lists, and the facts the topic's
        previous summary held that it drops (unless another topic holds them),
        not the other topics'; the answer for a topic evicted meanwhile gives
        no rows (:meth:`_facts_evicted` retires an evicted topic's), and a
        fact the user took back after stating it (topics' ``retractions``,
        :meth:`_facts_taken_back`) is not current, as in the context.
        Rows are never deleted. ``fact_id`` hashes policy, conversation, key,
        value and the introducing summary, so a rebuild gives the same ids.
        """
        p = event.payload
        if not p.facts and p.topic_id is None:
            return  # a topic's summary with no facts still drops what the topic's previous one held
        facts = [f for f in p.facts if not (retractions and taken_back(f, retractions))]
        conv = (p.policy, event.tenant_id, event.conversation_id)
        rows = self._active_facts(*conv)
        live = {kv for kv, row in rows.items() if row[2] is None}
        ids: dict[tuple[str, str], str] = {}
        for f in facts:
            kv = (f.key, f.value)
            reuse = kv in live or (kv in rows and not f.current)
            ids[kv] = rows[kv][0] if reuse else _fact_id(conv, f.key, f.value, p.summary_id)
        current = {f.key: ids[(f.key, f.value)] for f in facts if f.current}
        successor = {(f.key, f.value): ids.get((f.key, f.superseded_by)) or current.get(f.key) for f in facts if not f.current}
        gone = live - {(f.key, f.value) for f in facts if f.current}
        if p.topic_id is not None:
            holdings, evicted = self._topic_holdings(conv)
            if p.topic_id in evicted:
                return  # the answer for a topic evicted meanwhile: no memory holds its facts
            held = {(f.key, f.value) for f in p.facts if f.current}
            dropped = holdings.get(p.topic_id, set()) - held
            holdings[p.topic_id] = held
            others = set().union(*(h for t, h in holdings.items() if t != p.topic_id))
            gone = {kv for kv in gone if kv[0] in current or (kv in dropped and kv not in others)}
        pending = _pending_facts(ch, conv) if gone else {}  # a scan of the batch's inserts: only when retiring
        for kv in sorted(gone):
            row = rows[kv]
            newer = successor.get(kv) or current.get(kv[0])
            _retire(ch, conv, kv, row, pending, p.summary_id, newer if row[1] is None and newer != row[0] else None)
        for f in facts:
            kv = (f.key, f.value)
            if kv in live or (kv in rows and not f.current):
                continue
            fid = ids[kv]
            superseded_by = None if f.current else successor.get(kv)
            retired_by = None if f.current else p.summary_id
            rows[kv] = [fid, superseded_by, retired_by]
            ch.fact_inserts.append(
                {
                    "policy": p.policy, "tenant_id": event.tenant_id, "conversation_id": event.conversation_id,
                    "key": f.key, "value": f.value, "category": f.category, "introduced_by": p.summary_id,
                    "retired_by": retired_by, "fact_id": fid, "stated_at": f.stated_at, "stated_in": f.stated_in,
                    "introduced_seq": event.seq, "superseded_by": superseded_by,
                }
            )


def _fact_id(conv: tuple[str, str, str], key: str, value: str, summary_id: str) -> str:
    """Return the deterministic id of a fact row: a hash of its policy, conversation, key, value and first summary."""
    raw = "\x1f".join((*conv, key, value, summary_id))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


def _user_summary_row(event: SummaryProduced, user_id: str) -> dict[str, Any]:
    """Return the ``user_summaries`` row of a user summary made on the stream of one of the user's conversations."""
    p = event.payload
    return {
        "policy": p.policy, "tenant_id": event.tenant_id, "user_id": user_id, "conversation_id": event.conversation_id,
        "summary_id": p.summary_id, "request_id": p.request_id, "text": p.text,
        "covers": list(p.covers_conversations), "covers_summaries": list(p.covers_summaries),
        "produced_at": event.occurred_at, "summarizer": p.summarizer, "model": p.model,
    }


def _index_summary(ch: Changes, event: SummaryProduced) -> None:
    """Add a produced summary and each of its facts to ``search_docs`` (indexed at its covered end)."""
    p = event.payload
    key = (event.tenant_id, event.conversation_id)
    if p.text.strip():
        retrieval.add_doc(ch.search, *key, "summary", p.summary_id, p.covers_to, p.text, p.policy)
    for n, fact in enumerate(p.facts):
        retrieval.add_doc(ch.search, *key, "fact", f"{p.summary_id}/{n}", p.covers_to, f"{fact.key} {fact.value}", p.policy)


def _drop_pending_rows(ch: Changes, conv_key: tuple[str, str]) -> None:
    """Take out of this batch every row of a conversation deleted at this point of the batch; scrub its events.

    The store erases the conversation's stored rows *before* it writes the
    batch (``Changes.deleted``), so what the batch holds from before the
    deletion must go here; rows folded after it (a reopen) are kept.
    """
    for cols in (ch.messages,):
        keep = [i for i, (t, c) in enumerate(zip(cols["tenant_id"], cols["conversation_id"])) if (t, c) != conv_key]
        if len(keep) != len(cols["tenant_id"]):
            for name, values in cols.items():
                cols[name] = [values[i] for i in keep]
    events = ch.events
    for i, (t, c, kind) in enumerate(zip(events["tenant_id"], events["conversation_id"], events["type"])):
        if (t, c) == conv_key and kind in PRIVATE_FIELDS:
            events["payload"][i] = ERASED_PAYLOAD
    ch.summary_requests[:] = [r for r in ch.summary_requests if (r["tenant_id"], r["conversation_id"]) != conv_key]
    ch.fact_inserts[:] = [r for r in ch.fact_inserts if (r["tenant_id"], r["conversation_id"]) != conv_key]
    ch.state_history[:] = [r for r in ch.state_history if (r["tenant_id"], r["conversation_id"]) != conv_key]
    ch.fact_retirements[:] = [r for r in ch.fact_retirements if (r[1], r[2]) != conv_key]
    ch.fact_supersessions[:] = [r for r in ch.fact_supersessions if (r[1], r[2]) != conv_key]
    ch.retracted[:] = [r for r in ch.retracted if (r[0], r[1]) != conv_key]


def _pending_facts(ch: Changes, conv: tuple[str, str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Return the facts rows this batch inserts for ``conv`` (policy, tenant, conversation), by (key, value)."""
    return {(r["key"], r["value"]): r for r in ch.fact_inserts if (r["policy"], r["tenant_id"], r["conversation_id"]) == conv}


def _retire(
    ch: Changes, conv: tuple[str, str, str], kv: tuple[str, str], row: list[str | None],
    pending: dict[tuple[str, str], dict[str, Any]], retired_by: str, superseded_by: str | None = None,
) -> None:
    """Retire the live facts row ``kv`` (its cached ``row``): on the row this batch inserts, else as an update."""
    if superseded_by is not None:
        row[1] = superseded_by
    row[2] = retired_by
    mine = pending.get(kv)
    if mine is not None:  # introduced earlier in this same batch
        mine["retired_by"] = retired_by
        if superseded_by is not None:
            mine["superseded_by"] = superseded_by
        return
    ch.fact_retirements.append((*conv, *kv, retired_by))
    if superseded_by is not None:
        ch.fact_supersessions.append((*conv, *kv, superseded_by))
