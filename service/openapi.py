"""The published OpenAPI document, made to say what the service does (checked by Schemathesis).

FastAPI documents every error response as ``application/json`` (the 422 as its ``HTTPValidationError``),
while the service sends all of them as ``application/problem+json`` problem documents
(``service.problems``). ``install(app)`` replaces ``app.openapi`` with a function that generates the
document once and rewrites each 4xx/5xx response that has a body to the ``Problem`` schema under
``application/problem+json``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from service.problems import MEDIA_TYPE

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_UNUSED = ("HTTPValidationError", "ValidationError")  # FastAPI's 422 schema, which the service never sends


def problem_errors(doc: dict[str, Any]) -> dict[str, Any]:
    """Rewrite, in place, every documented error response with a body to a problem document; return ``doc``."""
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            for code, response in operation.get("responses", {}).items():
                is_error = str(code)[:1] in ("4", "5")
                if is_error and response.get("content"):
                    response["content"] = {MEDIA_TYPE: {"schema": dict(PROBLEM_REF)}}
    schemas = doc.get("components", {}).get("schemas", {})
    for name in _UNUSED:
        schemas.pop(name, None)
    return doc


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json`` and ``/docs``) return the rewritten document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = problem_errors(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
