"""``GET /models``: the loaded models and their versions, aliases, metrics and settings."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.schemas import ModelsResponse
from service.state import State

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelsResponse)
async def list_models(state: State) -> JSONResponse:
    """Every loaded model version; ``default`` is the one used when a request names none; ``limits`` the largest
    inference settings a request may give."""
    await run_in_threadpool(state.registry.refresh)
    s = state.settings
    return JSONResponse({"default": state.registry.default,
                         "models": [e.info() for e in state.registry.entries()],
                         "limits": {"iterations": s.max_iterations, "rounds": s.max_rounds,
                                    "tag_samples": s.max_tag_samples}})
