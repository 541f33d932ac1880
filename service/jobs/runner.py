"""One training job, run in a child process (``multiprocessing`` spawn context) by the scheduler.

The child trains into a hidden temporary directory under the trained-model directory, reports its
progress to the job store (throttled), and stops at the next batch when the job is cancelled, when it
is no longer the job's owner, or when its parent process has died. On success it reserves the next
version of the model's name and renames the model into ``<trained_dir>/<name>/v<N>/`` in one step; a
failed, cancelled or killed (SIGTERM) run leaves no model behind.

With ``PARSER_DASK_SCHEDULER`` set (``Settings().dask_scheduler``, read in the child), the training runs on that
Dask cluster (``TrainOptions.cluster``, as ``train --cluster``): the independent trainings are its tasks, the
progress comes back between the child's waits, and a cancel request cancels the tasks at the next check. An
unreachable scheduler fails the job with a one-line ``ConnectionError`` before any training, and a scheduler
lost mid-job fails it at once with ``ConnectionError: lost the Dask scheduler at ...``
(``engine.training.cluster.connect``); either way the temporary model directory is removed: no model.

This module imports numpy only inside ``run_job``, after limiting the numeric libraries to one thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

from service.jobs.layout import DataLayout
from service.jobs.store import STOPPED_ERROR, Job, JobStore

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.5  # seconds between progress writes (and cancellation checks)
TEMP_PREFIX = ".job-"  # temporary model directories: <trained_dir>/.job-<job_id>.<random>
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
MAX_ERROR = 500

TrainFunction = Callable[..., dict[str, Any]]


class _Stop(Exception):
    """Raised inside training to stop it: cancelled, lost ownership, parent gone, or SIGTERM."""

    def __init__(self, status: str, error: str | None = None) -> None:
        super().__init__(error or status)
        self.status, self.error = status, error


def temp_prefix(job_id: str) -> str:
    """The name prefix of a job's temporary model directories."""
    return f"{TEMP_PREFIX}{job_id}."


def single_threaded() -> None:
    """Limit BLAS/OpenMP to one thread (effective when numpy has not been imported yet)."""
    for var in THREAD_VARIABLES:
        os.environ[var] = "1"
    if "numpy" in sys.modules:
        log.debug("numpy was imported before the thread limits were set")


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop("failed", "the training process was terminated")


def is_input_error(error: BaseException) -> bool:
    """A problem with the job's input (treebank or options), explained by its message alone."""
    from engine.constituency.treebank import TreebankError
    from engine.data.conllu_io import ConlluError
    from engine.model.store import ModelError
    from engine.training.pipeline import TrainOptionsError
    from service.jobs.parse_job import ParseJobError

    return isinstance(error, ConlluError | ModelError | TrainOptionsError | ParseJobError | TreebankError)


def one_line_error(error: BaseException, job: Job) -> str:
    """A one-line message for the job's ``error``, without the server's upload paths."""
    if isinstance(error, MemoryError):
        text = "out of memory (try a smaller dim or second_dim, or fewer sentences)"
    else:
        lines = str(error).strip().splitlines()
        text = lines[0] if lines else ""
        if not is_input_error(error):
            text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    for path in (job.train_path, job.dev_path):
        if path:
            text = text.replace(str(Path(path).parent) + os.sep, "")
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."


def run_job(db_path: str | os.PathLike[str], job_id: str, trained_dir: str | os.PathLike[str], owner: str,
            train: TrainFunction | None = None) -> None:
    """Train job ``job_id`` (running, owned by ``owner``) and record the result in the job store.

    ``train`` replaces ``engine.training.pipeline.train_model`` (tests). Never raises for a training
    error: the job is marked failed with a one-line message instead.
    """
    single_threaded()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal: the parent decides what stops
    signal.signal(signal.SIGTERM, _on_sigterm)
    store = JobStore(db_path)
    parent = os.getppid()
    job = store.get(job_id)
    if job is None or job.status != "running" or job.owner != owner:
        log.warning("job %s is not running under %s; nothing to do", job_id, owner)
        return
    root = Path(trained_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(job_id), dir=root))
    final: Path | None = None
    try:
        if job.kind == "parse":
            _parse(store, job, Path(db_path).parent, owner, parent)
        else:
            final = _train(store, job, root, tmp, owner, parent, train)
    except _Stop as stop:
        if stop.status == "cancelled":
            store.finish(job_id, owner, "cancelled")
            log.info("job %s cancelled", job_id)
        else:
            store.finish(job_id, owner, "failed", error=stop.error)
            log.warning("job %s stopped: %s", job_id, stop.error)
    except Exception as e:
        message = one_line_error(e, job)
        log.error("job %s failed: %s", job_id, message, exc_info=not is_input_error(e))
        store.finish(job_id, owner, "failed", error=message)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if final is not None:
        log.info("job %s succeeded: %s", job_id, final)


def _checker(store: JobStore, job: Job, owner: str, parent: int) -> Callable[..., None]:
    """``check(fraction, stage, force=False)``: record progress (throttled to ``PROGRESS_INTERVAL``) and raise
    ``_Stop`` when the job was cancelled, was taken over, or the parent process died."""
    last_stage, last_time = "", 0.0

    def check(fraction: float, stage: str, force: bool = False) -> None:
        nonlocal last_stage, last_time
        if os.getppid() != parent:
            raise _Stop("failed", STOPPED_ERROR)
        now = time.monotonic()
        if force or stage != last_stage or now - last_time >= PROGRESS_INTERVAL:
            last_stage, last_time = stage, now
            if store.set_progress(job.id, owner, fraction, stage):
                current = store.get(job.id)
                if current is not None and current.cancel_requested:
                    raise _Stop("cancelled")
                raise _Stop("failed", "the job was taken over or ended elsewhere")

    return check


