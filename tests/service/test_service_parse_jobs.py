"""Batch parse jobs (``POST /jobs`` with ``config.kind = "parse"``): the real server and worker processes parse
an uploaded file into the CLI's output byte for byte, stream it back, cancel, expire; bad requests get 4xx."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from service_helpers import MODELS, ServerProcess, running_server

from engine.cli import main as engine_main
from engine.data.conllu_io import read_conllu
from service.app import create_app
from service.jobs.layout import DataLayout
from service.jobs.scheduler import Scheduler
from service.jobs.store import JobStore
from service.settings import Settings

KEY = "batch-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SLACK = 10.0  # deadlines are for a hang, not a pace


def untagged(path: Path, count: int) -> str:
    """The first ``count`` sentences of a treebank with UPOS, XPOS, HEAD and DEPREL blanked: what a user
    sends to be tagged and parsed."""
    blocks = path.read_text(encoding="utf-8").split("\n\n")[:count]
    out = []
    for block in blocks:
        lines = []
        for line in block.split("\n"):
            cols = line.split("\t")
            if len(cols) == 10:
                cols[3:8] = ["_"] * 5
                line = "\t".join(cols)
            lines.append(line)
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n\n"


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout * SLACK
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def submit(client: httpx.Client | TestClient, text: str, config: dict[str, Any]) -> httpx.Response:
    return client.post("/jobs", files={"input": ("input.conllu", text.encode(), "text/plain")},
                       data={"config": json.dumps({"kind": "parse", **config})}, headers=AUTH)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    with running_server(tmp_path_factory.mktemp("batch") / "data", {"API_KEY": KEY}) as (proc, client):
        yield proc, client


@pytest.mark.slow
def test_a_parse_job_writes_what_the_cli_writes(server: tuple[ServerProcess, httpx.Client], ewt_dir: Path,
                                                 tmp_path: Path) -> None:
    """600 untagged dev sentences (more than one chunk): the job's result is the CLI's output for the same
    model, byte for byte; progress rises to 1, the metrics count the sentences, the upload is deleted."""
    proc, client = server
    text = untagged(ewt_dir / "en_ewt-ud-dev.conllu", 600)
    r = submit(client, text, {"model": "en_ewt", "sentence_confidence": True})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    seen: list[float] = []

    def finished() -> dict[str, Any] | None:
        job = client.get(f"/jobs/{job_id}", headers=AUTH).json()
        seen.append(job["progress"])
        return job if job["status"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(finished, 120, "the parse job")
    assert job["status"] == "succeeded", job
    assert job["kind"] == "parse" and job["result"] == f"/jobs/{job_id}/result" and job["progress"] == 1.0
    assert seen == sorted(seen)
    assert job["model"]["name"] == "en_ewt" and job["config"]["model"] == f"en_ewt@{job['model']['version']}"
    words = sum(s.n for s in read_conllu(io.StringIO(text)))
    assert job["metrics"]["sentences"] == 600 and job["metrics"]["words"] == words
    wait_for(lambda: not (proc.data_dir / "uploads" / job_id).exists(), 30, "the upload to be deleted")

    result = client.get(f"/jobs/{job_id}/result", headers=AUTH)
    assert result.status_code == 200 and result.headers["content-type"].startswith("text/plain")
    source = tmp_path / "input.conllu"
    source.write_text(text, encoding="utf-8")
    expected = tmp_path / "cli.conllu"
    assert engine_main(["parse", "--model", str(MODELS / "en_ewt"), "--input", str(source), "--output",
                        str(expected), "--sentence-confidence"]) == 0
    assert result.content == expected.read_bytes()
    assert client.get(f"/jobs/{job_id}/result").status_code == 401  # the key is needed here too


@pytest.mark.slow
def test_a_parse_job_on_a_dask_cluster_writes_what_the_cli_writes(ewt_dir: Path, tmp_path: Path) -> None:
    """``PARSER_DASK_SCHEDULER`` set: the job's chunks are parsed by a 2-process LocalCluster's workers, and the
    result is still the CLI's output byte for byte."""
    distributed = pytest.importorskip("distributed")
    text = untagged(ewt_dir / "en_ewt-ud-dev.conllu", 1100)  # three chunks
    source = tmp_path / "input.conllu"
    source.write_text(text, encoding="utf-8")
    expected = tmp_path / "cli.conllu"
    assert engine_main(["parse", "--model", str(MODELS / "en_ewt"), "--input", str(source), "--output",
                        str(expected)]) == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dask:
        proc = ServerProcess(tmp_path / "data", workers=1,
                             env={"API_KEY": KEY, "PARSER_DASK_SCHEDULER": dask.scheduler_address})
        try:
            proc.wait_ready()
            with httpx.Client(base_url=proc.url, timeout=60) as client:
                job_id = submit(client, text, {}).json()["id"]
                job = wait_for(lambda: (j := client.get(f"/jobs/{job_id}", headers=AUTH).json())["status"] in
                               ("succeeded", "failed", "cancelled") and j, 240, "the parse job")
                assert job["status"] == "succeeded", job
                assert client.get(f"/jobs/{job_id}/result", headers=AUTH).content == expected.read_bytes()
        finally:
            proc.stop()
        with distributed.Client(dask) as observer:  # the chunks did run on the cluster's workers
            prefixes = observer.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.task_prefixes))
            assert "remote_chunk" in prefixes  # Dask strips the leading underscore


