"""Event models: the envelope, every event type, JSON encoding and upcasting on read.

Every event is a frozen pydantic model with the envelope fields (``event_id``,
``type``, ``schema_version``, ``tenant_id``, ``conversation_id``, ``seq``,
``occurred_at``, ``causation_id``) and a typed ``payload``. The stored ``type``
string is explicit and stable: it never comes from a module or class name, so
moving a class cannot break an old log.

Reading goes through :func:`decode`: an event written at an older
``schema_version`` is upcast (dict → dict, one version at a time) through the
:class:`UpcasterRegistry`; a newer version or an unknown type raises a
:class:`~memfold.core.errors.EventDecodeError` subclass. Events are never
silently dropped and stored events are never rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from memfold.core import wire
from memfold.core.errors import EventDecodeError, UnknownEventTypeError, UpcastError, ValidationError

_M = TypeVar("_M", bound=BaseModel)
ROLES = ("user", "assistant", "system", "tool")
Role = Literal["user", "assistant", "system", "tool"]
# What a summary stands for: one conversation (its policies' memory) or its user across conversations.
Scope = Literal["conversation", "user"]
FactCategory = Literal["ENTITY", "DECISION", "CONDITION", "STATE", "NUMERIC", "GENERAL"]


def utcnow() -> datetime:
    """Return the current UTC time. Only writers call this; folds never do."""
    return datetime.now(UTC)


class _Frozen(BaseModel):
    # defer_build: a model's validator is built on its first use, not at import (a read that decodes no event
    # never builds them).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# --------------------------------------------------------------------------- payload parts


class EncryptedContent(_Frozen):
    """What a user supplied (and what was derived from it), sealed with the conversation's data key.

    ``fields`` names the payload fields the ciphertext holds, as one JSON
    object; while sealed those fields hold their empty values. ``fields``
    None is the first sealed form (before every private field was sealed):
    a message's ``content`` as UTF-8, or a summary's ``{"text", "facts"}``.
    The key store holds ``key_id``.
    """

    key_id: str
    algorithm: str
    nonce_b64: str
    ciphertext_b64: str
    fields: tuple[str, ...] | None = None


class ToolCall(_Frozen):
    """A tool invocation requested by an assistant message; answered by a ``tool`` message with the same id."""

    id: str
    name: str
    arguments: str = "{}"


class Fact(_Frozen):
    """One structured fact (seed 000): ``order_id: #1234`` in category ENTITY.

    ``key`` names the subject: a later value of the same key supersedes the
    earlier one (a knowledge update). A summary lists the current value of
    each key and may also list earlier values, each with ``superseded_by`` set
    to the value that replaced it (the lineage). ``stated_at`` is when the
    value was first stated (the stating message's timestamp: event time),
    ``stated_in`` that message's index; both None when unknown (a model's
    summary, or a summary written before schema v2 of ``SummaryProduced``).
    """

    key: str
    value: str
    category: FactCategory = "GENERAL"
    stated_at: datetime | None = None
    stated_in: int | None = None
    superseded_by: str | None = None

    @property
    def current(self) -> bool:
        """True unless a later value of the same key superseded this one."""
        return self.superseded_by is None


# --------------------------------------------------------------------------- payloads


class MessagePayload(_Frozen):
    role: Role
    content: str | None = None
    encrypted: EncryptedContent | None = None
    name: str | None = None
    model_variant: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # An embedding computed outside the fold (remote model) is recorded with the
    # message the moment it is made, so replays never call the embedder again.
    embedding: tuple[float, ...] | None = None
    # The content's token count per tiktoken encoding, counted once at append: folds, replays and
    # rebuilds with that encoding read it instead of counting again (any other encoding counts).
    tokens: dict[str, pydantic.NonNegativeInt] = Field(default_factory=dict)
    # The user the conversation belongs to (schema v2): what user memory folds over. Sealed with the
    # content, so a forgotten conversation does not leave readable whose it was.
    user_id: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[^/]+$")

    @model_validator(mode="after")
    def _content_or_encrypted(self) -> MessagePayload:
        if self.content is None and self.encrypted is None:
            raise ValueError("a message needs content or encrypted content")
        return self


class ConversationDeletedPayload(_Frozen):
    """``reason`` is the operator's note, kept readable as the audit record: never put user content in it."""

    reason: str | None = None


