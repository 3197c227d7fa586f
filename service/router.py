"""ASGI middleware routing reads across shard nodes: a conversation's requests to its owner, tenant-wide ones to all.

A ``memfold serve`` shard node folds some partitions only
(:mod:`memfold.engine.sharding`). Every request naming a conversation
(``/v1/conversations/{id}/...``) is answered by the node that folds the
conversation's partition (``murmur2(tenant/conversation)``, the tenant
being the API key's):

- owned here: served here, unchanged;
- owned elsewhere: forwarded to the owner named by the node directory
  (:mod:`memfold.streams.shard_directory`) with the caller's headers, and
  its answer returned (``X-Memfold-Served-By`` names the node);
- a forwarded request is never forwarded again: a node asked about a
  partition it does not own (a move in progress, a stale directory)
  answers 421, and the router tries again, reading the directory anew,
  until the move settles or ``retry_s`` passes (then 503 with
  ``Retry-After``). No node ever answers from rows a move left behind.

Tenant-wide reads fan out: ``GET /v1/conversations`` and ``POST /v1/search``
go to one owner of every partition (this node for its own) and the answers
are merged: conversations by recency, search hits by score, the search page
bounded so that it is the same page a single node would give. A partition
with no live owner makes the read wait like a move, then 503: a merged
answer never silently leaves conversations out.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx

from memfold.core.errors import LogUnavailableError
from memfold.core.events import conversation_key
from memfold.core.partitioner import partition_for

log = logging.getLogger("memfold.router")

FORWARDED = b"x-memfold-forwarded"  # set on a forwarded request: the receiver answers itself or refuses (421)
SERVED_BY = b"x-memfold-served-by"
SEARCHED = b"x-memfold-searched"  # a node's search answer: the conversation ids it searched (for the merge)
_PREFIX = "/v1/conversations/"
_SUFFIXES = ("/messages", "/context", "/summaries", "/facts", "/audit", "/reopen", "/verify")
_HOP = {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade"}


def conversation_of(method: str, path: str) -> str | None:
    """Return the conversation a ``/v1/conversations/...`` path names (as the routes split it), else None."""
    if not path.startswith(_PREFIX):
        return None
    rest = path[len(_PREFIX):]
    if method == "DELETE" and "/messages/" in rest:
        rest = rest.split("/messages/", 1)[0]
    else:
        for suffix in _SUFFIXES:
            if rest.endswith(suffix):
                rest = rest[: -len(suffix)]
                break
    return rest or None


@dataclass(frozen=True)
class Routing:
    """What a shard node's router needs: the node directory, the topic's partition count, this node's partitions now."""

    directory: Any  # memfold.streams.shard_directory.ShardDirectory
    partition_count: int
    owned: Callable[[], set[int]]

    def owns(self, tenant_id: str, conversation_id: str) -> bool:
        """True when this node serves the conversation now."""
        return partition_for(conversation_key(tenant_id, conversation_id), self.partition_count) in self.owned()