@pytest.mark.slow
def test_cancelling_a_parse_job_leaves_no_result(server: tuple[ServerProcess, httpx.Client], ewt_dir: Path) -> None:
    proc, client = server
    text = untagged(ewt_dir / "en_ewt-ud-train.conllu", 6000)
    job_id = submit(client, text, {}).json()["id"]
    wait_for(lambda: client.get(f"/jobs/{job_id}", headers=AUTH).json()["progress"] > 0, 120, "parsing to start")
    assert client.delete(f"/jobs/{job_id}", headers=AUTH).status_code == 202
    job = wait_for(lambda: (j := client.get(f"/jobs/{job_id}", headers=AUTH).json())["status"] in
                   ("cancelled", "succeeded", "failed") and j, 60, "the cancellation")
    assert job["status"] == "cancelled" and job["result"] is None
    assert client.get(f"/jobs/{job_id}/result", headers=AUTH).status_code == 409
    assert not [p for p in (proc.data_dir / "results").iterdir() if job_id in p.name]


@pytest.fixture()
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The app with the shipped models and no worker: jobs stay queued."""
    monkeypatch.setenv("API_KEY", KEY)
    app = create_app(Settings(models_dir=MODELS, data_dir=tmp_path / "data", workers=0))
    with TestClient(app, raise_server_exceptions=False) as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, 60, "readiness")
        yield client


GOOD = "1\tDogs\t_\t_\t_\t_\t_\t_\t_\t_\n2\tbark\t_\t_\t_\t_\t_\t_\t_\t_\n\n"


@pytest.mark.parametrize(("files", "config", "status", "field"), [
    ({}, {}, 422, "input"),
    ({"input": GOOD}, {"model": "no-such-model"}, 422, "config.model"),
    ({"input": GOOD}, {"input_format": "text", "model": "en_ewt-o1"}, 422, "config.input_format"),
    ({"input": GOOD}, {"tag_samples": 1000}, 422, "config.tag_samples"),
    ({"input": GOOD}, {"unknown": 1}, 422, "config.unknown"),
    ({"input": GOOD + "1\tx\n\n"}, {}, 422, "input"),
    ({"input": "\n\n"}, {}, 422, "input"),
    ({"input": b"\xff\xfe".decode("latin-1")}, {"input_format": "text"}, 422, "input"),
])
def test_bad_parse_jobs_are_refused(api: TestClient, files: dict[str, str], config: dict[str, Any], status: int,
                                    field: str) -> None:
    body = {name: (name, text.encode("latin-1" if "\xff" in text else "utf-8"), "text/plain")
            for name, text in files.items()}
    r = api.post("/jobs", files=body or {"dev": ("d", b"", "text/plain")},
                 data={"config": json.dumps({"kind": "parse", **config})}, headers=AUTH)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field
    assert api.get("/jobs", headers=AUTH).json()["jobs"] == []


def test_results_are_only_for_parse_jobs_that_succeeded(api: TestClient) -> None:
    queued = submit(api, GOOD, {}).json()["id"]
    job = api.get(f"/jobs/{queued}", headers=AUTH).json()
    assert job["status"] == "queued" and job["kind"] == "parse" and job["config"]["model"].startswith("en_ewt@")
    assert api.get(f"/jobs/{queued}/result", headers=AUTH).json()["type"].endswith(":job-not-succeeded")
    assert api.get(f"/jobs/{'0' * 32}/result", headers=AUTH).status_code == 404
    kind = api.post("/jobs", files={"input": ("i", GOOD.encode(), "text/plain")},
                    data={"config": json.dumps({"kind": "bogus"})}, headers=AUTH)
    assert kind.status_code == 422 and kind.json()["field"] == "config.kind"
    no_train = api.post("/jobs", data={"config": json.dumps({"epochs": 1})}, headers=AUTH)
    assert no_train.status_code == 422 and no_train.json()["field"] == "train"


def test_expired_and_partial_results_are_deleted(tmp_path: Path) -> None:
    """The retention sweep: a result older than the retention period (counted from the job's end) goes, a
    newer one stays; a partial file goes once its job is not running; files of unknown jobs go."""
    layout = DataLayout.at(tmp_path)
    layout.create()
    store = JobStore(layout.database)
    for job_id in ("old", "new", "run"):
        store.create(job_id, {"kind": "parse"}, "input", None)
    for _ in ("old", "new", "run"):
        assert store.claim_next("node#1") is not None
    store.finish("old", "node#1", "succeeded")
    store.finish("new", "node#1", "succeeded")
    paths = {name: layout.results / name for name in ("old.conllu", "new.conllu", ".run.conllu.1.ab.tmp",
                                                      ".new.conllu.2.cd.tmp", "gone.conllu")}
    for path in paths.values():
        path.write_text("x")
    scheduler = Scheduler(store, layout.trained_dir, 0, "node", results_dir=layout.results, result_retention=3600)
    old_end = store.get("old").updated  # type: ignore[union-attr]
    removed = scheduler._expire_results(now=old_end + 1800)
    assert sorted(removed) == [".new.conllu.2.cd.tmp", "gone.conllu"]
    with store._write() as db:  # the first job ended two hours before the sweep
        db.execute("UPDATE jobs SET updated = ? WHERE id = 'old'", (old_end - 7200,))
    assert scheduler._expire_results(now=old_end) == ["old.conllu"]
    assert sorted(p.name for p in layout.results.iterdir()) == [".run.conllu.1.ab.tmp", "new.conllu"]
    assert os.path.exists(paths["new.conllu"])
