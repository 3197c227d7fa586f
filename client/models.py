"""Typed results and errors of the memfold HTTP client."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from memfold.core.errors import (
    AlreadyRetractedError,
    ConversationForgottenError,
    EventConflictError,
    MemfoldError,
    UnknownConversationError,
    UnknownMessageError,
    UnknownReplayError,
    UnknownUserError,
    UserConflictError,
    ValidationError,
)


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class Appended(_Result):
    """Where an appended message is in the log (``id`` is the message id the client sent)."""

    id: str | None
    event_id: str
    partition: int
    offset: int


class Message(_Result):
    """A stored message."""

    id: str | None
    event_id: str
    index: int
    seq: int
    role: str
    content: str
    tokens: int
    occurred_at: datetime
    name: str | None = None
    model_variant: str | None = None
    tool_calls: list[dict[str, Any]] = []
    tool_call_id: str | None = None
    importance: float | None = None
    metadata: dict[str, Any] = {}


class ContextMessage(_Result):
    """One message for the next model call; ``kind`` is system_prompt, memory:<...>, verbatim or current."""

    role: str
    content: str
    kind: str
    tokens: int
    index: int | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    occurred_at: str | None = None  # ISO-8601 as the service sent it (conversation messages; None for memory)

    def as_openai(self) -> dict[str, Any]:
        """Return the message as an OpenAI chat message: only keys that shape defines (``prompt()`` gives them all)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name and self.role != "tool":
            out["name"] = self.name
        if self.role == "assistant" and self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [
                {"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": tc["arguments"]}}
                for tc in self.tool_calls
            ]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


class Context(_Result):
    """The context for the next model call of one conversation."""

    conversation_id: str
    policy: str
    budget: int | None
    tokens: int
    messages: list[ContextMessage]


class Prompt(_Result):
    """The context for the next model call in a model API's shape (:meth:`Client.prompt`).

    ``messages`` go to the call as they are: the chat ``messages``
    (``openai``), the Messages API ``messages`` with ``system`` beside them
    (``anthropic``), or the ``input`` items (``responses``). ``memfold``
    runs parallel to ``messages``: one annotation per entry (``kind``,
    ``tokens``, ``index``, ``occurred_at``, ...); ``system_memfold``
    annotates what ``system`` holds.
    """

    format: str
    conversation_id: str
    policy: str
    budget: int | None
    tokens: int
    messages: list[dict[str, Any]]
    memfold: list[dict[str, Any]]
    system: str | None = None
    system_memfold: list[dict[str, Any]] | None = None


class Conversation(_Result):
    conversation_id: str
    message_count: int
    token_count: int
    first_at: datetime | None
    last_at: datetime | None


class Identity(_Result):
    key_id: str
    tenant_id: str
    role: str


class SearchHit(_Result):
    """A message matching a search; ``score`` is BM25 within its conversation."""

    conversation_id: str
    index: int
    role: str
    content: str
    occurred_at: datetime
    score: float


class SearchPage(_Result):
    """One page of a search: its best hits, how many conversations it searched, and the cursor of the next page."""

    query: str
    hits: list[SearchHit]
    conversations: int = 0
    next_cursor: str | None = None


class SqlResult(_Result):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool


class ApiError(MemfoldError):
    """The service answered with an error; ``status``, ``type`` and ``field`` say which."""

    def __init__(self, status: int, kind: str, message: str, *, field: str | None = None,
                 retry_after: float | None = None):
        super().__init__(f"{status} {kind}: {message}")  # first: ValidationError's init resets field
        self.status = status
        self.type = kind
        self.field = field
        self.retry_after = retry_after


class AuthenticationError(ApiError):
    """401: the key is missing, unknown or revoked."""


class PermissionDeniedError(ApiError):
    """403: the key's role does not allow this."""


class NotFoundError(ApiError):
    """404: no such conversation, message or replay for this key's tenant."""


class ConversationNotFoundError(NotFoundError, UnknownConversationError):
    """404: no such conversation for this key's tenant (the engine's ``UnknownConversationError``)."""


class MessageNotFoundError(NotFoundError, UnknownMessageError):
    """404: no such message in the conversation (the engine's ``UnknownMessageError``)."""


class ReplayNotFoundError(NotFoundError, UnknownReplayError):
    """404: no such replay namespace (the engine's ``UnknownReplayError``)."""


class UserNotFoundError(NotFoundError, UnknownUserError):
    """404: no conversation of this key's tenant belongs to that user (the engine's ``UnknownUserError``)."""


class ConflictError(ApiError):
    """409: a message id already stored with different content, or a message retracted before; nothing was written."""


class EventIdConflictError(ConflictError, EventConflictError):
    """409: a message id already stored with different content (the engine's ``EventConflictError``)."""


class AlreadyRetractedConflictError(ConflictError, AlreadyRetractedError):
    """409: the message was retracted before (the engine's ``AlreadyRetractedError``)."""


class UserIdConflictError(ConflictError, UserConflictError):
    """409: the message names another user than its conversation's (the engine's ``UserConflictError``)."""


class ConversationGoneError(ApiError, ConversationForgottenError):
    """410: the conversation was forgotten; nothing was written. ``reopen`` starts it again."""


class RequestTooLargeError(ApiError):
    """413: a body, batch or message above the service's limits; nothing was written."""


class InvalidRequestError(ApiError, ValidationError):
    """422: the request is malformed or a message is invalid; nothing was written."""


class RateLimitedError(ApiError):
    """429: too many requests for this key; ``retry_after`` says when to try again."""


class ServiceUnavailableError(ApiError):
    """5xx or no connection: the service could not answer."""


_BY_STATUS = {401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError, 409: ConflictError,
              410: ConversationGoneError, 413: RequestTooLargeError,
              422: InvalidRequestError, 429: RateLimitedError}


# The service names the engine error behind a 404 or 409: the client raises the class that is both the
# status's and the engine's, so code catching the engine's errors works against a service too.
_BY_TYPE = {(404, "UnknownConversationError"): ConversationNotFoundError, (404, "UnknownMessageError"): MessageNotFoundError,
            (404, "UnknownReplayError"): ReplayNotFoundError, (409, "EventConflictError"): EventIdConflictError,
            (409, "AlreadyRetractedError"): AlreadyRetractedConflictError,
            (404, "UnknownUserError"): UserNotFoundError, (409, "UserConflictError"): UserIdConflictError}


def error_for(status: int, body: Any, retry_after: str | None) -> ApiError:
    """Return the :class:`ApiError` subclass for an error response (the engine's error class too, where there is one)."""
    err = body.get("error", {}) if isinstance(body, dict) else {}
    cls = _BY_TYPE.get((status, err.get("type"))) or _BY_STATUS.get(
        status, ServiceUnavailableError if status >= 500 else ApiError)
    delay = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None
    return cls(status, err.get("type", "HTTPError"), err.get("message", str(body)[:500]), field=err.get("field"),
               retry_after=delay)
