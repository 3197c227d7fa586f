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
import base64
import binascii
import json
import re
import time
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import AfterValidator

from memfold.core.errors import (
    ConversationForgottenError,
    PartitionNotOwnedError,
    UnknownConversationError,
    UnknownMessageError,
    UserConflictError,
    ValidationError,
)
from memfold.core.ids import content_hash, new_event_id
from memfold.core.positions import Position
from memfold.core.shapes import messages_from
from memfold.core.validation import CONVERSATION_ID_RULE, RESERVED_SEGMENT
from memfold.service.context_cache import context_key
from memfold.service.deps import Admin, Forgetter, Reader, Writer, services
from memfold.service.router import SEARCHED, searched_header
from memfold.service.schemas import (
    AppendRequest,
    AppendResponse,
    ContextFormat,
    ContextResponse,
    ConversationsResponse,
    ErrorResponse,
    Identity,
    MessagesResponse,
    SearchRequest,
    SearchResponse,
    ShapedContextResponse,
    SqlRequest,
    SqlResponse,
    UserSearchRequest,
    UserSearchResponse,
    context_body,
    shaped_body,
)

CLIENT_ID_KEY = "memfold.client_id"  # metadata key recording the caller's message id; never shown in metadata
_LEGACY_CLIENT_ID_KEY = "message_id"  # where memfold before 0.2 recorded it (shown as ``id`` still, not in metadata)

_ERRORS = {401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
           429: {"model": ErrorResponse}}
router = APIRouter(prefix="/v1", responses=_ERRORS)


def _routable(conversation_id: str) -> str:
    # An id may hold '/' (sent as is or as %2F): every route ends in a fixed suffix, so the split is clear,
    # except that a DELETE ending in '/messages/<id>' is a retraction. The same rule as the engine's.
    if RESERVED_SEGMENT in conversation_id:
        raise ValueError(f"a conversation id {CONVERSATION_ID_RULE}")
    return conversation_id


# ``{conversation_id:path}`` in every route: the id may contain '/'.
ConversationId = Path(min_length=1, max_length=200, description="the conversation, unique within the key's tenant "
                      "(may contain '/', sent as is or percent-encoded, but not the segment '/messages/')")
ConversationPath = Annotated[str, ConversationId, AfterValidator(_routable)]


def legacy_event_id(tenant_id: str, conversation_id: str, message_id: str) -> str:
    """Return the event id memfold before 0.2 gave a caller's message id (an unkeyed hash): only to find old messages."""
    return "m" + content_hash(tenant_id, conversation_id, message_id, length=31)


def event_id_for(engine, tenant_id: str, conversation_id: str, message_id: str) -> str:
    """Return the log event id of a caller's message id: the same inputs give the same id while the conversation lives.

    An HMAC under the conversation's data key (:meth:`MemoryEngine.keyed_event_id`), not a plain hash:
    callers' ids may be hashes of the content (remote ingest sends one per line), and an unkeyed id
    would let anyone holding the log confirm a guess at erased content. Raises
    :class:`ConversationForgottenError` for a forgotten conversation.
    """
    return engine.keyed_event_id(conversation_id, message_id, tenant_id=tenant_id)


def existing(request: Request, tenant_id: str, conversation_id: str) -> dict[str, Any]:
    """Return the conversation's row, or raise 404 (the same answer for another tenant's and a missing one)."""
    row = services(request).engine.conversation(conversation_id, tenant_id=tenant_id)
    if row is None or row.get("deleted"):
        raise UnknownConversationError(f"no conversation {conversation_id!r}", field="conversation_id")
    return row


@router.get("/me", response_model=Identity, tags=["keys"])
async def me(key: Reader) -> Identity:
    """Return the calling key's id, tenant and role."""
    return Identity(key_id=key.key_id, tenant_id=key.tenant_id, role=key.role)


@router.post("/conversations/{conversation_id:path}/messages", response_model=AppendResponse, status_code=201,
             tags=["messages"], responses={409: {"model": ErrorResponse}, 413: {"model": ErrorResponse}})
