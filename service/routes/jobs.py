"""Training jobs: ``POST /jobs`` (multipart upload), ``GET /jobs``, ``GET /jobs/{id}``, ``DELETE /jobs/{id}``.

Uploads are validated before a job exists (422 naming the file and line of bad CoNLL-U); the job then
waits in the SQLite store for a worker process (``service.jobs.scheduler``). With ``API_KEY`` set every
route here needs ``Authorization: Bearer <key>``; without it they answer 403 unless ``PARSER_ALLOW_OPEN_JOBS=1``
opened them (``Settings.jobs_access``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Header, Security, UploadFile
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from engine.data.conllu_io import ConlluError, read_conllu
from service.jobs.config import JobConfig
from service.jobs.store import IdempotencyConflict, JobFinished, JobStore
from service.problems import ProblemError, _field
from service.schemas import JobAccepted, JobOut, JobsResponse, Problem, beyond_schema
from service.state import ServiceState, State

JOB_ID = r"^[0-9a-f]{32}$"


BEARER = HTTPBearer(auto_error=False, description="the service's API_KEY (`Authorization: Bearer <key>`)")
"""Documents the /jobs routes' authentication (``securitySchemes``); ``require_key`` checks the key."""


def require_key(state: State,
                credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None) -> None:
    """The API key in ``Authorization: Bearer``; without a configured key, 403 unless jobs were opened."""
    access = state.settings.jobs_access()
    if access == "open":
        return
    if access == "closed":
        raise ProblemError(403, "Jobs disabled", "the /jobs routes are closed: the service runs without API_KEY "
                           "(set API_KEY, or PARSER_ALLOW_OPEN_JOBS=1 to serve them without a key)",
                           kind="jobs-disabled")
    key = state.settings.api_key or ""
    token = credentials.credentials if credentials is not None else ""
    if credentials is None or not secrets.compare_digest(token.strip().encode(), key.encode()):
        raise ProblemError(401, "Unauthorized", "the /jobs routes need `Authorization: Bearer <API key>`",
                           kind="unauthorized", headers={"WWW-Authenticate": 'Bearer realm="jobs"'})


router = APIRouter(tags=["jobs"], dependencies=[Depends(require_key)], responses={
    401: {"model": Problem, "description": "missing or wrong API key (when API_KEY is set)"},
    403: {"model": Problem, "description": "no API_KEY configured and PARSER_ALLOW_OPEN_JOBS not set"}})


def _store(state: ServiceState) -> JobStore:
    if state.store is None:
        raise ProblemError(503, "Not ready", "the job store is starting", kind="not-ready",
                           headers={"Retry-After": "2"})
    return state.store


async def _save(upload: UploadFile, path: Path) -> str:
    """Copy an upload to ``path``; returns its SHA-256."""
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        while chunk := await upload.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _validate_treebank(path: Path, field: str) -> int:
    """Training needs readable CoNLL-U with a HEAD for every word; returns the number of sentences."""
    try:
        sents = read_conllu(path, name=field)
    except ConlluError as e:
        raise ProblemError(422, "Invalid CoNLL-U", f"{field}: line {e.line}: {e.problem}", kind="invalid-conllu",
                           field=field, rule="treebank", line=e.line) from e
    except UnicodeDecodeError as e:
        raise ProblemError(422, "Invalid CoNLL-U", f"{field} is not UTF-8 text ({e.reason} at byte {e.start})",
                           kind="invalid-conllu", field=field, rule="treebank") from e
    if not sents:
        raise ProblemError(422, "Invalid CoNLL-U", f"{field} holds no sentences", kind="invalid-conllu",
                           field=field, rule="treebank")
    for s in sents:
        if s.n == 0:
            raise ProblemError(422, "Invalid CoNLL-U", f"{field}: line {s.start_line}: sentence has no words",
                               kind="invalid-conllu", field=field, rule="treebank", line=s.start_line)
    return len(sents)


def _parse_config(raw: str | None, state: ServiceState) -> JobConfig:
    try:
        data = json.loads(raw) if raw else {}
    except json.JSONDecodeError as e:
        raise ProblemError(422, "Invalid job config", f"config is not valid JSON: {e}", kind="invalid-config",
                           field="config", rule="job-config") from e
    if not isinstance(data, dict):
        raise ProblemError(422, "Invalid job config", "config must be a JSON object", kind="invalid-config",
                           field="config", rule="job-config")
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as e:
        errors = [{"field": "config." + _field(("body", *err["loc"])), "message": err["msg"]} for err in e.errors()]
        raise ProblemError(422, "Invalid job config", "; ".join(f"{x['field']}: {x['message']}" for x in errors),
                           kind="invalid-config", field=errors[0]["field"], errors=errors, rule="job-config") from e
    if config.name in state.registry.shipped_names():
        raise ProblemError(422, "Invalid job config", f"{config.name!r} is a shipped model; choose another name",
                           kind="invalid-config", field="config.name", rule="job-config")
    return config


