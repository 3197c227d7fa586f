"""Request and response bodies of the HTTP API (the OpenAPI schema at /docs is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallIn(_Body):
    """One tool call of an assistant message (OpenAI chat shape, arguments as a JSON string)."""

    id: str
    name: str
    arguments: str = "{}"


class MessageIn(_Body):
    """One message to append.

    ``id`` is the caller's message id: appending the same id twice in the
    same conversation stores the message once (so a retry is safe).
    """

    id: str | None = Field(None, min_length=1, max_length=200)
    role: str = Field(description="user | assistant | system | tool")
    content: str | None = None
    occurred_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    model_variant: str | None = None
    importance: float | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class AppendRequest(_Body):
    """A batch of messages for one conversation, appended all or nothing, in order."""

    messages: list[MessageIn] = Field(min_length=1)


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
    """One message for the next model call; ``kind`` says where it came from."""

    role: str
    content: str
    kind: str
    tokens: int
    index: int | None = Field(None, description="the stored message's index, for messages shown verbatim or recalled")
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ContextResponse(BaseModel):
    conversation_id: str
    policy: str
    budget: int | None
    tokens: int
    messages: list[ContextMessageOut]


def context_body(conversation_id: str, policy: str, budget: int | None, messages) -> bytes:
    """Return the JSON answer of a context read: ``messages`` (``ContextMessage``s) with their tokens and indices."""
    out = []
    for m in messages:
        item = m.as_dict()
        item["tokens"] = m.tokens
        item["index"] = m.index
        out.append(item)
    return ContextResponse(conversation_id=conversation_id, policy=policy, budget=budget,
                           tokens=sum(m.tokens for m in messages), messages=out).model_dump_json().encode()


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


class SearchHit(BaseModel):
    """A message matching the query; ``score`` is BM25 within its conversation."""

    conversation_id: str
    index: int
    role: str
    content: str
    occurred_at: datetime
    score: float


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
