"""The published OpenAPI document, made to say what the service does (checked by Schemathesis).

FastAPI documents every error response as ``application/json`` (the 422 as its ``HTTPValidationError``),
while the service sends all of them as ``application/problem+json`` problem documents
(``service.problems``). ``install(app)`` replaces ``app.openapi`` with a function that generates the
document once and rewrites each 4xx/5xx response that has a body to the ``Problem`` schema under
``application/problem+json``.

The bounds that the service's settings fix (words per sentence, sentences per request, k, n, BP iterations...)
are marked in the request schemas with ``x-limit: <setting>`` (``service.schemas.limit``); ``with_limits`` writes
each as the JSON Schema keyword (``maxItems`` for an array, ``maximum`` for a number), the lower of the
setting and any bound already there, so the document states the limits this instance enforces. With the /jobs
routes opened without a key (``PARSER_ALLOW_OPEN_JOBS=1``) their bearer authentication is documented as optional.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from service.problems import MEDIA_TYPE
from service.settings import Settings

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


def _bound(node: dict[str, Any], value: int) -> None:
    """Add the setting's ``value`` to the array or number schema ``node`` (or to the branches of its anyOf)."""
    for branch in node.get("anyOf", [node]):
        key = {"array": "maxItems", "integer": "maximum", "number": "maximum"}.get(branch.get("type", ""))
        if key is not None:
            branch[key] = min(value, branch.get(key, value))


def with_limits(doc: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Write every ``x-limit`` of ``doc`` as the bound of the setting it names; return ``doc`` (changed in place)."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("x-limit"), str):
                _bound(node, int(getattr(settings, node["x-limit"])))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return doc


def form_parts(doc: dict[str, Any]) -> dict[str, Any]:
    """Document each optional part of a multipart body as what it is when sent (a file stays a file): FastAPI
    writes an optional ``UploadFile`` or form field as ``anyOf`` with null, which no multipart body can carry
    (a part left out is simply absent), and clients then send a file as a plain field."""
    schemas = doc.get("components", {}).get("schemas", {})
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data")
            if content is None:
                continue
            body = schemas.get(content["schema"].get("$ref", "").rsplit("/", 1)[-1], content["schema"])
            for name, part in body.get("properties", {}).items():
                branches = [b for b in part.get("anyOf", []) if b.get("type") != "null"]
                if len(branches) == 1:
                    part.pop("anyOf")
                    body["properties"][name] = {**branches[0], **part}
    return doc


def optional_auth(doc: dict[str, Any]) -> dict[str, Any]:
    """Document every operation's authentication as optional (the /jobs routes opened without a key)."""
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            if operation.get("security"):
                operation["security"] = [{}, *operation["security"]]
    return doc


def install(app: FastAPI, settings: Settings) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json`` and ``/docs``) return the rewritten document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = with_limits(form_parts(problem_errors(generate())), settings)
            app.openapi_schema = optional_auth(doc) if settings.jobs_access() == "open" else doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
