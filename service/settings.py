"""Service settings: command-line flags override environment variables override these defaults.

Environment variables carry the ``PARSER_`` prefix (``PARSER_PORT=9000``, ``PARSER_MAX_WORDS=300``), except
``API_KEY``, which protects the ``/jobs`` routes. Without a key those routes are closed (403) unless
``PARSER_ALLOW_OPEN_JOBS=1`` opens them to anyone, which the service logs at start-up: training jobs use
CPU, disk and memory, so serving them unauthenticated has to be a stated choice. Every limit here is also
stated in the OpenAPI description the app publishes at ``/docs``.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import sys
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.pipeline import MAX_TAG_SAMPLES
from service.jobs.layout import MODELS, RESULT_RETENTION_SECONDS, DataLayout

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
FORK_DEFAULT = sys.platform == "linux"  # macOS frameworks are not fork-safe, Windows cannot fork: threads there


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The CPU cores this process may use: its affinity mask (``taskset``, a container's cpuset), and no more than
    a cgroup v2 CPU quota allows (``docker run --cpus``), rounded up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A model name: letters, digits, ``.``, ``_``, ``-`` (no path separators, no leading dot)."""

JOB_LIMITS: dict[str, dict[str, int]] = {
    "epochs": {"le": 50},
    "batch_size": {"le": 512},
    "dim": {"ge": 1 << 10, "le": 1 << 24},  # several float64 arrays of this size per job
    "second_dim": {"ge": 1 << 10, "le": 1 << 24},
    "seed": {"le": 2**32 - 1},
    "seeds": {"le": 10},
    "bp_iterations": {"le": 20},
    "tag_samples": {"le": 16},  # as many as one parsing request may ask for (service.schemas)
}
"""Bounds of a training job's options (``POST /jobs``) where the service is stricter than the engine (whose
own bounds, e.g. up to 100 tag samples, are declared with the options in ``engine.training.options``): a job
runs on a shared node, so its size is capped. ``service.jobs.config.JobConfig`` applies them."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PARSER_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    models_dir: Path = Field(Path("models"), description="shipped models (read-only); aliases are symlinks")
    data_dir: Path = Field(Path("data"), description="job store (SQLite), uploads, and models trained by jobs")
    workers: int = Field(1, ge=0, le=64, description="training worker processes in this process's pool "
                         "(0: jobs wait for an external `python -m service.worker`)")
    dask_scheduler: str | None = Field(None, pattern=r"^tcp://[^\s:/]+:[0-9]+$", description="tcp://HOST:8786: "
                                       "parse jobs send their chunks, and training jobs their independent "
                                       "trainings, to this Dask cluster's workers (which must see the models at "
                                       "the same paths); unset: the job's own process does the work")
    default_model: str = Field("en_ewt", pattern=MODEL_NAME.pattern)
    api_key: str | None = Field(None, validation_alias=AliasChoices("API_KEY", "PARSER_API_KEY"))
    allow_open_jobs: bool = Field(False, description="without API_KEY, serve the /jobs routes to anyone "
                                  "(otherwise they answer 403); ignored when API_KEY is set")
    node: str = Field(default_factory=lambda: f"{socket.gethostname()}/api",
                      description="this process's name in the job store (a restarted node fails its old jobs)")

    # limits (each answered with a problem+json error naming the limit)
    max_body_bytes: int = Field(1 << 20, ge=1024, description="largest request body for parsing routes (413)")
    max_upload_bytes: int = Field(256 << 20, ge=1024, description="largest /jobs upload (413)")
    max_words: int = Field(500, ge=1, description="words per sentence (422)")
    max_sentences: int = Field(200, ge=1, description="sentences per request (422)")
    max_request_words: int = Field(20000, ge=1, description="words per request, all sentences together (422): "
                                   "about 70 s of parsing with the default model's 16 tag samples")
    max_words_kbest: int = Field(150, ge=1, description="words per sentence for /kbest and /sample (422)")
    max_words_constituency: int = Field(150, ge=1, description="words per sentence for a constituency model (422): "
                                        "its chart grows as n^2 labels and its time as n^3 (120 words: about 2 s "
                                        "and 190 MB with the X-bar PCFG of 20 PTB files, one core)")
    max_k: int = Field(100, ge=1, description="largest k for /kbest")
    max_n: int = Field(1000, ge=1, description="largest n for /sample")
    max_iterations: int = Field(50, ge=1, description="largest number of BP iterations a request may ask for")
    max_rounds: int = Field(100, ge=1, description="largest number of relaxed-inference rounds a request may ask "
                            "for")
    max_tag_samples: int = Field(16, ge=0, le=MAX_TAG_SAMPLES, description="largest inference.tag_samples a "
                                 "request may ask for; a model's default above it is capped to it (the engine "
                                 f"allows up to {MAX_TAG_SAMPLES})")

    # concurrency
    parse_threads: int = Field(2, ge=1, le=64, description="batches parsed at the same time (threads) when there "
                               "are no parse processes")
    parse_processes: int = Field(default_factory=lambda: min(8, usable_cores()) if FORK_DEFAULT else 0, ge=0,
                                 le=64, description="forked processes that parse batches (one batch each at a time), "
                                 "sharing the loaded models (default on Linux: the usable cores, at most 8; "
                                 "elsewhere 0); 0: parse on the server's threads")
    max_pending: int = Field(32, ge=1, description="requests admitted at once (running + waiting); beyond it 503")
    max_words_in_flight: int = Field(1000, ge=1, le=1_000_000, description="words admitted at once (queued + "
                                     "running, all requests together); beyond it 503. A request larger than "
                                     "this is admitted only when nothing else is in flight")
    batching: bool = Field(True, description="parse concurrent requests together (false: each request alone)")
    batch_wait_ms: float = Field(30.0, ge=0.0, le=1000.0, description="how long the first request of a batch "
                                 "waits for others with the same model and inference settings while another batch "
                                 "is being parsed (an idle server parses a request at once)")
    batch_gap_ms: float = Field(3.0, ge=0.0, le=1000.0, description="a waiting batch is parsed once no request "
                                "has arrived for this long (the burst of requests that a finished batch's clients "
                                "send is over), if PARSER_BATCH_WAIT_MS has not ended its wait first")
    batch_wait_idle: bool = Field(False, description="wait PARSER_BATCH_WAIT_MS for more requests also when no "
                                  "batch is being parsed (a lone request then always waits)")
    batch_max_words: int = Field(800, ge=1, le=100_000, description="words per batch: a batch is parsed as soon "
                                 "as it holds this many (a larger request is a batch of its own)")
    request_timeout_s: float = Field(60.0, gt=0.0, le=3600.0, description="time budget of a parsing request: "
                                     "504 when its parse has not finished in time, 503 when it never started")
    retry_after_seconds: int = Field(1, ge=1)
    result_retention_seconds: float = Field(RESULT_RETENTION_SECONDS, gt=0, description="how long a parse job's "
                                            "result is kept after the job ended; then it is deleted (GET: 410)")
    refresh_seconds: float = Field(2.0, gt=0, description="how often new models trained by jobs are picked up")

    def jobs_access(self) -> str:
        """How the ``/jobs`` routes are protected: ``"key"``, ``"open"`` (explicit opt-out) or ``"closed"``."""
        if self.api_key:
            return "key"
        return "open" if self.allow_open_jobs else "closed"

    @field_validator("parse_processes")
    @classmethod
    def _forkable(cls, value: int) -> int:
        if value and "fork" not in multiprocessing.get_all_start_methods():
            raise ValueError("parse processes are forked, and this platform cannot fork: set it to 0")
        return value

    @property
    def trained_dir(self) -> Path:
        """Models written by training jobs: ``<data_dir>/models/<name>/v<version>/``."""
        return self.data_dir / MODELS

    @property
    def jobs_db(self) -> Path:
        return self.layout.database

    @property
    def uploads_dir(self) -> Path:
        return self.layout.uploads

    @property
    def results_dir(self) -> Path:
        """Parse jobs' results: ``<data_dir>/results/<job_id>.conllu``."""
        return self.layout.results

    @property
    def layout(self) -> DataLayout:
        return DataLayout.at(self.data_dir, self.trained_dir)
