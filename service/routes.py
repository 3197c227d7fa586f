"""The /v1 routes. The tenant is always the key's; a conversation of another tenant is simply not found.

Most routes are plain ``def``: the engine's calls block (SQLite, DuckDB), so
FastAPI runs them in its thread pool; the store gives each thread its own
cursor. The two hot ones are ``async``: an append validates on the
service's two validator threads (not the pool reads use) and then waits
for its group commit (:mod:`.appender`) without holding a
thread; a context read answered from :mod:`.context_cache` never leaves the
event loop.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime
from functools import partial
from typing import Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from memfold.engine.errors import UnknownMessageError, ValidationError
from memfold.engine.ids import content_hash
from memfold.engine.positions import Position

from .app import Admin, Forgetter, Reader, Writer, services
from .context_cache import context_key
from .schemas import (
    AppendRequest,
    AppendResponse,
    ContextResponse,
    ConversationsResponse,
    ErrorResponse,
    Identity,
    MessagesResponse,
    SearchRequest,
    SearchResponse,
    SqlRequest,
    SqlResponse,
    context_body,
)

CLIENT_ID_KEY = "message_id"  # metadata key recording the caller's message id

_ERRORS = {401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
           429: {"model": ErrorResponse}}
router = APIRouter(prefix="/v1", responses=_ERRORS)
ConversationId = Path(min_length=1, max_length=200, description="the conversation, unique within the key's tenant")


def event_id_for(tenant_id: str, conversation_id: str, message_id: str) -> str:
    """Return the log event id of a caller's message id: the same inputs always give the same id.

    Namespaced by tenant and conversation, so two tenants (or conversations)
    using the same message id never collide, and a retry maps to the stored event.
    """
    return "m" + content_hash(tenant_id, conversation_id, message_id, length=31)


def existing(request: Request, tenant_id: str, conversation_id: str) -> dict[str, Any]:
    """Return the conversation's row, or raise 404 (the same answer for another tenant's and a missing one)."""
    row = services(request).engine.store.conversation(tenant_id, conversation_id)
    if row is None or row.get("deleted"):
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return row


@router.get("/me", response_model=Identity, tags=["keys"])
async def me(key: Reader) -> Identity:
    """Return the calling key's id, tenant and role."""
    return Identity(key_id=key.key_id, tenant_id=key.tenant_id, role=key.role)


@router.post("/conversations/{conversation_id}/messages", response_model=AppendResponse, status_code=201,
             tags=["messages"], responses={409: {"model": ErrorResponse}, 413: {"model": ErrorResponse}})
async def append_messages(
    request: Request, body: AppendRequest, key: Writer,
    conversation_id: str = ConversationId,
    wait: bool = Query(False, description="return once the projection holds the messages (read-your-writes)"),
) -> AppendResponse:
    """Append one message or a batch, all or nothing, in order.

    A message with an ``id`` already stored in this conversation is not
    stored again: the answer names the stored event, so retries are safe.
    The same ``id`` with different content is refused (409), nothing written.
    Appends arriving together are written in one log transaction.
    """
    svc = services(request)
    limit = svc.limits.max_batch
    if limit and len(body.messages) > limit:
        raise HTTPException(413, f"{len(body.messages)} messages in one append; the limit is {limit} "
                                 "(split the batch, or memfold serve --max-batch)")
    events = await asyncio.wrap_future(svc.validator.submit(_validated, svc.engine, key.tenant_id, conversation_id,
                                                            body))
    positions = await svc.appender.append(events)  # conflicts (409) are checked in the group, per request
    svc.metrics.appended.inc(len(events))
    if wait:
        await run_in_threadpool(svc.engine.wait_for, max(positions))
        svc.contexts.bump(positions)  # the projection may hold them before the runner's hook has run
    return AppendResponse(conversation_id=conversation_id, messages=[
        {"id": m.id, "event_id": e.event_id, "partition": p.partition, "offset": p.offset}
        for m, e, p in zip(body.messages, events, positions)
    ])


