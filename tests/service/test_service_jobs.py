"""Training jobs: the SQLite job store (idempotency, cancellation, ownership, recovery, versions), the job
config, and the scheduler end to end with real child processes training on the first sentences of EWT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import ValidationError

from engine.bp_parser import load_any
from engine.model.store import file_sha256
from engine.training.pipeline import train_model
from service.jobs.config import JobConfig
from service.jobs.layout import DataLayout
from service.jobs.runner import run_job
from service.jobs.scheduler import Scheduler
from service.jobs.store import (
    STOPPED_ERROR,
    IdempotencyConflict,
    Job,
    JobFinished,
    JobNotFound,
    JobStore,
    owner_id,
    request_hash,
)

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "jobs.sqlite3")


def _config(**fields: Any) -> dict[str, Any]:
    return JobConfig(**fields).model_dump()


SLACK = 10.0  # deadlines are for a hang, not a pace: a loaded 2-core machine runs these jobs several times slower


def _wait(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``SLACK * timeout`` seconds (it
    returns as soon as the condition holds, so a generous deadline costs a passing test nothing)."""
    timeout *= SLACK
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# -- the store ------------------------------------------------------------------------------------
def test_create_is_idempotent_per_key(store: JobStore) -> None:
    job, created = store.create("a", _config(), "t.conllu", None, "key-1", "hash-1")
    assert created and job.status == "queued" and job.progress == 0.0 and job.config["name"] == "custom"
    again, created = store.create("b", _config(), "t.conllu", None, "key-1", "hash-1")
    assert not created and again.id == "a" and store.get("b") is None
    with pytest.raises(IdempotencyConflict):
        store.create("c", _config(), "t.conllu", None, "key-1", "hash-2")
    assert store.find_by_key("key-1").id == "a" and store.find_by_key("nope") is None  # type: ignore[union-attr]
    # no key: every request is a new job
    assert store.create("d", _config(), "t.conllu", "d.conllu")[1] and store.create("e", _config(), "t.conllu", None)[1]
    assert [j.id for j in store.list(10)] == ["e", "d", "a"] and [j.id for j in store.list(1)] == ["e"]
    assert request_hash({"a": 1}, "x", None) == request_hash({"a": 1}, "x", None) != request_hash({"a": 2}, "x", None)
    public = job.public()
    assert set(public) == {"id", "kind", "status", "progress", "stage", "metrics", "model", "error", "config",
                           "created", "updated", "result"}
    assert public["kind"] == "train" and public["result"] is None
    assert public["created"].endswith("Z") and json.loads(json.dumps(public)) == public


def test_cancel_in_each_state(store: JobStore) -> None:
    for job_id in "abc":
        store.create(job_id, _config(), "t.conllu", None)
    cancelled = store.request_cancel("a")  # queued: at once
    assert cancelled.status == "cancelled" and cancelled.stage == "cancelled"
    running = store.claim_next("n#1")
    assert running is not None and running.id == "b" and running.status == "running" and running.owner == "n#1"
    job = store.request_cancel("b")  # running: requested; the runner stops and records it
    assert job.status == "running" and job.cancel_requested and job.stage == "cancelling"
    assert store.set_progress("b", "n#1", 0.5, "training") is True  # the runner learns it should stop
    assert store.get("b").stage == "cancelling"  # type: ignore[union-attr]
    assert store.finish("b", "n#1", "cancelled")
    for job_id in "ab":  # finished: unchanged
        with pytest.raises(JobFinished) as info:
            store.request_cancel(job_id)
        assert info.value.job.status == "cancelled" and info.value.job.stage == "cancelled"
    with pytest.raises(JobNotFound):
        store.request_cancel("zzz")
    assert store.counts() == {"queued": 1, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 2}


def test_progress_and_finish_only_by_the_owner(store: JobStore) -> None:
    store.create("a", _config(), "t.conllu", None)
    assert store.claim_next("n#1").id == "a" and store.claim_next("n#1") is None  # type: ignore[union-attr]
    assert store.counts()["running"] == 1
    assert store.set_progress("a", "n#1", 0.4, "training") is False
    assert store.set_progress("a", "n#1", 0.3, "training") is False  # progress never goes back
    assert store.get("a").progress == pytest.approx(0.4)  # type: ignore[union-attr]
    assert store.set_progress("a", "other#1", 0.9, "training") is True  # not its job: told to stop, not written
    assert store.get("a").progress == pytest.approx(0.4)  # type: ignore[union-attr]
    assert not store.finish("a", "other#1", "succeeded")
    assert store.finish("a", "n#1", "failed", error="boom")
    assert not store.finish("a", "n#1", "succeeded")  # an orphaned child cannot overwrite a final status
    job = store.get("a")
    assert job is not None and job.status == "failed" and job.error == "boom" and job.model is None
    with pytest.raises(ValueError, match="not a final status"):
        store.finish("a", "n#1", "running")
    store.create("b", _config(), "t.conllu", None)
    store.claim_next("n#1")
    assert store.heartbeat("n#1") == 1 and store.heartbeat("other#1") == 0
    assert store.finish("b", "n#1", "succeeded", metrics={"dev": {"uas": 80.0}}, model={"name": "x", "version": 1})
    public = store.get("b").public()  # type: ignore[union-attr]
    assert public["progress"] == 1.0 and public["model"] == {"name": "x", "version": 1} and public["stage"] == "done"
    assert public["metrics"] == {"dev": {"uas": 80.0}}


