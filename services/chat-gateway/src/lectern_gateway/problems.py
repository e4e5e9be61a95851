"""HTTP errors as RFC 9457 problem+json."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import asyncpg
import nats.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lectern_common.broker import nats_unavailable
from lectern_common.errors import (
    BadInputError,
    ForbiddenError,
    LecternError,
    NatsUnavailableError,
    NotFoundError,
    RetryableError,
)

PROBLEM_JSON = "application/problem+json"
MAX_JSON_BODY_BYTES = 1024 * 1024
_NUL_IN_URL = re.compile(rb"%00|\x00")
# an escaped NUL in JSON: \u0000 after an even number of backslashes (\\u0000 is text)
_NUL_IN_JSON = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000|\x00")

log = logging.getLogger(__name__)


class ProblemError(Exception):
    """Raised by routes to answer with a problem+json body."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        type_: str = "about:blank",
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type_
        self.headers = headers or {}
        self.extra = extra


def problem_response(
    status: int,
    title: str,
    detail: str,
    *,
    instance: str | None = None,
    type_: str = "about:blank",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem+json response."""
    body: dict[str, Any] = {"type": type_, "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


# Postgres is down, restarting, refusing connections or not answering in time: the
# request may succeed later, so 503 with Retry-After (never a hang or a 500). NATS's own
# TimeoutError is also a TimeoutError: ``unavailable`` looks at NATS first
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.OperatorInterventionError,
    asyncpg.TooManyConnectionsError,
    ConnectionError,
    TimeoutError,
)
DATABASE_RETRY_AFTER_S = 5
#: a JetStream election took 4.1-7.4 s in the cluster tests (docs/reliability.md): a client
#: asking again every 2 s is through within 2 s of the new leader, in at most four tries
NATS_RETRY_AFTER_S = 2
#: another service (retriever, re-ranker, a model provider) did not answer in time
UPSTREAM_RETRY_AFTER_S = 5


@dataclass(frozen=True)
class Unavailable:
    """A dependency that failed for now: the reason clients see, and when to ask again."""

    reason: str
    retry_after_s: int
    detail: str


DATABASE = Unavailable(
    "database_unavailable", DATABASE_RETRY_AFTER_S, "the database is unavailable; retry shortly"
)
NATS = Unavailable(
    NatsUnavailableError.reason, NATS_RETRY_AFTER_S,
    "NATS is unavailable (a server restarting or a stream electing its leader); retry shortly",
)  # fmt: skip


def unavailable(exc: BaseException) -> Unavailable | None:
    """Which dependency ``exc`` says is unavailable for now, None when it says something
    else (a bug, bad input). The reason names the real cause: ``nats_unavailable`` (a NATS
    server lost, a stream electing its leader, the quorum lost), ``database_unavailable``
    (Postgres), or the reason of a retryable error (``upstream``: another service or a model
    provider did not answer)."""
    if isinstance(exc, RetryableError):
        hinted = getattr(exc, "retry_after_s", None)
        default = NATS_RETRY_AFTER_S if exc.reason == NatsUnavailableError.reason else None
        wait = math.ceil(hinted) if hinted else default or UPSTREAM_RETRY_AFTER_S
        return Unavailable(exc.reason, max(1, wait), exc.message)
    if nats_unavailable(exc):
        return NATS
    if isinstance(exc, DATABASE_UNAVAILABLE):
        return DATABASE
    return None


def unavailable_response(cause: Unavailable, instance: str | None = None) -> JSONResponse:
    """503 problem+json with ``Retry-After`` for a dependency that failed for now."""
    return problem_response(
        503, "Service unavailable", cause.detail, instance=instance, reason=cause.reason,
        headers={"Retry-After": str(cause.retry_after_s)},
    )  # fmt: skip


_STATUS_BY_ERROR: list[tuple[type[LecternError], int, str]] = [
    (NotFoundError, 404, "Not found"),
    (ForbiddenError, 403, "Forbidden"),
    (BadInputError, 400, "Bad request"),
]


def install_problem_handlers(app: FastAPI) -> None:
    """Map every error to problem+json."""

    @app.exception_handler(ProblemError)
    async def _problem(request: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(
            exc.status, exc.title, exc.detail, instance=request.url.path, type_=exc.type,
            headers=exc.headers, **exc.extra,
        )  # fmt: skip

    @app.exception_handler(LecternError)
    async def _lectern(request: Request, exc: LecternError) -> JSONResponse:
        cause = unavailable(exc)
        if cause is not None:
            log.warning(
                "%s on %s %s: %s", cause.reason, request.method, request.url.path, exc.message
            )
            return unavailable_response(cause, request.url.path)
        for error_type, status, title in _STATUS_BY_ERROR:
            if isinstance(exc, error_type):
                return problem_response(
                    status, title, exc.message, instance=request.url.path, reason=exc.reason
                )
        return problem_response(
            500, "Internal error", exc.message, instance=request.url.path, reason=exc.reason
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return problem_response(
            422, "Invalid request", "the request did not validate", instance=request.url.path,
            errors=errors,
        )  # fmt: skip

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem_response(
            exc.status_code, str(exc.detail), str(exc.detail), instance=request.url.path,
            headers=dict(exc.headers or {}),
        )  # fmt: skip

    @app.exception_handler(asyncpg.DataError)
    async def _data(request: Request, exc: asyncpg.DataError) -> JSONResponse:
        # a value Postgres cannot hold (out of range, a character it cannot store): the
        # caller's fault, said without Postgres's own words
        log.info("rejected a value Postgres cannot store: %s", type(exc).__name__)
        return problem_response(
            400, "Bad request", "a value in the request is out of range or cannot be stored",
            instance=request.url.path, reason="bad_value",
        )  # fmt: skip

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(
            500, "Internal error", "the server failed; the error is logged",
            instance=request.url.path, reason="internal",
        )  # fmt: skip

    async def _dependency(request: Request, exc: Exception) -> JSONResponse:
        cause = unavailable(exc)
        if cause is None:  # a NATS error that is not about availability: a bug
            return await _unexpected(request, exc)
        log.warning(
            "%s on %s %s: %s", cause.reason, request.method, request.url.path,
            type(exc).__name__,
        )  # fmt: skip
        return unavailable_response(cause, request.url.path)

    # Starlette picks the handler of the first class in the error's MRO: NATS's errors
    # (its TimeoutError too) reach ``_dependency`` before the bare TimeoutError does
    dependencies: tuple[type[Exception], ...] = (nats.errors.Error, *DATABASE_UNAVAILABLE)
    for error_type in dependencies:
        app.add_exception_handler(error_type, _dependency)


class RejectNulBytes:
    """ASGI middleware: NUL characters in the query string or a JSON body are refused with
    400 problem+json before any route sees them (Postgres text cannot hold them), and JSON
    bodies larger than ``MAX_JSON_BODY_BYTES`` with 413. Uploads (multipart) pass through;
    their text fields are checked by the upload route."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _NUL_IN_URL.search(scope.get("query_string", b"")) or "\x00" in scope.get("path", ""):
            await _send_problem(scope, send, 400, "a NUL character in the URL")
            return
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if not content_type.endswith(b"json"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > MAX_JSON_BODY_BYTES:
                await _send_problem(
                    scope, send, 413, f"a JSON body over {MAX_JSON_BODY_BYTES} bytes"
                )
                return
            chunks.append(body)
            if not message.get("more_body"):
                break
        data = b"".join(chunks)
        if _NUL_IN_JSON.search(data):
            await _send_problem(scope, send, 400, "a NUL character (\\u0000) in the JSON body")
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _send_problem(scope: Any, send: Any, status: int, detail: str) -> None:
    response = problem_response(
        status, "Bad request" if status == 400 else "Request too large", detail,
        instance=scope.get("path"), reason="bad_input" if status == 400 else "too_large",
    )  # fmt: skip
    await response(scope, _no_receive, send)


async def _no_receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}