async def append_messages(
    request: Request, body: AppendRequest, key: Writer,
    conversation_id: ConversationPath,
    wait: bool = Query(False, description="return once the projection holds the messages (read-your-writes)"),
) -> AppendResponse:
    """Append one message or a batch, all or nothing, in order.

    A message with an ``id`` already stored in this conversation is not
    stored again: the answer names the stored event, so retries are safe.
    The same ``id`` with different content is refused (409), nothing written.
    Appends arriving together are written in one log transaction.
    With ``wait``, on a shard node whose partition moves to another node
    meanwhile, the answer comes at the move: the messages are in the log, and
    the new owner serves the partition's reads only once caught up past them.
    """
    svc = services(request)
    limit = svc.limits.max_batch
    if limit and len(body.messages) > limit:
        raise HTTPException(413, f"{len(body.messages)} messages in one append; the limit is {limit} "
                                 "(split the batch, or memfold serve --max-batch)")
    events, ids = await asyncio.wrap_future(svc.validator.submit(_validated, svc.engine, key.tenant_id,
                                                                 conversation_id, body))
    positions = await svc.appender.append(events)  # conflicts (409) are checked in the group, per request
    svc.metrics.appended.inc(len(events))
    if wait:
        try:
            await run_in_threadpool(svc.engine.wait_for, max(positions))
        except PartitionNotOwnedError:
            pass  # moved to another node while waiting: it reads them before it serves the partition
        else:
            svc.contexts.bump(positions)  # the projection may hold them before the runner's hook has run
    return AppendResponse(conversation_id=conversation_id, messages=[
        {"id": i, "event_id": e.event_id, "partition": p.partition, "offset": p.offset}
        for i, e, p in zip(ids, events, positions)
    ])


_SET_BY_THE_SERVICE = ("event_id", "tenant_id", "conversation_id")


def _validated(engine, tenant: str, conversation_id: str, body: AppendRequest) -> tuple[list, list[str | None]]:
    """Return the batch's events and each one's caller id; raise the first ValidationError (``line``: the item, 1-based).

    1. Each item's ``id`` (the caller's message id) becomes its keyed event id;
       an item without one gets a fresh event id, so every message can be
       traced to the item it came from.
    2. :func:`~memfold.core.shapes.messages_from` turns the items into
       canonical messages; an Anthropic item may give several (event ids
       ``<id>#1``, ``<id>#2``...), a run of Responses ``function_call`` items one.
    3. Each message is validated, its caller id recorded in its metadata.
    """
    items, lines, callers = [], {}, {}
    for i, raw in enumerate(body.messages):
        item = dict(raw)
        for k in _SET_BY_THE_SERVICE:
            if k in item:
                raise ValidationError(f"{k} is set by the service, not the message: drop it (the conversation is "
                                      "in the path; a message's id is 'id')", field=k, line=i + 1)
        caller = item.pop("id", None)
        if caller is not None and (not isinstance(caller, str) or not 1 <= len(caller) <= 200):
            raise ValidationError("id: the message id must be a string of 1 to 200 characters", field="id",
                                  line=i + 1)
        event_id = new_event_id() if caller is None else event_id_for(engine, tenant, conversation_id, caller)
        item["event_id"] = event_id
        lines[event_id], callers[event_id] = i + 1, caller
        items.append(item)
    events, ids = [], []
    for row in messages_from(body.format, items):
        first = row["event_id"].split("#", 1)[0]
        caller = callers[first]
        if caller is not None:
            row["metadata"] = {**(row.get("metadata") or {}), CLIENT_ID_KEY: caller}
        row.update(conversation_id=conversation_id, tenant_id=tenant)
        if body.user_id is not None:
            if row.get("user_id") not in (None, body.user_id):
                raise UserConflictError(f"the message names user {row['user_id']!r}, the batch {body.user_id!r}",
                                        field="user_id", line=lines[first], user_id=row["user_id"],
                                        owner=body.user_id)
            row["user_id"] = body.user_id
        events.append(engine.validate(row, line=lines[first]))
        ids.append(caller)
    return events, ids