class ConversationReopenedPayload(_Frozen):
    """``reason``: the operator's note, like a deletion's."""

    reason: str | None = None


class SettingsChangedPayload(_Frozen):
    policy: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    settings_hash: str | None = None


class MessageRetractedPayload(_Frozen):
    """Withdraws one earlier message of the same conversation, named by its ``event_id``."""

    retracted_event_id: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=1000)
    encrypted: EncryptedContent | None = None


class ClockTickedPayload(_Frozen):
    now: datetime


class SummaryRequestedPayload(_Frozen):
    """A policy asks for a summary. ``status`` is always "processing" while the request is open.

    ``covers_from``..``covers_to`` (message indices, inclusive) is what the
    summary will stand for; ``input_from``..``input_to`` is the slice of
    original messages fed to the summarizer next to the base summary.
    """

    request_id: str
    policy: str
    settings_hash: str
    covers_from: int
    covers_to: int
    input_from: int
    input_to: int
    base_summary_id: str | None = None
    window_start: int | None = None
    # Policies over non-contiguous messages (topics) name the exact inputs.
    input_indices: tuple[int, ...] | None = None
    topic_id: str | None = None
    kind: Literal["facts", "text"] = "text"
    token_cap: int | None = None
    char_cap: int | None = None
    status: Literal["processing"] = "processing"
    # "user": the summary of the conversation's user across its conversations (the user's summary), asked
    # on the stream of the conversation whose new summary triggered it; folded by no policy.
    scope: Scope = "conversation"


class SummaryProducedPayload(_Frozen):
    summary_id: str
    request_id: str
    policy: str
    settings_hash: str
    covers_from: int
    covers_to: int
    base_summary_id: str | None = None
    topic_id: str | None = None
    text: str = ""
    facts: tuple[Fact, ...] = ()
    encrypted: EncryptedContent | None = None
    summarizer: str
    model: str
    prompt_hash: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: int = 0
    cached: bool = False
    scope: Scope = "conversation"
    # A user summary: the conversation summaries it stands for (their ids) and the conversations they
    # summarize, in input order. Private (sealed with the text): they say which conversations are one user's.
    covers_summaries: tuple[str, ...] = ()
    covers_conversations: tuple[str, ...] = ()


class SummaryFailedPayload(_Frozen):
    request_id: str
    policy: str
    settings_hash: str
    reason: str
    error_type: str
    retryable: bool = False
    summarizer: str = ""
    model: str = ""
    latency_ms: int = 0
    encrypted: EncryptedContent | None = None
    scope: Scope = "conversation"


class TopicAssignedPayload(_Frozen):
    policy: str = "topics"
    settings_hash: str
    topic_id: str
    message_index: int
    similarity: float | None = None
    created: bool = False
    title: str | None = None
    encrypted: EncryptedContent | None = None


class TopicCompactedPayload(_Frozen):
    policy: str = "topics"
    settings_hash: str
    topic_id: str
    compacted_through: int
    kept_recent: int


class TopicEvictedPayload(_Frozen):
    policy: str = "topics"
    settings_hash: str
    topic_id: str
    priority: float


# --------------------------------------------------------------------------- envelope + types


