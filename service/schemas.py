"""Request and response bodies of the HTTP API (the OpenAPI schema at /docs is generated from these)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memfold.core.shapes import shaped


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallIn(_Body):
    """One tool call in memfold's compact flat shape ``{id, name, arguments}``.

    An alias of OpenAI's chat shape ``{id, type: "function", function: {name,
    arguments}}``, which is accepted too; ``arguments`` is a JSON string.
    """

    id: str
    name: str
    arguments: str = "{}"


class MessageIn(_Body):
    """One message in the ``openai`` format, as this schema documents it (the route accepts more, see below).

    OpenAI chat messages are taken as they are: ``tool_calls`` in OpenAI's
    shape or the flat alias (:class:`ToolCallIn`), ``content`` a string, null
    (an assistant calling tools) or a list of ``{"type": "text", "text"}``
    parts, ``name``, ``tool_call_id`` on tool messages, and the null
    ``refusal``/``audio``/``function_call``/``annotations`` of the openai
    SDK's assistant message. memfold's own keys sit beside them. ``id`` is
    the caller's message id: appending the same id twice in the same
    conversation stores the message once (so a retry is safe).
    """

    id: str | None = Field(None, min_length=1, max_length=200)
    role: str = Field(description="user | assistant | system | developer (stored as system) | tool")
    content: str | list[dict[str, Any]] | None = None
    occurred_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    model_variant: str | None = None
    importance: float | None = None
    tool_calls: list[dict[str, Any]] | None = Field(None, description="OpenAI's {id, type, function: {name, "
                                                    "arguments}} or the flat {id, name, arguments}")
    tool_call_id: str | None = None
    user_id: str | None = Field(None, min_length=1, max_length=200, description="the user the conversation "
                                "belongs to (or give it once for the batch: AppendRequest.user_id)")


InputFormat = Literal["openai", "anthropic", "responses"]
ContextFormat = Literal["openai", "anthropic", "responses", "compact"]


class AppendRequest(_Body):
    """A batch of messages for one conversation, appended all or nothing, in order.

    ``format`` says what shape the messages are in: ``openai`` (chat
    messages, :class:`MessageIn`; the default), ``anthropic`` (Messages API
    ``{role, content}`` with text, ``tool_use`` and ``tool_result`` blocks:
    one item may store several messages) or ``responses`` (Responses API
    input items: messages, ``function_call``, ``function_call_output``).
    In every format an item may also carry memfold's ``id``,
    ``occurred_at``, ``metadata``, ``model_variant`` and ``importance``.
    """

    format: InputFormat = "openai"
    user_id: str | None = Field(None, min_length=1, max_length=200, description="the user the conversation belongs "
                                "to, for every message of the batch (a conversation belongs to one user: naming "
                                "another is 409 UserConflictError)")
    messages: list[dict[str, Any]] = Field(min_length=1, description="messages in ``format``; errors name the "
                                           "item by ``line`` (1-based)",
                                           json_schema_extra={"items": MessageIn.model_json_schema()})


class Appended(BaseModel):
    """Where one appended message is in the log."""

    id: str | None
    event_id: str
    partition: int
    offset: int


class AppendResponse(BaseModel):
    conversation_id: str
    messages: list[Appended]


class MessageOut(BaseModel):
    """A stored message (``id`` is the caller's id when one was given at append)."""

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


class MessagesResponse(BaseModel):
    conversation_id: str
    messages: list[MessageOut]


class ContextMessageOut(BaseModel):
    """One message of a compact context (``?format=compact``); ``kind`` says where it came from."""

    role: str
    content: str
    kind: str
    tokens: int
    index: int | None = Field(None, description="the stored message's index, for messages shown verbatim or recalled")
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    occurred_at: str | None = None


class ContextResponse(BaseModel):
    conversation_id: str
    policy: str
    budget: int | None
    tokens: int
    messages: list[ContextMessageOut]


class ShapedContextResponse(BaseModel):
    """The context in a model API's own shape: ``messages`` go to the model call as they are.

    ``openai``: chat ``messages``. ``anthropic``: ``messages`` plus the
    top-level ``system`` text (``system_memfold`` annotates what it holds).
    ``responses``: the ``input`` items. ``memfold`` runs parallel to
    ``messages``: one annotation (``kind``, ``tokens``, ``index``,
    ``occurred_at``, ...) per entry, so no message holds a key its API does
    not define.
    """

    conversation_id: str
    policy: str
    budget: int | None
    tokens: int
    format: str
    messages: list[dict[str, Any]]
    system: str | None = None
    system_memfold: list[dict[str, Any]] | None = None
    memfold: list[dict[str, Any]]


def context_body(conversation_id: str, policy: str, budget: int | None, messages) -> bytes:
    """Return the JSON answer of a compact context read: ``messages`` (``ContextMessage``s) with tokens and indices."""
    out = []
    for m in messages:
        item = m.as_dict()
        item["tokens"] = m.tokens
        item["index"] = m.index
        out.append(item)
    return ContextResponse(conversation_id=conversation_id, policy=policy, budget=budget,
                           tokens=sum(m.tokens for m in messages), messages=out).model_dump_json().encode()


def shaped_body(format: str, conversation_id: str, policy: str, budget: int | None, messages) -> bytes:
    """Return the JSON answer of a context read in ``format`` (not ``compact``): :class:`ShapedContextResponse`."""
    answer = {"conversation_id": conversation_id, "policy": policy, "budget": budget,
              "tokens": sum(m.tokens for m in messages),
              **shaped(format, messages, conversation_id=conversation_id).as_dict()}
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()


class ConversationOut(BaseModel):
    conversation_id: str
    message_count: int
    token_count: int
    first_at: datetime | None
    last_at: datetime | None


class ConversationsResponse(BaseModel):
    conversations: list[ConversationOut]


class SearchRequest(_Body):
    """A query over the tenant's conversations: the listed ones, else one page of all of them (see ``cursor``)."""

    query: str = Field(min_length=1, max_length=10_000)
    conversation_ids: list[str] | None = Field(None, min_length=1, max_length=100,
                                               description="search only these (unknown ids are skipped); no paging")
    conversations: int = Field(20, ge=1, le=100, description="page size: how many conversations one page searches "
                               "when none are listed (in conversation id order)")
    cursor: str | None = Field(None, max_length=1000, description="the previous answer's next_cursor, for the next page")
    limit: int = Field(10, ge=1, le=100, description="the most hits one page answers")


class UserSearchRequest(_Body):
    """A query over every conversation of one user."""

    query: str = Field(min_length=1, max_length=10_000)
    limit: int = Field(10, ge=1, le=100, description="the most hits the answer holds")


class UserSearchResponse(BaseModel):
    user_id: str
    query: str
    hits: list[SearchHit]


class SearchHit(BaseModel):
    """A message matching the query; ``score`` is BM25 within its conversation."""

    conversation_id: str
    index: int
    role: str
    content: str
    occurred_at: datetime
    score: float


UserSearchResponse.model_rebuild()


class SearchResponse(BaseModel):
    query: str
    hits: list[SearchHit]
    conversations: int = Field(description="how many conversations this page searched")
    next_cursor: str | None = Field(description="send it as ``cursor`` for the next page; null after the last page")


class SqlRequest(_Body):
    """One read-only statement (SELECT, WITH ..., EXPLAIN) over the key's tenant's projection tables."""

    query: str = Field(min_length=1, max_length=20_000)
    limit: int = Field(10_000, ge=1, le=100_000)


class SqlResponse(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool


class Identity(BaseModel):
    """Who a key is: its id, tenant and role."""

    key_id: str
    tenant_id: str
    role: str


class ErrorBody(BaseModel):
    type: str
    message: str
    field: str | None = None
    line: int | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