def _accepted(job: Any, status: int = 202) -> JSONResponse:
    public = job.public()
    return JSONResponse({"id": public["id"], "status": public["status"]}, status_code=status,
                        headers={"Location": f"/jobs/{public['id']}"})


EXAMPLE_TREEBANK = ("1\tDogs\t_\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\t_\tVERB\tVBP\t_\t0\troot\t_\t_\n\n"
                    "1\tCats\t_\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tsleep\t_\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")
"""A training set small enough for the document's example (a real one has thousands of sentences)."""
JOB_EXAMPLE = {"requestBody": {"content": {"multipart/form-data": {"example": {
    "train": EXAMPLE_TREEBANK, "config": json.dumps({"name": "example", "epochs": 1, "components": ["parser"]})}}}}}


@router.post("/jobs", status_code=202, response_model=JobAccepted, openapi_extra={**beyond_schema(
        "job-config", "treebank", "idempotency-key"), **JOB_EXAMPLE}, responses={
    400: {"model": Problem, "description": "a body that is not multipart/form-data"},
    413: {"model": Problem, "description": "upload too large"},
    422: {"model": Problem, "description": "bad CoNLL-U (with line) or bad config (with field)"}})
async def create_job(
    state: State,
    train: Annotated[UploadFile, File(description="training treebank, CoNLL-U")],
    dev: Annotated[UploadFile | None, File(description="development treebank for choosing the epoch")] = None,
    config: Annotated[str | None, Form(description="JSON object: name, order, tree, root, epochs, ...")] = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
) -> JSONResponse:
    """Queue a training job; 202 with its id and a ``Location`` header. The same ``Idempotency-Key`` with the
    same files and config returns the same job."""
    store = _store(state)
    job_config = _parse_config(config, state)
    job_id = uuid.uuid4().hex
    staging = state.settings.uploads_dir / job_id
    staging.mkdir(parents=True, exist_ok=True)
    keep = False
    try:
        train_path = staging / "train.conllu"
        train_sha = await _save(train, train_path)
        await run_in_threadpool(_validate_treebank, train_path, "train")
        dev_path, dev_sha = None, ""
        if dev is not None and dev.filename:
            dev_path = staging / "dev.conllu"
            dev_sha = await _save(dev, dev_path)
            await run_in_threadpool(_validate_treebank, dev_path, "dev")
        settings = job_config.model_dump(mode="json")
        request_hash = hashlib.sha256(json.dumps([settings, train_sha, dev_sha], sort_keys=True).encode()).hexdigest()
        try:
            job, created = await run_in_threadpool(store.create, job_id, settings, train_path, dev_path,
                                                   idempotency_key, request_hash)
        except IdempotencyConflict as e:
            raise ProblemError(422, "Idempotency key reused", str(e) or "this Idempotency-Key was used for a "
                               "different request", kind="idempotency-conflict", field="Idempotency-Key",
                               rule="idempotency-key") from e
        keep = created
        if created and state.scheduler is not None:
            state.scheduler.wake()
        return _accepted(job)
    finally:
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)


@router.get("/jobs", response_model=JobsResponse)
async def list_jobs(state: State) -> JSONResponse:
    """The most recent jobs, newest first."""
    jobs = await run_in_threadpool(_store(state).list, 100)
    return JSONResponse({"jobs": [j.public() for j in jobs]})


def _job_or_404(store: JobStore, job_id: str) -> Any:
    job = store.get(job_id)
    if job is None:
        raise ProblemError(404, "Unknown job", f"no job {job_id}", kind="unknown-job", field="id")
    return job


@router.get("/jobs/{job_id}", response_model=JobOut, responses={404: {"model": Problem}})
async def get_job(state: State, job_id: Annotated[str, PathParam(pattern=JOB_ID)]) -> JSONResponse:
    """Status, progress 0..1, metrics, the model it produced, or its error."""
    job = await run_in_threadpool(_job_or_404, _store(state), job_id)
    return JSONResponse(job.public())


@router.delete("/jobs/{job_id}", status_code=202, response_model=JobOut, responses={
    404: {"model": Problem}, 409: {"model": Problem, "description": "the job has already finished"}})
async def cancel_job(state: State, job_id: Annotated[str, PathParam(pattern=JOB_ID)]) -> JSONResponse:
    """Cancel a queued job at once, or ask a running one to stop (it becomes ``cancelled`` when it has)."""
    store = _store(state)
    await run_in_threadpool(_job_or_404, store, job_id)
    try:
        job = await run_in_threadpool(store.request_cancel, job_id)
    except JobFinished as e:
        raise ProblemError(409, "Job finished", f"job {job_id} has already finished", kind="job-finished",
                           field="id") from e
    return JSONResponse(job.public(), status_code=202)