@router.get("/conversations", response_model=ConversationsResponse, tags=["conversations"])
def list_conversations(
    request: Request, key: Reader, limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
) -> ConversationsResponse:
    """List the tenant's conversations, most recently active first; ``message_count`` leaves retracted messages out.

    A shard node lists the conversations it serves (the router merges every node's list).
    """
    svc = services(request)
    if svc.owns is None:
        rows = svc.engine.conversations(tenant_id=key.tenant_id, limit=limit, offset=offset)
    else:  # rows of partitions it folded before a move stay in its file: left out, page by page
        rows, seen = [], 0
        while len(rows) < offset + limit:
            chunk = svc.engine.conversations(tenant_id=key.tenant_id, limit=1000, offset=seen)
            rows += [r for r in chunk if svc.owns(key.tenant_id, r["conversation_id"])]
            seen += len(chunk)
            if len(chunk) < 1000:
                break
        rows = rows[offset: offset + limit]
    return ConversationsResponse(conversations=rows)


@router.get("/conversations/{conversation_id:path}/messages", response_model=MessagesResponse, tags=["messages"])
def list_messages(
    request: Request, key: Reader, conversation_id: ConversationPath,
    start: int = Query(0, ge=0, description="first message index (0-based)"),
    limit: int = Query(1000, ge=1, le=10_000),
) -> MessagesResponse:
    """Return the stored messages of a conversation, oldest first."""
    existing(request, key.tenant_id, conversation_id)
    records = services(request).engine.messages(conversation_id, tenant_id=key.tenant_id, start=start, limit=limit)
    out = []
    for m in records:
        metadata = dict(m.metadata or {})
        caller_id = metadata.pop(CLIENT_ID_KEY, None)
        if caller_id is None and _LEGACY_CLIENT_ID_KEY in metadata and m.event_id == legacy_event_id(key.tenant_id, conversation_id,
                                                                str(metadata.get(_LEGACY_CLIENT_ID_KEY))):
            caller_id = metadata.pop(_LEGACY_CLIENT_ID_KEY)  # recorded by memfold before 0.2 (not the caller's own key)
        out.append({
            "id": caller_id, "event_id": m.event_id, "index": m.index, "seq": m.seq,
            "role": m.role, "content": m.content, "tokens": m.tokens, "occurred_at": m.occurred_at, "name": m.name,
            "model_variant": m.model_variant, "tool_calls": [tc.model_dump() for tc in m.tool_calls],
            "tool_call_id": m.tool_call_id, "importance": m.importance, "metadata": metadata,
        })
    return MessagesResponse(conversation_id=conversation_id, messages=out)


@router.delete("/conversations/{conversation_id:path}/messages/{message_id:path}", tags=["messages"],
               responses={409: {"model": ErrorResponse}})
