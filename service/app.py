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

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memfold.core.errors import (
    AlreadyRetractedError,
    ConfigError,
    ConversationForgottenError,
    ErasureIncompleteError,
    EventConflictError,
    LogUnavailableError,
    MemfoldError,
    MessageTooLargeError,
    PartitionNotOwnedError,
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
from memfold.service.deps import Services
from memfold.service.fastpath import ContextFastPath
from memfold.service.keys import ApiKeyStore
from memfold.service.limits import BodySizeLimit, Limits, RateLimiter
from memfold.service.metrics import ServiceMetrics
from memfold.service.portability import router as portability_router
from memfold.service.replays import ReplayJobs
from memfold.service.replays import router as replays_router
from memfold.service.router import ShardRouter
from memfold.service.routes import router as routes_router
from memfold.service.ui import router as ui_router

log = logging.getLogger("memfold.service")


def _error(status: int, kind: str, message: str, *, field=None, line=None, headers=None) -> JSONResponse:
    body = {"type": kind, "message": message}
    if field is not None:
        body["field"] = field
    if line is not None:
        body["line"] = line
    return JSONResponse({"error": body}, status_code=status, headers=headers)


_HTTP_KINDS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 408: "Timeout", 409: "Conflict", 421: "Misdirected",
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
        if isinstance(exc, PartitionNotOwnedError):  # a shard node; the router asks the owner (service/router.py)
            return _error(421, kind, str(exc), headers={"Retry-After": "1"})
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


def create_app(engine, keys: ApiKeyStore, limits: Limits | None = None, *, routing=None) -> FastAPI:
    """Return the service app over a running ``engine`` and ``keys``.

    ``routing`` (a :class:`memfold.service.router.Routing`) makes it a shard
    node's app: requests of conversations served elsewhere are forwarded,
    tenant-wide reads fan out (:mod:`memfold.service.router`).
    """
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
    app.include_router(routes_router)
    app.include_router(replays_router)
    app.include_router(portability_router)
    app.include_router(ui_router)

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict:  # async: no thread-pool hop for a probe
        """Answer 200 while the engine is open (no key needed)."""
        return {"status": "ok"}

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def prometheus_metrics() -> Response:
        """Prometheus text format: ingest, projector lag, summary queue, summarizer outcomes, latencies (no key needed)."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    context_route = next(r for r in routes_router.routes if r.path == "/v1/conversations/{conversation_id:path}/context")
    app.add_middleware(ContextFastPath, services=app.state.memfold, route=context_route)  # inside the metrics
    if routing is not None:
        app.state.memfold.owns = routing.owns
        metrics.collector.partitions = routing.owned
        app.add_middleware(ShardRouter, services=app.state.memfold, routing=routing)  # before the fast path
    app.add_middleware(_RequestMetrics, metrics=metrics)
    app.add_middleware(BodySizeLimit, limit=limits.max_body_bytes)
    return app


def close_app(app: FastAPI) -> None:
    """Write the appends still queued and stop the appender and the validators (before the engine closes)."""
    app.state.memfold.validator.shutdown(wait=True)
    app.state.memfold.appender.close()
