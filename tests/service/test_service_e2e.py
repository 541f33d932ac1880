"""The real server process over real HTTP: every endpoint, the API key, a training job on 200 EWT sentences
whose model then parses, cancellation of a running job, and a restart with a job left running."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import TAGS, TAGS2, WORDS, WORDS2, ServerProcess, running_server

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def first_sentences(path: Path, count: int) -> str:
    blocks = path.read_text(encoding="utf-8").split("\n\n")
    return "\n\n".join(blocks[:count]) + "\n\n"


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    r = client.get(f"/jobs/{job_id}", headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()


def submit(client: httpx.Client, train: str, config: dict[str, Any], key: str | None = None,
           dev: str | None = None) -> httpx.Response:
    files: dict[str, Any] = {"train": ("train.conllu", train.encode(), "text/plain")}
    if dev is not None:
        files["dev"] = ("dev.conllu", dev.encode(), "text/plain")
    headers = {**AUTH, **({"Idempotency-Key": key} if key else {})}
    return client.post("/jobs", files=files, data={"config": json.dumps(config)}, headers=headers)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    with running_server(tmp_path_factory.mktemp("e2e") / "data", {"API_KEY": KEY}) as (proc, client):
        yield proc, client


def test_e2e_every_endpoint(server: tuple[ServerProcess, httpx.Client]) -> None:
    _, c = server
    req = {"tokens": [WORDS, WORDS2], "tags": [TAGS, TAGS2]}
    assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
    parsed = c.post("/parse", json=req).json()
    assert parsed["model"]["name"] == "en_ewt" and len(parsed["sentences"]) == 2
    conllu = c.post("/parse", json={**req, "output": "conllu"})
    assert conllu.headers["content-type"].startswith("text/conllu") and "HeadProb=" in conllu.text
    marg = c.get("/marginals", params={"tokens": WORDS2, "tags": TAGS2}).json()
    assert len(marg["sentences"][0]["marginals"]) == 3
    assert c.post("/marginals", json=req).status_code == 200
    assert c.post("/confidence", json=req).json()["sentences"][0]["eta"] == 0.0
    assert len(c.post("/kbest", json={**req, "k": 3}).json()["sentences"][0]["trees"]) == 3
    assert len(c.post("/sample", json={**req, "n": 4, "seed": 1}).json()["sentences"][1]["trees"]) == 4
    assert c.get("/models").json()["default"] == "en_ewt"
    assert "parser_requests_total" in c.get("/metrics").text
    assert c.get("/").headers["content-type"].startswith("text/html")
    assert c.get("/openapi.json").json()["paths"].keys() >= {"/parse", "/marginals", "/jobs", "/jobs/{job_id}"}
    assert c.post("/parse", json={"tokens": [WORDS], "text": "x"}).status_code == 422
    assert c.post("/parse", json={"tokens": [["w"] * 501], "tags": [["X"] * 501]}).json()["sentence"] == 0


def test_e2e_docs_work_offline(server: tuple[ServerProcess, httpx.Client]) -> None:
    """/docs and /redoc load their scripts, styles and icon from the service itself (they loaded Swagger UI
    from a CDN: a blank page without internet), and the service serves those assets."""
    import re

    _, c = server
    kinds = {".js": "javascript", ".css": "text/css", ".png": "image/png"}
    for page, script in (("/docs", "SwaggerUIBundle"), ("/redoc", "Redoc")):
        r = c.get(page)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), page
        assert not re.search(r"(https?:)?//[A-Za-z0-9]", r.text), f"{page} refers to another host:\n{r.text}"
        assets = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert any(a.endswith(".js") for a in assets) and any(a.endswith(".png") for a in assets), assets
        for asset in assets:
            served = c.get(asset)
            kind = kinds[Path(asset).suffix]
            assert served.status_code == 200 and kind in served.headers["content-type"], (asset, served.headers)
            if kind == "javascript":
                assert script in served.text and len(served.content) > 100_000, asset
    assert '"validatorUrl": null' in c.get("/docs").text  # no badge fetched from an online validator


def test_e2e_jobs_need_the_key(server: tuple[ServerProcess, httpx.Client]) -> None:
    _, c = server
    assert c.get("/jobs").status_code == 401
    r = c.get("/jobs", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
    assert c.get("/jobs", headers=AUTH).status_code == 200
    assert c.post("/parse", json={"tokens": [WORDS2], "tags": [TAGS2]}).status_code == 200  # parsing stays open


def test_e2e_bad_upload_names_the_line(server: tuple[ServerProcess, httpx.Client]) -> None:
    _, c = server
    bad = "1\tDogs\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tbark\t_\tVERB\t_\t_\tx\troot\t_\t_\n\n"
    r = submit(c, bad, {"name": "bad"})
    assert r.status_code == 422 and r.json()["field"] == "train" and r.json()["line"] == 2
    r = submit(c, "1\tDogs\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n", {"name": "x", "epochs": 0})
    assert r.status_code == 422 and r.json()["field"] == "config.epochs"
    r = submit(c, "1\tDogs\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n", {"name": "en_ewt"})
    assert r.status_code == 422 and r.json()["field"] == "config.name"
    assert c.get("/jobs/" + "0" * 32, headers=AUTH).status_code == 404


@pytest.mark.slow
def test_e2e_training_job_then_parse_with_its_model(server: tuple[ServerProcess, httpx.Client],
                                                    ewt_dir: Path) -> None:
    _, c = server
    train = first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 200)
    dev = first_sentences(ewt_dir / "en_ewt-ud-dev.conllu", 50)
    config = {"name": "tiny-e2e", "epochs": 2, "dim": 2**18}
    r = submit(c, train, config, key="tiny-1", dev=dev)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert r.json()["status"] == "queued" and r.headers["location"] == f"/jobs/{job_id}"
    again = submit(c, train, config, key="tiny-1", dev=dev)
    assert again.status_code == 202 and again.json()["id"] == job_id  # same key, same request: same job
    assert submit(c, train, {**config, "epochs": 3}, key="tiny-1").status_code == 422  # same key, other request
    done = wait_for(lambda: (j := job(c, job_id))["status"] in ("succeeded", "failed") and j, 180, "the job")
    assert done["status"] == "succeeded", done
    assert done["progress"] == 1.0 and done["model"] == {"name": "tiny-e2e", "version": 1}
    assert done["metrics"]["dev"]["uas"] > 30
    uploads = server[0].data_dir / "uploads" / job_id  # retention: a terminal job's uploads are deleted
    wait_for(lambda: not uploads.exists(), 30, "the uploads of the succeeded job to be deleted")
    assert any(j["id"] == job_id for j in c.get("/jobs", headers=AUTH).json()["jobs"])
    models = c.get("/models").json()["models"]
    assert any(m["name"] == "tiny-e2e" and m["version"] == 1 for m in models)
    parsed = c.post("/parse", json={"tokens": [WORDS2], "tags": [TAGS2], "model": "tiny-e2e"})
    assert parsed.status_code == 200 and parsed.json()["model"] == {"name": "tiny-e2e", "version": 1}
    # a job builds the whole pipeline by default: raw text is split, tagged, parsed and labelled
    entry = next(m for m in models if m["name"] == "tiny-e2e")
    assert entry["components"] == ["tokenizer", "tagger", "parser", "labeler", "lemmatizer", "morph"]
    assert not entry["needs_tags"]
    from_text = c.post("/parse", json={"text": "Dogs bark. Cats sleep all day.", "model": "tiny-e2e"})
    assert from_text.status_code == 200, from_text.text
    words = [t for s in from_text.json()["sentences"] for t in s["tokens"]]
    assert [t["form"] for t in words][:2] == ["Dogs", "bark"] and all(t["upos"] != "_" and t["deprel"] for t in words)
    # and LEMMA and FEATS from the job's lemmatizer and morphological tagger, with the bundles' probabilities
    assert all(t["lemma"] != "_" and 0 < t["feats_prob"] <= 1 for t in words)
    assert c.delete(f"/jobs/{job_id}", headers=AUTH).status_code == 409  # finished jobs cannot be cancelled


@pytest.mark.slow
def test_e2e_cancel_a_running_job(server: tuple[ServerProcess, httpx.Client], ewt_dir: Path) -> None:
    proc, c = server
    train = first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 3000)
    r = submit(c, train, {"name": "to-cancel", "epochs": 30, "dim": 2**18})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    wait_for(lambda: job(c, job_id)["status"] == "running" and job(c, job_id)["progress"] > 0, 120, "running")
    queued = submit(c, first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 20), {"name": "queued-cancel"})
    queued_id = queued.json()["id"]  # the one worker is busy: this job waits in the queue
    assert queued.status_code == 202 and (proc.data_dir / "uploads" / queued_id / "train.conllu").is_file()
    r = c.delete(f"/jobs/{job_id}", headers=AUTH)
    assert r.status_code == 202 and r.json()["status"] in ("running", "cancelled")
    assert r.json()["stage"] in ("cancelling", "cancelled")
    cancelled = wait_for(lambda: (j := job(c, job_id))["status"] == "cancelled" and j, 30, "cancellation")
    assert cancelled["stage"] == "cancelled", cancelled  # it stayed "cancelling"
    r = c.delete(f"/jobs/{queued_id}", headers=AUTH)
    assert r.status_code == 202 and r.json()["status"] == "cancelled" and r.json()["stage"] == "cancelled", r.text
    for ended in (job_id, queued_id):  # retention: a cancelled job's uploads are deleted
        wait_for(lambda e=ended: not (proc.data_dir / "uploads" / e).exists(), 30, f"the uploads of {ended}")
    assert all(m["name"] != "to-cancel" for m in c.get("/models").json()["models"])
    trained = proc.data_dir / "models"
    assert not (trained / "to-cancel").exists() or not any((trained / "to-cancel").iterdir())


@pytest.mark.slow
def test_e2e_restart_fails_the_job_left_running(tmp_path: Path, ewt_dir: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data, workers=1, node="restart/api", env={"API_KEY": KEY})
    second = ServerProcess(data, workers=1, node="restart/api", env={"API_KEY": KEY}, start=False)
    try:
        first.wait_ready()
        with httpx.Client(base_url=first.url, timeout=60) as c:
            train = first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 3000)
            job_id = submit(c, train, {"name": "orphan", "epochs": 30, "dim": 2**18}).json()["id"]
            wait_for(lambda: job(c, job_id)["status"] == "running", 120, "running")
        first.kill()  # the server dies without any chance to clean up; its training child is orphaned
        second.start()
        second.wait_ready()
        with httpx.Client(base_url=second.url, timeout=60) as c:
            after = job(c, job_id)
            assert after["status"] == "failed" and "stopped" in after["error"], after
            assert not (data / "uploads" / job_id).exists()  # a terminal job's uploads are deleted at start-up
            time.sleep(2.0)  # the orphaned child notices its parent is gone and must not publish anything
            assert job(c, job_id)["status"] == "failed"
            assert all(m["name"] != "orphan" for m in c.get("/models").json()["models"])
            assert not (data / "models" / "orphan").exists() or not any((data / "models" / "orphan").iterdir())
    finally:
        second.stop()
        first.stop()
