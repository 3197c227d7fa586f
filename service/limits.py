"""Request limits: body size (413, checked before the body is read) and a per-key request rate (429)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
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
    """Token buckets keyed by API key id; :meth:`take` returns 0 or the seconds to wait.

    ``share(key)`` is the fraction of ``rate`` (and ``burst``) this process
    may grant the key: 1 alone; less when service replicas split a key's
    limit between them (:class:`ReplicaShares`). Granted requests are
    counted per key for :meth:`granted`.
    """

    def __init__(self, rate: float, burst: int, *, share: Callable[[str], float] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = max(1, burst)
        self.share = share
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._granted: dict[str, int] = {}
        self._since = clock()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Spend one token of ``key``'s bucket; return 0.0 if allowed, else the delay until a token is due."""
        if self.rate <= 0:
            return 0.0
        fraction = 1.0 if self.share is None else self.share(key)
        rate, burst = self.rate * fraction, max(1.0, self.burst * fraction)
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                self._granted[key] = self._granted.get(key, 0) + 1
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / rate

    def granted(self, top: int = 500) -> dict[str, float]:
        """Return the requests per second granted to each key since the last call (the ``top`` busiest), and reset."""
        now = self._clock()
        with self._lock:
            counts, self._granted = self._granted, {}
            elapsed, self._since = max(1e-3, now - self._since), now
        busiest = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return {k: round(n / elapsed, 3) for k, n in busiest}


class ReplicaShares:
    """Split each key's rate between the ``memfold serve`` replicas of a Kafka deployment.

    Every replica publishes, with its node-directory heartbeat, the rate it
    granted each busy key over the last beat (:meth:`RateLimiter.granted`).
    A replica then grants a key ``rate - (what the others granted it)``, and
    never less than ``rate / N`` (N replicas alive), so a key whose requests
    all land on one replica (one keep-alive connection) still gets the whole
    rate, and one spread over N replicas gets it split between them.

    Tolerance: the others' rates are at most two heartbeats old (2 s by
    default). In a steady state a key's requests across all replicas stay
    within ``rate`` plus each replica's ``burst`` share; for up to two
    heartbeats after its traffic moves between replicas (or when N changes)
    it can get up to ``N x rate``.
    """

    def __init__(self, directory, rate: float):
        self.directory = directory
        self.rate = rate

    def __call__(self, key: str) -> float:
        live = self.directory.live()
        others = sum(float((e.extra.get("load") or {}).get(key, 0.0)) for e in live if e.node != self.directory.node_id)
        if self.rate <= 0:
            return 1.0
        floor = 1.0 / max(1, len(live))
        return min(1.0, max(floor, 1.0 - others / self.rate))


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
