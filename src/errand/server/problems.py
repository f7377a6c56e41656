"""Errors as ``application/problem+json`` (RFC 9457), with the statuses of :mod:`errand.server.codes`.

A problem carries ``status``, ``title`` (the status's phrase), ``detail`` (the
error's message, written for people) and ``code`` (errand's stable code, for
programs to branch on), plus the error's structured fields (``task_id``,
``state``, ...). The database away is a 503 that says so (``store_unreachable``), with
no traceback in the log: it is the database's outage, not the server's fault. Anything
else unexpected is a 500 with no internals in the body; the exception goes to the
server's log.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from errand.database import StoreUnreachable, outage
from errand.errors import ErrandError
from errand.server.codes import fields_of, status_of

__all__ = ["PROBLEM_JSON", "install", "problem", "status_of"]

log = logging.getLogger("errand.server")
PROBLEM_JSON = "application/problem+json"


def problem(status: int, detail: str, code: str, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": http.HTTPStatus(status).phrase, "status": status, "detail": detail,
            "code": code, **{key: value for key, value in extra.items() if value is not None}}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON,
                        headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


def from_error(error: ErrandError) -> JSONResponse:
    return problem(status_of(error), error.message, error.code, **fields_of(error))


HtmlPage = Callable[[Request, int, str], Response]


def install(app: FastAPI, *, html: HtmlPage | None = None) -> None:
    """Answer every error of ``app`` with a problem document; or, when ``html`` is given,
    with the page it draws for a browser asking for a page (not the API) instead."""

    def answer(request: Request, response: JSONResponse, detail: str) -> Response:
        if html is not None and _wants_page(request):
            return html(request, response.status_code, detail)
        return response

    async def errand_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, ErrandError)
        if isinstance(error, StoreUnreachable):
            return store_away(request, error)
        return answer(request, from_error(error), error.message)

    def store_away(request: Request, away: StoreUnreachable) -> Response:
        # The database's address and the driver's words are the operator's (the log, /readyz), not the caller's.
        log.warning("%s %s: %s", request.method, request.url.path, away.message)
        detail = "the server cannot reach its database now; try again once it is back (its log says why)"
        return answer(request, problem(503, detail, away.code), detail)

    async def validation_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        errors = [{"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))}
                  for e in error.errors()]
        detail = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors) or "the request is not valid"
        return answer(request, problem(422, detail, "invalid_request", errors=errors), detail)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        code = str(getattr(error, "code", "") or http.HTTPStatus(error.status_code).phrase.lower().replace(" ", "_"))
        return answer(request, problem(error.status_code, str(error.detail), code), str(error.detail))

    async def unicode_error(request: Request, _error: Exception) -> Response:
        detail = "the request holds text that is not valid UTF-8"
        return answer(request, problem(400, detail, "invalid_text"), detail)

    async def unexpected(request: Request, error: Exception) -> Response:
        away = outage(error)
        if away is not None:
            return store_away(request, away)
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        detail = "the server failed unexpectedly; its log has the details"
        return answer(request, problem(500, detail, "internal_error"), detail)

    app.add_exception_handler(ErrandError, errand_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(UnicodeError, unicode_error)
    app.add_exception_handler(Exception, unexpected)


def _wants_page(request: Request) -> bool:
    """A browser's request for a page: not the API's paths, and HTML among what it accepts."""
    path = request.url.path
    if path == "/api" or path.startswith(("/api/", "/static/", "/assets/")):
        return False
    return "text/html" in request.headers.get("accept", "")
