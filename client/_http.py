"""``Client`` and ``AsyncClient``: the memfold HTTP API over httpx, with safe retries.

Retries: a request that got no answer (connection error, timeout), a 429 or a
502/503/504 is sent again after a backoff (or the server's Retry-After), up
to ``max_retries`` times. That is safe for appends too: the client gives
every message without an ``id`` a fresh one *before* the first attempt, and
the service stores a message id once per conversation, so a retry of an
append that did land stores nothing twice.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from memfold.client.models import (
    Appended,
    Context,
    Conversation,
    Identity,
    Message,
    Prompt,
    SearchHit,
    SearchPage,
    ServiceUnavailableError,
    SqlResult,
    error_for,
)
from memfold.core.errors import ValidationError

_RETRY_STATUS = {429, 502, 503, 504}
PROMPT_FORMATS = ("openai", "anthropic", "responses")


def _messages_body(messages: Iterable[Mapping[str, Any]], format: str = "openai",
                   user_id: str | None = None) -> dict[str, Any]:
    out = []
    for m in messages:
        if hasattr(m, "model_dump"):  # an SDK object (openai's ChatCompletionMessage, anthropic's MessageParam...)
            m = m.model_dump(mode="json", exclude_none=True)
        m = {k: v for k, v in m.items() if v is not None}
        m.setdefault("id", uuid.uuid4().hex)  # fixed before the first attempt: retries are idempotent
        if "occurred_at" in m and not isinstance(m["occurred_at"], str):
            m["occurred_at"] = m["occurred_at"].isoformat()
        out.append(m)
    body: dict[str, Any] = {"format": format, "messages": out}
    if user_id is not None:
        body["user_id"] = user_id
    return body


def _shaped(format: str) -> str:
    if format not in PROMPT_FORMATS:
        raise ValidationError(f"format must be one of {', '.join(PROMPT_FORMATS)}, got {format!r:.40} "
                              "(context() gives the compact form)", field="format")
    return format


def _conv(conversation_id: str) -> str:
    return f"/v1/conversations/{quote(conversation_id, safe='')}"


def _user(user_id: str) -> str:
    return "/v1/users/" + quote(user_id, safe="")


def _when(as_of: str | datetime | None) -> str | None:
    return as_of.isoformat() if isinstance(as_of, datetime) else as_of


def _replay_body(name: str, policy: str | None, overrides: Mapping[str, Any] | None,
                 conversations: list[str] | None) -> dict[str, Any]:
    body = {"name": name, "policy": policy, "overrides": dict(overrides) if overrides else None,
            "conversations": conversations}
    return {k: v for k, v in body.items() if v is not None}


def _diff_call(name: str, conversation_id: str | None, budget: int | None,
               questions: Iterable[Mapping[str, Any]] | None) -> tuple[str, str, dict[str, Any]]:
    """Return (method, path, request options) of a diff: a GET, or a POST carrying the question set."""
    path = f"/v1/replays/{quote(name, safe='')}/diff"
    if questions is None:
        return "GET", path, {"params": _params(conversation_id=conversation_id, budget=budget)}
    body = {"conversation_id": conversation_id, "budget": budget, "questions": [dict(q) for q in questions]}
    return "POST", path, {"json": {k: v for k, v in body.items() if v is not None}}


def _search_body(query: str, conversation_ids: list[str] | None, limit: int, conversations: int | None,
                 cursor: str | None) -> dict[str, Any]:
    body = {"query": query, "limit": limit, "conversation_ids": conversation_ids, "conversations": conversations,
            "cursor": cursor}
    return {k: v for k, v in body.items() if v is not None}


def _best(hits: list[SearchHit], limit: int) -> list[SearchHit]:
    return sorted(hits, key=lambda h: -h.score)[:limit]


def _params(**values: Any) -> dict[str, Any]:
    return {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in values.items() if v is not None}


def _unreachable(url: str, exc: httpx.TransportError) -> ServiceUnavailableError:
    return ServiceUnavailableError(0, type(exc).__name__, f"{url}: {exc or 'no answer'}; is `memfold serve` running "
                                                          "there? Check --url (env MEMFOLD_URL)")


class _Base:
    def __init__(self, url: str | None, api_key: str | None, timeout: float, max_retries: int, backoff: float):
        self.url = (url or os.environ.get("MEMFOLD_URL") or "http://127.0.0.1:8080").rstrip("/")
        key = api_key or os.environ.get("MEMFOLD_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        header = response.headers.get("retry-after") if response is not None else None
        if header:
            try:
                return float(header)
            except ValueError:
                pass
        return self.backoff * (2 ** attempt)

    @staticmethod
    def _result(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = response.text
            raise error_for(response.status_code, body, response.headers.get("retry-after"))
        return response.json() if response.content else None


class Client(_Base):
    """A synchronous client of one memfold service; use as a context manager or call :meth:`close`.

    ``url`` and ``api_key`` default to ``MEMFOLD_URL`` and ``MEMFOLD_API_KEY``.
    Errors are :class:`memfold.client.ApiError` subclasses (all ``MemfoldError``).
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.2, transport: httpx.BaseTransport | None = None):
        super().__init__(url, api_key, timeout, max_retries, backoff)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout, transport=transport)

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = self._http.request(method, path, **kw)
                if response.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    return self._result(response)
            except httpx.TransportError as exc:
                if attempt == self.max_retries:
                    raise _unreachable(self.url, exc) from exc
            time.sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")

    def append(self, conversation_id: str, messages: Iterable[Mapping[str, Any]], *, wait: bool = True,
               format: str = "openai", user_id: str | None = None) -> list[Appended]:
        """Append messages in order, all or nothing; ``format`` names their shape.

        ``openai`` (default): chat messages as the openai SDK gives and takes
        them (``ChatCompletionMessage`` objects too), or memfold's flat form.
        ``anthropic``: Messages API ``{role, content}`` with text, tool_use and
        tool_result blocks. ``responses``: Responses API input items. Each
        may also carry memfold's ``id``, ``occurred_at``, ``metadata``,
        ``model_variant``, ``importance``. One :class:`Appended` per stored
        message (an Anthropic message with tool results stores several).
        ``wait`` returns once the service's projection holds them, so a read
        that follows sees them. Retried safely (see the module docstring).
        ``user_id`` names the user the conversation belongs to (every message
        of the batch). Raises :class:`ConversationGoneError` (410) for a
        forgotten conversation, :class:`UserIdConflictError` (409) when the
        conversation belongs to another user.
        """
        body = self._request("POST", _conv(conversation_id) + "/messages",
                             json=_messages_body(messages, format, user_id), params=_params(wait=wait))
        return [Appended.model_validate(m) for m in body["messages"]]

    def add(self, conversation_id: str, role: str, content: str, **fields: Any) -> Appended:
        """Append one message; ``fields`` are the optional message keys (id, metadata, name, user_id, ...)."""
        return self.append(conversation_id, [{"role": role, "content": content, **fields}])[0]

    def messages(self, conversation_id: str, *, start: int = 0, limit: int = 1000) -> list[Message]:
        """Return stored messages from index ``start``, oldest first."""
        body = self._request("GET", _conv(conversation_id) + "/messages", params=_params(start=start, limit=limit))
        return [Message.model_validate(m) for m in body["messages"]]

    def context(self, conversation_id: str, *, budget: int | None = None, query: str | None = None,
                policy: str | None = None, as_of: str | datetime | None = None, user_id: str | None = None) -> Context:
        """Return the context for the next model call; ``query`` picks which older messages to recall.

        ``as_of`` (a ``"PARTITION:OFFSET"`` log position or an aware datetime)
        returns the context as it was right after that point (time travel).
        ``user_id`` reads it as a conversation of that user, one not started
        yet too (``GET /v1/users/{user_id}/context``, not with ``as_of``).
        """
        if user_id is not None:
            if as_of is not None:
                raise ValidationError("as_of reads a conversation's past without the user part; not with user_id",
                                      field="as_of")
            body = self._request("GET", _user(user_id) + "/context", params=_params(
                conversation_id=conversation_id, budget=budget, query=query, policy=policy, format="compact"))
            return Context.model_validate(body)
        body = self._request("GET", _conv(conversation_id) + "/context", params=_params(
            budget=budget, query=query, policy=policy, as_of=_when(as_of), format="compact"))
        return Context.model_validate(body)

    def prompt(self, conversation_id: str, *, format: str = "openai", budget: int | None = None,
               query: str | None = None, policy: str | None = None, as_of: str | datetime | None = None) -> Prompt:
        """Return the context for the next model call in ``format``, ready to send as it is.

        ``openai``: ``prompt.messages`` is the chat call's ``messages``.
        ``anthropic``: ``messages`` plus ``system``. ``responses``: the
        ``input`` items. ``prompt.memfold`` annotates each entry (kind,
        tokens, index, occurred_at). Other arguments as :meth:`context`.
        """
        body = self._request("GET", _conv(conversation_id) + "/context", params=_params(
            budget=budget, query=query, policy=policy, as_of=_when(as_of), format=_shaped(format)))
        return Prompt.model_validate(body)

    def retract(self, conversation_id: str, message_id: str, *, reason: str | None = None) -> None:
        """Retract one message (its ``event_id`` or the ``id`` it was appended with): reads leave it out from now on.

        Raises ``NotFoundError`` for a message the conversation does not hold
        and ``ConflictError`` when it is already retracted.
        """
        self._request("DELETE", f"{_conv(conversation_id)}/messages/{quote(message_id, safe='')}",
                      params=_params(reason=reason))

    def forget(self, conversation_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Erase a conversation (admin keys); afterwards it answers 404 and its log content is unreadable.

        Returns the service's answer (``forgotten``, the ``partition`` and
        ``offset`` of its ``ConversationDeleted``). An append to it then raises
        :class:`ConversationGoneError` until :meth:`reopen`.
        """
        return self._request("DELETE", _conv(conversation_id), params=_params(reason=reason))

    def reopen(self, conversation_id: str) -> dict[str, Any]:
        """Start a forgotten conversation again: appends are accepted from now on; its erased history stays gone."""
        return self._request("POST", _conv(conversation_id) + "/reopen")

    def summaries(self, conversation_id: str, *, policy: str | None = None) -> list[dict[str, Any]]:
        """Return the summary requests and outcomes of a conversation, oldest first."""
        return self._request("GET", _conv(conversation_id) + "/summaries", params=_params(policy=policy))["summaries"]

    def facts(self, conversation_id: str, *, policy: str | None = None) -> list[dict[str, Any]]:
        """Return the conversation's facts with the summary versions that introduced and retired them."""
        return self._request("GET", _conv(conversation_id) + "/facts", params=_params(policy=policy))["facts"]

    def audit(self, conversation_id: str) -> dict[str, Any]:
        """Return the conversation's memory evolution (summary versions, bi-temporal facts, settings, erasure)."""
        return self._request("GET", _conv(conversation_id) + "/audit")

    def user_memory(self, user_id: str, *, policy: str | None = None,
                    as_of: str | datetime | None = None) -> dict[str, Any]:
        """Return a user's memory across its conversations (current facts with their origin, every statement
        with its lineage, the user's summary ``user_summary`` (or None), each conversation's newest summary
        ``summary``, the conversations); ``as_of``: the facts as they stood then.
        Raises :class:`UserNotFoundError` (404) for a user no conversation of the tenant belongs to."""
        return self._request("GET", _user(user_id) + "/memory", params=_params(policy=policy, as_of=_when(as_of)))

    def search_user(self, user_id: str, query: str, *, limit: int = 10) -> list[dict[str, Any]]:
        """Return the messages of every conversation of the user best matching ``query``, best first."""
        return self._request("POST", _user(user_id) + "/search", json={"query": query, "limit": limit})["hits"]

    def audit_user(self, user_id: str) -> dict[str, Any]:
        """Return how the user's memory evolved: each statement of a fact, where it came from, what replaced it."""
        return self._request("GET", _user(user_id) + "/audit")

    def forget_user(self, user_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Erase a user (admin keys): every conversation of the user is forgotten, the user memory deleted."""
        return self._request("DELETE", _user(user_id), params=_params(reason=reason))

    def search(self, query: str, *, conversation_ids: list[str] | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """Return the best hits of ``query`` in the listed conversations, else in the first page of them only.

        :meth:`search_all` searches every conversation of the tenant;
        :meth:`search_page` returns one page with its ``next_cursor``.
        """
        return self._request("POST", "/v1/search", json=_search_body(query, conversation_ids, limit, None, None))["hits"]

    def search_page(self, query: str, *, cursor: str | None = None, conversations: int | None = None,
                    conversation_ids: list[str] | None = None, limit: int = 10) -> SearchPage:
        """Return one page of a search: the best ``limit`` hits in ``conversations`` conversations after ``cursor``.

        Pages go in conversation id order; the page's ``next_cursor`` (None
        after the last) continues the walk. With ``conversation_ids`` there is one page.
        """
        body = _search_body(query, conversation_ids, limit, conversations, cursor)
        return SearchPage.model_validate(self._request("POST", "/v1/search", json=body))

    def search_pages(self, query: str, *, conversations: int | None = None, limit: int = 10) -> Iterator[SearchPage]:
        """Yield every page of a search of the tenant's conversations, first to last (see :meth:`search_page`)."""
        cursor = None
        while True:
            page = self.search_page(query, cursor=cursor, conversations=conversations, limit=limit)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def search_all(self, query: str, *, limit: int = 10, conversations: int | None = 100) -> list[SearchHit]:
        """Return the best ``limit`` hits of ``query`` over every conversation of the tenant, best first.

        Walks every page (``conversations`` per request), so its cost grows
        with the tenant's conversations; scores are BM25 within a conversation.
        """
        hits: list[SearchHit] = []
        for page in self.search_pages(query, conversations=conversations, limit=limit):
            hits = _best(hits + page.hits, limit)
        return hits

    def conversations(self, *, limit: int = 100, offset: int = 0) -> list[Conversation]:
        """Return the tenant's conversations, most recently active first."""
        body = self._request("GET", "/v1/conversations", params=_params(limit=limit, offset=offset))
        return [Conversation.model_validate(c) for c in body["conversations"]]

    def sql(self, query: str, *, limit: int = 10_000) -> SqlResult:
        """Run one read-only statement over the tenant's tables (admin keys only)."""
        return SqlResult.model_validate(self._request("POST", "/v1/sql", json={"query": query, "limit": limit}))

    def me(self) -> Identity:
        """Return the key's id, tenant and role."""
        return Identity.model_validate(self._request("GET", "/v1/me"))

    def replay(self, name: str, *, policy: str | None = None, overrides: Mapping[str, Any] | None = None,
               conversations: list[str] | None = None) -> dict[str, Any]:
        """Start (or, with ``name`` alone, resume) a replay of the log with other settings (operator keys).

        Runs in the service's background; returns the job. Follow it with
        :meth:`replay_status` or :meth:`wait_replay`.
        """
        return self._request("POST", "/v1/replays", json=_replay_body(name, policy, overrides, conversations))

    def wait_replay(self, name: str, *, timeout: float = 600.0, interval: float = 0.2) -> dict[str, Any]:
        """Poll :meth:`replay_status` until the job is no longer running; return the last status.

        Raises ``ServiceUnavailableError`` when it still runs after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            status = self.replay_status(name)
            if (status.get("job") or {}).get("state") != "running":
                return status
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(0, "Timeout", f"replay {name!r} still running after {timeout}s")
            time.sleep(interval)

    def replay_status(self, name: str) -> dict[str, Any]:
        """Return a replay's manifest (status, head, stats) and its job (progress, report or error)."""
        return self._request("GET", f"/v1/replays/{quote(name, safe='')}")

    def replays(self) -> list[dict[str, Any]]:
        """Return every replay namespace of the service's data dir (operator keys)."""
        return self._request("GET", "/v1/replays")["replays"]

    def drop_replay(self, name: str) -> None:
        """Delete a replay namespace; the live projection is untouched."""
        self._request("DELETE", f"/v1/replays/{quote(name, safe='')}")

    def promote(self, name: str) -> dict[str, Any]:
        """Make a replay's settings live for every tenant; returns once reads use them."""
        return self._request("POST", f"/v1/replays/{quote(name, safe='')}/promote")

    def diff(self, name: str, *, conversation_id: str | None = None, budget: int | None = None,
             questions: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Compare replay ``name`` with live, per conversation (all, or one of the key's tenant), with totals.

        ``questions``: ``{"question", "answer", "conversation_id"?}`` mappings
        (the conversation defaults to ``conversation_id``); each side then
        reports the answer-content recall of its contexts for them.
        """
        method, path, options = _diff_call(name, conversation_id, budget, questions)
        return self._request(method, path, **options)

    def verify(self, conversation_id: str | None = None) -> dict[str, Any]:
        """Fold the log again and compare with the live projection: the whole data dir (operator keys) or one
        conversation of the key's tenant (admin keys). ``identical`` is True when nothing differs."""
        path = _conv(conversation_id) + "/verify" if conversation_id is not None else "/v1/verify"
        return self._request("POST", path)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client` (same methods, awaited)."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.2, transport: httpx.AsyncBaseTransport | None = None,
                 limits: httpx.Limits | None = None):
        super().__init__(url, api_key, timeout, max_retries, backoff)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=timeout, transport=transport,
                                       limits=limits or httpx.Limits(max_connections=100))

    async def _request(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = await self._http.request(method, path, **kw)
                if response.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    return self._result(response)
            except httpx.TransportError as exc:
                if attempt == self.max_retries:
                    raise _unreachable(self.url, exc) from exc
            await _sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")

    async def append(self, conversation_id: str, messages: Iterable[Mapping[str, Any]], *, wait: bool = True,
                     format: str = "openai", user_id: str | None = None) -> list[Appended]:
        """See :meth:`Client.append`."""
        body = await self._request("POST", _conv(conversation_id) + "/messages",
                                   json=_messages_body(messages, format, user_id), params=_params(wait=wait))
        return [Appended.model_validate(m) for m in body["messages"]]

    async def add(self, conversation_id: str, role: str, content: str, **fields: Any) -> Appended:
        """See :meth:`Client.add`."""
        return (await self.append(conversation_id, [{"role": role, "content": content, **fields}]))[0]

    async def messages(self, conversation_id: str, *, start: int = 0, limit: int = 1000) -> list[Message]:
        """See :meth:`Client.messages`."""
        body = await self._request("GET", _conv(conversation_id) + "/messages", params=_params(start=start, limit=limit))
        return [Message.model_validate(m) for m in body["messages"]]

    async def context(self, conversation_id: str, *, budget: int | None = None, query: str | None = None,
                      policy: str | None = None, as_of: str | datetime | None = None) -> Context:
        """See :meth:`Client.context`."""
        body = await self._request("GET", _conv(conversation_id) + "/context", params=_params(
            budget=budget, query=query, policy=policy, as_of=_when(as_of), format="compact"))
        return Context.model_validate(body)

    async def prompt(self, conversation_id: str, *, format: str = "openai", budget: int | None = None,
                     query: str | None = None, policy: str | None = None,
                     as_of: str | datetime | None = None) -> Prompt:
        """See :meth:`Client.prompt`."""
        body = await self._request("GET", _conv(conversation_id) + "/context", params=_params(
            budget=budget, query=query, policy=policy, as_of=_when(as_of), format=_shaped(format)))
        return Prompt.model_validate(body)

    async def retract(self, conversation_id: str, message_id: str, *, reason: str | None = None) -> None:
        """See :meth:`Client.retract`."""
        await self._request("DELETE", f"{_conv(conversation_id)}/messages/{quote(message_id, safe='')}",
                            params=_params(reason=reason))

    async def forget(self, conversation_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """See :meth:`Client.forget`."""
        return await self._request("DELETE", _conv(conversation_id), params=_params(reason=reason))

    async def reopen(self, conversation_id: str) -> dict[str, Any]:
        """See :meth:`Client.reopen`."""
        return await self._request("POST", _conv(conversation_id) + "/reopen")

    async def summaries(self, conversation_id: str, *, policy: str | None = None) -> list[dict[str, Any]]:
        """See :meth:`Client.summaries`."""
        return (await self._request("GET", _conv(conversation_id) + "/summaries", params=_params(policy=policy)))["summaries"]

    async def facts(self, conversation_id: str, *, policy: str | None = None) -> list[dict[str, Any]]:
        """See :meth:`Client.facts`."""
        return (await self._request("GET", _conv(conversation_id) + "/facts", params=_params(policy=policy)))["facts"]

    async def audit(self, conversation_id: str) -> dict[str, Any]:
        """See :meth:`Client.audit`."""
        return await self._request("GET", _conv(conversation_id) + "/audit")

    async def user_memory(self, user_id: str, *, policy: str | None = None,
                          as_of: str | datetime | None = None) -> dict[str, Any]:
        """See :meth:`Client.user_memory`."""
        return await self._request("GET", _user(user_id) + "/memory",
                                   params=_params(policy=policy, as_of=_when(as_of)))

    async def search_user(self, user_id: str, query: str, *, limit: int = 10) -> list[dict[str, Any]]:
        """See :meth:`Client.search_user`."""
        return (await self._request("POST", _user(user_id) + "/search", json={"query": query, "limit": limit}))["hits"]

    async def audit_user(self, user_id: str) -> dict[str, Any]:
        """See :meth:`Client.audit_user`."""
        return await self._request("GET", _user(user_id) + "/audit")

    async def forget_user(self, user_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """See :meth:`Client.forget_user`."""
        return await self._request("DELETE", _user(user_id), params=_params(reason=reason))
    async def search(self, query: str, *, conversation_ids: list[str] | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """See :meth:`Client.search`."""
        body = _search_body(query, conversation_ids, limit, None, None)
        return (await self._request("POST", "/v1/search", json=body))["hits"]

    async def search_page(self, query: str, *, cursor: str | None = None, conversations: int | None = None,
                          conversation_ids: list[str] | None = None, limit: int = 10) -> SearchPage:
        """See :meth:`Client.search_page`."""
        body = _search_body(query, conversation_ids, limit, conversations, cursor)
        return SearchPage.model_validate(await self._request("POST", "/v1/search", json=body))

    async def search_pages(self, query: str, *, conversations: int | None = None,
                           limit: int = 10) -> AsyncIterator[SearchPage]:
        """See :meth:`Client.search_pages`."""
        cursor = None
        while True:
            page = await self.search_page(query, cursor=cursor, conversations=conversations, limit=limit)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def search_all(self, query: str, *, limit: int = 10, conversations: int | None = 100) -> list[SearchHit]:
        """See :meth:`Client.search_all`."""
        hits: list[SearchHit] = []
        async for page in self.search_pages(query, conversations=conversations, limit=limit):
            hits = _best(hits + page.hits, limit)
        return hits

    async def conversations(self, *, limit: int = 100, offset: int = 0) -> list[Conversation]:
        """See :meth:`Client.conversations`."""
        body = await self._request("GET", "/v1/conversations", params=_params(limit=limit, offset=offset))
        return [Conversation.model_validate(c) for c in body["conversations"]]

    async def sql(self, query: str, *, limit: int = 10_000) -> SqlResult:
        """See :meth:`Client.sql`."""
        return SqlResult.model_validate(await self._request("POST", "/v1/sql", json={"query": query, "limit": limit}))

    async def me(self) -> Identity:
        """See :meth:`Client.me`."""
        return Identity.model_validate(await self._request("GET", "/v1/me"))

    async def replay(self, name: str, *, policy: str | None = None, overrides: Mapping[str, Any] | None = None,
                     conversations: list[str] | None = None) -> dict[str, Any]:
        """See :meth:`Client.replay`."""
        return await self._request("POST", "/v1/replays", json=_replay_body(name, policy, overrides, conversations))

    async def wait_replay(self, name: str, *, timeout: float = 600.0, interval: float = 0.2) -> dict[str, Any]:
        """See :meth:`Client.wait_replay`."""
        deadline = time.monotonic() + timeout
        while True:
            status = await self.replay_status(name)
            if (status.get("job") or {}).get("state") != "running":
                return status
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(0, "Timeout", f"replay {name!r} still running after {timeout}s")
            await _sleep(interval)

    async def replay_status(self, name: str) -> dict[str, Any]:
        """See :meth:`Client.replay_status`."""
        return await self._request("GET", f"/v1/replays/{quote(name, safe='')}")

    async def replays(self) -> list[dict[str, Any]]:
        """See :meth:`Client.replays`."""
        return (await self._request("GET", "/v1/replays"))["replays"]

    async def drop_replay(self, name: str) -> None:
        """See :meth:`Client.drop_replay`."""
        await self._request("DELETE", f"/v1/replays/{quote(name, safe='')}")

    async def promote(self, name: str) -> dict[str, Any]:
        """See :meth:`Client.promote`."""
        return await self._request("POST", f"/v1/replays/{quote(name, safe='')}/promote")

    async def diff(self, name: str, *, conversation_id: str | None = None, budget: int | None = None,
                   questions: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """See :meth:`Client.diff`."""
        method, path, options = _diff_call(name, conversation_id, budget, questions)
        return await self._request(method, path, **options)

    async def verify(self, conversation_id: str | None = None) -> dict[str, Any]:
        """See :meth:`Client.verify`."""
        path = _conv(conversation_id) + "/verify" if conversation_id is not None else "/v1/verify"
        return await self._request("POST", path)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _sleep(seconds: float) -> None:
    """``asyncio.sleep``; asyncio (~20 ms to import) stays off the synchronous client's import (the CLI's ``--url``)."""
    import asyncio

    await asyncio.sleep(seconds)
