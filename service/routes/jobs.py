"""Jobs: ``POST /jobs`` (multipart upload: a training job, or a batch parse job), ``GET /jobs``, ``GET /jobs/{id}``,
``DELETE /jobs/{id}``, and ``GET /jobs/{id}/result`` (a parse job's CoNLL-U, streamed).

Uploads are validated before a job exists (422 naming the file and line of bad CoNLL-U); the job then
waits in the SQLite store for a worker process (``service.jobs.scheduler``). With ``API_KEY`` set every
route here needs ``Authorization: Bearer <key>``; without it they answer 403 unless ``PARSER_ALLOW_OPEN_JOBS=1``
opened them (``Settings.jobs_access``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import uuid
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from fastapi import APIRouter, Depends, File, Form, Header, Security, UploadFile
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from engine.constituency.treebank import TreebankError, read_trees
from engine.data.conllu_io import ConlluError, check_parsable, iter_conllu, read_conllu
from service.jobs.config import ConstituencyJobConfig, JobConfig
from service.jobs.layout import INPUT_FILE
from service.jobs.parse_job import MAX_TEXT_BYTES, ParseJobConfig
from service.jobs.store import IdempotencyConflict, JobFinished, JobStore
from service.problems import ProblemError, _field
from service.registry import UnknownModel
from service.schemas import JobAccepted, JobOut, JobsResponse, Problem, beyond_schema
from service.state import ServiceState, State

JOB_ID = r"^[0-9a-f]{32}$"
CHECKED_SENTENCES = 1000  # a parse job's CoNLL-U sentences read before it is queued


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


def _bad_upload(title: str, kind: str, field: str, detail: str, line: int | None = None) -> ProblemError:
    """A 422 for a training upload (``rule: treebank``), with its ``line`` where one is known."""
    where: dict[str, Any] = {} if line is None else {"line": line}
    return ProblemError(422, title, detail, kind=kind, field=field, rule="treebank", **where)


def _validate_treebank(path: Path, field: str) -> int:
    """Training needs readable CoNLL-U with a HEAD for every word; returns the number of sentences."""
    bad = "Invalid CoNLL-U", "invalid-conllu", field
    try:
        sents = read_conllu(path, name=field)
    except ConlluError as e:
        raise _bad_upload(*bad, f"{field}: line {e.line}: {e.problem}", e.line) from e
    except UnicodeDecodeError as e:
        raise _bad_upload(*bad, f"{field} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    if not sents:
        raise _bad_upload(*bad, f"{field} holds no sentences")
    for s in sents:
        if s.n == 0:
            raise _bad_upload(*bad, f"{field}: line {s.start_line}: sentence has no words", s.start_line)
    return len(sents)


def _config_json(raw: str | None) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw else {}
    except json.JSONDecodeError as e:
        raise ProblemError(422, "Invalid job config", f"config is not valid JSON: {e}", kind="invalid-config",
                           field="config", rule="job-config") from e
    if not isinstance(data, dict):
        raise ProblemError(422, "Invalid job config", "config must be a JSON object", kind="invalid-config",
                           field="config", rule="job-config")
    return data


def _validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``model`` validated from a job's config; 422 naming each bad field (``config.<field>``)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = [{"field": "config." + _field(("body", *err["loc"])), "message": err["msg"]} for err in e.errors()]
        raise ProblemError(422, "Invalid job config", "; ".join(f"{x['field']}: {x['message']}" for x in errors),
                           kind="invalid-config", field=errors[0]["field"], errors=errors, rule="job-config") from e


def _parse_config(data: dict[str, Any], state: ServiceState) -> JobConfig:
    config: JobConfig = _validated(JobConfig, data)
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
        "job-config", "treebank", "idempotency-key", "parse-job"), **JOB_EXAMPLE}, responses={
    400: {"model": Problem, "description": "a body that is not multipart/form-data"},
    413: {"model": Problem, "description": "upload too large"},
    422: {"model": Problem, "description": "bad CoNLL-U (with line), bad config (with field), a missing file"}})
async def create_job(
    state: State,
    train: Annotated[UploadFile | None, File(description="training treebank, CoNLL-U (training jobs; .mrg "
                                             "bracketed trees with config.formalism constituency)")] = None,
    dev: Annotated[UploadFile | None, File(description="development treebank for choosing the epoch")] = None,
    input: Annotated[UploadFile | None, File(description="the file to parse (parse jobs): CoNLL-U or raw text, "
                                             "as config.input_format says")] = None,
    config: Annotated[str | None, Form(description="JSON object. Training (the default kind): name, order, "
                                       "tree, root, epochs, ...; a constituency model: {\"formalism\": "
                                       "\"constituency\", \"name\": ...} with .mrg train and dev files; batch "
                                       "parsing: {\"kind\": \"parse\", \"model\": ..., \"input_format\": "
                                       "\"conllu\"|\"text\", ...}")] = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
) -> JSONResponse:
    """Queue a training job, or a batch parse job (``config.kind = "parse"`` with an ``input`` file); 202 with
    its id and a ``Location`` header. The same ``Idempotency-Key`` with the same files and config returns the
    same job."""
    store = _store(state)
    data = _config_json(config)
    kind = data.pop("kind", "train")
    if kind == "parse":
        return await _create_parse_job(state, store, {"kind": kind, **data}, input, idempotency_key)
    if kind != "train":
        raise ProblemError(422, "Invalid job config", f"config.kind must be 'train' or 'parse', got {kind!r}",
                           kind="invalid-config", field="config.kind", rule="job-config")
    formalism = data.get("formalism", "dependency")
    if formalism == "constituency":
        return await _create_constituency_job(state, store, data, train, dev, idempotency_key)
    if formalism != "dependency":
        raise ProblemError(422, "Invalid job config", "config.formalism must be 'dependency' or 'constituency', "
                           f"got {formalism!r}", kind="invalid-config", field="config.formalism", rule="job-config")
    data.pop("formalism", None)
    job_config = _parse_config(data, state)
    if train is None or not train.filename:
        raise ProblemError(422, "Missing file", "a training job needs a train file (CoNLL-U)", kind="missing-file",
                           field="train", rule="treebank")
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
        job, keep = await _queue(state, store, job_id, settings, train_path, dev_path, idempotency_key, request_hash)
        return _accepted(job)
    finally:
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)


def _validate_trees(path: Path, field: str) -> int:
    """A constituency training job needs readable bracketed trees (``.mrg``); returns the number of trees."""
    bad = "Invalid treebank", "invalid-treebank", field
    try:
        trees = read_trees([path])
    except TreebankError as e:
        raise _bad_upload(*bad, f"{field}: line {e.line}: {e.problem}", e.line) from e
    except UnicodeDecodeError as e:
        raise _bad_upload(*bad, f"{field} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    if not trees:
        raise _bad_upload(*bad, f"{field} holds no trees")
    return len(trees)


async def _create_constituency_job(state: ServiceState, store: JobStore, data: dict[str, Any],
                                   train: UploadFile | None, dev: UploadFile | None,
                                   idempotency_key: str | None) -> JSONResponse:
    """A training job of a constituency model (``config.formalism = "constituency"``): ``.mrg`` uploads, checked
    with the engine's treebank reader before the job exists (422 naming the file and line)."""
    config: ConstituencyJobConfig = _validated(ConstituencyJobConfig, data)
    if config.name in state.registry.shipped_names():
        raise ProblemError(422, "Invalid job config", f"{config.name!r} is a shipped model; choose another name",
                           kind="invalid-config", field="config.name", rule="job-config")
    if train is None or not train.filename:
        raise ProblemError(422, "Missing file", "a constituency training job needs a train file (.mrg bracketed "
                           "trees)", kind="missing-file", field="train", rule="treebank")
    job_id = uuid.uuid4().hex
    staging = state.settings.uploads_dir / job_id
    staging.mkdir(parents=True, exist_ok=True)
    keep = False
    try:
        paths: dict[str, Path | None] = {"train": staging / "train.mrg", "dev": None}
        digests = {"train": await _save(train, staging / "train.mrg"), "dev": ""}
        if dev is not None and dev.filename:
            paths["dev"] = staging / "dev.mrg"
            digests["dev"] = await _save(dev, staging / "dev.mrg")
        for field, path in paths.items():
            if path is not None:
                await run_in_threadpool(_validate_trees, path, field)
        settings = config.model_dump(mode="json")
        request_hash = hashlib.sha256(json.dumps([settings, digests["train"], digests["dev"]],
                                                 sort_keys=True).encode()).hexdigest()
        train_path = paths["train"]
        assert train_path is not None
        job, keep = await _queue(state, store, job_id, settings, train_path, paths["dev"], idempotency_key,
                                 request_hash)
        return _accepted(job)
    finally:
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)