def _reserver(store: JobStore, check: Callable[..., None], name: str, root: Path
              ) -> tuple[Callable[[], Mapping[str, Any]], dict[str, int]]:
    """``reserve_version()``, called by the trainer when it saves: the next version of ``name`` (kept in the
    returned dict under ``"n"``) and the ``name`` and ``version`` the manifest records."""
    version: dict[str, int] = {}

    def reserve_version() -> Mapping[str, Any]:
        check(0.98, "saving", force=True)
        version["n"] = store.allocate_version(name, root)
        return {"name": name, "version": version["n"]}

    return reserve_version, version


def _train(store: JobStore, job: Job, root: Path, tmp: Path, owner: str, parent: int,
           train: TrainFunction | None) -> Path | None:
    from service.jobs.config import JobConfig

    if job.config.get("formalism") == "constituency":
        return _train_constituency(store, job, root, tmp, owner, parent)
    if train is None:
        from engine.training.pipeline import train_model

        train = train_model
    config = JobConfig.model_validate(job.config)
    check = _checker(store, job, owner, parent)
    reserve_version, version = _reserver(store, check, config.name, root)

    from service.settings import Settings

    options = config.to_options()
    cluster = Settings().dask_scheduler  # PARSER_DASK_SCHEDULER, inherited from the service's environment
    if cluster:
        check(0.0, f"connecting to {cluster}", force=True)
        options = replace(options, cluster=cluster)
    summary = train(job.train_path, job.dev_path, tmp / "model", options, progress=False,
                    on_progress=check, extra_manifest=reserve_version)
    if summary.get("interrupted"):
        raise RuntimeError("training was interrupted")
    metrics = {k: summary.get(k) for k in ("order", "best_epoch", "seconds", "skipped_trees", "dev")}
    if job.dev_path is not None and config.calibrate:
        from engine.cli import calibrate_trained

        check(0.99, "calibrating on the dev set", force=True)
        fitted = calibrate_trained(tmp / "model", job.dev_path)
        metrics["calibration"] = {k: fitted[k] for k in ("head_power", "ece_before", "ece_after")}
    return _publish(store, job, root, tmp, owner, config.name, version["n"], metrics)


def _train_constituency(store: JobStore, job: Job, root: Path, tmp: Path, owner: str, parent: int) -> Path | None:
    """A constituency model's job (``service.jobs.constituency_job``)."""
    from service.jobs.config import ConstituencyJobConfig
    from service.jobs.constituency_job import train_constituency

    config = ConstituencyJobConfig.model_validate(job.config)
    check = _checker(store, job, owner, parent)
    reserve_version, version = _reserver(store, check, config.name, root)
    metrics = train_constituency(job, tmp / "model", check, reserve_version)
    return _publish(store, job, root, tmp, owner, config.name, version["n"], metrics)


def _publish(store: JobStore, job: Job, root: Path, tmp: Path, owner: str, name: str, version: int,
             metrics: dict[str, Any]) -> Path | None:
    """Rename the trained ``tmp/model`` to ``<root>/<name>/v<version>`` and mark the job succeeded; a job that
    ended elsewhere meanwhile leaves no model behind."""
    model = {"name": name, "version": version}
    current = store.get(job.id)
    if current is None or current.status != "running" or current.owner != owner:
        log.warning("job %s ended elsewhere; discarding its model", job.id)
        return None
    final = root / name / f"v{version}"
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise RuntimeError(f"model directory {name}/v{version} already exists")
    os.rename(tmp / "model", final)
    published = False
    try:
        published = store.finish(job.id, owner, "succeeded", metrics=metrics, model=model)
    finally:
        if not published:  # the job ended elsewhere meanwhile, or we were stopped: never leave a stray model
            log.warning("job %s was not published; removing %s", job.id, final)
            shutil.rmtree(final, ignore_errors=True)
    return final if published else None


def _parse(store: JobStore, job: Job, data_dir: Path, owner: str, parent: int) -> None:
    """A batch parse job (``service.jobs.parse_job``): its result lands in ``<data_dir>/results/<id>.conllu``."""
    from service.jobs.parse_job import ParseJobConfig, run_parse_job

    config = ParseJobConfig.model_validate(job.config)
    if job.model_path is None:
        raise RuntimeError("the parse job has no model")
    result = DataLayout.at(data_dir).result_file(job.id)
    from service.settings import Settings

    cluster = Settings().dask_scheduler  # PARSER_DASK_SCHEDULER, inherited from the service's environment
    metrics = run_parse_job(config, job.model_path, job.train_path, result, _checker(store, job, owner, parent),
                            cluster)
    current = store.get(job.id)
    name, _, version = (config.model or "").partition("@")  # resolved to name@version when the job was queued
    model = {"name": name, "version": int(version)} if version.isdigit() else None
    published = current is not None and current.status == "running" and current.owner == owner and \
        store.finish(job.id, owner, "succeeded", metrics=metrics, model=model)
    if not published:
        log.warning("job %s ended elsewhere; discarding its result", job.id)
        result.unlink(missing_ok=True)
