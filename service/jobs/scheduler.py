"""Run queued training jobs, each in its own child process (``multiprocessing`` spawn context).

A daemon thread polls the job store: it reaps children that exited (a child that did not record its
job's end has its job marked failed with the exit code), heartbeats the running jobs, enforces
cancellation (a child still running ``cancel_grace`` seconds after a cancel request is terminated and
its job marked cancelled), periodically fails jobs whose runner vanished (stale heartbeat), and claims
queued jobs while fewer than ``workers`` children run. ``workers=0`` never trains: the jobs stay queued
for a separate worker process (``python -m service.worker``) sharing the database and model directory.

Two schedulers sharing a database must have different ``node`` names: on start, a scheduler fails the
running jobs of earlier boots of its own node (their processes died with the old boot).

Retention of uploads: a job's uploaded treebanks (``uploads/<id>/``) are deleted as soon as the job is
terminal (succeeded, failed or cancelled; the trained model is in the models directory, and a job never
runs again), by every scheduler that sees it end and, at start-up, for the jobs already terminal.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

from service.jobs.layout import RESULT_RETENTION_SECONDS
from service.jobs.runner import TEMP_PREFIX, run_job, temp_prefix
from service.jobs.store import STOPPED_ERROR, Job, JobStore, new_boot, owner_id

log = logging.getLogger(__name__)

JobTarget = Callable[[str, str, str, str], None]  # (db_path, job_id, trained_dir, owner), run in the child
SWEEP_SECONDS = 60.0  # seconds between sweeps of expired parse results
KILL_AFTER = 5.0  # seconds between SIGTERM and SIGKILL for a child that does not stop
CLOCK_SLACK = 5.0  # seconds of overlap between scans for jobs that ended elsewhere


@dataclass
class _Child:
    job_id: str
    process: BaseProcess
    stop_seen: float | None = None  # when a cancel request (or the loss of the job) was first seen
    terminated: float | None = None  # when SIGTERM was sent


class Scheduler:
    """Trains the store's queued jobs in up to ``workers`` child processes; models go to ``trained_dir``.

    ``on_finished(job)`` is called once in the scheduler thread for each job that ends after ``start``,
    whoever ended it: this scheduler's children, another worker sharing the database (so an app running
    with ``workers=0`` still learns about new models), a cancel request for a queued job, or recovery.
    It is not called for the jobs ``stop`` interrupts. ``target`` replaces ``run_job`` as the child's
    entry point (tests). With ``uploads_dir``, the uploads of terminal jobs (``uploads_dir/<id>/``) are
    deleted (see the module's retention rule); with ``results_dir``, parse jobs' results older than
    ``result_retention`` seconds (counted from the job's end) and the partial results of jobs that are not
    running are deleted.
    """

    def __init__(self, store: JobStore, trained_dir: str | os.PathLike[str], workers: int, node: str,
                 on_finished: Callable[[Job], object] | None = None, poll_seconds: float = 0.5,
                 stale_seconds: float = 60.0, cancel_grace: float = 10.0, *, target: JobTarget | None = None,
                 uploads_dir: str | os.PathLike[str] | None = None, results_dir: str | os.PathLike[str] | None = None,
                 result_retention: float = RESULT_RETENTION_SECONDS) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.store = store
        self.trained_dir = Path(trained_dir)
        self.workers = workers
        self.node = node
        self.on_finished = on_finished
        self.poll_seconds = poll_seconds
        self.stale_seconds = stale_seconds
        self.cancel_grace = cancel_grace
        self.target: JobTarget = target or run_job
        self.uploads_dir = Path(uploads_dir) if uploads_dir is not None else None
        self.results_dir = Path(results_dir) if results_dir is not None else None
        self.result_retention = result_retention
        self._last_sweep = float("-inf")
        self.boot = new_boot()
        self.owner = owner_id(node, self.boot)
        self._context = multiprocessing.get_context("spawn")
        self._children: dict[str, _Child] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_recover = 0.0
        self._last_heartbeat = 0.0
        self._cursor = 0.0  # time.time() of the last scan for jobs that ended elsewhere
        self._reported: dict[str, float] = {}  # job id -> its "updated" when on_finished was called

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Fail the jobs a previous run left running, remove stray temporary models, start the thread."""
        if self._thread is not None:
            raise RuntimeError("scheduler already started")
        self.trained_dir.mkdir(parents=True, exist_ok=True)
        self._cursor = time.time()
        self._recover()
        self._remove_stray_temp_dirs()
        self._remove_finished_uploads()
        self._thread = threading.Thread(target=self._loop, name=f"job-scheduler-{self.node}", daemon=True)
        self._thread.start()
        log.info("job scheduler %s started (%d worker(s))", self.owner, self.workers)

    def wake(self) -> None:
        """Look at the queue now instead of at the next poll (e.g. right after a job was created)."""
        self._wake.set()

    @property
    def running(self) -> list[str]:
        """Ids of the jobs whose child process is running."""
        with self._lock:
            return list(self._children)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop claiming, mark the running jobs failed (service stopped), terminate their children, join."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            children = list(self._children.values())
            self._children.clear()
        for child in children:
            self.store.finish(child.job_id, self.owner, "failed", error=STOPPED_ERROR)
            if child.process.is_alive():
                child.process.terminate()
        for child in children:
            child.process.join(max(0.1, deadline - time.monotonic()))
            if child.process.is_alive():
                child.process.kill()
                child.process.join(1.0)
            self._remove_temp(child.job_id)
        log.info("job scheduler %s stopped", self.owner)

    # -- the thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self._tick()
            except Exception:
                log.exception("job scheduler: error while polling the job store")
            self._wake.wait(self.poll_seconds)

    def _tick(self) -> None:
        ended: list[Job] = []
        with self._lock:
            if self._stopping.is_set():
                return
            ended += self._reap()
            if self._children:
                if time.monotonic() - self._last_heartbeat >= min(self.stale_seconds / 10, 5.0):
                    self._last_heartbeat = time.monotonic()
                    self.store.heartbeat(self.owner)
                self._enforce_stops()
            if time.monotonic() - self._last_recover >= max(self.stale_seconds / 4, self.poll_seconds):
                self._recover()
            ended += self._claim()
            if time.monotonic() - self._last_sweep >= SWEEP_SECONDS:
                self._last_sweep = time.monotonic()
                self._expire_results()
            for job in ended:
                self._reported[job.id] = job.updated
            elsewhere = self._ended_elsewhere()
            for job in elsewhere:
                self._reported[job.id] = job.updated
            ended += elsewhere
        for job in ended:
            self._remove_uploads(job.id)
            if self.on_finished is not None:
                try:
                    self.on_finished(job)
                except Exception:
                    log.exception("job scheduler: on_finished failed for job %s", job.id)

    def _recover(self) -> None:
        self._last_recover = time.monotonic()
        # a scheduler that never trains owns no jobs, so it has no earlier boot whose jobs it may fail
        recovered = self.store.recover(self.node if self.workers > 0 else None, self.boot, self.stale_seconds)
        for job_id in recovered:
            log.warning("job %s was running when its service stopped: marked failed", job_id)
            self._remove_temp(job_id)

    def _ended_elsewhere(self) -> list[Job]:
        """Jobs that ended since the last scan and were not run by this scheduler's children."""
        now = time.time()
        jobs = [job for job in self.store.finished_since(self._cursor - CLOCK_SLACK)
                if job.id not in self._reported and job.id not in self._children]
        self._cursor = now
        horizon = now - 4 * CLOCK_SLACK
        self._reported = {k: t for k, t in self._reported.items() if t >= horizon}
        return jobs

    def _reap(self) -> list[Job]:
        ended = []
        for job_id, child in list(self._children.items()):
            if child.process.is_alive():
                continue
            child.process.join(1.0)
            code = child.process.exitcode
            how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            if self.store.finish(job_id, self.owner, "failed",
                                 error=f"the training process {how} before finishing the job"):
                log.error("job %s: the training process %s before finishing the job", job_id, how)
            del self._children[job_id]
            self._remove_temp(job_id)
            job = self.store.get(job_id)
            if job is not None:
                ended.append(job)
        return ended

    def _enforce_stops(self) -> None:
        now = time.monotonic()
        for child in self._children.values():
            if child.terminated is not None:
                if now - child.terminated >= KILL_AFTER and child.process.is_alive():
                    child.process.kill()
                continue
            job = self.store.get(child.job_id)
            if job is not None and job.status == "running" and job.owner == self.owner and not job.cancel_requested:
                continue
            if child.stop_seen is None:
                child.stop_seen = now
            if now - child.stop_seen >= self.cancel_grace:
                if job is not None and job.cancel_requested:
                    self.store.finish(child.job_id, self.owner, "cancelled")
                log.warning("job %s: the training process did not stop within %.0f s; terminating it",
                            child.job_id, self.cancel_grace)
                child.process.terminate()
                child.terminated = now

    def _claim(self) -> list[Job]:
        failed = []
        while len(self._children) < self.workers and not self._stopping.is_set():
            job = self.store.claim_next(self.owner)
            if job is None:
                break
            process = self._context.Process(
                target=self.target, args=(str(self.store.path), job.id, str(self.trained_dir), self.owner),
                name=f"train-{job.id}", daemon=True)
            try:
                process.start()
            except Exception as e:
                log.exception("job %s: could not start the training process", job.id)
                reason = " ".join(str(e).split())[:300] or type(e).__name__
                self.store.finish(job.id, self.owner, "failed", error=f"could not start the training process: {reason}")
                ended = self.store.get(job.id)
                if ended is not None:
                    failed.append(ended)
                continue
            log.info("job %s: training in process %s", job.id, process.pid)
            self._children[job.id] = _Child(job.id, process)
        return failed

    # -- temporary model directories ------------------------------------------------------------
    def _remove_temp(self, job_id: str) -> None:
        for path in self.trained_dir.glob(f"{temp_prefix(job_id)}*"):
            shutil.rmtree(path, ignore_errors=True)

    def _remove_stray_temp_dirs(self) -> None:
        """Temporary model directories of jobs that are not running (left by a killed process)."""
        if not self.trained_dir.is_dir():
            return
        running = [temp_prefix(job.id) for job in self.store.list(limit=1_000_000, status="running")]
        for path in self.trained_dir.iterdir():
            if path.name.startswith(TEMP_PREFIX) and not any(path.name.startswith(p) for p in running):
                shutil.rmtree(path, ignore_errors=True)

    # -- uploads --------------------------------------------------------------------------------
    def _remove_uploads(self, job_id: str) -> None:
        """Delete the uploads of a job that has ended (it never runs again)."""
        if self.uploads_dir is not None:
            shutil.rmtree(self.uploads_dir / job_id, ignore_errors=True)

    def _remove_finished_uploads(self) -> None:
        """At start-up: the uploads of jobs that are already terminal (ended while no scheduler watched, or
        before this rule). A directory without a job (an upload still being received) is left alone."""
        if self.uploads_dir is None or not self.uploads_dir.is_dir():
            return
        for path in self.uploads_dir.iterdir():
            job = self.store.get(path.name)
            if job is not None and job.finished:
                shutil.rmtree(path, ignore_errors=True)

    # -- parse jobs' results --------------------------------------------------------------------
    def _expire_results(self, now: float | None = None) -> list[str]:
        """Delete the results whose job ended more than ``result_retention`` seconds ago (or is unknown), and
        the temporary files of jobs that are not running (a killed run's partial output). Returns the names."""
        if self.results_dir is None or not self.results_dir.is_dir():
            return []
        now = time.time() if now is None else now
        removed = []
        for path in self.results_dir.iterdir():
            partial = path.name.startswith(".")
            job = self.store.get(path.name.lstrip(".").split(".", 1)[0])
            expired = job is None or (job.finished and (partial or now - job.updated > self.result_retention))
            if expired:
                path.unlink(missing_ok=True)
                removed.append(path.name)
        if removed:
            log.info("deleted %d expired or partial parse result(s)", len(removed))
        return removed