async def _queue(state: ServiceState, store: JobStore, job_id: str, settings: dict[str, Any], path: Path,
                 dev_path: Path | None, idempotency_key: str | None, request_hash: str,
                 model_path: str | None = None) -> tuple[Any, bool]:
    """Create the job (or find the earlier one of this idempotency key) and wake the scheduler."""
    try:
        job, created = await run_in_threadpool(store.create, job_id, settings, path, dev_path, idempotency_key,
                                               request_hash, model_path)
    except IdempotencyConflict as e:
        raise ProblemError(422, "Idempotency key reused", str(e) or "this Idempotency-Key was used for a "
                           "different request", kind="idempotency-conflict", field="Idempotency-Key",
                           rule="idempotency-key") from e
    if created and state.scheduler is not None:
        state.scheduler.wake()
    return job, created


async def _create_parse_job(state: ServiceState, store: JobStore, data: dict[str, Any], upload: UploadFile | None,
                            idempotency_key: str | None) -> JSONResponse:
    """A batch parse job (``service.jobs.parse_job``): the model is resolved now (``name@version``, so that a
    newer version published meanwhile does not change the job), the input streamed to disk and checked."""
    config: ParseJobConfig = _validated(ParseJobConfig, data)
    if upload is None or not upload.filename:
        raise ProblemError(422, "Missing file", "a parse job needs an input file", kind="missing-file",
                           field="input", rule="parse-job")
    try:
        entry = state.registry.get(config.model)
    except UnknownModel as e:
        raise ProblemError(422, "Unknown model", str(e), kind="unknown-model", field="config.model",
                           rule="parse-job") from e
    if entry.formalism != "dependency":
        raise ProblemError(422, "Invalid job config", f"model {entry.name!r} is a constituency model: batch parse "
                           "jobs write CoNLL-U and are for dependency models (send its sentences to /parse)",
                           kind="constituency-model", field="config.model", rule="parse-job")
    if config.input_format == "text" and not entry.has_tokenizer:
        raise ProblemError(422, "Invalid job config", f"model {entry.name!r} has no tokenizer: give CoNLL-U input",
                           kind="invalid-config", field="config.input_format", rule="parse-job")
    if config.tag_samples is not None and config.tag_samples > state.settings.max_tag_samples:
        raise ProblemError(422, "Invalid job config", f"config.tag_samples: at most {state.settings.max_tag_samples}",
                           kind="invalid-config", field="config.tag_samples", rule="parse-job")
    config = config.model_copy(update={"model": f"{entry.name}@{entry.version}"})
    job_id = uuid.uuid4().hex
    staging = state.settings.uploads_dir / job_id
    staging.mkdir(parents=True, exist_ok=True)
    keep = False
    try:
        path = staging / INPUT_FILE
        sha = await _save(upload, path)
        await run_in_threadpool(_check_parse_input, path, config)
        settings = config.model_dump(mode="json")
        request_hash = hashlib.sha256(json.dumps([settings, sha], sort_keys=True).encode()).hexdigest()
        job, keep = await _queue(state, store, job_id, settings, path, None, idempotency_key, request_hash,
                                 str(entry.path))
        return _accepted(job)
    finally:
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)