class ShardRouter:
    """Wrap the app; see the module docstring."""

    def __init__(self, app, *, services, routing: Routing, retry_s: float = 15.0, timeout_s: float = 60.0):
        self.app = app
        self.services = services
        self.directory = routing.directory
        self.partition_count = routing.partition_count
        self.owned = routing.owned
        self.retry_s = retry_s
        self._client = httpx.AsyncClient(timeout=timeout_s)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        forwarded = FORWARDED in headers
        method, path = scope["method"], scope["path"]
        conversation = conversation_of(method, path)
        tenant = self._tenant(scope) if (conversation is not None or path in ("/v1/conversations", "/v1/search")) else None
        if tenant is None:  # no key, a bad one, or not a routed path: the app answers (401 and so on)
            return await self.app(scope, receive, send)
        if conversation is not None:
            partition = partition_for(conversation_key(tenant, conversation), self.partition_count)
            if partition in self.owned():
                return await self.app(scope, receive, send)
            if forwarded:
                return await _answer(send, 421, {"error": {"type": "PartitionNotOwned", "message":
                                     f"this node does not serve partition {partition} (now); ask the router again"}})
            body = await _body(receive)
            return await self._forward(scope, send, partition, body)
        if forwarded:  # one node's part of a fan-out: the app answers for this node's partitions only
            return await self.app(scope, receive, send)
        if method == "GET" and path == "/v1/conversations":
            return await self._fan_out_list(scope, send)
        if method == "POST" and path == "/v1/search":
            return await self._fan_out_search(scope, send, await _body(receive))
        return await self.app(scope, receive, send)

    def _tenant(self, scope) -> str | None:
        presented = _presented(scope)
        try:
            key = self.services.keys.authenticate(presented) if presented else None
        except LogUnavailableError:  # the shared key store is stale: the app answers 503
            return None
        return key.tenant_id if key is not None else None

    # ------------------------------------------------------------------ one conversation

    async def _forward(self, scope, send, partition: int, body: bytes) -> None:
        """Send the request to the partition's owner; retry while the partition moves (421, refused connection)."""
        deadline = time.monotonic() + self.retry_s
        last = "no node serves it"
        while True:
            if partition in self.owned():  # it moved here meanwhile
                return await self.app(scope, _replay(body), send)
            entry = self.directory.owner(partition, besides=self.directory.node_id)
            if entry is not None:
                try:
                    status, headers, content = await self._call(entry.url, scope, body)
                except httpx.TransportError as exc:
                    last = f"{entry.url} did not answer ({type(exc).__name__})"
                else:
                    if status != 421:
                        return await _send(send, status, headers + [(SERVED_BY, entry.url.encode())], content)
                    last = f"{entry.url} no longer serves it"
            if time.monotonic() >= deadline:
                return await _answer(send, 503, {"error": {"type": "PartitionMoving", "message":
                                     f"partition {partition} has no serving node yet ({last}); retry shortly"}},
                                     headers=[(b"retry-after", b"1")])
            await asyncio.sleep(0.1)

    async def _call(self, url: str, scope, body: bytes, query: bytes | None = None) -> tuple[int, list, bytes]:
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP]
        headers.append((FORWARDED, self.directory.node_id.encode()))
        raw = scope.get("raw_path") or scope["path"].encode()
        qs = scope.get("query_string", b"") if query is None else query
        target = url.rstrip("/") + raw.decode("latin-1") + (("?" + qs.decode("latin-1")) if qs else "")
        response = await self._client.request(scope["method"], target, headers=headers, content=body)
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
               if k.encode("latin-1") not in _HOP and k.lower() != "content-encoding"]
        return response.status_code, out, response.content

    # ------------------------------------------------------------------ fan-out

    async def _parts(self, scope, body: bytes, query: bytes | None = None) -> list[tuple[int, dict[bytes, bytes], bytes]]:
        """Ask one owner of every partition (this node for its own); wait like a move while one has none."""
        deadline = time.monotonic() + self.retry_s
        while True:
            mine = self.owned()
            urls: dict[str, None] = {}
            missing = []
            for p in range(self.partition_count):
                if p in mine:
                    continue
                entry = self.directory.owner(p, besides=self.directory.node_id)
                if entry is None:
                    missing.append(p)
                else:
                    urls[entry.url] = None
            if not missing:
                calls = [self._call(url, scope, body, query) for url in urls]
                if mine:
                    calls.append(self._local(scope, body, query))
                try:
                    answers = await asyncio.gather(*calls)
                except httpx.TransportError:
                    answers = None
                if answers is not None and all(status != 421 for status, _, _ in answers):
                    return [(s, dict(h), c) for s, h, c in answers]
            if time.monotonic() >= deadline:
                raise _Unrouted(missing)
            await asyncio.sleep(0.1)

    async def _local(self, scope, body: bytes, query: bytes | None) -> tuple[int, list, bytes]:
        local = dict(scope)
        local["headers"] = [*scope["headers"], (FORWARDED, self.directory.node_id.encode())]
        if query is not None:
            local["query_string"] = query
        status, headers, chunks = 0, [], []

        async def capture(message):
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status, headers = message["status"], list(message.get("headers") or [])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(local, _replay(body), capture)
        return status, headers, b"".join(chunks)

    async def _fan_out_list(self, scope, send) -> None:
        params = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            limit = int(params.get("limit", ["100"])[0])
            offset = int(params.get("offset", ["0"])[0])
        except ValueError:
            return await self.app(scope, _replay(b""), send)  # the route answers 422
        if not 1 <= limit <= 1000 or offset < 0:
            return await self.app(scope, _replay(b""), send)  # the route answers 422
        # The merged page needs each node's first offset + limit rows: asked for in pages of at most 1,000.
        rows: dict[str, dict[str, Any]] = {}
        needed, start = offset + limit, 0
        while start < needed:
            ask = min(1000, needed - start)
            try:
                parts = await self._parts(scope, b"", urlencode({"limit": ask, "offset": start}).encode())
            except _Unrouted as exc:
                return await exc.answer(send)
            failed = next((p for p in parts if p[0] != 200), None)
            if failed is not None:
                return await _send(send, failed[0], list(failed[1].items()), failed[2])
            pages = [json.loads(content)["conversations"] for _, _, content in parts]
            for page in pages:
                for row in page:
                    rows.setdefault(row["conversation_id"], row)
            if all(len(page) < ask for page in pages):
                break
            start += ask
        ordered = sorted(rows.values(), key=lambda r: (r["conversation_id"]))
        ordered.sort(key=lambda r: r["last_at"] or "", reverse=True)  # stable: ties keep id order, as one node's SQL
        return await _answer(send, 200, {"conversations": ordered[offset: offset + limit]})

    async def _fan_out_search(self, scope, send, body: bytes) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return await self.app(scope, _replay(body), send)  # the route answers 422
        try:
            parts = await self._parts(scope, body)
        except _Unrouted as exc:
            return await exc.answer(send)
        failed = next((p for p in parts if p[0] != 200), None)
        if failed is not None:
            return await _send(send, failed[0], list(failed[1].items()), failed[2])
        answers = [(json.loads(content), _searched(headers)) for _, headers, content in parts]
        limit = int(request.get("limit") or 10)
        if request.get("conversation_ids"):
            hits = [h for answer, _ in answers for h in answer["hits"]]
            merged = {"query": request.get("query"), "next_cursor": None,
                      "conversations": sum(a["conversations"] for a, _ in answers)}
        else:
            # Each node searched its own next page of ids. The merged page ends at the smallest last id of
            # a node that has more: past it, another node's ids are not searched yet. A node whose page went
            # past that bound is asked again for its ids up to it, so its hits are ranked over exactly those.
            # The page is then the first ``conversations`` ids up to that bound, as one node would have it.
            cut = min((ids[-1] for a, ids in answers if a["next_cursor"] is not None and ids), default=None)
            candidates = sorted({i for _, ids in answers for i in ids if cut is None or i <= cut})
            size = int(request.get("conversations") or 20)
            page = candidates[:size]
            more = cut is not None or len(candidates) > size
            bound = page[-1] if more and page else None
            hits, count = [], 0
            for answer, ids in answers:
                kept = [i for i in ids if bound is None or i <= bound]
                count += len(kept)
                if len(kept) == len(ids):
                    hits += answer["hits"]
                elif kept:
                    again = dict(request, conversation_ids=kept, cursor=None)
                    hits += await self._search_again(scope, again, kept)
            merged = {"query": request.get("query"), "conversations": count,
                      "next_cursor": None if bound is None else _cursor(bound)}
        hits.sort(key=lambda h: (-h["score"], h["conversation_id"], h["index"]))
        merged["hits"] = hits[:limit]
        return await _answer(send, 200, merged)

    async def _search_again(self, scope, request: dict, ids: list[str]) -> list[dict]:
        body = json.dumps(request).encode()
        parts = await self._parts(scope, body)
        return [h for status, _, content in parts if status == 200 for h in json.loads(content)["hits"]]

    async def aclose(self) -> None:
        await self._client.aclose()


