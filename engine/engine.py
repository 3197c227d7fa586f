"""MemoryEngine: the embedded composition root (SQLite log + DuckDB projection + summarizer worker).

Appends validate, write an immutable event and return its log position at
once; a background runner projects it and the policies decide summaries,
which a background worker produces. Reads assemble context from the latest
projection and never call a model. ``wait_for(position)`` gives
read-your-writes; ``wait_idle()`` waits for the summaries due as well.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from memfold.core.errors import (
    AlreadyRetractedError,
    ConfigError,
    EmbedderError,
    ErasureIncompleteError,
    EventConflictError,
    PartitionNotOwnedError,
    ProjectionError,
    ProjectionLagTimeout,
    UnknownConversationError,
    UnknownMessageError,
    UnknownUserError,
    UserConflictError,
    ValidationError,
)
from memfold.core.events import (
    ConversationDeleted,
    ConversationDeletedPayload,
    ConversationReopened,
    ConversationReopenedPayload,
    MessageAppended,
    MessageRetracted,
    MessageRetractedPayload,
    ToolCall,
    conversation_key,
    same_message,
    utcnow,
)
from memfold.core.ids import content_hash, new_event_id
from memfold.core.partitioner import partition_for
from memfold.core.ports import ContextMessage, ContextPlan, FoldContext, MessageRecord, Policy
from memfold.core.positions import Position
from memfold.core.sealing import user_summary_scope
from memfold.core.settings import Settings
from memfold.core.shapes import FORMATS, INPUT_FORMATS, Shaped, messages_from, shaped
from memfold.core.tokens import MESSAGE_OVERHEAD, text_digest
from memfold.core.validation import validate_message
from memfold.engine import builders, users
from memfold.engine.builders import ROLES, fold_contexts, load_policy  # noqa: F401 - public names of this module
from memfold.engine.erasure import PendingErasures, remove_leftovers
from memfold.engine.settings_follow import FollowThread, settings_of
from memfold.engine.users import with_user_part
from memfold.projections.context import assemble
from memfold.projections.dense import FusedOlder
from memfold.projections.excerpt import forget_analysed
from memfold.projections.retrieval import OlderAsOf, OlderFromProjection
from memfold.projections.store import DuckDBProjectionStore
from memfold.projections.summarizers import build_embedder
from memfold.projections.time_travel import seq_as_of, state_as_of

if TYPE_CHECKING:
    from memfold.projections.projector import ServingHooks
    from memfold.projections.store import Changes

log = logging.getLogger("memfold.engine")

# Engines not closed yet: closed at interpreter exit. Their threads are daemons; left running while
# the interpreter finalizes, one inside DuckDB is unwound by force and the process aborts
# ("FATAL: exception not rethrown", exit status 134) even after a script that simply ended.
_OPEN: weakref.WeakSet[MemoryEngine] = weakref.WeakSet()
# Plans a process makes with the token counts the fold recorded before it counts for itself (_read_plan).
RECORDED_PLANS = 64
_at_exit_registered = False


def _close_open_engines() -> None:
    for engine in list(_OPEN):
        try:
            engine.close()
        except Exception as exc:  # noqa: BLE001 - the process is exiting: report and close the rest
            log.warning("could not close a memfold engine at exit: %s", exc)


def open_engines() -> int:
    """Return how many engines of this process are open (made and not closed yet)."""
    return len(_OPEN)


def _track(engine: MemoryEngine) -> None:
    """Close ``engine`` at exit unless it is closed before.

    Registered with the first engine, after DuckDB is imported: exit handlers
    run last-registered first, so the engines close while DuckDB still runs
    queries (its own handler refuses them afterwards).
    """
    global _at_exit_registered
    if not _at_exit_registered:
        atexit.register(_close_open_engines)
        _at_exit_registered = True
    _OPEN.add(engine)

class MemoryEngine:
    """Append messages, read assembled context, query projections. Use :meth:`open`; close when done."""

    ROLES = ROLES

    def __init__(
        self, settings: Settings, *, start: bool = True, role: str = "embedded", log_timeout: float | None = None,
        policy_changes: str = "rebuild", partitions: Iterable[int] | None = None,
        owners: Callable[[str, str], str | None] | None = None, hooks: ServingHooks | None = None,
    ):
        """Open an engine of ``role`` (see :mod:`memfold.engine.builders`) over ``settings``; start it if ``start``.

        ``partitions`` makes a ``projector`` a shard node folding only those
        (``[]``: nothing until :meth:`memfold.engine.runner.Runner.own`).

        ``log_timeout`` bounds every wait on a Kafka log (default: the log's
        own). ``policy_changes`` says what to do when the settings ask for a
        policy the projection does not keep, or for other settings of one it
        keeps: ``"rebuild"`` (default) rebuilds the projection from the log;
        ``"refuse"`` (what reads use: a read never changes the data dir)
        raises a :class:`ConfigError` naming the command that makes the change.

        ``owners`` is a client's source of conversations' users, ``(tenant,
        conversation) -> user``, when a projection elsewhere holds them (the
        service's fold process): appends check a message's user against it.
        ``hooks`` are what a process serving reads asks of every projector
        (:class:`~memfold.projections.projector.ServingHooks`).
        """
        self._closed = True
        self.owners = owners
        parts = builders.build(role, settings, log_timeout=log_timeout, policy_changes=policy_changes,
                               listeners=[self._on_erasure], on_appended=self._wake, partitions=partitions,
                               hooks=hooks)
        self._hold(parts)
        builders.start(parts, start=start)
        if parts.follower is not None and (start or role == "worker"):
            self._following = FollowThread(self)
            self._following.start()
        _track(self)

    def _hold(self, parts: builders.Parts) -> None:
        """Keep what the builder made; nothing else is made here."""
        self.role = parts.role
        self.settings = parts.settings
        self.counter = parts.counter
        self.log, self.sealer = parts.log, parts.sealer
        self.store, self.summarizer, self.worker, self.runner = parts.store, parts.summarizer, parts.worker, parts.runner
        self.dense = parts.dense
        self.snapshots = parts.snapshots
        self._parts = parts
        self._folds = parts.folds
        self._follower, self._following = parts.follower, None
        self._batch_listeners = [self._on_erasure, *builders.dense_listeners(self.dense)]
        self._switch_listeners: list[Callable[[Any], None]] = []
        self.switching = threading.RLock()  # held while the settings change (promote, following the log)
        self._rebuilding = False  # a rebuild's beside file is in use: not a leftover
        self._embedder = None
        self.appended_users: dict[tuple[str, str], str] = {}  # conversation -> user, as appended (engine.users)
        # Plans count their memory text on every read; the same summary is read many times.
        self._recorded: dict[str, int] = {}  # token counts the fold recorded (text digest -> tokens), see _read_plan
        self._recorded_plans = 0
        self._count_cached = functools.lru_cache(maxsize=1024)(self._count)
        self._read_contexts: dict[tuple[str, str], FoldContext] = {}
        self._last_plan: tuple[Any, FoldContext, ContextPlan] | None = None  # see _read_plan
        self._closed = False

    def add_batch_listener(self, listener: Callable[[Any], None]) -> None:
        """Call ``listener`` with the changes of every batch the projection commits, under any settings to come."""
        self._batch_listeners.append(listener)
        self.projector.listeners.append(listener)

    def add_switch_listener(self, listener: Callable[[Any], None]) -> None:
        """Call ``listener`` with the new projector after each settings switch (promote, adopt, rebuild)."""
        self._switch_listeners.append(listener)

    @property
    def policies(self) -> dict[str, tuple[Policy, FoldContext]]:
        """Every policy folded here with its fold context."""
        return self._folds.policies

    @property
    def projector(self):
        """The projector of the folds in force."""
        return self._folds.projector

    @classmethod
    def open(cls, data_dir: str | Path | None = None, settings: Settings | None = None, **overrides: Any) -> MemoryEngine:
        """Open (creating if needed) the engine for ``data_dir`` with ``settings`` (default: loaded)."""
        if settings is None:
            settings = Settings.load(None, **overrides)
        if data_dir is not None:
            settings = settings.model_copy(update={"data_dir": Path(data_dir)})
        return cls(settings)

    def _wake(self) -> None:
        self.runner.notify()

    # ----------------------------------------------------------------- writing

    def validate(
        self, message: Mapping[str, Any], *, line: int | None = None, event_id: str | None = None
    ) -> MessageAppended:
        """Return the ``MessageAppended`` event for ``message`` or raise a :class:`ValidationError`.

        Keys: see :data:`memfold.core.validation.MESSAGE_KEYS`; every check
        is listed in that module. The time the message was said is
        occurred_at (or ts, or created_at; default now), kept and shown with
        recalled messages. ``event_id`` is the id to use when the
        message names none (default: a fresh one). Raises nothing else.
        """
        s = self.settings
        return validate_message(
            message, max_chars=s.max_message_chars, max_tokens=s.max_message_tokens,
            count_tokens=self.counter.count, line=line, event_id=event_id, encoding=self.counter.encoding_name,
        )

    def append_message(
        self,
        conversation_id: str,
        role: str,
        content: str | Sequence[Mapping[str, Any]] | None,
        *,
        tenant_id: str = "default",
        model_variant: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
        tool_calls: Sequence[Mapping[str, Any] | ToolCall] = (),
        tool_call_id: str | None = None,
        name: str | None = None,
        occurred_at: datetime | None = None,
        event_id: str | None = None,
        user_id: str | None = None,
    ) -> Position:
        """Validate and append one message; return its log position (projection follows asynchronously).

        The fields are those of an OpenAI chat message: ``content`` a string
        or a list of ``{"type": "text", "text"}`` parts, ``tool_calls`` in
        OpenAI's shape or the flat ``{"id", "name", "arguments"}`` alias.

        Give ``event_id`` to make the append idempotent: appending the same
        id again returns the stored position and stores nothing; the same id
        with different content raises :class:`EventConflictError`.

        ``user_id`` names the user the conversation belongs to (its memory
        then joins the user's, :meth:`user_memory`); a conversation belongs
        to at most one user: naming another raises :class:`UserConflictError`.
        """
        message = {
            "conversation_id": conversation_id, "role": role, "content": content, "tenant_id": tenant_id,
            "model_variant": model_variant, "metadata": metadata, "importance": importance,
            "tool_calls": tool_calls, "tool_call_id": tool_call_id, "name": name, "occurred_at": occurred_at,
            "event_id": event_id, "user_id": user_id,
        }
        event = self.validate(message)
        if event_id is not None:
            self.check_conflicts([event])
        return self.append_events([event])[0]

    def append_many(self, messages: Iterable[Mapping[str, Any]], *, format: str = "openai") -> list[Position]:
        """Validate every message, then append them as one batch; all or nothing.

        ``format`` names the shape of ``messages``: ``openai`` (chat
        messages, or memfold's flat compact alias), ``anthropic`` (Messages
        API messages) or ``responses`` (Responses API input items); see
        :func:`memfold.core.shapes.messages_from` for how the last two
        become memfold messages. Raises the first :class:`ValidationError`
        (with ``line`` = 1-based index in the batch; for ``anthropic`` and
        ``responses``, a shape error names the input item, a later one the
        converted message) before anything is written, including an
        :class:`EventConflictError` for an ``event_id`` already stored with
        other content. A repeated id with the same content is stored once.
        """
        if not isinstance(format, str) or format not in INPUT_FORMATS:
            raise ValidationError(f"format must be one of {', '.join(INPUT_FORMATS)}, got {format!r:.40}",
                                  field="format")
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise ValidationError(f"messages must be a list of message objects, got {type(messages).__name__}",
                                  field="messages")
        messages = list(messages)
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping):
                raise ValidationError(f"each message must be an object (a mapping), got {type(m).__name__}",
                                      field="messages", line=i + 1)
        if format != "openai":  # openai messages are made canonical by validation itself
            messages = messages_from(format, messages)
        events = [self.validate(m, line=i + 1) for i, m in enumerate(messages)]
        given = [(i + 1, e) for i, (m, e) in enumerate(zip(messages, events)) if m.get("event_id") is not None]
        if given:
            self.check_conflicts([e for _, e in given], lines=[line for line, _ in given])
        return self.append_events(events)

    def keyed_event_id(self, conversation_id: str, idempotency_key: str, *, tenant_id: str = "default") -> str:
        """Return the event id of a message its writer names by ``idempotency_key`` (ingest: a hash of the line).

        Keyed by the conversation's data key: the same key gives the same id
        while the conversation lives (a re-run stores nothing twice), and the
        id tells nothing about the content once the conversation is forgotten.
        Without a key store (content unsealed: nothing can be erased anyway)
        it is a plain hash. Raises :class:`ConversationForgottenError` for a
        forgotten conversation.
        """
        for name, value in (("conversation_id", conversation_id), ("idempotency_key", idempotency_key),
                            ("tenant_id", tenant_id)):
            if not isinstance(value, str) or not value:
                raise ValidationError(f"{name} must be a non-empty string", field=name)
        scope = conversation_key(tenant_id, conversation_id)
        if self.sealer is None:
            return content_hash("event id", scope, idempotency_key)
        return self.sealer.keyed_id(scope, idempotency_key)

    def check_conflicts(self, events: Sequence[MessageAppended], lines: Sequence[int] | None = None) -> dict[str, Position]:
        """Return the positions of ``events`` the log already holds; raise on one held with other content.

        A stored event with the same ``event_id`` is a duplicate when its
        tenant, conversation and message fields are equal (time and recorded
        embeddings aside), and an :class:`EventConflictError` otherwise.
        """
        stored = self.log.find([e.event_id for e in events])
        first: dict[str, MessageAppended] = {}
        for i, event in enumerate(events):
            position = stored.get(event.event_id)
            if position is not None:
                records = self.log.read(position.partition, position.offset, 1)
                earlier = records[0].event if records else event
            else:  # the same id twice in this batch: the log keeps the first
                earlier = first.setdefault(event.event_id, event)
            if not isinstance(earlier, MessageAppended):  # an unreadable record (poison) or another type holds the id
                raise EventConflictError(
                    f"event_id {event.event_id!r} names a stored record that is not this message "
                    f"({type(earlier).__name__}); use a new event_id for a new message",
                    field="event_id", line=lines[i] if lines is not None else None, event_id=event.event_id,
                )
            if not same_message(earlier, event):
                where = f"is already stored (at {position})" if position is not None else "is given twice"
                raise EventConflictError(
                    f"event_id {event.event_id!r} {where} with different content; "
                    "use a new event_id for a new message",
                    field="event_id", line=lines[i] if lines is not None else None, event_id=event.event_id,
                )
        return stored

    def append_events(self, events: Sequence[MessageAppended]) -> list[Position]:
        """Append already validated events as one batch and wake the projector.

        Raises :class:`UserConflictError`, writing nothing, when a message
        names another user than its conversation's (:func:`memfold.engine.users.check_owners`).
        """
        if not events:
            return []
        users.check_owners(self, events)
        positions = self.log.append(self._with_embeddings(events))
        users.appended(self, events)
        if self.store is not None:
            self.runner.notify()
        return positions

    def _with_embeddings(self, events: Sequence[MessageAppended]) -> Sequence[MessageAppended]:
        """Record a remote embedding on each user message when the topics policy needs one.

        An embedding from a remote model is non-deterministic, so it is made
        here, outside every fold, and stored on the event: replays read it
        back. If the embedder fails, the message is still accepted, with the
        deterministic local embedding (same dimensions) recorded instead and
        the fallback noted in its metadata; nothing is lost.
        """
        if "topics" not in self.settings.active_policies or self.settings.embedder.kind == "local":
            return events
        todo = [i for i, e in enumerate(events) if e.payload.role == "user" and e.payload.embedding is None]
        if not todo:
            return events
        from memfold.projections.embedders import LocalHashEmbedder

        texts = [events[i].payload.content or "" for i in todo]
        source = self.settings.embedder.kind
        try:
            if self._embedder is None:
                self._embedder = build_embedder(self.settings)
            vectors = self._embedder.embed(texts)
        except EmbedderError as exc:
            log.warning("embedder unavailable (%s); recording local embeddings for %d message(s)", exc, len(todo))
            vectors = LocalHashEmbedder(dimensions=self.settings.embedder.dimensions).embed(texts)
            source = f"local (fallback: {type(exc).__name__})"
        out = list(events)
        for i, vector in zip(todo, vectors):
            p = out[i].payload
            meta = {**p.metadata, "embedding_source": source}
            out[i] = out[i].model_copy(update={"payload": p.model_copy(update={"embedding": tuple(vector), "metadata": meta})})
        return out

    def retract(
        self, conversation_id: str, event_id: str, *, tenant_id: str = "default", reason: str | None = None,
        timeout: float = 30.0,
    ) -> Position:
        """Withdraw the message ``event_id`` of a conversation; return the position of its ``MessageRetracted``.

        The log keeps both events. Once projected (this waits for it, so the
        next read leaves the message out), the message is marked retracted in
        ``messages`` and left out of history, verbatim, recall and the input
        of every summary requested afterwards; indices do not shift. A summary
        already produced keeps its content: erasing is :meth:`forget`.
        Raises :class:`UnknownMessageError` when ``event_id`` is no message of
        this conversation (another tenant's message included) and
        :class:`AlreadyRetractedError` when it was retracted before; nothing
        is written then. The retraction's id derives from the message's, so
        two racing retractions are stored once.
        """
        _check_reading(conversation_id, tenant_id)
        _require_text("event_id", event_id)
        for name, value in (("conversation_id", conversation_id), ("event_id", event_id)):
            if not isinstance(value, str) or not value.strip():
                raise ValidationError(f"{name} is required and must be a non-empty string", field=name)
        found = self.log.find([event_id]).get(event_id)
        records = self.log.read(found.partition, found.offset, 1) if found is not None else []
        target = records[0].event if records else None
        if (
            not isinstance(target, MessageAppended)
            or (target.tenant_id, target.conversation_id) != (tenant_id, conversation_id)
        ):
            raise UnknownMessageError(
                f"conversation {conversation_id!r} holds no message {event_id!r}", field="event_id"
            )
        retraction_id = "retract-" + content_hash(tenant_id, conversation_id, event_id)
        if self.log.find([retraction_id]):
            raise AlreadyRetractedError(f"message {event_id!r} is already retracted", field="event_id")
        event = MessageRetracted(
            event_id=retraction_id, tenant_id=tenant_id, conversation_id=conversation_id, occurred_at=utcnow(),
            causation_id=event_id, payload=MessageRetractedPayload(retracted_event_id=event_id, reason=reason),
        )
        position = self.log.append([event])[0]
        if self.store is not None:
            self.runner.notify()
            self.wait_for(position, timeout)
        return position

    # ----------------------------------------------------------------- waiting

    def wait_for(self, position: Position, timeout: float = 30.0) -> None:
        """Block until the projection has applied the event *at* ``position`` (read-your-writes)."""
        self.runner.wait_for(position, timeout)

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Block until the projection is caught up, every summary due has been produced or failed, and (dense
        retrieval on) every message is embedded or the embedder is failing."""
        deadline = time.monotonic() + timeout
        if self.store is None:
            return  # a client has nothing to wait for locally
        summaries_idle = self.worker.idle if self.role in ("embedded", "worker") else (lambda: True)
        dense = self.dense

        def idle() -> bool:
            return summaries_idle() and (dense is None or dense.idle())

        while True:
            self.runner.notify()
            # Idle only after a step of our own that found nothing to apply: a step that
            # folds records (an outcome the worker just appended, deciding new requests,
            # or those requests themselves) hands their open requests to the worker
            # only once a later read of the partition comes back empty.
            if self.runner.caught_up() and idle() and self.runner.run_once() == 0:
                if self.runner.caught_up() and self.runner.handed_over() and idle():
                    return
            if time.monotonic() > deadline:
                raise ProjectionLagTimeout(f"memfold was still busy after {timeout}s (projection or summaries)")
            time.sleep(0.01)

    # ----------------------------------------------------------------- reading

    def _read_context(self, name: str) -> tuple[Policy, FoldContext]:
        """Return policy ``name`` and the fold context reads plan with (token counts cached), made once per settings."""
        impl, ctx = self.policies[name]
        key = (name, ctx.settings_hash)
        read = self._read_contexts.get(key)
        if read is None:
            read = self._read_contexts[key] = msgspec.structs.replace(ctx, count_tokens=self._count_cached)
        return impl, read

    def _count(self, text: str) -> int:
        """Return the tokens of ``text``: recorded by the fold if it was, else counted (loading the tokenizer)."""
        if self._recorded:
            n = self._recorded.get(text_digest(text))
            if n is not None:
                return n
        return self.counter.count(text)

    def _read_plan(self, name: str, tenant_id: str, conversation_id: str) -> tuple[Policy, FoldContext, ContextPlan]:
        """Return policy ``name``, its read context and the conversation's plan now.

        The last plan is reused while the state and the read context are the
        very same objects: states are frozen and plans pure, so the service's
        :meth:`context_in_memory` check and the :meth:`context` read after it
        plan once (the plan was ~7 µs of a ~165 µs read).
        """
        impl, ctx = self._read_context(name)
        state = self.projector.state(name, tenant_id, conversation_id)
        last = self._last_plan
        if last is not None and last[0] is state and last[1] is ctx:
            return impl, ctx, last[2]
        if not self.counter.loaded and self._recorded_plans < RECORDED_PLANS:
            # A process that has counted nothing yet (a CLI read): plan with the counts the fold recorded. A
            # process that keeps reading loads the tokenizer once instead of a query per plan.
            self._recorded_plans += 1
            self._recorded.update(self.store.plan_tokens(name, tenant_id, conversation_id))
        plan = impl.plan(state, ctx)
        self._last_plan = (state, ctx, plan)
        return impl, ctx, plan

    def _policy_name(self, policy: str | None, tenant_id: str) -> str:
        name = policy or self.settings.policy_for(tenant_id)
        if name not in self.policies:
            raise ConfigError(
                f"policy {name!r} has no projection here; active: {', '.join(self.policies)} "
                "(add it to 'policies' in memfold.toml or MEMFOLD_POLICIES)"
            )
        return name

    def plan(self, conversation_id: str, *, policy: str | None = None, tenant_id: str = "default"):
        """Return the policy's :class:`ContextPlan` for a conversation (what memory is in force)."""
        _check_reading(conversation_id, tenant_id, policy=policy)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        name = self._policy_name(policy, tenant_id)
        impl, ctx = self.policies[name]
        return impl.plan(self.projector.state(name, tenant_id, conversation_id), ctx)

    def require_stored(self, conversation_id: str, *, tenant_id: str = "default") -> None:
        """Raise :class:`UnknownConversationError` for a conversation never written or forgotten.

        What every read of one conversation does first (history, messages,
        summaries, context without ``user_id``), here as over HTTP (404): a
        misspelt id is an error, not an empty memory. A conversation appended
        here and not folded yet is not unknown (its key is live), it reads as
        far as the projection holds it.
        """
        stored = self.projector.stored(tenant_id, conversation_id)
        if stored:
            return
        if stored is None and self.sealer is not None and \
                self.sealer.keys.status(conversation_key(tenant_id, conversation_id)) == "live":
            return
        raise UnknownConversationError(
            f"no conversation {conversation_id!r} in tenant {tenant_id!r}"
            + (" (it was forgotten)" if stored is False else ""), field="conversation_id")

    def owns(self, conversation_id: str, *, tenant_id: str = "default") -> bool:
        """True when this engine folds the conversation's partition: always, except on a shard node."""
        if self.store is None:  # a client engine holds no projection
            return False
        return partition_for(conversation_key(tenant_id, conversation_id), self.log.partition_count) in set(
            self.runner.partitions)

    def check_owned(self, conversation_id: str, *, tenant_id: str = "default") -> None:
        """Raise :class:`PartitionNotOwnedError` when a shard node does not fold this conversation's partition.

        A shard node may still hold rows of a partition it folded before a
        move; answering from them would be stale without saying so.
        """
        if self.store is not None and not self.owns(conversation_id, tenant_id=tenant_id):
            partition = partition_for(conversation_key(tenant_id, conversation_id), self.log.partition_count)
            raise PartitionNotOwnedError(
                f"this node does not fold partition {partition} (conversation {conversation_id!r}); read it from "
                f"the node that owns it (memfold serve routes there), owned here: {self.runner.partitions}",
                partition=partition,
            )

    def context(
        self,
        conversation_id: str,
        *,
        budget: int | None = None,
        query: str | None = None,
        policy: str | None = None,
        tenant_id: str = "default",
        as_of: Position | datetime | None = None,
        dense: bool | None = None,
        user_id: str | None = None,
    ) -> list[ContextMessage]:
        """Return the messages for the next model call, within ``budget`` tokens. Never calls a summarizer.

        In a conversation of a user (or given ``user_id``: a conversation
        about to start, read before its first append), ``context.user_share``
        of the budget, and what the conversation's own context leaves
        unused, goes to the user's memory (``kind="memory:user"``) and to
        messages recalled from the user's other conversations
        (``kind="user_recalled"``), placed after the conversation's own memory.
        ``user_id`` naming another user than the conversation's raises
        :class:`UserConflictError`.

        With dense retrieval configured (``retrieval.embedder``), recall fuses
        BM25 with the cosine ranking of message embeddings, embedding the
        query once (cached); if the embedder fails, recall is BM25 alone and a
        warning is logged. ``dense=False`` asks for BM25 alone.

        ``as_of`` (a log :class:`Position`, or a timezone-aware ``datetime``)
        returns the context as memfold would have assembled it at that point
        of the log instead (:meth:`context_as_of`).

        Order: system prompt, memory, recalled older messages, recent verbatim,
        current user message. With a budget, what memory and the uncovered
        messages leave goes to older messages most relevant to ``query``
        (default: the current user message), then to the newest older ones
        (``projections.context``). When the policy reports a pending summary
        and its settings allow a lazy wait (seed 000), wait at most
        ``lazy_timeout_ms`` for it, then fall back.
        """
        _check_reading(conversation_id, tenant_id, budget=budget, query=query, policy=policy)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        if user_id is None:  # with a user: a conversation not started yet reads as its first context
            self.require_stored(conversation_id, tenant_id=tenant_id)
        if as_of is not None:
            return self.context_as_of(conversation_id, as_of, budget=budget, query=query, policy=policy,
                                      tenant_id=tenant_id, dense=dense)
        name = self._policy_name(policy, tenant_id)
        impl, ctx, plan = self._read_plan(name, tenant_id, conversation_id)
        lazy_ms = ctx.settings.read_wait_ms()
        pending = plan.notes.get("pending_request") if plan.notes else None
        if pending and lazy_ms:
            deadline = time.monotonic() + lazy_ms / 1000
            while time.monotonic() < deadline and self.store.outcome(pending) in (None, "processing"):
                time.sleep(0.01)
            impl, ctx, plan = self._read_plan(name, tenant_id, conversation_id)
        log_budget_decisions(name, conversation_id, plan)
        verbatim = self._verbatim(plan, tenant_id, conversation_id, budget)
        older = self._older(tenant_id, conversation_id, dense)
        part = self._user_part(name, plan, verbatim, tenant_id, conversation_id, budget, query, user_id)
        mine = part.render() if part is not None else []
        messages = assemble(
            plan, verbatim, budget=None if budget is None else budget - sum(m.tokens for m in mine),
            system_prompt=self.settings.system_prompt, count_tokens=self.counter.count,
            older=None if plan.fallback == "deleted" else older, query=query,
            recall_share=self.settings.context.recall_share,
        )
        if part is not None:  # what the conversation's own context left unused goes to the user part too
            room = budget - sum(m.tokens for m in messages)
            if room > part.room:  # more than it was given: render it again (a user part is at most its room)
                mine = part.render(room)
        return with_user_part(messages, mine)

    def _user_part(self, name: str, plan, verbatim, tenant_id: str, conversation_id: str, budget: int | None,
                   query: str | None, user_id: str | None = None):
        """Return the context's :class:`~memfold.engine.users.UserPart`: None without a budget, a user, or a user share."""
        user = self.projector.users.owner(tenant_id, conversation_id)
        if user_id is not None:
            users.check_user_id(user_id)
            if user is not None and user != user_id:
                raise UserConflictError(f"conversation {conversation_id!r} belongs to user {user!r}, not {user_id!r}",
                                        field="user_id", user_id=user_id, owner=user)
            user = user_id
        if user is None or budget is None or not self.settings.context.user_share or plan.fallback == "deleted":
            return None
        current = verbatim[-1] if verbatim and verbatim[-1].role == "user" else None
        fixed = sum(m.tokens or self._count_cached(m.content) + MESSAGE_OVERHEAD for m in plan.memory)
        if self.settings.system_prompt:
            fixed += self._count_cached(self.settings.system_prompt) + MESSAGE_OVERHEAD
        fixed += current.tokens if current is not None else 0
        if query is None and current is not None:
            query = current.content
        return users.user_part(self, user, conversation_id, tenant_id, name, budget, fixed, query)

    def prompt(
        self,
        conversation_id: str,
        *,
        format: str = "openai",
        budget: int | None = None,
        query: str | None = None,
        policy: str | None = None,
        tenant_id: str = "default",
        as_of: Position | datetime | None = None,
    ) -> Shaped:
        """Return :meth:`context` in ``format``, ready to pass to a model call; never calls a summarizer.

        ``format``: ``openai`` (``messages`` for ``chat.completions.create``),
        ``anthropic`` (``messages`` plus ``system`` for ``messages.create``),
        ``responses`` (``input`` items for ``responses.create``) or
        ``compact`` (memfold's annotated dicts). memfold's annotations are in
        ``Shaped.memfold``, parallel to the messages, never inside them.
        """
        if not isinstance(format, str) or format not in FORMATS:
            raise ValidationError(f"format must be one of {', '.join(FORMATS)}, got {format!r:.40}", field="format")
        messages = self.context(conversation_id, budget=budget, query=query, policy=policy, tenant_id=tenant_id,
                                as_of=as_of)
        return shaped(format, messages, conversation_id=conversation_id)

    def context_in_memory(self, conversation_id: str, *, policy: str | None = None, tenant_id: str = "default") -> bool:
        """True when :meth:`context` of this conversation (no ``as_of``) is computed from memory alone.

        Its policy state, recall index and newest messages are held in
        memory (and, for a conversation of a user, the user's memory and the
        recall index of each of the user's conversations), no embedder is configured (a query would be embedded), the
        policy never waits for a pending summary (``lazy_timeout_ms`` 0) and
        its plan does not name verbatim messages one by one (topics): the
        read makes no model call, no sleep and, unless a verbatim window
        reaches before the hot tail, no store query. A service may
        then compute it where it stands instead of handing it to a thread
        (each hand-over waits for CPython's interpreter lock again).
        """
        _check_reading(conversation_id, tenant_id, policy=policy)
        name = self._policy_name(policy, tenant_id)
        key = (tenant_id, conversation_id)
        _, ctx = self._read_context(name)
        if not (self.dense is None and not ctx.settings.read_wait_ms()
                and self.projector.holds_state(name, *key) and self.projector.search.loaded(key)
                and self.projector.tail.holds(key) and self.projector.users.warm(*key)):
            return False
        user = self.projector.users.owner(*key)
        if user is not None and not all(self.projector.search.loaded((tenant_id, c))
                                        for c in self.projector.users.memory(tenant_id, user).conversations):
            return False
        # A plan naming its verbatim messages one by one (topics) reads them from the store.
        return not self._read_plan(name, *key)[2].verbatim_indices

    def context_as_of(
        self,
        conversation_id: str,
        as_of: Position | datetime,
        *,
        budget: int | None = None,
        query: str | None = None,
        policy: str | None = None,
        tenant_id: str = "default",
        dense: bool | None = None,
    ) -> list[ContextMessage]:
        """Return the context memfold would have assembled right after ``as_of`` (time travel).

        ``as_of`` is a log :class:`Position` (the conversation's events *at*
        or before it) or a timezone-aware ``datetime`` (as right after the
        last message said at or before it was appended). Computed from the
        projection history: the policy state is the newest snapshot before
        that point folded forward with the few events after it
        (:mod:`memfold.projections.time_travel`), never a replay of the log.
        Raises :class:`ValidationError` for a position in another partition
        or a naive datetime. Never waits for a summary.
        """
        _check_reading(conversation_id, tenant_id, budget=budget, query=query, policy=policy)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        self.require_stored(conversation_id, tenant_id=tenant_id)
        name = self._policy_name(policy, tenant_id)
        impl, ctx = self._read_context(name)
        key = (tenant_id, conversation_id)
        history = self.projector.history.conversation(key)
        counters, states = state_as_of(history, self.policies, key, seq_as_of(history, key, as_of))
        plan = impl.plan(states[name], ctx)
        end = counters.message_count
        if plan.verbatim_indices is not None:
            verbatim = self.projector.search.messages_at(key, [i for i in plan.verbatim_indices if i < end])
        elif budget is None:
            verbatim = self.projector.search.messages_at(key, range(plan.verbatim_from, end))
        else:
            recent = self.projector.search.newest(key, end, budget) if end else []
            verbatim = [m for m in recent if m.index >= plan.verbatim_from]
        older = self._older(tenant_id, conversation_id, dense, as_of=end)
        return assemble(
            plan, verbatim, budget=budget, system_prompt=self.settings.system_prompt, count_tokens=self.counter.count,
            older=None if plan.fallback == "deleted" else older, query=query,
            recall_share=self.settings.context.recall_share,
        )

    def _older(self, tenant_id: str, conversation_id: str, dense: bool | None, as_of: int | None = None):
        """Return where recall finds older messages: BM25, fused with dense retrieval when configured and not refused.

        ``as_of`` (a message count): BM25 as when the conversation had that
        many messages (time travel); the dense ranking is today's, later
        messages dropped.
        """
        older = OlderFromProjection(self.projector.search, (tenant_id, conversation_id))
        if as_of is not None:
            older = OlderAsOf(older, as_of)
        if self.dense is None or dense is False:
            return older

        return FusedOlder(older, self.dense, (tenant_id, conversation_id), self.settings.retrieval.rrf_k)

    def _verbatim(self, plan, tenant_id: str, conversation_id: str, budget: int | None) -> list[MessageRecord]:
        if not self.projector.users.holds(tenant_id, conversation_id):
            return []  # not started yet (read as a user's new conversation): nothing to ask the store
        if plan.verbatim_indices is not None:
            return self.store.messages_at(tenant_id, conversation_id, plan.verbatim_indices)
        return self.projector.recent_messages(tenant_id, conversation_id, plan.verbatim_from, budget)

    def search(
        self,
        conversation_id: str,
        query: str,
        *,
        kinds: Sequence[str] = ("message", "summary", "fact"),
        policy: str | None = None,
        limit: int = 10,
        tenant_id: str = "default",
    ) -> list:
        """Return the conversation's documents best matching ``query`` (BM25), best first.

        Each hit (``projections.retrieval.Hit``) names its kind (message,
        summary, fact), id, message index (a summary's or fact's: the end of
        what it covers) and score; ``policy`` restricts summaries and facts.
        """
        _check_reading(conversation_id, tenant_id, query=query, policy=policy, query_required=True)
        _check_search(kinds, limit)
        return self.projector.search.rank((tenant_id, conversation_id), query, kinds=kinds, policy=policy, limit=limit)

    def conversation(self, conversation_id: str, *, tenant_id: str = "default") -> dict[str, Any] | None:
        """Return the conversation's projection row (counts, times, ``deleted``), or None if never written."""
        _check_reading(conversation_id, tenant_id)
        return self.store.conversation(tenant_id, conversation_id)

    def conversations(self, *, tenant_id: str = "default", limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Return a page of the tenant's live conversations, most recently active first."""
        return self.store.conversation_page(tenant_id, limit, offset)

    def conversation_ids(self, *, tenant_id: str = "default", after: str = "", limit: int = 100) -> list[str]:
        """Return up to ``limit`` ids of the tenant's live conversations after ``after``, in id order (a search's pages)."""
        return self.store.conversation_ids_after(tenant_id, after, limit)

    def messages(self, conversation_id: str, *, tenant_id: str = "default", start: int = 0,
                 limit: int | None = None) -> list[MessageRecord]:
        """Return the conversation's stored messages from index ``start``, at most ``limit``, oldest first."""
        _check_reading(conversation_id, tenant_id)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        self.require_stored(conversation_id, tenant_id=tenant_id)
        return self.store.messages(tenant_id, conversation_id, start, None if limit is None else start + limit - 1)

    def search_messages(self, conversation_id: str, query: str, *, tenant_id: str = "default",
                        limit: int = 10) -> list[tuple[float, MessageRecord]]:
        """Return ``(score, message)`` for the conversation's messages best matching ``query`` (BM25), best first."""
        key = (tenant_id, conversation_id)
        ranked = self.projector.search.rank(key, query, limit=limit)
        found = {m.index: m for m in self.projector.search.messages_at(key, sorted(h.idx for h in ranked))}
        return [(h.score, found[h.idx]) for h in ranked if h.idx in found]

    def tenant_sql(self, tenant_id: str, query: str, limit: int,
                   timeout_s: float = 10.0) -> tuple[list[str], list[list[Any]], bool]:
        """Run one read-only ``query`` over ``tenant_id``'s tables only; return (columns, rows, truncated).

        What ``POST /v1/sql`` runs for a tenant's admin key: see
        :func:`memfold.projections.tenant_sql.run_tenant_sql`.
        """
        from memfold.projections.tenant_sql import run_tenant_sql

        return run_tenant_sql(self.store, tenant_id, query, limit, timeout_s)

    def export(self, directory: str | Path, **options: Any):
        """Write the log to ``directory`` as ``memfold export`` does (see :mod:`memfold.engine.portability`)."""
        from memfold.engine.portability import export_engine

        return export_engine(self, directory, **options)

    def progress(self) -> tuple[dict[int, int], dict[int, int]]:
        """Return the log's end positions and the projection's, per partition (their gap is the projection's lag)."""
        return self.log.end_positions(), self.store.position()

    def summary_counts(self) -> dict[str, tuple[int, float]]:
        """Return ``{status: (summary requests, total latency ms)}`` of the projection."""
        return self.store.summary_status_counts()
    # ----------------------------------------------------------------- users

    def user_memory(
        self, user_id: str, *, tenant_id: str = "default", policy: str | None = None, as_of: datetime | None = None,
    ) -> dict[str, Any]:
        """Return a user's memory across its conversations: what the fold keeps of the user.

        Keys: ``conversations`` (id, message_count, first_at, last_at; most
        recently active first), ``facts`` (the current value of each key, with
        the conversation, message index and time it was stated in),
        ``statements`` (every statement, with ``superseded_by`` /
        ``superseded_in`` naming the later one that replaced it),
        ``summary`` (each conversation's newest summary text). ``as_of`` (a
        timezone-aware datetime): the facts as they stood then. Raises
        :class:`UnknownUserError` when no live conversation of the tenant
        belongs to the user.
        """
        _require_text("tenant_id", tenant_id)
        if policy is not None and not isinstance(policy, str):
            raise ValidationError(f"policy must be a policy name (a string), got {type(policy).__name__}", field="policy")
        users.check_user_id(user_id)
        return users.memory(self, user_id, tenant_id, self._policy_name(policy, tenant_id), as_of)

    def user_of(self, conversation_id: str, *, tenant_id: str = "default") -> str | None:
        """Return the user a conversation belongs to (None: no user named, or not projected yet)."""
        _check_reading(conversation_id, tenant_id)
        return self.projector.users.owner(tenant_id, conversation_id)

    def search_user(self, user_id: str, query: str, *, limit: int = 10, tenant_id: str = "default") -> list[dict[str, Any]]:
        """Return the messages of every conversation of a user best matching ``query`` (BM25), best first.

        Each hit: conversation_id, index, role, content, occurred_at, score.
        Raises :class:`UnknownUserError` for a user with no live conversation.
        """
        _require_text("tenant_id", tenant_id)
        _require_text("query", query)
        _check_search(("message",), limit)
        users.check_user_id(user_id)
        return users.search(self, user_id, query, tenant_id, limit)

    def audit_user(self, user_id: str, *, tenant_id: str = "default") -> dict[str, Any]:
        """Return how a user's memory evolved: every statement of a fact, the conversation that taught it, what replaced it."""
        _require_text("tenant_id", tenant_id)
        users.check_user_id(user_id)
        return users.audit(self, user_id, tenant_id)

    def forget_user(
        self, user_id: str, *, tenant_id: str = "default", reason: str | None = None, timeout: float = 120.0,
    ) -> list[str]:
        """Erase a user: crypto-shred every conversation of the user and the user memory; return the conversations.

        Steps: (1) list the user's conversations (the projection's, those
        this process appended and the projection does not hold yet, and those
        of an earlier run cut short) and record them as a pending user erasure
        (``data_dir/erasures``: conversation ids, not the user id); (2)
        :meth:`forget` each not forgotten yet, and finish each whose own
        erasure is pending (its data key destroyed, its rows erased, the file
        rewritten, replay namespaces too); (3) delete what is left of the
        user memory and rewrite the file; (4) clear the record. Resumable: a
        run cut short is finished by running it again. Raises
        :class:`UnknownUserError` when the user has no conversation here and
        no erasure of it is pending.
        """
        _require_text("tenant_id", tenant_id)
        users.check_user_id(user_id)
        if self.store is None:
            raise ConfigError("forget_user needs the projection to find the user's conversations; "
                              "run it where the projection is (memfold forget --user, DELETE /v1/users/{user_id})")
        pending = PendingErasures(self.settings.data_dir)
        found = pending.user_conversations(tenant_id, user_id)
        found += [c["conversation_id"] for c in self.store.user_conversations(tenant_id, user_id)]
        found += [c for (t, c), u in self.appended_users.items() if t == tenant_id and u == user_id]
        conversations = list(dict.fromkeys(found))
        if not conversations:
            raise UnknownUserError(f"no conversation of tenant {tenant_id!r} belongs to user {user_id!r}",
                                   field="user_id")
        pending.begin_user(tenant_id, user_id, conversations)
        for conversation_id in conversations:
            done = (self.sealer is not None and not pending.is_pending(tenant_id, conversation_id)
                    and self.sealer.keys.status(conversation_key(tenant_id, conversation_id)) == "forgotten")
            if not done:  # forgotten by the run cut short, and finished: forgetting it again would add nothing
                self.forget(conversation_id, tenant_id=tenant_id, reason=reason, timeout=timeout)
        with self.runner.paused():
            if self.store.erase_user(tenant_id, user_id) or self.store.compaction_owed():
                self.store.compact()
            self.projector.users.clear()
        pending.done_user(tenant_id, user_id)
        return conversations

    def history(self, conversation_id: str, *, tenant_id: str = "default") -> list[MessageRecord]:
        """Return every message of a conversation as stored, oldest first (:meth:`require_stored`)."""
        _check_reading(conversation_id, tenant_id)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        self.require_stored(conversation_id, tenant_id=tenant_id)
        return self.store.messages(tenant_id, conversation_id)

    def summaries(self, conversation_id: str, *, tenant_id: str = "default", policy: str | None = None) -> list[dict[str, Any]]:
        """Return the summary chain(s): every request with its outcome and lineage, oldest first (:meth:`require_stored`)."""
        _check_reading(conversation_id, tenant_id, policy=policy)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        self.require_stored(conversation_id, tenant_id=tenant_id)
        return self.store.summary_rows(tenant_id, conversation_id, policy)

    def audit(self, conversation_id: str, *, tenant_id: str = "default") -> dict[str, Any]:
        """Return the memory evolution of a conversation: summary versions, facts, settings, erasure.

        Shape: :mod:`memfold.projections.audit`. Reads the projection (and
        the pending-erasure record) only; an erased conversation shows that it
        existed and when it was erased, and a ``forget`` cut short shows as
        ``erasure pending`` until a ``forget`` finishes it.
        """
        _check_reading(conversation_id, tenant_id)
        self.check_owned(conversation_id, tenant_id=tenant_id)
        from memfold.projections.audit import audit

        return audit(self.store, tenant_id, conversation_id,
                     erasure_pending=self.erasure_pending(conversation_id, tenant_id=tenant_id))

    def sql(
        self, query: str, params: Sequence[Any] | None = None, *, write: bool = False
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run SQL over the projection tables; return (columns, rows).

        Read-only: a statement that is not a SELECT or EXPLAIN raises
        :class:`ProjectionError` before anything runs (the projection is
        derived from the log; change memory by appending, retracting or
        forgetting). ``write=True`` lifts that for maintenance (CHECKPOINT,
        an index of your own); rows you change are lost at the next rebuild.
        """
        _require_text("query", query)
        if params is not None and (isinstance(params, (str, bytes)) or not isinstance(params, (Sequence, Mapping))):
            raise ValidationError(f"params must be a list of values (or a mapping), got {type(params).__name__}",
                                  field="params")
        return self.store.query(query, params) if write else self.store.read_query(query, params)

    def forget(
        self, conversation_id: str, *, tenant_id: str = "default", reason: str | None = None, timeout: float = 120.0
    ) -> Position:
        """Erase a conversation (crypto-shredding); return the position of its ``ConversationDeleted``.

        Steps: (1) record the erasure as pending (``data_dir/erasures``), so
        a run cut short shows in ``audit`` and is finished by the next
        ``forget``; (2) append ``ConversationDeleted`` (the audit record that
        it existed and was erased); (3) destroy its data keys, so its sealed
        content in the log, in every copy of the log, can no longer be read,
        and appends to it are refused until :meth:`reopen`; (4) wait until
        the projection has folded the deletion, which deletes its rows and
        summary-cache entries in the same transaction (recording that the
        file must be rewritten) and rewrites the DuckDB file so no freed
        block keeps its text; (5) wait for summaries in flight, delete rows a
        late writer added, and rewrite the file if a rewrite is still owed;
        (6) the same in every replay namespace, and replace the Parquet
        snapshots in ``snapshot.dir`` by a fresh one; (7) delete what killed
        commands left beside the projections; (8) clear the pending record.

        Idempotent and resumable: forgetting a forgotten conversation redoes
        (3)..(8) (appending a second deletion record). Raises
        :class:`UnknownConversationError` for a conversation the key store
        never held, :class:`ErasureIncompleteError` when a copy could not be
        removed (a full disk, a replay open elsewhere): the key is destroyed
        by then, and ``forget`` again finishes the rest. Raises
        :class:`ConfigError` when content is not sealed (a Kafka log without
        a ``keystore``): the log could not be erased.
        """
        from memfold.engine.replaying import erase_in_replays
        from memfold.engine.snapshots import erase_in_snapshots

        _require_text("conversation_id", conversation_id)
        _require_text("tenant_id", tenant_id)
        if reason is not None and not isinstance(reason, str):
            raise ValidationError("reason must be a string", field="reason")
        if self.sealer is None:
            raise ConfigError(
                "this deployment stores content unsealed (no key store), so a conversation cannot be erased "
                "from its log; set 'keystore' (env MEMFOLD_KEYSTORE) to a key store every node shares, e.g. "
                "kafka://HOST:PORT/TOPIC (a compacted key topic on the same broker)"
            )
        scope = conversation_key(tenant_id, conversation_id)
        if self.sealer.keys.status(scope) == "unknown":
            raise UnknownConversationError(
                f"no conversation {conversation_id!r} in tenant {tenant_id!r}: nothing to forget", field="conversation_id"
            )
        pending = PendingErasures(self.settings.data_dir)
        pending.begin(tenant_id, conversation_id)
        self.appended_users.pop((tenant_id, conversation_id), None)
        event = ConversationDeleted(
            event_id=new_event_id(), tenant_id=tenant_id, conversation_id=conversation_id, occurred_at=utcnow(),
            payload=ConversationDeletedPayload(reason=reason),
        )
        position = self.log.append([event])[0]
        self.sealer.keys.destroy(scope)
        self.sealer.forget()
        if self.store is None:
            pending.done(tenant_id, conversation_id)
            return position  # a client: every projector node erases its replica when it folds the deletion
        self.runner.notify()
        self.wait_for(position, timeout)
        self.wait_idle(timeout)
        failed = []
        with self.runner.paused():  # the projector compacted on commit; a late summary-cache write may follow
            try:
                if self.store.erase(tenant_id, conversation_id) or self.store.compaction_owed():
                    self.store.compact()
            except ProjectionError as exc:
                failed.append(f"the projection: {exc}")
            self.projector.drop_reads((tenant_id, conversation_id))
        self._drop_text_caches()  # again: a summary in flight until now may have read its messages
        failed += erase_in_replays(self.settings.data_dir, tenant_id, conversation_id)[1]
        failed += erase_in_snapshots(self.store, self.settings.snapshot_dir())
        self._remove_leftovers()
        if failed:
            raise ErasureIncompleteError(
                f"the data key of {conversation_id!r} is destroyed, but {len(failed)} cop"
                f"{'y' if len(failed) == 1 else 'ies'} could not be rewritten yet ({'; '.join(failed)}); "
                "free the disk or close the other process, then forget it again to finish",
                remaining=failed,
            )
        pending.done(tenant_id, conversation_id)
        return position

    def reopen(self, conversation_id: str, *, tenant_id: str = "default", reason: str | None = None,
               timeout: float = 30.0) -> Position | None:
        """Start a forgotten conversation again, empty; return the position of its ``ConversationReopened``.

        Appends to a forgotten conversation are refused
        (:class:`ConversationForgottenError`) until this is called. Steps:
        (1) give the conversation a new data key; (2) append
        ``ConversationReopened`` (folds start it from fresh states); (3) wait
        until the projection holds it (not for a client). What was said
        before the erasure stays shredded; what is appended from now on can
        be forgotten again. Returns None, appending nothing, when the
        conversation was not forgotten. Raises
        :class:`UnknownConversationError` for one the key store never held.
        """
        _require_text("conversation_id", conversation_id)
        _require_text("tenant_id", tenant_id)
        if self.sealer is None:
            return None  # nothing is ever forgotten without a key store
        scope = conversation_key(tenant_id, conversation_id)
        status = self.sealer.keys.status(scope)
        if status == "unknown":
            raise UnknownConversationError(
                f"no conversation {conversation_id!r} in tenant {tenant_id!r}: nothing to reopen", field="conversation_id"
            )
        if status == "live":
            return None
        self.sealer.keys.reopen(scope)
        event = ConversationReopened(
            event_id=new_event_id(), tenant_id=tenant_id, conversation_id=conversation_id, occurred_at=utcnow(),
            payload=ConversationReopenedPayload(reason=reason),
        )
        position = self.log.append([event])[0]
        if self.store is not None:
            self.runner.notify()
            self.wait_for(position, timeout)
        return position

    def erasure_pending(self, conversation_id: str, *, tenant_id: str = "default") -> bool:
        """True while a ``forget`` of the conversation has begun and not finished (run ``forget`` again)."""
        return PendingErasures(self.settings.data_dir).is_pending(tenant_id, conversation_id)

    def _remove_leftovers(self) -> list[str]:
        """Delete what killed commands left beside the projections (copies with plaintext); return their names."""
        from memfold.engine.replay import beside_path

        busy = {beside_path(self.store.path, "rebuild")} if self._rebuilding else set()
        removed = remove_leftovers(self.settings.data_dir, self.store.path, busy=busy)
        if removed:
            log.warning("removed what killed commands left beside the projection: %s", ", ".join(removed))
        return removed

    def _on_erasure(self, changes: Changes) -> None:
        """After the projection folded a forget: empty the text caches, destroy the keys of user summaries made from it.

        On every node that folds the deletion (a worker, a projector node, the
        process that forgot), as :meth:`forget` does once more when it returns.
        """
        if changes.erased:
            self._drop_text_caches()
        if changes.shredded_user_summaries and self.sealer is not None:
            # User summaries made from a forgotten conversation: their copies in the log are shredded with their keys.
            for tenant_id, summary_id in sorted(changes.shredded_user_summaries):
                self.sealer.keys.destroy(user_summary_scope(tenant_id, summary_id))
            self.sealer.forget()

    def _drop_text_caches(self) -> None:
        """Empty what this process keeps of conversations' text for speed.

        All of it (these caches are not kept per conversation): analysed
        excerpts, the summarizer's traces, statements and line counts, and the
        memory texts the projector and the reads remember token counts of, and
        the last plan a read made.
        """
        forget_analysed()
        self.summarizer.drop_text_caches()
        self.projector.drop_text_caches()
        self._count_cached.cache_clear()
        self._last_plan = None

    def rebuild(self, timeout: float = 600.0) -> None:
        """Fold the projection again from the log *beside* the live one, swap it in, return when idle.

        Steps: (1) fold the log into a fresh file next to the live one (reads
        keep answering from the live projection meanwhile); (2) pause the
        live runner, fold what arrived since, and swap the files; (3) wait for
        the summaries the rebuilt projection finds open. ``llm_cache`` and
        ``dense_vectors`` are carried over and outcomes already in the log are
        folded, not recomputed, so replaying unchanged history calls no model
        and no embedder.
        """

        self._rebuilding = True
        try:
            self._rebuild(timeout)
        finally:
            self._rebuilding = False

    def _rebuild(self, timeout: float) -> None:
        beside = self._fold_beside("rebuild")
        try:
            with self.runner.paused():
                self._fold_beside("rebuild", store=beside)
                builders.swap_projection(self, beside, self.settings)
        except BaseException:
            beside.close()
            beside.path.unlink(missing_ok=True)
            raise
        self.wait_idle(timeout)  # the runner hands the open requests it finds to the summarizer

    def verify(self, conversation_id: str | None = None, *, tenant_id: str = "default") -> list:
        """Replay the log with the live settings into a temporary namespace; return its differences from live.

        An empty list proves the live projection (summaries, facts, version
        chains, retrieval tables, fold states, snapshots) is exactly what the
        log folds to; otherwise one :class:`~memfold.engine.replay.Difference`
        per table that differs. ``conversation_id`` replays and compares only
        that conversation. The live runner is paused while the replay folds
        to the same positions; the live projection is never written, and the
        temporary namespace is removed afterwards.
        """
        from memfold.engine.replaying import verify

        return verify(self, conversation_id, tenant_id)

    def replay(
        self,
        name: str,
        *,
        policy: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        settings_file: str | Path | None = None,
        conversations: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
        batch_size: int = 5000,
        processes: int = 1,
    ):
        """Fold the log with other settings into the namespace ``name``; create it or resume it; return a report.

        The settings are the live ones changed by ``settings_file`` (a
        memfold.toml: its policy settings), then ``policy`` (the read policy,
        folded too), then ``overrides`` (dotted keys such as
        ``{"hierarchical.trigger_message_count": 30}``,
        :mod:`memfold.core.overrides`). ``conversations`` restricts the
        replay to those conversation ids. The namespace lives in
        ``<data_dir>/replays/NAME/`` (:mod:`memfold.engine.namespaces`): its
        own DuckDB projection and positions, and a side log for the summary
        requests and outcomes it makes. Nothing is written to the live log
        or the live projection; summaries go through the shared summary
        cache (the report counts hits, misses and model calls).

        Calling it again with only ``name`` resumes a replay that was
        interrupted (to the same result as an uninterrupted run) or catches
        a finished one up with what the log gained since. Calling it with
        other settings than the namespace's raises :class:`ConfigError`.
        ``progress(done, total)`` is called after every batch of up to
        ``batch_size`` log events (one transaction each).
        ``processes`` > 1 folds a new namespace's source in that many
        processes, each a share of the partitions, merged into the namespace
        (:mod:`memfold.engine.replay_group`; the same rows as one process).
        Returns a :class:`~memfold.engine.namespaces.ReplayReport`.
        """
        from memfold.engine.replaying import replay

        if self.store is None:
            raise ConfigError("a client engine keeps no projection; replay from an embedded or projector engine")
        return replay(self, name, policy=policy, overrides=overrides, settings_file=settings_file,
                      conversations=conversations, progress=progress, batch_size=batch_size, processes=processes)

    def replays(self) -> list[dict[str, Any]]:
        """Return the manifest of every replay namespace of this data dir (name, settings, status, head...).

        ``stale`` is true for a namespace folded by other fold rules (an older
        memfold): diff refuses it and the next replay run folds it again.
        """
        from memfold.engine.namespaces import list_namespaces

        return [{**space.manifest, "stale": space.stale} for space in list_namespaces(self.settings.data_dir)]

    def drop_replay(self, name: str) -> Path:
        """Delete the replay namespace ``name``; return its path. Raises :class:`UnknownReplayError` if none."""
        from memfold.engine.namespaces import drop

        return drop(self.settings.data_dir, name)

    def diff_replay(
        self,
        name: str,
        conversation_id: str | None = None,
        *,
        tenant_id: str | None = None,
        budget: int = 4000,
        questions: Sequence[Any] = (),
    ):
        """Compare replay ``name`` with live, per conversation; return a :class:`~memfold.engine.replay_diff.ReplayDiff`.

        Per conversation and side: summary versions (count, newest, covered
        messages), facts in force and the facts the replay added, changed or
        lost, context tokens at ``budget``, answer-content recall of
        ``questions`` (:class:`~memfold.engine.replay_diff.Question`, e.g. from
        ``replay_diff.load_questions``) and summarizer calls and tokens. Reads only.
        """
        from memfold.engine.replay_diff import diff

        if self.store is None:
            raise ConfigError("a client engine keeps no projection; diff from an embedded or projector engine")
        return diff(self, name, conversation_id, tenant_id=tenant_id, budget=budget, questions=questions)

    def promote(self, name: str, *, timeout: float = 600.0) -> Position:
        """Make the settings of replay ``name`` live; return the position of the ``SettingsChanged`` recording it.

        Steps: (1) catch the replay up with the log; (2) append one
        ``SettingsChanged`` (policy, settings, hash, replay name: the audit
        record) and the summary events the replay made to the live log, so
        the log alone reproduces them (idempotent by event id: promoting
        again appends nothing new); (3) record the settings in the data dir
        (``promoted.json``: later processes open with them); (4) fold the
        log beside the live projection under the new settings, pause the
        runner, fold what arrived since, swap the files and switch the
        engine's folds. Reads answer from the old projection until the swap
        and from the new one after it, never from an empty one. Afterwards
        the live projection is what a fresh rebuild of the log under the
        new settings gives. Embedded engines and projector nodes (the
        service on a Kafka log); the workers and other projector nodes adopt
        the settings from the ``SettingsChanged`` on the log
        (:meth:`follow_settings`).
        """
        from memfold.engine.replaying import promote

        return promote(self, name, timeout)

    def follow_settings(self) -> bool:
        """Adopt a ``SettingsChanged`` appended to the log since the last look; return True when this node switched.

        Worker and projector nodes on a Kafka log only (a thread calls it
        every second); anywhere else it returns False. See
        :mod:`memfold.engine.settings_follow`.
        """
        if self._follower is None or self._closed:
            return False
        from memfold.engine.replaying import adopt

        with self.switching:
            change = self._follower.poll()
            return change is not None and adopt(self, settings_of(self.settings, change))

    def switch_settings(self, settings: Settings) -> None:
        """Fold and read with ``settings`` from now on; the caller has swapped in a projection made with them.

        Call with the runner paused. Builds new folds and installs them: the
        engine, its runner and its summary worker use them from the next
        batch on. Readers in flight finish with the old fold contexts (every
        policy name stays resolvable). A client (no projection) only validates
        with them from now on.
        """
        if self.store is None:
            self.settings = settings
            return
        folds = builders.build_folds(settings, self.store, self.counter, self._batch_listeners,
                                     partition_count=self.log.partition_count, hooks=self._parts.hooks)
        self._folds = folds
        self.runner.projector = folds.projector
        self.worker.use(folds.inputs, folds.settings)
        self.settings = settings
        # Every row may have changed: caches keyed by partition progress (the service's) drop what they hold.
        self.runner.committed(self.store.position())
        for listener in self._switch_listeners:
            listener(folds.projector)

    def _fold_beside(self, name: str, store=None):
        """Fold the log up to its end into ``store`` (a fresh beside file if None)."""
        from memfold.engine.replay import beside_path, fold_beside

        if store is None:
            path = beside_path(self.store.path, name)
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".wal").unlink(missing_ok=True)
            store = DuckDBProjectionStore(path)
        ends = self.log.end_positions()
        try:
            fold_beside(self.log, store, self.policies, self.counter, ends)
        except BaseException:
            store.close()
            store.path.unlink(missing_ok=True)
            raise
        return store

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Stop the background threads and close the log and the projection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        if self._following is not None:
            self._following.stop()
        self._parts.close()

    def __enter__(self) -> MemoryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def log_budget_decisions(policy: str, conversation_id: str, plan: Any) -> None:
    """Log what a plan dropped or cut to fit its policy's own prompt budget (seed 001 §8.3), if anything.

    Policies report it in ``plan.notes`` (``turns_dropped``,
    ``summary_truncated_from``/``_to``) instead of logging, so that folds and
    replays stay free of side effects; reads log it here.
    """
    notes = plan.notes or {}
    dropped, cut_from = notes.get("turns_dropped"), notes.get("summary_truncated_from")
    if not dropped and cut_from is None:
        return
    log.info(
        "context budget policy=%s conversation=%s turns_dropped=%s tail_turns=%s summary_tokens_from=%s "
        "summary_tokens_to=%s",
        policy, conversation_id, dropped or 0, notes.get("tail_turns"), cut_from, notes.get("summary_truncated_to"),
        extra={"policy": policy, "conversation_id": conversation_id, "turns_dropped": dropped or 0,
               "tail_turns": notes.get("tail_turns"), "summary_tokens_from": cut_from,
               "summary_tokens_to": notes.get("summary_truncated_to")},
    )


def _require_text(name: str, value: Any) -> None:
    """Raise :class:`ValidationError` unless ``value`` is a non-blank string (an id a caller passed)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} is required and must be a non-empty string, got {value!r:.80}", field=name)


def _check_reading(
    conversation_id: Any, tenant_id: Any, *, budget: Any = None, query: Any = None, policy: Any = None,
    query_required: bool = False,
) -> None:
    """Raise :class:`ValidationError` for arguments of a read that are of the wrong type or out of range."""
    _require_text("conversation_id", conversation_id)
    _require_text("tenant_id", tenant_id)
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0):
        raise ValidationError(f"budget must be a positive number of tokens (an int), got {budget!r:.40}", field="budget")
    if query_required:
        _require_text("query", query)
    elif query is not None and not isinstance(query, str):
        raise ValidationError(f"query must be a string, got {type(query).__name__}", field="query")
    if policy is not None and not isinstance(policy, str):
        raise ValidationError(f"policy must be a policy name (a string), got {type(policy).__name__}", field="policy")


def _check_search(kinds: Any, limit: Any) -> None:
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not all(isinstance(k, str) for k in kinds):
        raise ValidationError("kinds must be a list of strings (message, summary, fact)", field="kinds")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValidationError(f"limit must be a positive int, got {limit!r:.40}", field="limit")
