"""What every route depends on: the app's services and the API key a request presents, checked for a permission."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from memfold.service.appender import GroupAppender
from memfold.service.context_cache import ContextCache
from memfold.service.keys import ApiKey, ApiKeyStore
from memfold.service.limits import Limits, RateLimiter
from memfold.service.metrics import ServiceMetrics


@dataclass
class Services:
    """What the routes use, kept on ``app.state.memfold``."""

    engine: object
    keys: ApiKeyStore
    limits: Limits
    limiter: RateLimiter
    metrics: ServiceMetrics
    appender: GroupAppender
    contexts: ContextCache
    replays: object = None  # replays.ReplayJobs (imported with the routes)
    # A shard node: (tenant, conversation) -> served here now; None when every partition is (router.Routing.owns).
    owns: Callable[[str, str], bool] | None = None
    # Appends are validated here, not in the thread pool the reads use: fifty clients appending at once
    # then keep two threads busy, not forty, and a context read does not queue behind them for the GIL.
    validator: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=2, thread_name_prefix="memfold-validate"))


def services(request: Request) -> Services:
    return request.app.state.memfold


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


# Declared for the OpenAPI document only (its security schemes, so /docs' "Authorize" can send a key):
# the key itself is read by _presented_key, which also answers the fast path.
_BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="Authorization: Bearer mf_<id>_<secret>")
_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="apiKey", description="X-API-Key: mf_<id>_<secret>")
_Documented = Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
_DocumentedHeader = Annotated[str | None, Security(_HEADER)]
_ROLE_FOR = {"read": "a reader", "write": "a writer", "forget": "an admin", "admin": "an admin", "operate": "an operator"}


def require(permission: str):
    """Return a dependency that authenticates the request's key and checks ``permission`` and the rate.

    It runs on the event loop (async, no thread hop): a known key is a
    dictionary hit (:meth:`ApiKeyStore.authenticate`), the rate a lock.
    """

    async def dependency(request: Request, _bearer: _Documented, _header: _DocumentedHeader) -> ApiKey:
        svc: Services = request.app.state.memfold
        presented = _presented_key(request)
        key = svc.keys.authenticate(presented) if presented else None
        if key is None:
            svc.metrics.rejected.labels("unauthenticated").inc()
            raise HTTPException(
                401, "missing, unknown or revoked API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not key.allows(permission):
            svc.metrics.rejected.labels("forbidden").inc()
            raise HTTPException(403, f"this key's role ({key.role}) may not {permission}; {_ROLE_FOR[permission]} key "
                                     "(or one of a role above it) is needed")
        wait = svc.limiter.take(key.key_id)
        if wait:
            svc.metrics.rejected.labels("rate").inc()
            raise HTTPException(
                429, f"too many requests for this key (limit {svc.limits.rate:g}/s, burst {svc.limits.burst}); "
                f"retry after {wait:.2f}s", headers={"Retry-After": f"{max(1, round(wait))}"},
            )
        return key

    return dependency


Reader = Annotated[ApiKey, Depends(require("read"))]
Writer = Annotated[ApiKey, Depends(require("write"))]
Admin = Annotated[ApiKey, Depends(require("admin"))]
Forgetter = Annotated[ApiKey, Depends(require("forget"))]
Operator = Annotated[ApiKey, Depends(require("operate"))]
