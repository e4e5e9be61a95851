"""HTTP errors as RFC 9457 problem+json."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lectern_common.errors import (
    BadInputError,
    ForbiddenError,
    LecternError,
    NotFoundError,
    RetryableError,
)

PROBLEM_JSON = "application/problem+json"


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


_STATUS_BY_ERROR: list[tuple[type[LecternError], int, str]] = [
    (NotFoundError, 404, "Not found"),
    (ForbiddenError, 403, "Forbidden"),
    (BadInputError, 400, "Bad request"),
    (RetryableError, 503, "Service unavailable"),
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