class Event(_Frozen):
    """The envelope every event shares. Subclasses pin ``type`` and ``schema_version``.

    ``seq`` is 0 until the log assigns it: strictly increasing, gapless, per
    conversation (``tenant_id/conversation_id``), counting every event type.
    """

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    event_id: str = Field(min_length=1, max_length=200)
    type: str
    schema_version: int
    # No "/" in a tenant id: the partition key is "tenant/conversation" and must be unambiguous.
    tenant_id: str = Field(default="default", min_length=1, max_length=200, pattern=r"^[^/]+$")
    conversation_id: str = Field(min_length=1, max_length=400)
    seq: int = Field(default=0, ge=0)
    occurred_at: datetime
    causation_id: str | None = None
    payload: Any

    @field_validator("occurred_at")
    @classmethod
    def _aware_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @property
    def key(self) -> str:
        """The partition key ``tenant/conversation``: one conversation, one partition, total order."""
        return conversation_key(self.tenant_id, self.conversation_id)

    def with_seq(self, seq: int) -> Event:
        """Return a copy carrying the log-assigned ``seq`` (valid by construction: not validated again)."""
        return replaced(self, seq=seq)

    def encode(self) -> str:
        """Return the canonical JSON text of this event (what the log stores).

        Raises :class:`~memfold.core.errors.ValidationError` naming the event
        when it cannot be JSON (a lone surrogate, NaN in metadata): events
        built through the validation boundary never do, events built by hand may.
        """
        try:
            return self.model_dump_json()
        except (pydantic_core.PydanticSerializationError, UnicodeError, ValueError) as exc:
            raise ValidationError(f"event {self.event_id} ({self.type}) cannot be encoded as JSON: {exc}") from exc


def conversation_key(tenant_id: str, conversation_id: str) -> str:
    """Return the partition key for a conversation: ``tenant/conversation``."""
    return f"{tenant_id}/{conversation_id}"


class MessageAppended(Event):
    """v2: the payload may name the ``user_id`` the conversation belongs to (v1 messages have none)."""

    TYPE: ClassVar[str] = "MessageAppended"
    VERSION: ClassVar[int] = 2
    type: Literal["MessageAppended"] = "MessageAppended"
    schema_version: Literal[2] = 2
    payload: MessagePayload


def same_message(a: MessageAppended, b: MessageAppended) -> bool:
    """Return True when two ``MessageAppended`` say the same thing: a duplicate, not a conflict.

    Compares tenant, conversation and the message fields; ignores ``seq``,
    the time (a line without ``ts`` gets the time of each ingest) and what
    the engine records at append (the embedding and its source, the token counts).
    """
    if (a.tenant_id, a.conversation_id, a.type) != (b.tenant_id, b.conversation_id, b.type):
        return False
    skip = {"embedding", "metadata", "tokens"}
    meta_a = {k: v for k, v in a.payload.metadata.items() if k != "embedding_source"}
    meta_b = {k: v for k, v in b.payload.metadata.items() if k != "embedding_source"}
    return meta_a == meta_b and a.payload.model_dump(exclude=skip) == b.payload.model_dump(exclude=skip)


class MessageRetracted(Event):
    """An earlier message is withdrawn: reads leave it out from now on; the log keeps both events.

    Summaries produced before it keep their content (the log is immutable;
    ``forget`` erases); summaries requested after it are not given it.
    """

    TYPE: ClassVar[str] = "MessageRetracted"
    VERSION: ClassVar[int] = 2
    type: Literal["MessageRetracted"] = "MessageRetracted"
    schema_version: Literal[2] = 2
    payload: MessageRetractedPayload


class ConversationDeleted(Event):
    TYPE: ClassVar[str] = "ConversationDeleted"
    type: Literal["ConversationDeleted"] = "ConversationDeleted"
    schema_version: Literal[1] = 1
    payload: ConversationDeletedPayload = ConversationDeletedPayload()


class ConversationReopened(Event):
    """A forgotten conversation starts again, empty, on purpose: appends are accepted from here on.

    Folds give it a fresh state (no messages, no memory); what came before
    the deletion stays shredded in the log.
    """

    TYPE: ClassVar[str] = "ConversationReopened"
    type: Literal["ConversationReopened"] = "ConversationReopened"
    schema_version: Literal[1] = 1
    payload: ConversationReopenedPayload = ConversationReopenedPayload()