def test_recover_earlier_boot_and_stale_heartbeat(store: JobStore) -> None:
    for job_id in ("old-boot", "other-node", "current", "stale", "queued"):
        store.create(job_id, _config(), "t.conllu", None)
    for job_id, owner in (("old-boot", owner_id("n", 100)), ("other-node", owner_id("m", 100)),
                          ("current", owner_id("n", 200)), ("stale", owner_id("m", 50))):
        assert store.claim_next(owner).id == job_id  # type: ignore[union-attr]
    with store._write() as db:  # the "stale" job's runner stopped heartbeating two minutes ago
        db.execute("UPDATE jobs SET heartbeat = ? WHERE id = 'stale'", (time.time() - 120,))
    assert sorted(store.recover("n", 200, stale_seconds=60)) == ["old-boot", "stale"]
    for job_id in ("old-boot", "stale"):
        job = store.get(job_id)
        assert job is not None and job.status == "failed" and job.error == STOPPED_ERROR
    assert [store.get(j).status for j in ("other-node", "current", "queued")] == [  # type: ignore[union-attr]
        "running", "running", "queued"]
    assert store.recover(None, 10**30) == []  # no node: only the heartbeat rule


def test_allocate_version_never_reuses_a_directory(store: JobStore, tmp_path: Path) -> None:
    assert [store.allocate_version("a"), store.allocate_version("a"), store.allocate_version("b")] == [1, 2, 1]
    (tmp_path / "models" / "b" / "v7").mkdir(parents=True)
    (tmp_path / "models" / "b" / "latest").mkdir()
    assert store.allocate_version("b", tmp_path / "models") == 8
    assert JobStore(store.path).allocate_version("a") == 3  # kept in the database


def test_job_config() -> None:
    config = JobConfig.model_validate({"name": "my-model_1.0", "order": 2, "factors": ["sib", "grand", "sib"]})
    assert config.factors == ["sib", "grand"] and config.epochs == 8 and config.dim == 2**22
    options = config.to_options()
    assert options.order == 2 and options.factors == ("sib", "grand") and options.name == "my-model_1.0"
    assert options.tag_samples == 0 and JobConfig(tag_samples=4).to_options().tag_samples == 4
    assert options.seeds == 1 and JobConfig(seeds=3).to_options().seeds == 3
    assert options.effective_labeler_tag_samples == 1
    assert JobConfig(labeler_tag_samples=0).to_options().effective_labeler_tag_samples == 0
    for bad in ({"name": "../x"}, {"name": ""}, {"epochs": 0}, {"epochs": 51}, {"order": 3}, {"factors": ["cousin"]},
                {"dim": 2**25}, {"learning_rate": 0}, {"bp_iterations": 21}, {"unknown": 1}, {"max_sentences": 0},
                {"l2": float("nan")}, {"tag_samples": 17}, {"tag_samples": 2, "components": ["parser"]},
                {"seeds": 0}, {"seeds": 11}, {"labeler_tag_samples": 17},
                {"labeler_tag_samples": 1, "components": ["parser", "labeler"]}):
        with pytest.raises(ValidationError):
            JobConfig.model_validate(bad)
    schema = JobConfig.model_json_schema()
    assert all("description" in field for field in schema["properties"].values())


