"""Ports: the interfaces the core talks to, and the plain values that cross them.

Adapters live in ``memfold.streams`` (logs, runners) and
``memfold.projections`` (policies, store, summarizers, embedders); only the
composition root (``MemoryEngine``, the CLI) picks concrete ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

import msgspec
from pydantic import BaseModel

from memfold.core.events import Event, Fact, SummaryRequested, ToolCall
from memfold.core.positions import LogRecord, Position

# --------------------------------------------------------------------------- the log


@runtime_checkable
class EventLog(Protocol):
    """An append-only, partitioned event log (embedded SQLite file or Kafka topic).

    Invariants every backend keeps (tests/contract/event_log_contract.py):
    - one conversation (``tenant/conversation``) maps to one partition via
      Kafka's murmur2 partitioner, so its events are totally ordered;
    - offsets within a partition start at 0 and have no gaps;
    - ``seq`` per conversation starts at 1, is strictly increasing and gapless,
      also under concurrent appenders.
    """

    @property
    def partition_count(self) -> int: ...

    def append(self, events: Sequence[Event]) -> list[Position]:
        """Append ``events`` in order; return the position of each, in the same order.

        The log assigns ``seq`` (an event's own ``seq`` is ignored). On failure
        raise :class:`~memfold.core.errors.AppendFailedError` naming the
        events that were not stored; never report an unacknowledged event as stored.
        """
        ...

    def read(self, partition: int, start: int, limit: int = 1000) -> list[LogRecord]:
        """Return up to ``limit`` records of ``partition`` starting *at* offset ``start``, in offset order."""
        ...

    def scan(self, partition: int, start: int, types: Collection[str], limit: int = 5000) -> tuple[list[LogRecord], int]:
        """Return the records of ``types`` among ``partition``'s next ``limit`` offsets from ``start``, and the offset after them.

        The other events are passed over undecoded: for a reader that wants a
        few event types out of a partition it shares with conversations (the
        settings follower's ``SettingsChanged``). The returned offset is where
        the next scan starts; it is ``start`` when the end was reached.
        """
        ...

    def partitions(self) -> list[int]:
        """Return the partition numbers, ascending."""
        ...

    def find(self, event_ids: Sequence[str]) -> dict[str, Position]:
        """Return the position of each of ``event_ids`` already stored; ids not stored are absent."""
        ...

    def end_positions(self) -> dict[int, int]:
        """Return, per partition, the offset the next appended event will get (= number of events)."""
        ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- what folds see


class MessageRecord(msgspec.Struct, frozen=True):
    """A message as policies and the context assembler see it (also a row of ``messages``).

    ``index`` is the 0-based ordinal among the conversation's messages (the
    seeds' "sequence number"); ``tokens`` is its prompt cost, content plus the
    per-message overhead, counted once at projection time.
    """

    tenant_id: str
    conversation_id: str
    index: int
    seq: int
    event_id: str
    role: str
    content: str
    tokens: int
    occurred_at: datetime
    model_variant: str | None = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    importance: float | None = None
    embedding: tuple[float, ...] | None = None
    metadata: Mapping[str, Any] = msgspec.field(default_factory=dict)


class MemoryMessage(msgspec.Struct, frozen=True):
    """A system message that carries memory (facts, narrative, summary). Never trimmed from the front."""

    content: str
    kind: str  # "facts" | "narrative" | "summary" | "topic_summary" | ...
    tokens: int = 0


class ContextPlan(msgspec.Struct, frozen=True):
    """What a policy wants in the next prompt; the assembler fetches and trims to the budget.

    Verbatim messages are either every message from ``verbatim_from`` to the
    end (the common case, read without listing indices) or, when
    ``verbatim_indices`` is not None, exactly those indices, oldest first.
    ``fallback`` names why the policy fell back (``"takeLast"``,
    ``"summary_failed"``...), or is ``None`` when memory is in force.
    """

    memory: tuple[MemoryMessage, ...] = ()
    verbatim_from: int = 0
    verbatim_indices: tuple[int, ...] | None = None
    fallback: str | None = None
    notes: Mapping[str, Any] = msgspec.field(default_factory=dict)


class ContextMessage(msgspec.Struct, frozen=True):
    """One message of an assembled context: what ``memfold context --json`` prints."""

    role: str
    content: str
    kind: str  # "system_prompt" | "memory:<kind>" | "recalled" | "verbatim" | "current"
    tokens: int = 0
    index: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    occurred_at: datetime | None = None
    name: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the compact annotated form: role, content, kind, tokens (+ index, occurred_at, name, tool fields when set).

        Tool calls are the flat ``{"id", "name", "arguments"}`` alias; for a
        model call use :meth:`as_openai` or :func:`memfold.core.shapes.shaped`.
        """
        out: dict[str, Any] = {"role": self.role, "content": self.content, "kind": self.kind, "tokens": self.tokens}
        if self.index is not None:
            out["index"] = self.index
        if self.occurred_at is not None:
            out["occurred_at"] = self.occurred_at.isoformat()
        if self.tool_calls:
            out["tool_calls"] = [tc.model_dump() for tc in self.tool_calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.name:
            out["name"] = self.name
        return out

    def as_openai(self) -> dict[str, Any]:
        """Return the message as an OpenAI ``ChatCompletionMessageParam``: only keys that type defines.

        ``name`` is kept on system, user and assistant messages (a tool
        message has no ``name`` in that type); an assistant message with tool
        calls and no text has ``content`` ``None``, as the API returns it.
        """
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name and self.role != "tool":
            out["name"] = self.name
        if self.role == "assistant" and self.tool_calls:
            if not self.content:
                out["content"] = None
            out["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in self.tool_calls
            ]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


class FoldContext(msgspec.Struct, frozen=True):
    """What a policy fold may use besides state and event: its settings, their hash, pure helpers.

    ``count_tokens`` and ``embed`` are pure functions (tiktoken, the local
    hashing embedder); a remote embedding arrives recorded on the message.
    """

    policy: str
    settings: BaseModel
    settings_hash: str
    count_tokens: Callable[[str], int]
    embed: Callable[[str], tuple[float, ...]] | None = None
    # ``[users] summary_every``: a conversation of a user asks for the user's summary after every N-th
    # summary this policy makes of it (0: never). Decided by the projector, from the conversation's own stream.
    user_summary_every: int = 1
    user_summary_token_cap: int = 400  # ``[users] summary_token_cap``, recorded on the request


class Policy(Protocol):
    """A memory policy (one per seed): a pure fold plus a context planner.

    The runner (``projections.fold.step``) drives it per conversation::

        state = policy.evolve(state, item, ctx)            # item: MessageRecord or Event
        for request in policy.decide(state, ctx, item):
            state = policy.evolve(state, request, ctx)     # decided requests are folded at once
            emit(request)                                  # and appended to the log

    ``evolve`` must treat an event it has already folded (same request_id or
    event_id) as a no-op: a request it decided comes back from the log later.
    No clock, no randomness, no I/O: time comes from event timestamps, ids from
    content hashes (``projections.fold.make_request``).
    """

    name: ClassVar[str]
    State: ClassVar[type[Any]]  # a frozen msgspec struct (projections.policies.state_codec)

    def initial(self, tenant_id: str, conversation_id: str) -> Any: ...

    def evolve(self, state: Any, item: MessageRecord | Event, ctx: FoldContext) -> Any: ...

    def decide(self, state: Any, ctx: FoldContext, cause: MessageRecord | Event) -> list[SummaryRequested]: ...

    def plan(self, state: Any, ctx: FoldContext) -> ContextPlan: ...


# --------------------------------------------------------------------------- summarizers


class SummaryInput(msgspec.Struct, frozen=True):
    """Everything a summarizer is given for one request (also the cache key's content)."""

    policy: str
    kind: str  # "facts" (facts + narrative, seed 000) | "text" (one summary text)
    messages: tuple[MessageRecord, ...]
    existing_summary: str | None = None
    existing_facts: tuple[Fact, ...] = ()
    window_start: int | None = None
    # Sliding window only (setting ``sliding_window.keep_facts``): facts stated before ``window_start`` stay,
    # read from every input message, and the summary returns them as its structured facts.
    keep_facts: bool = False
    token_cap: int | None = None
    char_cap: int | None = None
    prompt_format: str = "default"  # "chunked" = seed 001's EXISTING_SUMMARY / NEW_TURNS input
    model: str | None = None
    prompt_id: str | None = None
    prompt_version: str | None = None


class SummaryOutput(msgspec.Struct, frozen=True):
    """What a summarizer returns. ``text`` is the narrative (kind "facts") or the summary (kind "text")."""

    text: str
    facts: tuple[Fact, ...] = ()
    model: str = ""
    prompt_hash: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False

    @property
    def empty(self) -> bool:
        """True when there is nothing to use: no facts and a blank text (seed 000 → takeLast)."""
        return not self.facts and not self.text.strip()


@runtime_checkable
class PolicyTables(Protocol):
    """A policy that keeps rows of tables of its own (memories, topics) beside its state.

    ``holds_topics``: its summaries hold one topic's facts each (the projector
    tracks which); :meth:`retractions` are what the user took back, as far as
    its state keeps them.
    """

    holds_topics: ClassVar[bool]

    def rows(self, state: Any) -> dict[str, list[dict[str, Any]]]: ...

    def retractions(self, state: Any) -> tuple[tuple[str, int], ...]:
        """Return (key stem, message index) of what the user took back that ``state`` keeps (``()``: none)."""
        ...


@runtime_checkable
class KeepsAppended(Protocol):
    """A log that can hand the events this process appended to its next read, undecoded (the SQLite log)."""

    def keep_appended(self, limit: int) -> None:
        """Keep up to ``limit`` of the events appended from now on for the next read (0: none)."""
        ...


class Summarizer(Protocol):
    """Turns a :class:`SummaryInput` into a :class:`SummaryOutput`, or raises a ``SummarizerError``."""

    name: str

    def summarize(self, request: SummaryInput) -> SummaryOutput: ...

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        """Return ``(model, prompt hash)`` this summarizer answers ``request`` with, before calling it (cache key)."""
        ...

    def drop_text_caches(self) -> None:
        """Forget every conversation text kept for speed (erasure calls it); a no-op where none is kept."""
        ...

    def close(self) -> None:
        """Release what the summarizer holds (worker processes, HTTP connections); idempotent."""
        ...


@runtime_checkable
class CachedSummarizer(Protocol):
    """A summarizer with a cache in front: every hit of a batch in one query, new entries in one transaction."""

    name: str

    def lookup(self, inputs: Sequence[SummaryInput]) -> list[tuple[str, SummaryOutput | None]]:
        """Return ``(cache key, cached output or None)`` for each input, in order."""
        ...

    def batched(self) -> AbstractContextManager[None]:
        """Within the block, new cache entries are written in one transaction at its end."""
        ...


class Embedder(Protocol):
    """Maps texts to unit-length vectors of ``dimensions`` floats."""

    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]: ...


class MessageSource(Protocol):
    """Where a summarizer worker reads original messages from (a projection store)."""

    def messages(self, tenant_id: str, conversation_id: str, start: int, end: int) -> list[MessageRecord]:
        """Return messages with ``start <= index <= end`` in index order."""
        ...


class ProjectionStore(Protocol):
    """Projection tables plus the log positions they cover, always written together.

    Invariants every store keeps (tests/contract/projection_store_contract.py):
    - :meth:`apply` writes row changes *and* positions in one transaction: after
      a failure (or a crash) the store holds both or neither;
    - positions only move forward, per partition, and survive reopening;
    - :meth:`reset` forgets every row and position (cached model outputs stay).

    Skipping records the store already covers is the projector's job: it
    reads :meth:`position` and folds only what lies at or after it.
    """

    def apply(self, changes: Any, positions: Mapping[int, int]) -> None:
        """Write the projector's row ``changes`` and advance ``positions`` (partition -> next offset) in ONE transaction.

        On failure raise :class:`~memfold.core.errors.ProjectionError` and
        leave the store exactly as before the call.
        """
        ...

    def position(self) -> dict[int, int]:
        """Return, per partition, the next offset to apply (offsets below it are applied)."""
        ...

    def has_reached(self, position: Position) -> bool:
        """True once the event *at* ``position`` has been applied."""
        ...

    def reset(self) -> None:
        """Drop every projection row and position; the next apply starts at offset 0."""
        ...

    def outcomes(self, request_ids: Sequence[str]) -> dict[str, str]:
        """Return the status ('processing', 'completed', 'failed', 'superseded') of each known request id."""
        ...

    def open_request_events(self, partitions: Sequence[int] | None = None) -> list[SummaryRequested]:
        """Return the requests still 'processing' in ``partitions`` (None = all), in log order."""
        ...

    def messages(self, tenant_id: str, conversation_id: str, start: int = 0, end: int | None = None) -> list[MessageRecord]:
        """Return messages with ``start <= index <= end`` (``end`` None = to the last), in index order."""
        ...

    def messages_at(self, tenant_id: str, conversation_id: str, indices: Sequence[int]) -> list[MessageRecord]:
        """Return the messages at exactly ``indices`` (unknown ones left out), in index order."""
        ...

    def summary(self, summary_id: str) -> dict[str, Any] | None:
        """Return the row of the summary ``summary_id`` (``text``, ``facts``, lineage), or None when none was produced."""
        ...

    def outcome(self, request_id: str) -> str | None:
        """Return the status of one summary request (as :meth:`outcomes`), or None when the request is unknown."""
        ...

    def close(self) -> None: ...


KEY_BYTES = 32  # AES-256
# How stale a process's cached keys may be for unsealing: a key another process destroyed stops
# unsealing here within this time. Sealing always checks first.
KEY_RECHECK_S = 0.1


@runtime_checkable
class KeyStore(Protocol):
    """Where data keys live. Keys are never logged, exported or put in a projection."""

    def active_keys(self, scopes: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """Return ``{scope: (key_id, key)}`` to seal new content, creating keys (durably) for new scopes.

        A forgotten scope (every key destroyed, not reopened since) is left
        out of the answer: nothing new may be sealed in it, so the caller
        refuses the content (or, for a late derived event, drops its text).
        """
        ...

    def status(self, scope: str) -> str:
        """Return ``"live"`` (a key to seal with), ``"forgotten"`` (keys destroyed, not reopened) or ``"unknown"``."""
        ...

    def reopen(self, scope: str) -> bool:
        """Give a forgotten scope a new key (durably); return False when it was not forgotten (nothing done).

        Content sealed before stays shredded; content sealed from now on is readable.
        """
        ...

    def key(self, key_id: str) -> bytes | None:
        """Return the key ``key_id`` names, or None once destroyed.

        Raises :class:`KeyStoreError` for a key this store never held (a node
        pointed at the wrong key store must not mistake content for erased).
        """
        ...

    def destroy(self, scope: str) -> int:
        """Destroy every key of ``scope`` durably; return how many were live. Idempotent.

        The scope is forgotten from then on (see :meth:`active_keys`) until :meth:`reopen`.
        """
        ...

    def record_destroyed(self, key_id: str, scope: str) -> None:
        """Record ``key_id`` of ``scope`` as destroyed, holding no key bytes (an import of a forgotten conversation).

        Content sealed with it then reads as erased here too, instead of as a
        key this store never held. Idempotent; a live key of that id stays live.
        """
        ...

    def close(self) -> None: ...