def retract_message(
    request: Request, key: Writer, conversation_id: ConversationPath,
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
    try:
        keyed = event_id_for(engine, key.tenant_id, conversation_id, message_id)
    except ConversationForgottenError:
        raise UnknownConversationError(f"no conversation {conversation_id!r}", field="conversation_id") from None  # forgotten since `existing`
    for event_id in dict.fromkeys((message_id, keyed, legacy_event_id(key.tenant_id, conversation_id, message_id))):
        try:
            position = engine.retract(conversation_id, event_id, tenant_id=key.tenant_id, reason=reason)
        except UnknownMessageError:
            continue
        services(request).contexts.bump([position])
        return {"conversation_id": conversation_id, "event_id": event_id, "retracted": True,
                "partition": position.partition, "offset": position.offset}
    raise UnknownMessageError(f"no message {message_id!r} in conversation {conversation_id!r}", field="message_id")


@router.get("/conversations/{conversation_id:path}/context", response_model=ShapedContextResponse | ContextResponse,
            tags=["context"])
async def get_context(
    request: Request, key: Reader, conversation_id: ConversationPath,
    budget: int | None = Query(None, ge=1, description="token budget (default: no limit)"),
    policy: str | None = Query(None, description="policy to read (default: the tenant's)"),
    query: str | None = Query(None, max_length=10_000,
                              description="what older messages to recall (default: the current user message)"),
    as_of: str | None = Query(None, max_length=64, description="time travel: the context as it was right after a "
                              "log position 'PARTITION:OFFSET' or an ISO-8601 time with a timezone"),
    format: Annotated[ContextFormat, Query(description="openai: chat messages as the openai SDK takes them; "
                                           "anthropic: Messages API messages plus system; responses: Responses API "
                                           "input items; compact: memfold's annotated messages")] = "openai",
) -> Response:
    """Return the messages for the next model call within ``budget`` tokens, in ``format``. Never calls a model.

    Memory first, then recalled older messages most relevant to ``query``,
    recent turns and the current message. Except in ``compact``, the
    messages hold only keys their API defines; ``memfold`` beside them
    annotates each (kind, tokens, index, occurred_at). The same read answers
    from a cache until something new of the conversation is projected.
    """
    svc = services(request)
    started = time.perf_counter()
    point = _point(as_of)
    name = policy or svc.engine.settings.policy_for(key.tenant_id)
    compact_key = context_key(key.tenant_id, conversation_id, budget, query, name, as_of)
    # Each format's answer is cached under its own key; the compact entry also keeps the messages they are made of.
    cache_key = compact_key if format == "compact" else (*compact_key, format)
    version = svc.contexts.version(key.tenant_id, conversation_id)  # before computing: see context_cache
    body = svc.contexts.get(cache_key, version)
    if body is None and format != "compact":
        messages = svc.contexts.messages(compact_key, version)  # e.g. answered ahead by the fold process
        if messages is not None:
            body = shaped_body(format, conversation_id, name, budget, messages)
            svc.contexts.put(cache_key, version, body)
    svc.metrics.context_cache.labels("miss" if body is None else "hit").inc()
    if body is None:
        args = (request, key.tenant_id, conversation_id, budget, query, name, point)
        if point is None and svc.contexts.known(key.tenant_id, conversation_id) and svc.engine.context_in_memory(
                conversation_id, policy=name, tenant_id=key.tenant_id):
            # A fraction of a millisecond of CPU: computed here. Handed to a thread, the read and its answer
            # each waited for the interpreter lock behind the projector (mixed load: p50 18 -> 11 ms).
            messages, compact = _render_context(*args)
        else:
            messages, compact = await run_in_threadpool(_render_context, *args)
        body = compact if format == "compact" else shaped_body(format, conversation_id, name, budget, messages)
        lazy_ms = svc.engine.settings.policy_settings(name).read_wait_ms()
        # An answer that waited out a pending summary (lazy wait) is the fallback: the next read waits again.
        if not lazy_ms or time.perf_counter() - started < lazy_ms / 1000:
            svc.contexts.put(compact_key, version, compact, messages=messages)
            if format != "compact":
                svc.contexts.put(cache_key, version, body)
    svc.contexts.alias(key.tenant_id, conversation_id, request.scope.get("query_string", b""), cache_key)
    svc.metrics.context_seconds.observe(time.perf_counter() - started)
    return Response(body, media_type="application/json")


def _render_context(request: Request, tenant: str, conversation_id: str, budget: int | None, query: str | None,
                    name: str, point: Position | datetime | None) -> tuple[tuple, bytes]:
    """Return the context's messages and its compact answer."""
    svc = services(request)

    def stored() -> bool:
        row = svc.engine.conversation(conversation_id, tenant_id=tenant)
        return row is not None and not row.get("deleted")

    if not svc.contexts.exists(tenant, conversation_id, stored):  # a DuckDB point query only the first time
        raise UnknownConversationError(f"no conversation {conversation_id!r}", field="conversation_id")
    messages = tuple(svc.engine.context(conversation_id, budget=budget, query=query, policy=name, tenant_id=tenant,
                                        as_of=point))
    return messages, context_body(conversation_id, name, budget, messages)


@router.delete("/conversations/{conversation_id:path}", tags=["conversations"],
               responses={503: {"model": ErrorResponse}})
def forget_conversation(
    request: Request, key: Forgetter, conversation_id: ConversationPath,
    reason: str | None = Query(None, max_length=1000, description="recorded on the ConversationDeleted event"),
) -> dict:
    """Erase a conversation (admin keys): its rows go, its data key is destroyed, so the log's copy is unreadable.

    Returns once the projection no longer holds it. The deletion itself is
    an event, so the audit trail keeps that the conversation existed.
    Idempotent: forgetting a forgotten conversation again answers 200 and
    finishes any erasure the first call could not (503 with Retry-After
    while something still cannot be removed); 404 only for an id this
    tenant never had.
    """
    engine = services(request).engine
    if engine.audit(conversation_id, tenant_id=key.tenant_id)["conversation"]["status"] == "unknown":
        raise UnknownConversationError(f"no conversation {conversation_id!r}", field="conversation_id")
    position = engine.forget(conversation_id, tenant_id=key.tenant_id, reason=reason)
    services(request).contexts.bump([position])
    services(request).contexts.deleted([(key.tenant_id, conversation_id)])  # the projector's word may come later
    return {"conversation_id": conversation_id, "forgotten": True, "partition": position.partition,
            "offset": position.offset}


@router.post("/conversations/{conversation_id:path}/reopen", tags=["conversations"],
             responses={409: {"model": ErrorResponse}})
def reopen_conversation(request: Request, key: Forgetter, conversation_id: ConversationPath) -> dict:
    """Accept appends again to a forgotten conversation (admin keys): it starts empty, under a new data key.

    Its erased history stays erased. Until it is reopened, an append to a
    forgotten conversation answers 410 Gone.
    """
    engine = services(request).engine
    if engine.audit(conversation_id, tenant_id=key.tenant_id)["conversation"]["status"] == "unknown":
        raise UnknownConversationError(f"no conversation {conversation_id!r}", field="conversation_id")
    done = engine.reopen(conversation_id, tenant_id=key.tenant_id)
    services(request).contexts.deleted([(key.tenant_id, conversation_id)])  # known again once something is projected
    answer: dict[str, Any] = {"conversation_id": conversation_id, "reopened": True}
    if isinstance(done, Position):
        answer.update(partition=done.partition, offset=done.offset)
    return answer


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


@router.get("/conversations/{conversation_id:path}/summaries", tags=["memory"])
def list_summaries(
    request: Request, key: Reader, conversation_id: ConversationPath, policy: str | None = Query(None),
) -> dict:
    """Return every summary request of the conversation with its outcome and lineage, oldest first."""
    existing(request, key.tenant_id, conversation_id)
    rows = services(request).engine.summaries(conversation_id, tenant_id=key.tenant_id, policy=policy)
    return {"conversation_id": conversation_id, "summaries": [_decoded(row) for row in rows]}


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """Return a summary row with its JSON column (``facts``) as JSON, not a string holding JSON."""
    facts = row.get("facts")
    if isinstance(facts, str):
        row = {**row, "facts": json.loads(facts) if facts else []}
    return row


@router.get("/conversations/{conversation_id:path}/facts", tags=["memory"])
def list_facts(request: Request, key: Reader, conversation_id: ConversationPath) -> dict:
    """Return every fact memory held, bi-temporal: when it was stated, learned, changed (superseded) and retired."""
    existing(request, key.tenant_id, conversation_id)
    trail = services(request).engine.audit(conversation_id, tenant_id=key.tenant_id)
    return {"conversation_id": conversation_id, "facts": trail["facts"]}


@router.get("/conversations/{conversation_id:path}/audit", tags=["memory"])
def get_audit(request: Request, key: Reader, conversation_id: ConversationPath) -> dict:
    """Return how the conversation's memory evolved: summary versions with lineage, facts, settings, erasure.

    An erased conversation still answers here (it existed, and when it was
    erased is part of the trail); one that never existed for this tenant is 404.
    """
    trail = services(request).engine.audit(conversation_id, tenant_id=key.tenant_id)
    if trail["conversation"]["status"] == "unknown":
        raise UnknownConversationError(f"no conversation {conversation_id!r}", field="conversation_id")
    return trail


@router.post("/search", response_model=SearchResponse, tags=["memory"])
def search(request: Request, body: SearchRequest, key: Reader, response: Response) -> SearchResponse:
    """Return the tenant's messages best matching ``query`` (BM25 per conversation, merged by score), a page at a time.

    Searches the listed ``conversation_ids`` (unknown ids are skipped, exactly
    like another tenant's), else one page of the tenant's conversations in
    id order: ``conversations`` of them after ``cursor``. ``next_cursor``
    names the next page (null after the last), so walking the pages reaches
    every conversation, including those created meanwhile with later ids.
    """
    engine = services(request).engine
    owns = services(request).owns  # a shard node searches the conversations it serves; the router merges
    next_cursor = None
    if body.conversation_ids:
        ids = [c for c in body.conversation_ids if owns is None or owns(key.tenant_id, c)]
    else:
        after = _after(body.cursor)
        ids, more = [], False
        while True:
            found = engine.conversation_ids(tenant_id=key.tenant_id, after=after, limit=body.conversations + 1)
            ids += [c for c in found if owns is None or owns(key.tenant_id, c)]
            if len(ids) > body.conversations:
                more = True
                break
            if len(found) <= body.conversations:
                break
            after = found[-1]
        ids = ids[: body.conversations]
        if more:
            next_cursor = _cursor(ids[-1])
    if owns is not None:
        response.headers[SEARCHED.decode()] = searched_header(list(ids))
    hits = []
    for conversation_id in dict.fromkeys(ids):
        if engine.conversation(conversation_id, tenant_id=key.tenant_id) is None:
            continue
        hits += [(score, conversation_id, m) for score, m in
                 engine.search_messages(conversation_id, body.query, tenant_id=key.tenant_id, limit=body.limit)]
    hits.sort(key=lambda h: (-round(h[0], 4), h[1], h[2].index))  # ties in one order on every node (router merges)
    return SearchResponse(query=body.query, next_cursor=next_cursor, conversations=len(ids), hits=[
        {"conversation_id": c, "index": m.index, "role": m.role, "content": m.content, "occurred_at": m.occurred_at,
         "score": round(score, 4)}
        for score, c, m in hits[: body.limit]
    ])


def _cursor(conversation_id: str) -> str:
    return base64.urlsafe_b64encode(conversation_id.encode("utf-8")).decode("ascii").rstrip("=")


def _after(cursor: str | None) -> str:
    """Return the conversation id a search cursor continues after ('' for the first page)."""
    if cursor is None:
        return ""
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValidationError("cursor is not one this service gave: pass a search answer's next_cursor unchanged",
                              field="cursor") from None


# ----------------------------------------------------------------- users

UserPath = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^/]+$", description="the user id")]