class SettingsChanged(Event):
    TYPE: ClassVar[str] = "SettingsChanged"
    type: Literal["SettingsChanged"] = "SettingsChanged"
    schema_version: Literal[1] = 1
    payload: SettingsChangedPayload


class ClockTicked(Event):
    TYPE: ClassVar[str] = "ClockTicked"
    type: Literal["ClockTicked"] = "ClockTicked"
    schema_version: Literal[1] = 1
    payload: ClockTickedPayload


class SummaryRequested(Event):
    TYPE: ClassVar[str] = "SummaryRequested"
    type: Literal["SummaryRequested"] = "SummaryRequested"
    schema_version: Literal[1] = 1
    payload: SummaryRequestedPayload


class SummaryProduced(Event):
    """v2: each fact may carry ``stated_at``, ``stated_in`` and ``superseded_by`` (see :class:`Fact`)."""

    TYPE: ClassVar[str] = "SummaryProduced"
    VERSION: ClassVar[int] = 2
    type: Literal["SummaryProduced"] = "SummaryProduced"
    schema_version: Literal[2] = 2
    payload: SummaryProducedPayload


class SummaryFailed(Event):
    TYPE: ClassVar[str] = "SummaryFailed"
    VERSION: ClassVar[int] = 2
    type: Literal["SummaryFailed"] = "SummaryFailed"
    schema_version: Literal[2] = 2
    payload: SummaryFailedPayload


class TopicAssigned(Event):
    TYPE: ClassVar[str] = "TopicAssigned"
    VERSION: ClassVar[int] = 2
    type: Literal["TopicAssigned"] = "TopicAssigned"
    schema_version: Literal[2] = 2
    payload: TopicAssignedPayload


class TopicCompacted(Event):
    TYPE: ClassVar[str] = "TopicCompacted"
    type: Literal["TopicCompacted"] = "TopicCompacted"
    schema_version: Literal[1] = 1
    payload: TopicCompactedPayload


class TopicEvicted(Event):
    TYPE: ClassVar[str] = "TopicEvicted"
    type: Literal["TopicEvicted"] = "TopicEvicted"
    schema_version: Literal[1] = 1
    payload: TopicEvictedPayload


EVENT_CLASSES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        MessageAppended,
        MessageRetracted,
        ConversationDeleted,
        ConversationReopened,
        SettingsChanged,
        ClockTicked,
        SummaryRequested,
        SummaryProduced,
        SummaryFailed,
        TopicAssigned,
        TopicCompacted,
        TopicEvicted,
    )
}

# The payload fields that hold what a user supplied, or what was derived from it, per event type:
# sealed under the conversation's data key on append (engine.sealing) and blanked in the projection
# when the conversation is forgotten. Everything else in an event is the envelope an audit keeps.
PRIVATE_FIELDS: dict[str, tuple[str, ...]] = {
    MessageAppended.TYPE: ("content", "name", "model_variant", "metadata", "importance", "tool_calls",
                           "tool_call_id", "embedding", "user_id"),
    SummaryProduced.TYPE: ("text", "facts", "covers_summaries", "covers_conversations"),
    SummaryFailed.TYPE: ("reason",),
    MessageRetracted.TYPE: ("reason",),
    TopicAssigned.TYPE: ("title",),
}


def sealed_content(event: Event) -> EncryptedContent | None:
    """Return the sealed form of ``event``'s private fields: None when they are plain, or it has none."""
    return event.payload.encrypted if event.type in PRIVATE_FIELDS else None  # type: ignore[attr-defined]


AnyEvent = Annotated[
    (
        MessageAppended | MessageRetracted | ConversationDeleted | ConversationReopened | SettingsChanged | ClockTicked
        | SummaryRequested | SummaryProduced | SummaryFailed | TopicAssigned | TopicCompacted | TopicEvicted
    ),
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Event] = TypeAdapter(AnyEvent, config=ConfigDict(defer_build=True))