class _Unrouted(Exception):
    def __init__(self, missing: list[int]):
        self.missing = missing

    async def answer(self, send) -> None:
        await _answer(send, 503, {"error": {"type": "PartitionMoving", "message":
                      f"partitions {self.missing} have no serving node yet; retry shortly"}},
                      headers=[(b"retry-after", b"1")])


def _searched(headers: dict[bytes, bytes]) -> list[str]:
    raw = headers.get(SEARCHED)
    if not raw:
        return []
    return json.loads(base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4)))


def searched_header(ids: list[str]) -> str:
    """Return the ``X-Memfold-Searched`` value naming the conversation ids a search page searched, in id order."""
    return base64.urlsafe_b64encode(json.dumps(sorted(ids)).encode("utf-8")).decode("ascii").rstrip("=")


def _cursor(conversation_id: str) -> str:
    return base64.urlsafe_b64encode(conversation_id.encode("utf-8")).decode("ascii").rstrip("=")


def _presented(scope) -> str | None:
    auth = xkey = None
    for name, value in scope["headers"]:
        if name == b"authorization" and auth is None:
            auth = value
        elif name == b"x-api-key" and xkey is None:
            xkey = value
    if auth is not None and auth[:7].lower() == b"bearer ":
        return auth[7:].strip().decode("latin-1")
    return xkey.decode("latin-1") if xkey is not None else None


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # nothing more: the app only waits here for a disconnect
        return {"type": "http.disconnect"}

    return receive


async def _send(send, status: int, headers: list, content: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(content)).encode())]})
    await send({"type": "http.response.body", "body": content})


async def _answer(send, status: int, body: dict, headers: list | None = None) -> None:
    await _send(send, status, [(b"content-type", b"application/json"), *(headers or [])],
                json.dumps(body).encode("utf-8"))