def _check_parse_input(path: Path, config: ParseJobConfig) -> None:
    """What can be checked at once: text is UTF-8 and within ``MAX_TEXT_BYTES``; CoNLL-U's first
    ``CHECKED_SENTENCES`` sentences read (a problem further on fails the job, naming its line)."""
    if config.input_format == "text":
        if path.stat().st_size > MAX_TEXT_BYTES:
            raise ProblemError(413, "Input too large", f"raw text input is tokenised whole: at most {MAX_TEXT_BYTES} "
                               "bytes (CoNLL-U input has no such limit)", kind="too-large", field="input")
        try:
            with open(path, encoding="utf-8") as f:
                while f.read(1 << 20):
                    pass
        except UnicodeDecodeError as e:
            raise ProblemError(422, "Invalid input", f"input is not UTF-8 text ({e.reason})", kind="invalid-input",
                               field="input", rule="parse-job") from e
        return
    try:
        first = list(islice(iter_conllu(path, name="input", strict_heads=False), CHECKED_SENTENCES))
        check_parsable(first, "input")
    except ConlluError as e:
        raise ProblemError(422, "Invalid CoNLL-U", f"input: line {e.line}: {e.problem}", kind="invalid-conllu",
                           field="input", rule="parse-job", line=e.line) from e
    if not first:
        raise ProblemError(422, "Invalid CoNLL-U", "input holds no sentences", kind="invalid-conllu", field="input",
                           rule="parse-job")


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


@router.get("/jobs/{job_id}/result", response_class=StreamingResponse, responses={
    200: {"content": {"text/plain": {}}, "description": "the parsed CoNLL-U, streamed"},
    404: {"model": Problem}, 409: {"model": Problem, "description": "not a parse job, or it has not succeeded"},
    410: {"model": Problem, "description": "the result was deleted after the retention period"}})
async def job_result(state: State, job_id: Annotated[str, PathParam(pattern=JOB_ID)]) -> StreamingResponse:
    """The CoNLL-U a batch parse job wrote, streamed (kept for ``PARSER_RESULT_RETENTION_SECONDS`` after the
    job ended)."""
    job = await run_in_threadpool(_job_or_404, _store(state), job_id)
    if job.kind != "parse":
        raise ProblemError(409, "No result", f"job {job_id} is a training job: its model is listed in /models",
                           kind="not-a-parse-job", field="id")
    if job.status != "succeeded":
        raise ProblemError(409, "No result", f"job {job_id} is {job.status}: a result exists once it has succeeded",
                           kind="job-not-succeeded", field="id")
    try:  # open before answering: a retention sweep deleting it now cannot cut the download short
        handle = await run_in_threadpool(open, state.settings.layout.result_file(job_id), "rb")
    except FileNotFoundError as e:
        raise ProblemError(410, "Result deleted", f"the result of job {job_id} was deleted after the retention "
                           "period", kind="result-expired", field="id") from e
    size = os.fstat(handle.fileno()).st_size
    return StreamingResponse(_read_chunks(handle), media_type="text/plain; charset=utf-8", headers={
        "Content-Length": str(size), "Content-Disposition": f'attachment; filename="{job_id}.conllu"'})


def _read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(1 << 20):
            yield chunk
