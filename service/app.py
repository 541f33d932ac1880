"""The FastAPI application: ``create_app(settings)`` wires routers, error handlers, limits and the lifespan.

Start-up (lifespan) opens the job store, starts the training scheduler, and loads the models in the
background so that ``/healthz`` answers at once and ``/readyz`` turns 200 when the default model is in;
a background task then picks up models that training jobs publish. Shutdown stops the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool

import engine
from service import openapi, problems
from service.batcher import Batcher
from service.limits import Admission, BodyLimitMiddleware, JsonContentTypeMiddleware
from service.metrics import Metrics, MetricsMiddleware
from service.parse_batch import run_batch
from service.parse_processes import ParseProcesses
from service.registry import ModelRegistry
from service.routes import jobs, models, ops, parsing
from service.settings import Settings
from service.state import ServiceState

log = logging.getLogger("service")


def _description(s: Settings) -> str:
    return f"""Probabilistic dependency parsing: each tree comes with arc marginals, k-best and sampled trees.

Errors are `application/problem+json` (RFC 9457) naming the offending `field`, `sentence`, `word` or `line`.

**Limits** (configurable; environment variables `PARSER_*`):
request body {s.max_body_bytes} bytes (413), upload to /jobs {s.max_upload_bytes} bytes (413),
{s.max_words} words per sentence (422; {s.max_words_kbest} for /kbest and /sample,
{s.max_words_constituency} for constituency models),
{s.max_sentences} sentences and {s.max_request_words} words per request (422), k <= {s.max_k}, n <= {s.max_n},
{s.max_iterations} BP iterations, {s.max_rounds} relaxed rounds and {s.max_tag_samples} tag samples;
at most {s.max_pending} requests and {s.max_words_in_flight} words in flight
(queued + running), beyond that 503 with Retry-After. A parsing request not answered within
{s.request_timeout_s:g} s gets 504 (503 if its parse never started). Concurrent requests with the same model
and inference settings are parsed together (batches of up to {s.batch_max_words} words, collected for at most
{s.batch_wait_ms:g} ms while another batch is parsed){"" if s.batching else " (off)"}, in
{s.parse_processes or "no"} parse processes.
With `API_KEY` set, the /jobs routes need `Authorization: Bearer <key>` (401); without it they answer 403
unless the service was started with `PARSER_ALLOW_OPEN_JOBS=1`.
"""


def _log_jobs_access(s: Settings) -> None:
    """Say at start-up who may use the /jobs routes (an open or closed job API is a deployment decision)."""
    access = s.jobs_access()
    if access == "open":
        log.warning("/jobs is open to anyone: API_KEY is not set and PARSER_ALLOW_OPEN_JOBS=1")
    elif access == "closed":
        log.warning("/jobs is closed (403): API_KEY is not set; set API_KEY, or PARSER_ALLOW_OPEN_JOBS=1 to "
                    "serve training jobs without a key")
    else:
        log.info("/jobs needs the API key (Authorization: Bearer)")


async def _load(state: ServiceState) -> None:
    """Open the job store, start the scheduler, load the models (in threads: this is the event loop)."""
    from service.jobs.scheduler import Scheduler
    from service.jobs.store import JobStore

    s = state.settings
    try:
        for d in (s.data_dir, s.uploads_dir, s.results_dir, s.trained_dir):
            d.mkdir(parents=True, exist_ok=True)
        state.store = await run_in_threadpool(JobStore, s.jobs_db)
        state.scheduler = Scheduler(state.store, s.trained_dir, s.workers, s.node,
                                    on_finished=lambda job: state.registry.refresh(), uploads_dir=s.uploads_dir,
                                    results_dir=s.results_dir, result_retention=s.result_retention_seconds)
        await run_in_threadpool(state.scheduler.start)
        await run_in_threadpool(state.registry.load_shipped)
        await run_in_threadpool(state.registry.refresh)
        from engine.compiled import warm_up

        log.info("compiled kernels ready in %.2f s", await run_in_threadpool(warm_up))  # before /readyz says ready
        if state.parse_processes is not None:
            state.parse_processes.start()  # here, on the event loop's thread: fork with the models loaded
    except Exception as e:  # report through /readyz instead of dying silently
        log.exception("start-up failed")
        state.loading_error = f"start-up failed: {e}"
        return
    if not state.registry.ready:
        state.loading_error = (f"default model {s.default_model!r} is not available in {s.models_dir}; "
                               f"loaded: {', '.join(state.registry.names()) or 'none'}")
        log.error(state.loading_error)
    state.startup_done = True


async def _refresh_forever(state: ServiceState) -> None:
    while True:
        await asyncio.sleep(state.settings.refresh_seconds)
        if state.startup_done:
            try:
                await run_in_threadpool(state.registry.refresh)
            except Exception:
                log.exception("refreshing the model registry failed")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    registry = ModelRegistry(settings.models_dir, settings.trained_dir, settings.default_model,
                             settings.max_tag_samples)
    processes = (ParseProcesses(settings.parse_processes, registry.entries, settings.request_timeout_s)
                 if settings.parse_processes else None)
    state = ServiceState(
        settings=settings,
        registry=registry,
        admission=Admission(settings.max_pending, settings.max_words_in_flight, settings.retry_after_seconds,
                            metrics.rejected.inc),
        batcher=Batcher(processes.run if processes else run_batch,
                        workers=settings.parse_processes or settings.parse_threads,
                        wait_s=settings.batch_wait_ms / 1000, gap_s=settings.batch_gap_ms / 1000,
                        max_words=settings.batch_max_words, enabled=settings.batching,
                        wait_only_when_busy=not settings.batch_wait_idle, on_batch=metrics.batch,
                        on_dropped=lambda reason: metrics.dropped.labels(reason).inc()),
        metrics=metrics,
        parse_processes=processes,
    )
    metrics.words_in_flight.set_function(lambda: state.admission.words)
    metrics.parse_processes.set_function(lambda: processes.alive if processes else 0)
    metrics.watch_jobs(lambda: state.store.counts() if state.store is not None else {})

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        _log_jobs_access(settings)
        loader = asyncio.create_task(_load(state))
        refresher = asyncio.create_task(_refresh_forever(state))
        try:
            yield
        finally:
            refresher.cancel()
            await state.batcher.stop()
            if state.parse_processes is not None:
                await run_in_threadpool(state.parse_processes.stop)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await loader
            if state.scheduler is not None:
                await run_in_threadpool(state.scheduler.stop, 10.0)

    # /docs and /redoc load Swagger UI and ReDoc from the fastapi-offline package (under /static-offline-docs),
    # not from a CDN: the docs work offline and in air-gapped deployments. validatorUrl null: Swagger UI would
    # otherwise send the document to an online validator for its badge.
    app = FastAPIOffline(title="bp-parser", version=engine.__version__, description=_description(settings),
                         lifespan=lifespan, swagger_ui_parameters={"validatorUrl": None})
    app.state.service = state
    problems.install(app)
    openapi.install(app, settings)
    for router in (parsing.router, models.router, jobs.router, ops.router):
        app.include_router(router)
    app.add_middleware(JsonContentTypeMiddleware)
    app.add_middleware(BodyLimitMiddleware, limit_for=lambda path: settings.max_upload_bytes
                       if path.startswith("/jobs") else settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
