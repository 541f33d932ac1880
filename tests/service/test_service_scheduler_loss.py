"""A training job on a Dask cluster whose scheduler is SIGKILLed mid-job (issue 27's failure bullet): the job
fails with one line naming the lost scheduler, within a bounded time (no hang), the model registry gets no
model, half-written or whole, and the API keeps answering /models and /parse while the cluster is down."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster_helpers import TIMEOUT, SchedulerProcesses
from service_helpers import WORDS2, running_server
from test_service_train_cluster import AUTH, KEY, first_sentences, wait_for

# seeds 2: the tagger's folds, the seeds' parsers and the labeller's folds are the cluster's tasks
CONFIG = {"name": "lost", "epochs": 3, "dim": 2**18, "seeds": 2}
ENDED = ("succeeded", "failed", "cancelled")


def _serving(client: httpx.Client) -> list[dict[str, Any]]:
    """The API answers: a sentence parsed, its models listed (returned)."""
    r = client.post("/parse", json={"tokens": [WORDS2]})
    assert r.status_code == 200, r.text
    assert len(r.json()["sentences"][0]["tokens"]) == len(WORDS2)
    r = client.get("/models")
    assert r.status_code == 200, r.text
    return list(r.json()["models"])


@pytest.mark.slow
def test_a_killed_scheduler_fails_the_job_cleanly_and_the_api_keeps_serving(ewt_dir: Path, tmp_path: Path) -> None:
    from distributed import Client

    train = first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 300)
    dev = first_sentences(ewt_dir / "en_ewt-ud-dev.conllu", 50)
    data = tmp_path / "data"
    with SchedulerProcesses(tmp_path / "dask") as dask, \
            running_server(data, {"API_KEY": KEY, "PARSER_DASK_SCHEDULER": dask.address}) as (_, client):
        before = _serving(client)
        files = {"train": ("train.conllu", train.encode(), "text/plain"),
                 "dev": ("dev.conllu", dev.encode(), "text/plain")}
        r = client.post("/jobs", files=files, data={"config": json.dumps(CONFIG)}, headers=AUTH)
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]

        def job() -> dict[str, Any]:
            return client.get(f"/jobs/{job_id}", headers=AUTH).json()

        with Client(dask.address, timeout=TIMEOUT) as observer:  # the job's tasks are running on the workers
            wait_for(lambda: job()["status"] in ENDED or any(
                key.startswith("run_task") for keys in observer.processing().values() for key in keys),
                600, "the job's first task on the workers")
        assert job()["status"] == "running", job()
        dask.scheduler.send_signal(signal.SIGKILL)
        dask.scheduler.wait(30)
        assert _serving(client) == before  # the cluster is down (the job may still run): the API answers

        # bounded: the client notices the closed connection at once; a wait on it fails within its reconnect time
        finished = wait_for(lambda: (j := job())["status"] in ENDED and j, 180, "the job to end")
        assert finished["status"] == "failed", finished
        error = finished["error"]
        assert error.startswith(f"ConnectionError: lost the Dask scheduler at {dask.address}"), error
        assert "\n" not in error
        assert _serving(client) == before  # the registry as it was: no model "lost"
        # Dask's workers stop by themselves when their scheduler is gone
        wait_for(lambda: all(w.poll() is not None for w in dask.workers), 120, "the workers to stop")
    models = data / "models"  # the registry of trained models: nothing, not even a temporary directory
    assert not models.exists() or not list(models.rglob("*")), list(models.rglob("*"))
