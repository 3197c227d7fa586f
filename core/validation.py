"""The validation boundary: one input message (a JSONL line or an API call) becomes a ``MessageAppended`` or a ``ValidationError``.

Every check an input can fail is made here, before the message joins a
batch, so that nothing later (encoding, the log's transaction, a fold) can
fail on it. Each failure is a :class:`~memfold.core.errors.ValidationError`
whose ``field`` names the offending key (``metadata.a.b``, ``tool_calls[1].id``)
and whose ``line`` is the input line, when there is one.

What is checked (README "What happens to bad input" lists the same):

- shape: an OpenAI chat message, first made canonical by
  :func:`memfold.core.shapes.canonical_openai` (``tool_calls`` as
  ``{"id", "type": "function", "function": {...}}``, ``content`` as a list of
  text parts, the SDK's null ``refusal``/``audio``/... keys), then a JSON
  object whose keys are all in :data:`MESSAGE_KEYS`;
- types: strings where strings belong, ``importance`` a real number in
  [0, 1] (``true`` is not a number), ``tool_calls`` a list of
  ``{"id", "name", "arguments"}`` objects (the compact alias of OpenAI's
  shape, or ``ToolCall`` instances, checked field by field the same way,
  however they were built) whose ``arguments`` is a string;
- encodability: no lone surrogate (``"\\ud800"``) in any string or key, no
  NaN or Infinity anywhere (they are not JSON);
- nesting: metadata at most :data:`MAX_DEPTH` levels deep;
- sizes: content within ``max_message_chars`` / ``max_message_tokens``,
  metadata within :data:`MAX_METADATA_BYTES` of JSON, ids and names within
  their length limits;
- ids: ``tenant_id`` and ``user_id`` non-empty, without ``/``, within
  :data:`MAX_ID_CHARS`;
- time: ``occurred_at`` / ``ts`` / ``created_at`` an ISO-8601 string, a datetime or Unix
  seconds, between :data:`MIN_TIME` and :data:`MAX_TIME` (a timestamp without
  a zone is UTC).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pydantic

from memfold.core.errors import EmptyContentError, MessageTooLargeError, UnknownRoleError, ValidationError
from memfold.core.events import ROLES, MessageAppended, MessagePayload, ToolCall, utcnow
from memfold.core.ids import new_event_id
from memfold.core.shapes import canonical_openai

MESSAGE_KEYS = (
    "conversation_id", "role", "content", "tenant_id", "event_id", "model_variant", "metadata", "importance",
    "tool_calls", "tool_call_id", "name", "ts", "occurred_at", "created_at", "user_id",
)
TIME_KEYS = ("occurred_at", "ts", "created_at")  # one message may give several, if they agree
MAX_DEPTH = 32
MAX_METADATA_BYTES = 1024 * 1024  # the agents adapter keeps whole SDK items (tool outputs) here
MAX_ID_CHARS = 200  # event_id, tenant_id, user_id, tool call ids, names, model variants
MAX_CONVERSATION_CHARS = 400
# One rule on every path (Python, JSONL, HTTP): an id may hold '/', but not the segment the HTTP
# API reads as a message of the conversation (DELETE .../messages/<id> retracts one).
RESERVED_SEGMENT = "/messages/"
CONVERSATION_ID_RULE = ("may contain '/', but not the segment '/messages/' (the HTTP API reads "
                        "DELETE .../messages/<id> as a retraction); choose another id")
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(2100, 1, 1, tzinfo=UTC)


def validate_message(
    message: Any,
    *,
    max_chars: int,
    max_tokens: int,
    count_tokens: Callable[[str], int],
    line: int | None = None,
    event_id: str | None = None,
    encoding: str | None = None,
) -> MessageAppended:
    """Return the ``MessageAppended`` event for ``message`` or raise a :class:`ValidationError`.

    ``event_id`` is used when the message names none (ingest passes an id
    derived from the line; ``None`` means a fresh time-ordered id). With
    ``encoding`` (the name of what ``count_tokens`` counts with), the
    content's token count is recorded on the event (``payload.tokens``), so
    no fold counts it again; without it only texts longer than
    ``max_tokens`` characters are counted, for the size check. Pure but
    for the clock and a fresh id when the message gives neither. Never raises
    anything but a ``ValidationError``.
    """
    try:
        return _validate(message, max_chars, max_tokens, count_tokens, line, event_id, encoding)
    except ValidationError:
        raise
    except RecursionError as exc:
        raise ValidationError(f"nested more than {MAX_DEPTH} levels deep", line=line) from exc
    except Exception as exc:  # a check this module forgot must still name the line, never escape as a crash
        raise ValidationError(f"invalid message ({type(exc).__name__}: {exc})", line=line) from exc


def _validate(message, max_chars, max_tokens, count_tokens, line, event_id, encoding) -> MessageAppended:
    def fail(text: str, field: str | None, cls: type[ValidationError] = ValidationError) -> ValidationError:
        return cls(f"{field}: {text}" if field else text, field=field, line=line)

    if not isinstance(message, Mapping):
        raise fail(f"a message must be a JSON object, got {_kind(message)}", None)
    message = canonical_openai(message, line=line)
    unknown = [k for k in message if k not in MESSAGE_KEYS]
    if unknown:
        shown = _safe(unknown[0]) if isinstance(unknown[0], str) else repr(unknown[0])
        raise fail(f"unknown key {shown}; the keys are {', '.join(MESSAGE_KEYS)}", shown)

    def text(field: str, *, required: bool = False, limit: int = MAX_ID_CHARS) -> str | None:
        value = message.get(field)
        if value is None:
            if required:
                raise fail("is required", field)
            return None
        if not isinstance(value, str):
            raise fail(f"must be a string, got {_kind(value)}", field)
        if required and not value.strip():
            raise fail("must not be empty", field)
        if len(value) > limit:
            raise fail(f"has {len(value)} characters; the limit is {limit}", field)
        _check_encodable(value, field, fail)
        return value

    conversation_id = text("conversation_id", required=True, limit=MAX_CONVERSATION_CHARS)
    if RESERVED_SEGMENT in conversation_id:
        raise fail(CONVERSATION_ID_RULE, "conversation_id")
    tenant_id = text("tenant_id")
    if tenant_id is None:
        tenant_id = "default"
    elif not tenant_id or "/" in tenant_id:
        raise fail("must be a non-empty string without '/'", "tenant_id")
    user_id = text("user_id")
    if user_id is not None and (not user_id.strip() or "/" in user_id):
        raise fail("must be a non-empty string without '/' (it is a path segment: /v1/users/{user_id})", "user_id")
    role = message.get("role")
    if role not in ROLES:
        raise fail(f"unknown role {_safe(role)}: must be one of {', '.join(ROLES)}", "role", UnknownRoleError)
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise fail(f"must be a string or a list of text parts, got {_kind(content)}", "content")
    _check_encodable(content, "content", fail)
    tool_calls = _tool_calls(message.get("tool_calls"), fail)
    if not content.strip() and not (role == "assistant" and tool_calls):
        raise fail("is empty", "content", EmptyContentError)
    if len(content) > max_chars:
        raise MessageTooLargeError(
            f"content has {len(content)} characters; the limit is {max_chars} (max_message_chars)",
            size=len(content), limit=max_chars, unit="chars", field="content", line=line,
        )
    # Recorded on the event when the encoding is named; else only a long text needs counting (tokens <= chars).
    tokens = count_tokens(content) if encoding is not None or len(content) > max_tokens else 0
    if tokens > max_tokens:
        raise MessageTooLargeError(
            f"content has {tokens} tokens; the limit is {max_tokens} (max_message_tokens)",
            size=tokens, limit=max_tokens, unit="tokens", field="content", line=line,
        )
    tool_call_id = text("tool_call_id")
    if role == "tool" and not tool_call_id:
        raise fail("a tool message needs the tool_call_id it answers", "tool_call_id")
    metadata = _metadata(message.get("metadata"), fail)
    importance = message.get("importance")
    if importance is not None:
        if isinstance(importance, bool) or not isinstance(importance, (int, float)):
            raise fail(f"must be a number between 0 and 1, got {_kind(importance)}", "importance")
        if not (math.isfinite(importance) and 0 <= importance <= 1):
            raise fail(f"must be between 0 and 1, got {importance}", "importance")
    given_id = text("event_id")
    if given_id is not None and not given_id.strip():
        raise fail("must not be empty", "event_id")
    try:
        return MessageAppended(
            event_id=given_id or event_id or new_event_id(),
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            occurred_at=_occurred_at(message, fail),
            payload=MessagePayload(
                role=role, content=content, name=text("name"), model_variant=text("model_variant"),
                metadata=metadata, importance=importance, tool_calls=tool_calls, tool_call_id=tool_call_id,
                tokens={encoding: tokens} if encoding is not None else {}, user_id=user_id,
            ),
        )
    except pydantic.ValidationError as exc:  # a model constraint the checks above did not cover
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or None
        raise fail(str(err.get("msg")), field) from exc


def _tool_calls(value: Any, fail) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise fail(f"must be a list of {{id, name, arguments}} objects, got {_kind(value)}", "tool_calls")
    calls = []
    for i, call in enumerate(value):
        where = f"tool_calls[{i}]"
        if isinstance(call, ToolCall):
            # Checked like a JSON object: an instance may come from model_construct (no validation at all),
            # and a normally built one carries no length limits; both must meet the same checks.
            call = {key: getattr(call, key, None) for key in ("id", "name", "arguments")}
        elif not isinstance(call, Mapping):
            raise fail(f"must be an object {{id, name, arguments}}, got {_kind(call)}", where)
        extra = [k for k in call if k not in ("id", "name", "arguments")]
        if extra:
            raise fail(f"unknown key {_safe(extra[0])}; a tool call has id, name, arguments", where)
        fields = {}
        for key in ("id", "name", "arguments"):
            item = call.get(key)
            if item is None and key == "arguments":
                continue
            if not isinstance(item, str) or (key != "arguments" and not item.strip()):
                wanted = "a string (JSON text)" if key == "arguments" else "a non-empty string"
                raise fail(f"must be {wanted}, got {_kind(item)}", f"{where}.{key}")
            limit = MAX_METADATA_BYTES if key == "arguments" else MAX_ID_CHARS
            if len(item) > limit:
                raise fail(f"has {len(item)} characters; the limit is {limit}", f"{where}.{key}")
            _check_encodable(item, f"{where}.{key}", fail)
            fields[key] = item
        calls.append(ToolCall(**fields))
    return tuple(calls)


def _metadata(value: Any, fail) -> dict[str, Any]:
    """Return ``value`` as a plain JSON object after checking every key and value, iteratively (no recursion)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(f"must be an object, got {_kind(value)}", "metadata")
    stack: list[tuple[Any, str, int]] = [(value, "metadata", 1)]
    while stack:
        node, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise fail(f"nested more than {MAX_DEPTH} levels deep", where)
        if isinstance(node, Mapping):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise fail(f"keys must be strings, got {_kind(key)}", where)
                _check_encodable(key, where, fail)
                stack.append((item, f"{where}.{_safe(key, quote=False)}", depth + 1))
        elif isinstance(node, (list, tuple)):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(node))
        elif isinstance(node, str):
            _check_encodable(node, where, fail)
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise fail(f"{node} is not a JSON number (NaN and Infinity are rejected)", where)
        elif node is not None and not isinstance(node, (bool, int)):
            raise fail(f"{_kind(node)} is not a JSON value", where)
    size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise fail(f"is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES}", "metadata")
    return dict(value)


