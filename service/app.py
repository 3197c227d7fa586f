"""The HTTP service's app: one process owns the engine (the projection writer); every request goes through it.

``create_app(engine, keys, limits)`` wires routes, API-key auth, limits,
error bodies and metrics, plus the two things that keep the hot paths off
the projection: group commit of appends (:mod:`.appender`) and reuse of
rendered contexts (:mod:`.context_cache`, answered before routing by
:mod:`.fastpath`); ``close_app`` stops the appender and the append validators. Every error answers ``{"error": {"type",
"message", "field"?, "line"?}}``; memfold's own errors keep their names.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline

from memfold.engine.errors import (
    AlreadyRetractedError,
    ConfigError,
    ConversationForgottenError,
    ErasureIncompleteError,
    EventConflictError,
    LogUnavailableError,
    MemfoldError,
    MessageTooLargeError,
    ProjectionLagTimeout,
    SqlTimeoutError,
    UnknownConversationError,
    UnknownMessageError,
    UnknownReplayError,
    UnknownUserError,
    UserConflictError,
    ValidationError,
)
from memfold.service.appender import GroupAppender
from memfold.service.context_cache import ContextCache
from memfold.service.keys import ApiKey, ApiKeyStore
from memfold.service.limits import BodySizeLimit, Limits, RateLimiter
from memfold.service.metrics import ServiceMetrics

log = logging.getLogger("memfold.service")


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


def _error(status: int, kind: str, message: str, *, field=None, line=None, headers=None) -> JSONResponse:
    body = {"type": kind, "message": message}
    if field is not None:
        body["field"] = field
    if line is not None:
        body["line"] = line
    return JSONResponse({"error": body}, status_code=status, headers=headers)


_HTTP_KINDS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 408: "Timeout", 409: "Conflict",
               410: "Gone", 413: "PayloadTooLarge", 429: "RateLimited"}


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return _error(exc.status_code, _HTTP_KINDS.get(exc.status_code, "HTTPError"), str(exc.detail),
                      headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}" for e in exc.errors()[:5]
        )
        return _error(422, "ValidationError", f"malformed request: {problems}", field=where or None)

    @app.exception_handler(MemfoldError)
    async def memfold_error(request: Request, exc: MemfoldError):
        kind = type(exc).__name__
        if isinstance(exc, (EventConflictError, AlreadyRetractedError, UserConflictError)):
            return _error(409, kind, str(exc), field=exc.field, line=exc.line)
        if isinstance(exc, SqlTimeoutError):
            return _error(408, kind, str(exc), field=exc.field)
        if isinstance(exc, ConversationForgottenError):  # before ValidationError: it is one
            return _error(410, kind, str(exc), field=exc.field, line=exc.line)
        if isinstance(exc, ErasureIncompleteError):
            return _error(503, kind, str(exc), headers={"Retry-After": "5"})
        if isinstance(exc, (UnknownReplayError, UnknownConversationError, UnknownMessageError, UnknownUserError)):
            return _error(404, kind, str(exc), field=exc.field)
        if isinstance(exc, MessageTooLargeError):
            return _error(413, kind, str(exc), field=exc.field, line=exc.line)
        if isinstance(exc, ValidationError):
            return _error(422, kind, str(exc), field=exc.field, line=exc.line)
        if isinstance(exc, ConfigError):
            return _error(422, kind, str(exc))
        if isinstance(exc, ProjectionLagTimeout):
            return _error(504, kind, str(exc))
        if isinstance(exc, LogUnavailableError):
            return _error(503, kind, str(exc), headers={"Retry-After": "1"})
        return _error(500, kind, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, "InternalError", f"unexpected {type(exc).__name__}; the service log has the details")


class _RequestMetrics:
    """ASGI middleware timing every request by its route template (not its raw path: ids stay out of labels)."""

    def __init__(self, app, metrics: ServiceMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            # path_format drops converters ({conversation_id:path} -> {conversation_id}): labels stay as dashboards know them
            template = getattr(route, "path_format", None) or getattr(route, "path", "unmatched")
            self.metrics.requests.labels(template, scope["method"], str(status[0])).observe(time.perf_counter() - started)


def operation_id(route: APIRoute) -> str:
    """Return a route's OpenAPI operationId: its function's name in camelCase (``get_context`` -> ``getContext``)."""
    first, *rest = route.name.split("_")
    return first + "".join(w.capitalize() for w in rest)


def create_app(engine, keys: ApiKeyStore, limits: Limits | None = None) -> FastAPI:
    """Return the service app over a running ``engine`` and the data dir's ``keys``."""
    from memfold.service.replays import ReplayJobs
    from memfold.service.replays import router as replays_router
    from memfold.service.routes import router
    from memfold.service.ui import router as ui_router

    limits = limits or Limits()
    app = FastAPIOffline(  # /docs and /redoc load their scripts from this service, not a CDN
        static_url="/docs-assets",
        generate_unique_id_function=operation_id,
        title="memfold",
        summary="Event-sourced conversation memory over HTTP.",
        description="Append messages, read the context for the next model call, inspect how memory evolved. "
        "Every /v1 route needs an API key (`Authorization: Bearer <key>` or `X-API-Key`); the tenant "
        "comes from the key.",
        version="0.1.0",
    )
    metrics = ServiceMetrics(engine)
    app.state.memfold = Services(engine, keys, limits, RateLimiter(limits.rate, limits.burst), metrics,
                                 GroupAppender(engine, on_group=metrics.append_groups.inc), ContextCache(engine),
                                 ReplayJobs(engine))
    _install_error_handlers(app)
    app.include_router(router)
    app.include_router(replays_router)
    app.include_router(ui_router)

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict:  # async: no thread-pool hop for a probe
        """Answer 200 while the engine is open (no key needed)."""
        return {"status": "ok"}

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def prometheus_metrics() -> Response:
        """Prometheus text format: ingest, projector lag, summary queue, summarizer outcomes, latencies (no key needed)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    from memfold.service.fastpath import ContextFastPath

    context_route = next(r for r in router.routes if r.path == "/v1/conversations/{conversation_id:path}/context")
    app.add_middleware(ContextFastPath, services=app.state.memfold, route=context_route)  # inside the metrics
    app.add_middleware(_RequestMetrics, metrics=metrics)
    app.add_middleware(BodySizeLimit, limit=limits.max_body_bytes)
    return app


def close_app(app: FastAPI) -> None:
    """Write the appends still queued and stop the appender and the validators (before the engine closes)."""
    app.state.memfold.validator.shutdown(wait=True)
    app.state.memfold.appender.close()