def test_job_config_fields_are_the_engine_options_within_the_service_limits() -> None:
    """Every job option is a ``TrainOptions`` field with its default; bounds are the engine's, narrowed by
    ``JOB_LIMITS`` (so a job never gets more tag samples than a request may ask for); ``name`` and
    ``calibrate`` are the service's own."""
    from engine.training import options as train_options
    from service.settings import JOB_LIMITS

    declared = {name for name, spec in train_options.specs().items() if spec.job}
    assert set(JobConfig.model_fields) == declared | {"name", "calibrate"} and set(JOB_LIMITS) <= declared
    assert JobConfig().to_options() == train_options.TrainOptions(name="custom")
    schema = JobConfig.model_json_schema()["properties"]
    assert schema["tag_samples"]["maximum"] == JOB_LIMITS["tag_samples"]["le"] < train_options.MAX_TAG_SAMPLES
    assert schema["labeler_tag_samples"]["anyOf"][0]["maximum"] == train_options.MAX_LABELER_TAG_SAMPLES
    assert schema["learning_rate"]["anyOf"][0]["exclusiveMinimum"] == 0


# -- child-process targets (module level, so a spawned child can import them) --------------------
def _exploding_train(train_path: str, dev_path: str | None, out_dir: Path, options: Any, **kw: Any) -> dict:
    report = kw.pop("on_progress")

    def explode(fraction: float, stage: str) -> None:
        report(fraction, stage)
        if stage == "training" and fraction > 0.3:
            Path(out_dir).mkdir(parents=True)
            (Path(out_dir) / "weights.npy").write_bytes(b"partial")
            raise RuntimeError("simulated training failure")

    return train_model(train_path, dev_path, out_dir, options, on_progress=explode, **kw)


def _exploding_job(db_path: str, job_id: str, trained_dir: str, owner: str) -> None:
    run_job(db_path, job_id, trained_dir, owner, train=_exploding_train)


def _crashing_job(db_path: str, job_id: str, trained_dir: str, owner: str) -> None:
    os._exit(3)


def _stubborn_job(db_path: str, job_id: str, trained_dir: str, owner: str) -> None:
    (Path(trained_dir) / f".job-{job_id}.stubborn").mkdir()  # a temporary model the scheduler must clean up
    time.sleep(60)  # never looks at cancellation


def _dispatch(db_path: str, job_id: str, trained_dir: str, owner: str) -> None:
    """Each test job's config name says how its child behaves."""
    name = JobStore(db_path).get(job_id).config["name"]  # type: ignore[union-attr]
    target = {"explode": _exploding_job, "crash": _crashing_job, "stubborn": _stubborn_job}.get(name, run_job)
    target(db_path, job_id, trained_dir, owner)


