"""The job queue: one SQLite table of jobs (training, and batch parsing of an uploaded file), shared by the
app, the scheduler and its children.

Every operation opens its own connection (WAL journal, busy timeout) and writes inside ``BEGIN
IMMEDIATE``, so the store is safe across threads and processes. A job goes

    queued -> running -> succeeded | failed | cancelled        (queued -> cancelled directly)

A running job belongs to an *owner* (``owner_id(node, boot)``: one scheduler start on one node);
progress and the final status are written only by that owner, so a process that lost its job (the
service marked it failed, or it was cancelled) can never overwrite the result.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL = ("succeeded", "failed", "cancelled")
STOPPED_ERROR = "the service stopped while the job was running"
_VERSION_DIR = re.compile(r"v([1-9][0-9]*)")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    progress REAL NOT NULL DEFAULT 0,
    stage TEXT,
    metrics TEXT,
    model TEXT,
    error TEXT,
    config TEXT NOT NULL,
    train_path TEXT NOT NULL,
    dev_path TEXT,
    idempotency_key TEXT UNIQUE,
    request_hash TEXT,
    owner TEXT,
    heartbeat REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    model_path TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
CREATE INDEX IF NOT EXISTS jobs_by_updated ON jobs (updated);
CREATE TABLE IF NOT EXISTS model_versions (
    name TEXT PRIMARY KEY,
    last INTEGER NOT NULL
);
"""


class JobStoreError(Exception):
    """Base class of the job store's errors."""


class JobNotFound(JobStoreError):
    """No job with this id."""


class IdempotencyConflict(JobStoreError):
    """The idempotency key was used before for a different request."""


class JobFinished(JobStoreError):
    """The job has already finished (succeeded, failed or cancelled); ``job`` is its current state."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} has already {job.status}")
        self.job = job


def owner_id(node: str, boot: int) -> str:
    """The owner of the jobs one scheduler start (``boot``, increasing over restarts) runs on ``node``."""
    return f"{node}#{boot}"


def parse_owner(owner: str) -> tuple[str, int] | None:
    node, sep, boot = owner.rpartition("#")
    return (node, int(boot)) if sep and boot.isdigit() else None


def new_boot() -> int:
    """A boot number: later scheduler starts get larger ones."""
    return time.time_ns()


def request_hash(config: Mapping[str, Any], *digests: str | None) -> str:
    """A fingerprint of a job request (its config and the SHA-256 of its files), for idempotency."""
    canonical = json.dumps({"config": config, "files": list(digests)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


@dataclass(frozen=True)
class Job:
    """One row of the job table."""

    id: str
    status: str
    progress: float
    stage: str | None
    metrics: dict[str, Any] | None
    model: dict[str, Any] | None
    error: str | None
    config: dict[str, Any]
    train_path: str  # the training treebank; a parse job's uploaded input
    dev_path: str | None
    idempotency_key: str | None
    request_hash: str | None
    owner: str | None
    heartbeat: float | None
    cancel_requested: bool
    created: float
    updated: float
    model_path: str | None = None  # a parse job's model directory, resolved when it was submitted

    @property
    def kind(self) -> str:
        """``train`` or ``parse`` (batch parsing of an uploaded file), from the job's config."""
        return str(self.config.get("kind", "train"))

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Job:
        data = dict(row)
        for key in ("metrics", "model", "config"):
            data[key] = json.loads(data[key]) if data[key] is not None else None
        data["cancel_requested"] = bool(data["cancel_requested"])
        return cls(**data)

    def public(self) -> dict[str, Any]:
        """What the API shows: id, kind, status, progress (0..1), stage, metrics, model ({"name", "version"}:
        the model a training job produced, or the one a parse job used; else None), error, config, created and
        updated (ISO 8601, UTC), and a parse job's ``result`` (the path of its output once it has succeeded)."""
        return {"id": self.id, "kind": self.kind, "status": self.status, "progress": round(self.progress, 4),
                "stage": self.stage,
                "metrics": self.metrics, "model": self.model, "error": self.error, "config": self.config,
                "created": _iso(self.created), "updated": _iso(self.updated),
                "result": f"/jobs/{self.id}/result" if self.kind == "parse" and self.status == "succeeded" else None}


