"""ASGI middleware answering a repeated context read from the cache before FastAPI sees the request.

Routing, dependency solving and parameter validation cost several times
what a cache hit does. A read whose exact query string was validated
before (by the route, which records it with :meth:`ContextCache.alias`)
needs none of that again: this middleware authenticates the key, checks
its role and rate exactly as the route's dependency does, and answers the
cached bytes. Anything else (no or a bad key, a role without read, a rate
limit, an unseen query string, a stale answer) goes to FastAPI unchanged,
which gives the usual answers and errors.
"""

from __future__ import annotations

import time

from memfold.core.errors import LogUnavailableError

_PREFIX, _SUFFIX = "/v1/conversations/", "/context"
_HEADERS = [(b"content-type", b"application/json")]


class ContextFastPath:
    """Wraps the app; ``services`` is the app's :class:`~memfold.service.app.Services`, ``route`` the context route."""

    def __init__(self, app, services, route):
        self.app = app
        self.services = services
        self.route = route

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            path = scope["path"]
            if path.startswith(_PREFIX) and path.endswith(_SUFFIX):
                started = time.perf_counter()
                body = self._cached(scope, path[len(_PREFIX):-len(_SUFFIX)])
                if body is not None:
                    scope["route"] = self.route  # the request metrics label it by its route template
                    await send({"type": "http.response.start", "status": 200,
                                "headers": [*_HEADERS, (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
                    metrics = self.services.metrics
                    metrics.context_cache.labels("hit").inc()
                    metrics.context_seconds.observe(time.perf_counter() - started)
                    return
        await self.app(scope, receive, send)

    def _cached(self, scope, conversation_id: str) -> bytes | None:
        if not conversation_id:
            return None  # ids may hold '/': only an id the route validated has an alias to answer from
        auth = xkey = None  # the first of each, as the route's dependency reads them
        for name, value in scope["headers"]:
            if name == b"authorization" and auth is None:
                auth = value
            elif name == b"x-api-key" and xkey is None:
                xkey = value
        if auth is not None and auth[:7].lower() == b"bearer ":
            presented = auth[7:].strip().decode("latin-1")
        else:
            presented = xkey.decode("latin-1") if xkey is not None else None
        svc = self.services
        try:
            key = svc.keys.authenticate(presented) if presented else None
        except LogUnavailableError:  # the shared key store is stale: the route answers 503
            return None
        if key is None or not key.allows("read"):
            return None
        body = svc.contexts.lookup(key.tenant_id, conversation_id, scope.get("query_string", b""))
        if body is None or svc.limiter.take(key.key_id):
            return None  # a rate-limited read goes on to the route, which answers 429
        return body