def _validated(engine, tenant: str, conversation_id: str, body: AppendRequest) -> list:
    """Return the batch's events; raise the first message's ValidationError (``line`` 1-based)."""
    events = []
    for i, m in enumerate(body.messages):
        row = m.model_dump(exclude_none=True, exclude={"id"})
        row.update(conversation_id=conversation_id, tenant_id=tenant)
        if m.id is not None:
            row["event_id"] = event_id_for(tenant, conversation_id, m.id)
            row["metadata"] = {**(m.metadata or {}), CLIENT_ID_KEY: m.id}
        events.append(engine.validate(row, line=i + 1))
    return events


@router.get("/conversations", response_model=ConversationsResponse, tags=["conversations"])
def list_conversations(
    request: Request, key: Reader, limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
) -> ConversationsResponse:
    """List the tenant's conversations, most recently active first."""
    _, rows = services(request).engine.store.query(
        "SELECT conversation_id, message_count, token_count, first_at, last_at FROM conversations "
        "WHERE tenant_id = ? AND NOT coalesce(deleted, false) ORDER BY last_at DESC, conversation_id LIMIT ? OFFSET ?",
        [key.tenant_id, limit, offset],
    )
    keys = ("conversation_id", "message_count", "token_count", "first_at", "last_at")
    return ConversationsResponse(conversations=[dict(zip(keys, r)) for r in rows])


@router.get("/conversations/{conversation_id}/messages", response_model=MessagesResponse, tags=["messages"])
def list_messages(
    request: Request, key: Reader, conversation_id: str = ConversationId,
    start: int = Query(0, ge=0, description="first message index (0-based)"),
    limit: int = Query(1000, ge=1, le=10_000),
) -> MessagesResponse:
    """Return the stored messages of a conversation, oldest first."""
    existing(request, key.tenant_id, conversation_id)
    records = services(request).engine.store.messages(key.tenant_id, conversation_id, start, start + limit - 1)
    return MessagesResponse(conversation_id=conversation_id, messages=[
        {
            "id": (m.metadata or {}).get(CLIENT_ID_KEY), "event_id": m.event_id, "index": m.index, "seq": m.seq,
            "role": m.role, "content": m.content, "tokens": m.tokens, "occurred_at": m.occurred_at, "name": m.name,
            "model_variant": m.model_variant, "tool_calls": [tc.model_dump() for tc in m.tool_calls],
            "tool_call_id": m.tool_call_id, "importance": m.importance, "metadata": dict(m.metadata or {}),
        }
        for m in records
    ])


@router.delete("/conversations/{conversation_id}/messages/{message_id}", tags=["messages"],
               responses={409: {"model": ErrorResponse}})
def retract_message(
    request: Request, key: Writer, conversation_id: str = ConversationId,
    message_id: str = Path(min_length=1, max_length=200, description="the message's event_id, or the id it was appended with"),
    reason: str | None = Query(None, max_length=1000, description="recorded on the MessageRetracted event"),
) -> dict:
    """Retract one message (writer keys): a ``MessageRetracted`` event; reads leave the message out from now on.

    The log keeps the message; summaries produced before keep their content
    (erase with ``DELETE /v1/conversations/{id}``). 404 for a message this
    conversation does not hold, 409 when it is already retracted.
    """
    existing(request, key.tenant_id, conversation_id)
    engine = services(request).engine
    for event_id in (message_id, event_id_for(key.tenant_id, conversation_id, message_id)):
        try:
            position = engine.retract(conversation_id, event_id, tenant_id=key.tenant_id, reason=reason)
        except UnknownMessageError:
            continue
        services(request).contexts.bump([position])
        return {"conversation_id": conversation_id, "event_id": event_id, "retracted": True,
                "partition": position.partition, "offset": position.offset}
    raise HTTPException(404, f"no message {message_id!r} in conversation {conversation_id!r}")


