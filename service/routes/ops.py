"""Operations: ``GET /healthz`` (process up), ``GET /readyz`` (models loaded), ``GET /metrics`` (Prometheus),
and ``GET /`` (the self-contained page that draws a parse)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, JSONResponse, Response

from service.metrics import CONTENT_TYPE
from service.problems import ProblemError
from service.state import State

router = APIRouter(tags=["operations"])
PAGE = Path(__file__).resolve().parent.parent / "static" / "index.html"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """200 while the process serves HTTP."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "models are still loading (or failed to load)"}})
async def readyz(state: State) -> JSONResponse:
    """200 once start-up is over with the default model loaded, 503 before: start-up also loads the models
    that training jobs published, so after a restart they are listed as soon as the service is ready."""
    if state.registry.ready and state.startup_done:
        return JSONResponse({"status": "ready", "models": state.registry.names()})
    detail = state.loading_error or "models are loading"
    return JSONResponse({"status": "loading" if state.loading_error is None else "failed", "detail": detail},
                        status_code=503, headers={"Retry-After": "2"})


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
async def metrics(state: State) -> Response:
    """Prometheus text format: requests, latency, sentence lengths, jobs by state."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page() -> HTMLResponse:
    if not PAGE.is_file():
        raise ProblemError(404, "Not found", "the page is not installed", kind="not-found")
    return HTMLResponse(PAGE.read_text(encoding="utf-8"))