# --------------------------------------------------------------------------- upcasting

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class UpcasterRegistry:
    """Upcasters keyed by (event type, from_version); each lifts a raw dict by exactly one version."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Register ``fn`` to turn ``event_type`` at ``from_version`` into ``from_version + 1``."""

        def deco(fn: Upcaster) -> Upcaster:
            key = (event_type, from_version)
            if key in self._steps:
                raise ValueError(f"an upcaster for {event_type} v{from_version} is already registered")
            self._steps[key] = fn
            return fn

        return deco

    def upcast(self, raw: dict[str, Any], current: int) -> dict[str, Any]:
        """Lift ``raw`` to ``current``; raise :class:`UpcastError` when a step is missing or fails."""
        event_type = raw["type"]
        version = raw.get("schema_version")
        if not isinstance(version, int):
            raise UpcastError(event_type, -1, current, "schema_version is missing or not an integer")
        if version > current:
            raise UpcastError(
                event_type, version, current, "written by a newer memfold; upgrade before reading this log"
            )
        start = version
        while version < current:
            step = self._steps.get((event_type, version))
            if step is None:
                raise UpcastError(event_type, start, current, f"no upcaster registered from v{version}")
            try:
                raw = step(dict(raw))
            except Exception as exc:  # an upcaster bug must name the event, not crash the reader
                raise UpcastError(event_type, start, current, f"upcaster v{version} failed: {exc}") from exc
            version += 1
            raw["schema_version"] = version
        return raw


UPCASTERS = UpcasterRegistry()


@UPCASTERS.register(SummaryProduced.TYPE, 1)
def _summary_produced_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """v1 facts were stated at an unknown time and carry no lineage: say so explicitly."""
    payload = dict(raw.get("payload") or {})
    payload["facts"] = [
        {**f, "stated_at": None, "stated_in": None, "superseded_by": None} for f in payload.get("facts") or ()
    ]
    raw["payload"] = payload
    return raw


@UPCASTERS.register(MessageAppended.TYPE, 1)
def _message_appended_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """v1 messages named no user: they belong to none (``user_id`` None), as before users existed."""
    return raw


@UPCASTERS.register(MessageRetracted.TYPE, 1)
@UPCASTERS.register(SummaryFailed.TYPE, 1)
@UPCASTERS.register(TopicAssigned.TYPE, 1)
def _sealable_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """v2 may seal its text (reason, title) under the conversation's key; a v1 event has it in the clear."""
    return raw


# --------------------------------------------------------------------------- decoding


def decode(data: str | bytes, upcasters: UpcasterRegistry | None = None, *, event_type: str | None = None) -> Event:
    """Decode one stored event, upcasting older schema versions.

    ``event_type``, when the log stores it beside the body (a SQLite column,
    a Kafka header), saves looking for it in the JSON; a wrong one only costs
    the slower general path. Raises :class:`UnknownEventTypeError` for a type
    this code does not know, :class:`UpcastError` for a version it cannot
    reach, and :class:`EventDecodeError` for anything else malformed.
    """
    if upcasters is None:
        cls = EVENT_CLASSES.get(event_type) if event_type is not None else _class_of(data)
        if cls is MessageAppended:
            try:
                fast = _message_from_wire(wire.MESSAGE_DECODER.decode(data))
            except wire.WireError:
                fast = None  # pydantic decides (and names the error)
            if fast is not None:
                return fast
        try:  # fast path: current version, known type, validated in pydantic-core by its own class
            return cls.model_validate_json(data) if cls is not None else _ADAPTER.validate_json(data)
        except pydantic.ValidationError:
            pass
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventDecodeError(f"event is not valid JSON: {exc}") from exc
    return decode_dict(raw, upcasters)