# -- the scheduler --------------------------------------------------------------------------------
def _first_sentences(source: Path, n: int, out: Path) -> Path:
    blocks = [b for b in source.read_text(encoding="utf-8").split("\n\n") if b.strip()][:n]
    out.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def treebanks(ewt_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("treebanks")
    train = ewt_dir / "en_ewt-ud-train.conllu"
    return {"small": _first_sentences(train, 200, tmp / "small.conllu"),
            "large": _first_sentences(train, 1000, tmp / "large.conllu"),
            "dev": _first_sentences(ewt_dir / "en_ewt-ud-dev.conllu", 50, tmp / "dev.conllu")}


@pytest.fixture()
def layout(tmp_path: Path) -> DataLayout:
    layout = DataLayout.at(tmp_path / "data")
    layout.create()
    return layout


@pytest.fixture()
def running(layout: DataLayout) -> Iterator[Callable[..., tuple[Scheduler, list[Job]]]]:
    """Start a scheduler on ``layout`` (stopped after the test); returns it and its finished jobs."""
    schedulers: list[Scheduler] = []

    def start(workers: int, **kw: Any) -> tuple[Scheduler, list[Job]]:
        finished: list[Job] = []
        scheduler = Scheduler(JobStore(layout.database), layout.trained_dir, workers, "test-node",
                              on_finished=finished.append, poll_seconds=0.05, **kw)
        schedulers.append(scheduler)
        scheduler.start()
        return scheduler, finished

    yield start
    for scheduler in schedulers:
        scheduler.stop(timeout=10)


def _submit(store: JobStore, layout: DataLayout, job_id: str, train: Path, dev: Path | None = None,
            **config: Any) -> None:
    """What the app does: copy the uploads into DIR/uploads/<id>/ and queue the job."""
    layout.upload_dir(job_id).mkdir(parents=True)
    train_path = layout.train_file(job_id)
    train_path.write_bytes(train.read_bytes())
    dev_path = None
    if dev is not None:
        dev_path = layout.dev_file(job_id)
        dev_path.write_bytes(dev.read_bytes())
    store.create(job_id, _config(**config), train_path, dev_path)


def _leftovers(layout: DataLayout) -> list[str]:
    return sorted(str(p.relative_to(layout.trained_dir)) for p in layout.trained_dir.rglob("*"))


@pytest.mark.slow
def test_scheduler_trains_and_versions_models(layout: DataLayout, treebanks: dict[str, Path],
                                              running: Callable[..., tuple[Scheduler, list[Job]]]) -> None:
    store = JobStore(layout.database)
    for job_id, calibrate in (("first", True), ("second", False)):
        _submit(store, layout, job_id, treebanks["small"], treebanks["dev"], name="tiny", epochs=2, dim=2**16,
                calibrate=calibrate)
    scheduler, finished = running(workers=2)
    _wait(lambda: len(finished) == 2, 60, "both jobs to finish")
    assert scheduler.running == []
    jobs = {job_id: store.get(job_id) for job_id in ("first", "second")}
    versions = set()
    for job in jobs.values():
        assert job is not None and job.status == "succeeded", job
        assert job.progress == 1.0 and job.error is None and job.model is not None and job.model["name"] == "tiny"
        assert job.metrics is not None and job.metrics["dev"]["uas"] > 30 and job.metrics["best_epoch"] in (1, 2)
        model = load_any(layout.trained_dir / "tiny" / f"v{job.model['version']}")
        assert model.manifest["name"] == "tiny" and model.manifest["version"] == job.model["version"]
        assert model.manifest["training"]["train_sentences"] == 200 and model.extractor.dim == 2**16
        fitted = (model.manifest.get("inference") or {}).get("head_calibration")
        if job.id == "first":  # calibrated on its dev upload, as `train --dev` does
            assert fitted is not None and fitted["data_sha256"] == file_sha256(treebanks["dev"])
            assert job.metrics["calibration"]["head_power"] == model.manifest["inference"]["head_power"]
        else:
            assert fitted is None and "calibration" not in job.metrics
        versions.add(job.model["version"])
    assert versions == {1, 2}
    assert sorted(j.id for j in finished) == ["first", "second"] and all(j.status == "succeeded" for j in finished)
    assert [p for p in _leftovers(layout) if "/" not in p] == ["tiny"]  # no temporary directories left
    assert store.counts() == {"queued": 0, "running": 0, "succeeded": 2, "failed": 0, "cancelled": 0}


def test_a_scheduler_without_workers_only_watches(layout: DataLayout,
                                                running: Callable[..., tuple[Scheduler, list[Job]]]) -> None:
    store = JobStore(layout.database)
    for job_id in ("elsewhere", "queued", "cancelled"):
        store.create(job_id, _config(), "t.conllu", None)
    assert store.claim_next("worker#1").id == "elsewhere"  # type: ignore[union-attr]
    scheduler, finished = running(workers=0)
    store.request_cancel("cancelled")
    assert store.finish("elsewhere", "worker#1", "succeeded", model={"name": "x", "version": 1})
    _wait(lambda: len(finished) == 2, 5, "the jobs that ended elsewhere to be reported")
    assert sorted((j.id, j.status) for j in finished) == [("cancelled", "cancelled"), ("elsewhere", "succeeded")]
    time.sleep(0.3)  # a few more polls: each job is reported once, and nothing is claimed
    assert len(finished) == 2 and scheduler.running == [] and store.get("queued").status == "queued"  # type: ignore[union-attr]


def test_uploads_of_terminal_jobs_are_deleted(layout: DataLayout, tmp_path: Path,
                                              running: Callable[..., tuple[Scheduler, list[Job]]]) -> None:
    """Retention: a job's uploads go when it is terminal, at start-up for jobs already terminal, and as a
    scheduler sees jobs end (here one that only watches, as the app with workers=0 does); a queued job's
    uploads and a directory without a job (an upload being received) stay."""
    store = JobStore(layout.database)
    treebank = tmp_path / "t.conllu"
    treebank.write_text("1\tDogs\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    for job_id in ("old", "elsewhere", "cancelled", "queued"):
        _submit(store, layout, job_id, treebank)
    layout.upload_dir("receiving").mkdir()
    assert store.claim_next("worker#1").id == "old"  # type: ignore[union-attr]
    assert store.finish("old", "worker#1", "failed", error="boom")  # ended before any scheduler watched
    assert store.claim_next("worker#1").id == "elsewhere"  # type: ignore[union-attr]
    scheduler, finished = running(workers=0, uploads_dir=layout.uploads)
    assert not layout.upload_dir("old").exists()  # start-up
    store.request_cancel("cancelled")
    assert store.finish("elsewhere", "worker#1", "succeeded", model={"name": "x", "version": 1})
    # ("old" may be reported too: it ended within the scheduler's clock slack before its start)
    _wait(lambda: {"elsewhere", "cancelled"} <= {j.id for j in finished}, 5, "the jobs that ended to be reported")
    assert not layout.upload_dir("elsewhere").exists() and not layout.upload_dir("cancelled").exists()
    assert layout.train_file("queued").is_file() and layout.upload_dir("receiving").is_dir()


@pytest.mark.slow
def test_cancelling_a_running_job(layout: DataLayout, treebanks: dict[str, Path],
                                  running: Callable[..., tuple[Scheduler, list[Job]]]) -> None:
    store = JobStore(layout.database)
    _submit(store, layout, "long", treebanks["large"], name="long", epochs=50, dim=2**16, components=["parser"])
    scheduler, finished = running(workers=1, cancel_grace=30)  # the child must stop by itself
    job = _wait(lambda: (j := store.get("long")) and j.status == "running" and j.stage == "training" and
                j.progress > 0.02 and j, 60, "training to start")
    assert 0.02 < job.progress < 0.5
    start = time.monotonic()
    assert store.request_cancel("long").status == "running"
    _wait(lambda: store.get("long").status == "cancelled", 5, "the job to be cancelled")  # type: ignore[union-attr]
    assert time.monotonic() - start < 5
    _wait(lambda: finished, 5, "the child process to exit")
    assert finished[0].status == "cancelled" and scheduler.running == []
    assert _leftovers(layout) == []  # no model, no temporary directory


@pytest.mark.slow
def test_failures_never_leave_a_model(layout: DataLayout, treebanks: dict[str, Path],
                                      running: Callable[..., tuple[Scheduler, list[Job]]]) -> None:
    store = JobStore(layout.database)
    bad = layout.data_dir / "bad.conllu"
    bad.write_text("1\tthe\tthe\tDET\n\n", encoding="utf-8")
    _submit(store, layout, "bad-input", bad, name="bad")
    _submit(store, layout, "explode", treebanks["small"], name="explode", epochs=2, dim=2**16)
    _submit(store, layout, "crash", treebanks["small"], name="crash")
    _submit(store, layout, "stubborn", treebanks["small"], name="stubborn")
    scheduler, finished = running(workers=4, cancel_grace=0.5, target=_dispatch)
    _wait(lambda: len(finished) == 3, 60, "three jobs to fail")
    errors = {job_id: store.get(job_id).error for job_id in ("bad-input", "explode", "crash")}  # type: ignore[union-attr]
    assert all(store.get(job_id).status == "failed" for job_id in errors)  # type: ignore[union-attr]
    assert errors["bad-input"].startswith("train.conllu:1: ")  # one line, without the server's upload path
    assert errors["explode"] == "RuntimeError: simulated training failure"
    assert errors["crash"] == "the training process exited with code 3 before finishing the job"
    assert store.get("explode").stage == "training"  # type: ignore[union-attr]

    # a child that ignores cancellation is terminated after the grace period, and the job is cancelled
    assert scheduler.running == ["stubborn"]
    _wait(lambda: (layout.trained_dir / ".job-stubborn.stubborn").is_dir(), 30, "the stubborn child to start")
    store.request_cancel("stubborn")
    _wait(lambda: len(finished) == 4, 10, "the stubborn child to be terminated")
    assert store.get("stubborn").status == "cancelled" and scheduler.running == []  # type: ignore[union-attr]
    assert _leftovers(layout) == []

    # stopping the scheduler fails the jobs it was running
    _submit(store, layout, "stopped", treebanks["small"], name="stubborn")
    _wait(lambda: scheduler.running == ["stopped"], 10, "the job to start")
    scheduler.stop(timeout=10)
    job = store.get("stopped")
    assert job is not None and job.status == "failed" and job.error == STOPPED_ERROR
    assert _leftovers(layout) == [] and len(finished) == 4


@pytest.mark.slow
def test_worker_command(layout: DataLayout, treebanks: dict[str, Path]) -> None:
    store = JobStore(layout.database)
    _submit(store, layout, "w", treebanks["small"], name="tiny", epochs=1, dim=2**12)
    health = layout.data_dir / "alive"
    proc = subprocess.Popen([sys.executable, "-m", "service.worker", "--data-dir", str(layout.data_dir),
                             "--poll-seconds", "0.1", "--node", "worker-test", "--health-file", str(health)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: store.get("w").status == "succeeded", 60, "the worker to train the job")  # type: ignore[union-attr]
        touched = health.stat().st_mtime  # docker-compose.yml's `jobs` health check reads its age
        _wait(lambda: health.stat().st_mtime > touched, 10, "the health file to be touched again")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "started" in err and "stopped" in err
    assert (layout.trained_dir / "tiny" / "v1" / "manifest.json").is_file()
