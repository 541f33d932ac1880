"""Errors as ``application/problem+json`` (RFC 9457): type, title, status, detail, plus the member that
says where the problem is (``field``, ``sentence``, ``word``, ``line``).

Handlers turn every error the app can raise into a problem document, so bad input is never a 500:
validation errors become 422 naming the field (malformed JSON: 400), unknown routes 404, and anything
unexpected a 500 problem without internals (logged with its traceback).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

log = logging.getLogger("service")

MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "urn:bp-parser:problem:"
"""Problem types are URNs (``urn:bp-parser:problem:invalid-input``); docs/http-api.md (Errors) lists them."""


class ProblemError(Exception):
    """Raise to answer with a problem document; ``extra`` members (``field``, ``sentence``...) are added."""

    def __init__(self, status: int, title: str, detail: str, *, kind: str | None = None,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail
        self.kind = kind or title.lower().replace(" ", "-")
        self.headers = headers or {}
        self.extra = extra

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (a parse process sends it to the server): the default passes only ``detail``."""
        return _rebuilt_problem, (self.status, self.title, self.detail, self.kind, self.headers, self.extra)


def _rebuilt_problem(status: int, title: str, detail: str, kind: str, headers: dict[str, str],
             extra: dict[str, Any]) -> ProblemError:
    return ProblemError(status, title, detail, kind=kind, headers=headers, **extra)


def problem_response(status: int, title: str, detail: str, kind: str, headers: dict[str, str] | None = None,
                     **extra: Any) -> JSONResponse:
    body = {"type": f"{TYPE_BASE}{kind}", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "inference", "iterations")`` -> ``"inference.iterations"``; list indices as ``[i]``."""
    parts: list[str] = []
    for item in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        first = next(e for e in errors if e.get("type") == "json_invalid")
        return problem_response(400, "Malformed JSON", f"the request body is not valid JSON: "
                                f"{first.get('ctx', {}).get('error', first.get('msg'))}", "malformed-json")
    items = [{"field": _field(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in errors]
    detail = "; ".join(f"{i['field'] or 'body'}: {i['message']}" for i in items[:5])
    return problem_response(422, "Invalid request", detail, "invalid-request", field=items[0]["field"] if items
                            else None, errors=items)


def _problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(exc.status, exc.title, exc.detail, exc.kind, exc.headers, **exc.extra)


def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    titles = {404: "Not found", 405: "Method not allowed", 401: "Unauthorized"}
    title = titles.get(exc.status_code, "HTTP error")
    detail = exc.detail if isinstance(exc.detail, str) else title
    if exc.status_code == 400 and detail == "There was an error parsing the body":  # FastAPI: bytes that are no JSON
        return problem_response(400, "Malformed JSON", "the request body could not be read as JSON: it must be "
                                "UTF-8 text, not compressed, with numbers of at most 4,300 digits", "malformed-json")
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route {request.url.path}; see /docs for the API"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
        detail = f"{request.method} is not allowed on {request.url.path}; allowed: {headers['Allow']}"
    return problem_response(exc.status_code, title, detail, title.lower().replace(" ", "-"), headers)


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers on this request's path (asked of each route with
    Starlette's ``matches``, so routes of included routers count too).

    Starlette builds a 405's ``Allow`` from the first route whose path matches, so a path served by two
    routes (``GET /jobs/{id}`` and ``DELETE /jobs/{id}``) would list only one of them."""
    routes = request.app.router.routes
    scope = dict(request.scope)
    allowed = []
    for method in METHODS:
        scope["method"] = method
        if any(route.matches(scope)[0] is Match.FULL for route in routes):
            allowed.append(method)
    return allowed


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(500, "Internal error", "the server failed while handling this request; it has been "
                            "logged", "internal-error")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ProblemError, _problem)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