@router.get("/conversations/{conversation_id}/context", response_model=ContextResponse, tags=["context"])
async def get_context(
    request: Request, key: Reader, conversation_id: str = ConversationId,
    budget: int | None = Query(None, ge=1, description="token budget (default: no limit)"),
    policy: str | None = Query(None, description="policy to read (default: the tenant's)"),
    query: str | None = Query(None, max_length=10_000,
                              description="what older messages to recall (default: the current user message)"),
    as_of: str | None = Query(None, max_length=64, description="time travel: the context as it was right after a "
                              "log position 'PARTITION:OFFSET' or an ISO-8601 time with a timezone"),
) -> ContextResponse:
    """Return the messages for the next model call within ``budget`` tokens. Never calls a model.

    Memory first, then recalled older messages most relevant to ``query``,
    recent turns and the current message. The same read answers from a cache
    until something new of the conversation is projected.
    """
    svc = services(request)
    started = time.perf_counter()
    point = _point(as_of)
    name = policy or svc.engine.settings.policy_for(key.tenant_id)
    cache_key = context_key(key.tenant_id, conversation_id, budget, query, name, as_of)
    version = svc.contexts.version(key.tenant_id, conversation_id)  # before computing: see context_cache
    body = svc.contexts.get(cache_key, version)
    svc.metrics.context_cache.labels("miss" if body is None else "hit").inc()
    if body is None:
        args = (request, key.tenant_id, conversation_id, budget, query, name, point)
        if point is None and svc.contexts.known(key.tenant_id, conversation_id) and svc.engine.context_in_memory(
                conversation_id, policy=name, tenant_id=key.tenant_id):
            # A fraction of a millisecond of CPU: computed here. Handed to a thread, the read and its answer
            # each waited for the interpreter lock behind the projector (mixed load: p50 18 -> 11 ms).
            body = _render_context(*args)
        else:
            body = await run_in_threadpool(_render_context, *args)
        lazy_ms = getattr(svc.engine.settings.policy_settings(name), "lazy_timeout_ms", 0)
        # An answer that waited out a pending summary (lazy wait) is the fallback: the next read waits again.
        if not lazy_ms or time.perf_counter() - started < lazy_ms / 1000:
            svc.contexts.put(cache_key, version, body)
    svc.contexts.alias(key.tenant_id, conversation_id, request.scope.get("query_string", b""), cache_key)
    svc.metrics.context_seconds.observe(time.perf_counter() - started)
    return Response(body, media_type="application/json")


def _render_context(request: Request, tenant: str, conversation_id: str, budget: int | None, query: str | None,
                    name: str, point: Position | datetime | None) -> bytes:
    svc = services(request)

    def stored() -> bool:
        row = svc.engine.store.conversation(tenant, conversation_id)
        return row is not None and not row.get("deleted")

    if not svc.contexts.exists(tenant, conversation_id, stored):  # a DuckDB point query only the first time
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    messages = svc.engine.context(conversation_id, budget=budget, query=query, policy=name, tenant_id=tenant,
                                  as_of=point)
    return context_body(conversation_id, name, budget, messages)


@router.delete("/conversations/{conversation_id}", tags=["conversations"])
def forget_conversation(
    request: Request, key: Forgetter, conversation_id: str = ConversationId,
    reason: str | None = Query(None, max_length=1000, description="recorded on the ConversationDeleted event"),
) -> dict:
    """Erase a conversation (admin keys): its rows go, its data key is destroyed, so the log's copy is unreadable.

    Returns once the projection no longer holds it. The deletion itself is
    an event, so the audit trail keeps that the conversation existed.
    """
    existing(request, key.tenant_id, conversation_id)
    position = services(request).engine.forget(conversation_id, tenant_id=key.tenant_id, reason=reason)
    services(request).contexts.bump([position])
    services(request).contexts.deleted([(key.tenant_id, conversation_id)])  # the projector's word may come later
    return {"conversation_id": conversation_id, "forgotten": True, "partition": position.partition,
            "offset": position.offset}


def _point(as_of: str | None) -> Position | datetime | None:
    """Return the log position or aware datetime ``as_of`` names; raise :class:`ValidationError` otherwise."""
    if as_of is None:
        return None
    if re.fullmatch(r"\d+:\d+", as_of):
        partition, offset = as_of.split(":")
        return Position(int(partition), int(offset))
    try:
        when = datetime.fromisoformat(as_of)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ValidationError(f"as_of {as_of!r} is neither PARTITION:OFFSET nor an ISO-8601 time with a timezone "
                              "(e.g. 2026-03-02T09:00:00Z)", field="as_of")
    return when