def _occurred_at(message: Mapping[str, Any], fail) -> datetime:
    given = [k for k in TIME_KEYS if message.get(k) is not None]
    if any(message[k] != message[given[0]] for k in given[1:]):
        raise fail(f"{' and '.join(given)} differ; give the time once", given[-1])
    if not given:
        return utcnow()
    field = given[0]
    value = message[field]
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise fail(f"{_safe(value)} is not an ISO-8601 timestamp (2026-03-01T09:30:00Z)", field) from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise fail(f"{value} is not a time", field)
        try:
            moment = datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise fail(f"{value} Unix seconds is outside {MIN_TIME:%Y-%m-%d} .. {MAX_TIME:%Y-%m-%d}", field) from None
    else:
        raise fail(f"must be an ISO-8601 string or Unix seconds, got {_kind(value)}", field)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if not MIN_TIME <= moment < MAX_TIME:
        raise fail(f"{moment.isoformat()} is outside {MIN_TIME:%Y-%m-%d} .. {MAX_TIME:%Y-%m-%d}", field)
    return moment


def _check_encodable(value: str, field: str, fail) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise fail(f"contains a lone surrogate (U+{ord(value[exc.start]):04X}) at character {exc.start}; "
                   "it cannot be stored as UTF-8", field) from None


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _safe(value: Any, *, quote: bool = True) -> str:
    """Return ``value`` shortened and printable, for an error message (surrogates escaped)."""
    if not isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    text = value.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > 60:
        text = text[:57] + "..."
    return repr(text) if quote else text