class JobStore:
    """Training jobs in the SQLite database at ``path`` (created with its tables if absent)."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(jobs)").fetchall()}
            if "model_path" not in columns:  # a database of an earlier version: parse jobs added the column
                db.execute("ALTER TABLE jobs ADD COLUMN model_path TEXT")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            db.execute("PRAGMA synchronous=NORMAL")
            yield db
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A connection inside a write transaction, committed on success and rolled back on error."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @staticmethod
    def _get(db: sqlite3.Connection, job_id: str) -> Job | None:
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return Job.from_row(row) if row is not None else None

    # -- the API's side -------------------------------------------------------------------------
    def create(self, job_id: str, config: Mapping[str, Any], train_path: str | Path, dev_path: str | Path | None,
               idempotency_key: str | None = None, request_hash: str | None = None, model_path: str | None = None
               ) -> tuple[Job, bool]:
        """Queue a job; return it and whether it was created. A request repeating an earlier one's
        ``idempotency_key`` with the same ``request_hash`` returns the earlier job (created False); with
        a different hash it raises ``IdempotencyConflict``."""
        with self._write() as db:
            now = time.time()
            if idempotency_key is not None:
                row = db.execute("SELECT * FROM jobs WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
                if row is not None:
                    earlier = Job.from_row(row)
                    if earlier.request_hash != request_hash:
                        raise IdempotencyConflict(f"Idempotency-Key {idempotency_key!r} was already used for a "
                                                  "different request")
                    return earlier, False
            db.execute(
                "INSERT INTO jobs (id, status, progress, config, train_path, dev_path, idempotency_key, "
                "request_hash, model_path, created, updated) VALUES (?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, json.dumps(dict(config)), str(train_path), None if dev_path is None else str(dev_path),
                 idempotency_key, request_hash, model_path, now, now))
            job = self._get(db, job_id)
        assert job is not None
        return job, True

    def get(self, job_id: str) -> Job | None:
        with self._connect() as db:
            return self._get(db, job_id)

    def find_by_key(self, idempotency_key: str) -> Job | None:
        """The job created with this idempotency key, if any."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
            return Job.from_row(row) if row is not None else None

    def list(self, limit: int = 100, status: str | None = None) -> builtins.list[Job]:
        """The most recent jobs first (optionally only those with ``status``)."""
        query = "SELECT * FROM jobs"
        args: builtins.list[str | int] = []
        if status is not None:
            query += " WHERE status = ?"
            args.append(status)
        query += " ORDER BY created DESC, rowid DESC LIMIT ?"
        args.append(int(limit))
        with self._connect() as db:
            return [Job.from_row(r) for r in db.execute(query, args).fetchall()]

    def finished_since(self, since: float) -> builtins.list[Job]:
        """Jobs that ended (succeeded, failed or cancelled) and were last updated after ``since`` (a
        ``time.time()`` value), oldest first. Timestamps are taken inside the write transaction, so a
        job committed after a call is never stamped much earlier than that call."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM jobs WHERE updated > ? AND status IN ('succeeded', 'failed', "
                              "'cancelled') ORDER BY updated, rowid", (since,)).fetchall()
        return [Job.from_row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        """The number of jobs in each of the five states."""
        with self._connect() as db:
            rows = db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        counts = dict.fromkeys(STATUSES, 0)
        counts.update({status: n for status, n in rows})
        return counts

    def request_cancel(self, job_id: str) -> Job:
        """Cancel a job: a queued one at once; a running one is marked and becomes cancelled when its
        runner stops. Raises ``JobNotFound``, or ``JobFinished`` for a job that has already ended."""
        with self._write() as db:
            now = time.time()
            job = self._get(db, job_id)
            if job is None:
                raise JobNotFound(f"no job {job_id!r}")
            if job.finished:
                raise JobFinished(job)
            if job.status == "queued":
                db.execute("UPDATE jobs SET status = 'cancelled', cancel_requested = 1, stage = 'cancelled', "
                           "updated = ? WHERE id = ?", (now, job_id))
            else:
                db.execute("UPDATE jobs SET cancel_requested = 1, stage = 'cancelling', updated = ? WHERE id = ?",
                           (now, job_id))
            job = self._get(db, job_id)
        assert job is not None
        return job

    # -- the scheduler's and runner's side ------------------------------------------------------
    def claim_next(self, owner: str) -> Job | None:
        """Atomically take the oldest queued job: it becomes running, owned by ``owner``."""
        with self._write() as db:
            now = time.time()
            row = db.execute("SELECT id FROM jobs WHERE status = 'queued' ORDER BY created, rowid LIMIT 1").fetchone()
            if row is None:
                return None
            db.execute("UPDATE jobs SET status = 'running', owner = ?, heartbeat = ?, stage = 'starting', "
                       "updated = ? WHERE id = ?", (owner, now, now, row["id"]))
            return self._get(db, row["id"])

    def heartbeat(self, owner: str) -> int:
        """Mark every running job of ``owner`` as alive now; return how many there are."""
        with self._write() as db:
            return db.execute("UPDATE jobs SET heartbeat = ? WHERE status = 'running' AND owner = ?",
                              (time.time(), owner)).rowcount

    def set_progress(self, job_id: str, owner: str, fraction: float, stage: str) -> bool:
        """Record the progress of a running job of ``owner`` (it never goes back); return whether the job
        should stop: cancellation was requested, or the job is no longer running under ``owner``."""
        fraction = min(max(float(fraction), 0.0), 1.0)
        with self._write() as db:
            now = time.time()
            db.execute("UPDATE jobs SET progress = MAX(progress, ?), "
                       "stage = CASE WHEN cancel_requested THEN stage ELSE ? END, heartbeat = ?, updated = ? "
                       "WHERE id = ? AND status = 'running' AND owner = ?", (fraction, stage, now, now, job_id, owner))
            row = db.execute("SELECT status, owner, cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return row is None or bool(row["cancel_requested"]) or row["status"] != "running" or row["owner"] != owner

    def finish(self, job_id: str, owner: str, status: str, metrics: dict[str, Any] | None = None,
               model: dict[str, Any] | None = None, error: str | None = None) -> bool:
        """End a running job of ``owner`` with a terminal ``status``; False (and nothing written) if the
        job is not running under ``owner`` any more. The stage becomes ``done`` or ``cancelled`` (a failed
        job keeps the stage it failed in)."""
        if status not in TERMINAL:
            raise ValueError(f"not a final status: {status!r}")
        with self._write() as db:
            now = time.time()
            return db.execute(
                "UPDATE jobs SET status = ?, metrics = ?, model = ?, error = ?, updated = ?, heartbeat = ?, "
                "progress = CASE WHEN ? = 'succeeded' THEN 1.0 ELSE progress END, "
                "stage = CASE ? WHEN 'succeeded' THEN 'done' WHEN 'cancelled' THEN 'cancelled' ELSE stage END "
                "WHERE id = ? AND status = 'running' AND owner = ?",
                (status, _json(metrics), _json(model), error, now, now, status, status, job_id, owner),
            ).rowcount == 1

    def allocate_version(self, name: str, trained_dir: str | Path | None = None) -> int:
        """The next version number of model ``name`` (1, 2, ...), reserved in a transaction. With
        ``trained_dir``, a number whose directory ``trained_dir/name/v<N>`` already exists is never
        handed out (e.g. after the database was reset)."""
        on_disk = 0
        if trained_dir is not None and (Path(trained_dir) / name).is_dir():
            for entry in (Path(trained_dir) / name).iterdir():
                match = _VERSION_DIR.fullmatch(entry.name)
                if match:
                    on_disk = max(on_disk, int(match.group(1)))
        with self._write() as db:
            row = db.execute("SELECT last FROM model_versions WHERE name = ?", (name,)).fetchone()
            version = max(row["last"] if row is not None else 0, on_disk) + 1
            db.execute("INSERT INTO model_versions (name, last) VALUES (?, ?) "
                       "ON CONFLICT (name) DO UPDATE SET last = excluded.last", (name, version))
        return version

    def recover(self, node: str | None, boot: int, stale_seconds: float = 60.0) -> builtins.list[str]:
        """Fail the running jobs whose runner is gone: those owned by an earlier boot of ``node`` (None:
        skip this rule), and those whose heartbeat is older than ``stale_seconds``. Returns their ids."""
        recovered = []
        with self._write() as db:
            now = time.time()
            for row in db.execute("SELECT id, owner, heartbeat FROM jobs WHERE status = 'running'").fetchall():
                parsed = parse_owner(row["owner"] or "")
                earlier_boot = node is not None and parsed is not None and parsed[0] == node and parsed[1] < boot
                stale = row["heartbeat"] is None or row["heartbeat"] < now - stale_seconds
                if earlier_boot or stale:
                    db.execute("UPDATE jobs SET status = 'failed', error = ?, updated = ? WHERE id = ?",
                               (STOPPED_ERROR, now, row["id"]))
                    recovered.append(row["id"])
        return recovered
