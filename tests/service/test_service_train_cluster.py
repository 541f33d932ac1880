"""Training jobs on a Dask cluster (``PARSER_DASK_SCHEDULER``): the real server and its job process train on a
2-process ``LocalCluster`` a model equal, array for array, to the one trained without a cluster; an unreachable
scheduler fails the job with a one-line error and leaves no model."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster_helpers import assert_same_arrays, local_cluster
from service_helpers import ServerProcess

from engine.training.pipeline import train_model
from service.jobs.config import JobConfig

KEY = "cluster-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# seeds 2: the parsers are Dask tasks, like the tagger's and the labeller's folds, so the model is bit for bit
# the sequential one (one seed's first-order CLL would run data-parallel, equal only up to rounding)
CONFIG = {"name": "on-dask", "epochs": 2, "dim": 2**18, "seeds": 2}


def first_sentences(path: Path, count: int) -> str:
    return "\n\n".join(path.read_text(encoding="utf-8").split("\n\n")[:count]) + "\n\n"


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout  # generous: a deadline for a hang, not a pace
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_job(data: Path, scheduler: str, train: str, dev: str, timeout: float) -> tuple[dict[str, Any], list[float]]:
    """Submit a training job to a new server using ``scheduler``; the finished job and the progress seen."""
    proc = ServerProcess(data, workers=1, env={"API_KEY": KEY, "PARSER_DASK_SCHEDULER": scheduler})
    seen: list[float] = []
    try:
        proc.wait_ready()
        with httpx.Client(base_url=proc.url, timeout=60) as client:
            files = {"train": ("train.conllu", train.encode(), "text/plain"),
                     "dev": ("dev.conllu", dev.encode(), "text/plain")}
            r = client.post("/jobs", files=files, data={"config": json.dumps(CONFIG)}, headers=AUTH)
            assert r.status_code == 202, r.text
            job_id = r.json()["id"]

            def finished() -> dict[str, Any] | None:
                job = client.get(f"/jobs/{job_id}", headers=AUTH).json()
                seen.append(job["progress"])
                return job if job["status"] in ("succeeded", "failed", "cancelled") else None

            return wait_for(finished, timeout, "the training job"), seen
    finally:
        proc.stop()


@pytest.mark.slow
def test_a_training_job_on_a_dask_cluster_trains_the_model_of_one_process(ewt_dir: Path, tmp_path: Path) -> None:
    """200 EWT sentences, the job's default components (tokenizer, tagger, parser, labeller, lemmatizer, morph):
    every array of the job's model equals the one ``train_model`` writes without a cluster; the progress rises to
    1, and the trainings did run on the cluster's workers."""
    from distributed import Client

    train, dev = first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 200), first_sentences(
        ewt_dir / "en_ewt-ud-dev.conllu", 50)
    (tmp_path / "train.conllu").write_text(train, encoding="utf-8")
    (tmp_path / "dev.conllu").write_text(dev, encoding="utf-8")
    with local_cluster() as dask:
        job, seen = run_job(tmp_path / "data", dask.scheduler_address, train, dev, 900)
        assert job["status"] == "succeeded", job
        with Client(dask) as observer:
            prefixes = observer.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.task_prefixes))
            assert "run_task" in prefixes  # the seeds and folds ran as the cluster's tasks
    assert job["progress"] == 1.0 and seen == sorted(seen)
    config = {k: v for k, v in CONFIG.items() if k != "name"}
    options = JobConfig.model_validate({"name": "local", **config}).to_options()
    train_model(tmp_path / "train.conllu", tmp_path / "dev.conllu", tmp_path / "local", options, progress=False)
    assert_same_arrays(tmp_path / "local", tmp_path / "data" / "models" / "on-dask" / "v1")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on return: nothing listens there


@pytest.mark.slow
def test_an_unreachable_scheduler_fails_the_job_with_one_line_and_no_model(ewt_dir: Path, tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{_closed_port()}"
    train = first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 30)
    job, _ = run_job(tmp_path / "data", address, train, train, 300)
    assert job["status"] == "failed", job
    error = job["error"]
    assert error.startswith(f"ConnectionError: cannot reach the Dask scheduler at {address}"), error
    assert "\n" not in error
    models = tmp_path / "data" / "models"
    assert not models.exists() or not [p for p in models.rglob("*") if p.is_file()]  # no model, no partial one
