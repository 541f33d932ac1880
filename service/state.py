"""What the routes share: settings, model registry, admission control, the batcher, metrics, the job store
and scheduler.

One ``ServiceState`` per app, created by ``create_app`` and filled in by the lifespan (models are loaded at
start-up, never at import time or on a first request). Routes get it with ``Annotated[ServiceState,
Depends(get_state)]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from service.batcher import Batcher
from service.limits import Admission
from service.metrics import Metrics
from service.problems import ProblemError
from service.registry import AnyEntry, ModelRegistry, UnknownModel
from service.settings import Settings

if TYPE_CHECKING:
    from service.jobs.scheduler import Scheduler
    from service.jobs.store import JobStore
    from service.parse_processes import ParseProcesses


@dataclass
class ServiceState:
    settings: Settings
    registry: ModelRegistry
    admission: Admission
    batcher: Batcher
    metrics: Metrics
    store: JobStore | None = None
    scheduler: Scheduler | None = None
    parse_processes: ParseProcesses | None = None
    loading_error: str | None = None
    startup_done: bool = field(default=False)

    def model(self, ref: str | None) -> AnyEntry:
        """The model a request names (or the default); 503 while loading, 404 if unknown."""
        if not self.registry.ready:
            raise ProblemError(503, "Not ready", self.loading_error or "models are still loading",
                               kind="not-ready", headers={"Retry-After": "2"})
        try:
            return self.registry.get(ref)
        except UnknownModel as e:
            raise ProblemError(404, "Unknown model", str(e), kind="unknown-model", field="model") from e


async def get_state(request: Request) -> ServiceState:
    """The app's state (async: FastAPI would run a plain function on its thread pool, a hand-off per request)."""
    state: ServiceState = request.app.state.service
    return state


State = Annotated[ServiceState, Depends(get_state)]
