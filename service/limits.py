"""Request limits: body size (413, checked before the body is read) and a per-key request rate (429)."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Service limits; 0 disables a limit.

    ``max_body_bytes`` bounds one request body, ``max_batch`` the messages of
    one append; ``rate`` and ``burst`` are a token bucket per API key
    (requests per second, bucket size); ``sql_timeout_s`` one /v1/sql statement.
    """

    max_body_bytes: int = 4 * 1024 * 1024
    max_batch: int = 1000
    rate: float = 200.0
    burst: int = 400
    # POST /v1/sql stops a statement running longer (408); env MEMFOLD_SQL_TIMEOUT_S, read when serving starts.
    sql_timeout_s: float = field(default_factory=lambda: float(os.environ.get("MEMFOLD_SQL_TIMEOUT_S", "10")))


class RateLimiter:
    """Token buckets keyed by API key id; :meth:`take` returns 0 or the seconds to wait."""

    def __init__(self, rate: float, burst: int):
        self.rate = rate
        self.burst = max(1, burst)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Spend one token of ``key``'s bucket; return 0.0 if allowed, else the delay until a token is due."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


class BodySizeLimit:
    """ASGI middleware: answer 413 to a body over ``limit`` bytes, before any of it reaches a route.

    A declared ``Content-Length`` over the limit is refused unread. A body
    without one (``Transfer-Encoding: chunked``) is read here, at most
    ``limit`` bytes of it, and handed on once complete: refusing it inside
    the route's own read would surface as the framework's 400 ("error
    parsing the body"), not 413.
    """

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.limit <= 0:
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                return await _too_large(send, int(declared), self.limit)
            return await self.app(scope, receive, send)  # the server reads no more than it declared
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        messages, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see it
                messages.append(message)
                break
            seen += len(message.get("body", b""))
            if seen > self.limit:
                return await _too_large(send, seen, self.limit)
            messages.append(message)
            if not message.get("more_body", False):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


async def _too_large(send, size: int, limit: int) -> None:
    body = json.dumps({"error": {
        "type": "PayloadTooLarge",
        "message": f"request body has {size}+ bytes; the limit is {limit} (memfold serve --max-body-bytes)",
    }}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