@router.get("/users/{user_id}/memory", tags=["users"], responses={404: {"model": ErrorResponse}})
def user_memory(
    request: Request, key: Reader, user_id: UserPath, policy: str | None = Query(None),
    as_of: str | None = Query(None, description="an ISO-8601 time with a timezone: the facts as they stood then"),
) -> dict:
    """Return the user's memory across its conversations: current facts (with the conversation and time each was
    stated in), every statement with its lineage, the user's summary (``user_summary``: the summarizer's summary
    across its conversations, or null), each conversation's newest summary (``summary``) and the user's
    conversations. 404 for a user no live conversation of this tenant belongs to."""
    point = _point(as_of)
    if isinstance(point, Position):
        raise ValidationError("as_of of user memory is a time, not a log position", field="as_of")
    return services(request).engine.user_memory(user_id, tenant_id=key.tenant_id, policy=policy, as_of=point)


@router.get("/users/{user_id}/context", response_model=ShapedContextResponse | ContextResponse, tags=["users"],
            responses={404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}})
def user_context(
    request: Request, key: Reader, user_id: UserPath,
    conversation_id: str = Query(min_length=1, max_length=400, description="the user's conversation, started or not"),
    budget: int | None = Query(None, ge=1), policy: str | None = Query(None),
    query: str | None = Query(None, max_length=10_000),
    format: Annotated[ContextFormat, Query()] = "openai",
) -> Response:
    """Return the context of a conversation of the user, one not started yet too (its first turn's context: what the
    user's other conversations taught). 409 for a conversation of another user, 404 for a user no conversation of
    this tenant belongs to. Not cached: the conversation's own route is the one to poll."""
    engine = services(request).engine
    engine.user_memory(user_id, tenant_id=key.tenant_id)  # 404 for a user this tenant does not have
    name = policy or engine.settings.policy_for(key.tenant_id)
    messages = tuple(engine.context(conversation_id, budget=budget, query=query, policy=name,
                                    tenant_id=key.tenant_id, user_id=user_id))
    body = (context_body(conversation_id, name, budget, messages) if format == "compact"
            else shaped_body(format, conversation_id, name, budget, messages))
    return Response(body, media_type="application/json")