def _message_from_wire(w: wire.MessageAppendedWire) -> MessageAppended | None:
    """Return the ``MessageAppended`` of a decoded mirror, built without validating it a second time.

    None when the model would refuse it (no content at all): the caller lets pydantic say why.
    """
    p = w.payload
    if p.content is None and p.encrypted is None:
        return None
    sealed = p.encrypted
    if sealed is not None:
        sealed = unchecked(EncryptedContent, {
            "key_id": sealed.key_id, "algorithm": sealed.algorithm,
            "nonce_b64": sealed.nonce_b64, "ciphertext_b64": sealed.ciphertext_b64, "fields": sealed.fields,
        })
    payload = unchecked(MessagePayload, {
        "role": p.role, "content": p.content, "encrypted": sealed, "name": p.name,
        "model_variant": p.model_variant, "metadata": p.metadata, "importance": p.importance,
        "tool_calls": tuple(unchecked(ToolCall, {"id": t.id, "name": t.name, "arguments": t.arguments})
                            for t in p.tool_calls),
        "tool_call_id": p.tool_call_id, "embedding": p.embedding, "tokens": p.tokens, "user_id": p.user_id,
    })
    at = w.occurred_at  # what Event._aware_utc makes of it
    at = (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC)
    return unchecked(MessageAppended, {
        "event_id": w.event_id, "type": w.type, "schema_version": w.schema_version, "tenant_id": w.tenant_id,
        "conversation_id": w.conversation_id, "seq": w.seq, "occurred_at": at, "causation_id": w.causation_id,
        "payload": payload,
    })


def unchecked(cls: type[_M], values: dict[str, Any], fields_set: set[str] | None = None) -> _M:
    """Return a ``cls`` holding ``values`` (every field, in declaration order), not validated.

    For values that are valid already (decoded by a mirror as strict as the
    model, or copied from a validated model): what ``model_construct`` does,
    without its per-field Python loop. ``fields_set`` (default: every key of
    ``values``) is kept as given, not copied.
    """
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_fields_set__", set(values) if fields_set is None else fields_set)
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def replaced(model: _M, **changes: Any) -> _M:
    """Return a copy of a validated frozen model with ``changes``, not validated again (3x cheaper than ``model_copy``).

    For changes that are valid by construction (the log's own ``seq``, content sealed or unsealed here).
    """
    return unchecked(type(model), {**model.__dict__, **changes}, model.__pydantic_fields_set__ | changes.keys())


_TYPE_KEY = '"type":"'


def _class_of(data: str | bytes) -> type[Event] | None:
    """Guess an encoded event's class from its first ``"type":"`` key (a quote inside a string is escaped).

    Only a hint for the fast path: a wrong guess fails validation and the
    general path decides.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
    at = text.find(_TYPE_KEY)
    if at < 0:
        return None
    end = text.find('"', at + len(_TYPE_KEY))
    return EVENT_CLASSES.get(text[at + len(_TYPE_KEY) : end]) if end > 0 else None


def decode_dict(raw: Any, upcasters: UpcasterRegistry | None = None) -> Event:
    """Decode one event from an already parsed JSON object (see :func:`decode`)."""
    if not isinstance(raw, dict):
        raise EventDecodeError(f"event must be a JSON object, got {type(raw).__name__}")
    event_type = raw.get("type")
    if not isinstance(event_type, str):
        raise EventDecodeError("event has no 'type' string")
    cls = EVENT_CLASSES.get(event_type)
    if cls is None:
        raise UnknownEventTypeError(event_type)
    if raw.get("schema_version") != cls.VERSION:
        raw = (upcasters or UPCASTERS).upcast(raw, cls.VERSION)
    try:
        return cls.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise EventDecodeError(f"invalid {event_type} event: {_first_error(exc)}") from exc


def _first_error(exc: pydantic.ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg')}" if where else str(err.get("msg"))


def json_schemas() -> dict[str, dict[str, Any]]:
    """Return the JSON Schema of every event type, keyed by its ``type`` string."""
    return {name: cls.model_json_schema() for name, cls in sorted(EVENT_CLASSES.items())}