@router.get("/conversations/{conversation_id}/summaries", tags=["memory"])
def list_summaries(
    request: Request, key: Reader, conversation_id: str = ConversationId, policy: str | None = Query(None),
) -> dict:
    """Return every summary request of the conversation with its outcome and lineage, oldest first."""
    existing(request, key.tenant_id, conversation_id)
    rows = services(request).engine.summaries(conversation_id, tenant_id=key.tenant_id, policy=policy)
    return {"conversation_id": conversation_id, "summaries": rows}


@router.get("/conversations/{conversation_id}/facts", tags=["memory"])
def list_facts(request: Request, key: Reader, conversation_id: str = ConversationId) -> dict:
    """Return every fact memory held, bi-temporal: when it was stated, learned, changed (superseded) and retired."""
    existing(request, key.tenant_id, conversation_id)
    trail = services(request).engine.audit(conversation_id, tenant_id=key.tenant_id)
    return {"conversation_id": conversation_id, "facts": trail["facts"]}


@router.get("/conversations/{conversation_id}/audit", tags=["memory"])
def get_audit(request: Request, key: Reader, conversation_id: str = ConversationId) -> dict:
    """Return how the conversation's memory evolved: summary versions with lineage, facts, settings, erasure.

    An erased conversation still answers here (it existed, and when it was
    erased is part of the trail); one that never existed for this tenant is 404.
    """
    trail = services(request).engine.audit(conversation_id, tenant_id=key.tenant_id)
    if trail["conversation"]["status"] == "unknown":
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return trail


@router.post("/search", response_model=SearchResponse, tags=["memory"])
def search(request: Request, body: SearchRequest, key: Reader) -> SearchResponse:
    """Return the tenant's messages best matching ``query`` (BM25 per conversation, merged by score).

    Searches the listed conversations (unknown ids are skipped, exactly like
    another tenant's), else the most recently active ones.
    """
    engine = services(request).engine
    if body.conversation_ids:
        ids = body.conversation_ids
    else:
        _, rows = engine.store.query(
            "SELECT conversation_id FROM conversations WHERE tenant_id = ? AND NOT coalesce(deleted, false) "
            "ORDER BY last_at DESC LIMIT ?", [key.tenant_id, body.conversations])
        ids = [r[0] for r in rows]
    hits = []
    for conversation_id in dict.fromkeys(ids):
        if engine.store.conversation(key.tenant_id, conversation_id) is None:
            continue
        index_key = (key.tenant_id, conversation_id)
        ranked = engine.projector.search.rank(index_key, body.query, limit=body.limit)
        found = {m.index: m for m in engine.projector.search.messages_at(index_key, sorted(h.idx for h in ranked))}
        hits += [(h.score, conversation_id, found[h.idx]) for h in ranked if h.idx in found]
    hits.sort(key=lambda h: -h[0])
    return SearchResponse(query=body.query, hits=[
        {"conversation_id": c, "index": m.index, "role": m.role, "content": m.content, "occurred_at": m.occurred_at,
         "score": round(score, 4)}
        for score, c, m in hits[: body.limit]
    ])


@router.post("/sql", response_model=SqlResponse, tags=["analytics"], responses={403: {"model": ErrorResponse}})
def run_sql(request: Request, body: SqlRequest, key: Admin) -> SqlResponse:
    """Run one read-only statement over the tenant's tables (conversations, messages, summaries, facts, events)."""
    from .sql import run_tenant_sql

    engine = services(request).engine
    remote = getattr(engine, "tenant_sql", None)  # the fold process's store (fold_process.RemoteEngine)
    columns, rows, truncated = (remote or partial(run_tenant_sql, engine.store))(key.tenant_id, body.query, body.limit)
    return SqlResponse(columns=columns, rows=rows, truncated=truncated)