@router.post("/users/{user_id}/search", response_model=UserSearchResponse, tags=["users"],
             responses={404: {"model": ErrorResponse}})
def user_search(request: Request, key: Reader, user_id: UserPath, body: UserSearchRequest) -> UserSearchResponse:
    """Return the messages of the user's conversations best matching ``query`` (BM25 per conversation, merged)."""
    hits = services(request).engine.search_user(user_id, body.query, limit=body.limit, tenant_id=key.tenant_id)
    return UserSearchResponse(user_id=user_id, query=body.query, hits=hits)


@router.get("/users/{user_id}/audit", tags=["users"], responses={404: {"model": ErrorResponse}})
def user_audit(request: Request, key: Reader, user_id: UserPath) -> dict:
    """Return how the user's memory evolved: each statement of a fact, the conversation that taught it, what replaced it."""
    return services(request).engine.audit_user(user_id, tenant_id=key.tenant_id)


@router.delete("/users/{user_id}", tags=["users"], responses={404: {"model": ErrorResponse},
                                                               503: {"model": ErrorResponse}})
def forget_user(
    request: Request, key: Forgetter, user_id: UserPath,
    reason: str | None = Query(None, max_length=1000, description="recorded on each ConversationDeleted event"),
) -> dict:
    """Erase a user (admin keys): every conversation of the user is forgotten (crypto-shredded) and the user memory
    deleted. Returns once the projection holds none of it; running it again finishes an erasure cut short."""
    forgotten = services(request).engine.forget_user(user_id, tenant_id=key.tenant_id, reason=reason)
    services(request).contexts.deleted([(key.tenant_id, c) for c in forgotten])
    return {"user_id": user_id, "forgotten": True, "conversations": forgotten}


@router.post("/sql", response_model=SqlResponse, tags=["analytics"],
             responses={403: {"model": ErrorResponse}, 408: {"model": ErrorResponse}})
def run_sql(request: Request, body: SqlRequest, key: Admin) -> SqlResponse:
    """Run one read-only statement over the tenant's tables (conversations, messages, summaries, facts, events)."""
    timeout = services(request).limits.sql_timeout_s
    columns, rows, truncated = services(request).engine.tenant_sql(key.tenant_id, body.query, body.limit, timeout)
    return SqlResponse(columns=columns, rows=rows, truncated=truncated)
