"""Deployment check: build the image, run the compose stack, walk the user's path, tear it all down.

    python bench/deploy_check.py [--project-dir .] [--train TRAIN.conllu] [--sentences 40] [--no-cache]

Steps, in order (the first failure stops the walk; teardown always runs):

- ``context``: the build context (what ``.dockerignore`` lets through) holds no tests, bench, docs, git or caches;
- ``build``: ``DOCKER_BUILDKIT=0 docker build`` (the legacy builder); the image runs as uid 10001, has a
  healthcheck and a ``/data`` volume;
- ``compose-needs-key``: ``docker-compose config`` refuses to run without ``API_KEY``;
- ``up``: ``docker-compose up -d --scale worker=N`` (``--dask-workers``, default 2) on a free host port;
  ``/readyz`` answers 200, Docker reports every container of ``api``, ``jobs``, ``scheduler`` and ``worker``
  healthy (each one's health check), every process in ``api``, ``jobs`` and the workers runs as uid 10001 and
  owns the ``/data`` volume, and the Dask scheduler has the N workers;
- ``parse-text``, ``models``: the README's ``/parse`` with ``text`` and ``GET /models``;
- ``jobs-key``, ``train``, ``parse-trained``: ``/jobs`` without the key is 401; a small first-order training job
  (the first ``--sentences`` sentences of EWT train, 1 epoch, 2 seeds) posted with the key is run by ``jobs`` to
  ``succeeded``, its two seeds' trainings as tasks on the Dask workers (``run_task``, counted per worker from
  each worker's own log of task transitions), and the API then parses with the new model;
- ``parse-job``: a batch parse job (the same sentences, ``en_ewt``) whose chunks are parsed on the Dask workers
  (``_remote_chunk`` tasks), its result one CoNLL-U block per input sentence;
- ``restart``: ``docker-compose restart api``; ready again, the trained model still listed;
- ``teardown``: ``docker-compose down --volumes`` leaves no container, network or volume of the project.

Prints one JSON line (what passed, what failed and why, image size, seconds from ``up`` to ready) and exits
0 when everything passed, 1 on any failure. When Docker cannot run here it says why and exits 0 with
``"result": "skipped"`` (``--require-docker``: exit 1 instead).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docker import CheckFailed, ComposeProject, container_uids, inspect, run, versions, why_docker_cannot_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data"))
UID = 10001
FORBIDDEN = {"tests", "bench", "docs", ".git", "data", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache",
             ".mypy_cache", ".hypothesis", ".benchmarks"}
TEXT = "The parser tells you how sure it is. Dogs bark."
WORDS, TAGS = ["Dogs", "bark", "."], ["NOUN", "VERB", "PUNCT"]
MODEL = "deploy-check"
SERVICES = ("api", "jobs", "scheduler", "worker")  # docker-compose.yml's; `worker` are the Dask workers


@dataclass
class Check:
    """The state of one run: options, the compose project, and what the report will say."""

    args: argparse.Namespace
    tag: str
    compose: ComposeProject
    url: str
    key: str
    passed: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    job_id: str = ""

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60)

    def fail_with_logs(self, message: str) -> CheckFailed:
        logs = "\n".join(f"--- {s} logs ---\n{self.compose.logs(s)}" for s in SERVICES)
        return CheckFailed(f"{message}\n{logs}")


@dataclass
class Pending:
    """What a probe answers while the awaited thing is not there yet (false, with a reason for the report)."""

    detail: str

    def __bool__(self) -> bool:
        return False


def wait_for(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``probe`` every 0.5 s until it returns something true; CheckFailed naming ``what`` after timeout
    (with the last ``Pending`` reason)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    reason = f": {last.detail}" if isinstance(last, Pending) else ""
    raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}{reason}")


def step_context(c: Check) -> None:
    """Copy the build context into a throw-away build and list it: .dockerignore must keep these out."""
    probe = ("FROM python:3.11-slim\nCOPY . /context\n"
             "RUN cd /context && echo TOP $(ls -A) && echo NESTED $(find . -mindepth 2 \\( -name __pycache__ "
             "-o -name '*.pyc' -o -name '*.egg-info' \\) -prune | head -n 5)\n")
    done = run(["docker", "build", "--rm", "--force-rm", "--no-cache", "-t", f"{c.tag}-context", "-f", "-",
               str(c.args.project_dir)], stdin=probe, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    out = done.stdout + done.stderr  # the newer clients print the legacy builder's output on stderr
    run(["docker", "image", "rm", "-f", f"{c.tag}-context"], check=False)
    listed = {words[0]: words[1:] for words in map(str.split, out.splitlines()) if words}
    if "TOP" not in listed or "NESTED" not in listed:
        raise CheckFailed(f"could not list the build context:\n{out[-1500:]}")
    top, nested = listed["TOP"], listed["NESTED"]
    bad = sorted(FORBIDDEN & set(top)) + nested
    c.figures["context"] = top
    if bad:
        raise CheckFailed(f".dockerignore lets these into the build context: {', '.join(bad)}")


def step_build(c: Check) -> None:
    """The legacy builder builds the image; it runs as the parser user with a healthcheck and /data volume."""
    start = time.monotonic()
    cache = ["--no-cache"] if c.args.no_cache else []
    done = run(["docker", "build", *cache, "-t", c.tag, str(c.args.project_dir)], timeout=1800,
               env={**os.environ, "DOCKER_BUILDKIT": "0"})
    out = done.stdout + done.stderr
    c.figures["build_s"] = round(time.monotonic() - start, 1)
    sent = [line.split()[-1] for line in out.splitlines() if line.startswith("Sending build context")]
    c.figures["context_size"] = sent[-1] if sent else None
    image = inspect("image", c.tag)
    c.figures["image_size_mb"] = round(image["Size"] / 1e6, 1)
    config = image["Config"]
    problems = []
    if config.get("User", "").split(":")[0] not in (str(UID), "parser"):
        problems.append(f"runs as user {config.get('User')!r}, not {UID}")
    if not (config.get("Healthcheck") or {}).get("Test"):
        problems.append("has no HEALTHCHECK")
    if "/data" not in (config.get("Volumes") or {}):
        problems.append("declares no /data volume")
    if problems:
        raise CheckFailed("the image " + "; ".join(problems))


def step_compose_needs_key(c: Check) -> None:
    env = {k: v for k, v in c.compose.env.items() if k != "API_KEY"}
    done = c.compose("config", "-q", check=False, env=env)
    if done.returncode == 0 or "API_KEY" not in done.stderr + done.stdout:
        raise CheckFailed("docker-compose starts without API_KEY: the /jobs routes would run unprotected")


def readyz(c: Check) -> bool | Pending:
    """True once /readyz answers 200; Pending before; CheckFailed when the service says start-up failed."""
    try:
        r = httpx.get(c.url + "/readyz", timeout=5)
    except httpx.TransportError as e:
        return Pending(f"/readyz: {type(e).__name__} {e}")
    if r.status_code == 200:
        return True
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
    if isinstance(body, dict) and body.get("status") == "failed":
        raise c.fail_with_logs(f"/readyz: the service failed to start: {body.get('detail')}")
    return Pending(f"/readyz {r.status_code}: {body}")


def require_running(c: Check, service: str) -> None:
    """A service whose container stopped or restarted (``restart: unless-stopped`` hides a crash loop) fails."""
    state = inspect("container", c.compose.container(service))
    if not state["State"].get("Running") or state.get("RestartCount", 0) > 0:
        raise c.fail_with_logs(f"the {service} container is {state['State'].get('Status')} "
                               f"after {state.get('RestartCount', 0)} restart(s)")


def health(container: str) -> str:
    return str(inspect("container", container)["State"].get("Health", {}).get("Status", "none"))


def step_up(c: Check) -> None:
    """Start the stack; time to /readyz 200 and to every container "healthy"; who runs what and owns /data; the
    Dask workers joined the scheduler."""
    start = time.monotonic()
    c.compose("up", "-d", "--no-build", "--scale", f"worker={c.args.dask_workers}", timeout=300)
    wait_for(lambda: readyz(c), c.args.ready_timeout, "/readyz to answer 200")
    c.figures["up_to_ready_s"] = round(time.monotonic() - start, 1)
    containers = {name: c.compose.containers(name) for name in SERVICES}
    if len(containers["worker"]) != c.args.dask_workers:
        raise c.fail_with_logs(f"{len(containers['worker'])} worker containers, not {c.args.dask_workers}")
    for name, ids in containers.items():
        for cid in ids:
            state = wait_for(lambda cid=cid: health(cid) in ("healthy", "unhealthy") and health(cid), 120,
                             f"a Docker health status of {name}")
            if state != "healthy":
                raise c.fail_with_logs(f"Docker reports the {name} container {cid[:12]} {state}")
    c.figures["up_to_healthy_s"] = round(time.monotonic() - start, 1)
    for name in ("api", "jobs", "worker"):
        require_running(c, name)
        for cid in containers[name]:
            uids = container_uids(cid)
            if not uids or any(uid != UID for uid in uids.values()):
                raise CheckFailed(f"{name}: processes not running as uid {UID}: {uids}")
            probe = "import os; print(os.stat('/data').st_uid, os.access('/data', os.W_OK))"
            out = run(["docker", "exec", cid, "python", "-c", probe]).stdout.split()
            if out[0] != str(UID) or out[1] != "True":
                raise CheckFailed(f"{name}: /data is owned by uid {out[0]}, writable: {out[1]} (want {UID}, True)")
    workers = dask_query(c, "len(client.scheduler_info()['workers'])")
    if workers != c.args.dask_workers:
        raise c.fail_with_logs(f"the Dask scheduler has {workers} workers, not {c.args.dask_workers}")
    # the workers' nanny preload (engine.training.dask_nanny): no MALLOC_TRIM_THRESHOLD_ (1.3x slower training)
    trims = dask_query(c, "client.run(__import__('os').getenv, 'MALLOC_TRIM_THRESHOLD_')")
    if any(value is not None for value in trims.values()):
        raise CheckFailed(f"Dask workers run with MALLOC_TRIM_THRESHOLD_={sorted(trims.values())}: the nanny preload "
                          "engine.training.dask_nanny did not take")


def dask_query(c: Check, expression: str) -> Any:
    """``expression`` (over ``client``, a Dask client on the scheduler) evaluated in the scheduler's container."""
    code = ("import json\nfrom distributed import Client\n"
            "with Client('tcp://127.0.0.1:8786', timeout=30) as client:\n"
            f"    print(json.dumps({expression}))\n")
    return json.loads(run(["docker", "exec", c.compose.container("scheduler"), "python", "-c", code],
                          timeout=120).stdout.strip().splitlines()[-1])


def tasks_per_worker(c: Check, prefix: str) -> dict[str, int]:
    """How many distinct tasks of ``prefix`` each Dask worker ran (its own log of task transitions)."""
    code = ("client.run(lambda dask_worker: len({e[0] for e in dask_worker.state.log if isinstance(e[0], str) "
            f"and e[0].startswith({prefix!r})}}))")
    return dict(dask_query(c, code))


def step_parse_text(c: Check) -> None:
    with c.http() as h:
        r = h.post("/parse", json={"text": TEXT})
    if r.status_code != 200:
        raise CheckFailed(f"POST /parse with text: {r.status_code} {r.text[:300]}")
    sents = r.json()["sentences"]
    if len(sents) != 2 or not all(w["head"] >= 0 and 0 < w["prob"] <= 1 for s in sents for w in s["tokens"]):
        raise CheckFailed(f"POST /parse with text: unexpected answer {r.text[:300]}")
    with c.http() as h:
        metrics = h.get("/metrics").text
    alive = [line.split()[1] for line in metrics.splitlines() if line.startswith("parser_parse_processes ")]
    c.figures["api_parse_processes"] = float(alive[0]) if alive else None
    if not alive or float(alive[0]) < 1:
        raise CheckFailed(f"the api container parses without parse processes (parser_parse_processes: {alive})")


def step_models(c: Check) -> None:
    with c.http() as h:
        body = h.get("/models").json()
    names = {m["name"] for m in body["models"]}
    if body.get("default") != "en_ewt" or not {"en_ewt", "en_ewt-o1", "en_ewt-o2"} <= names:
        raise CheckFailed(f"GET /models: default {body.get('default')!r}, models {sorted(names)}")


def step_jobs_key(c: Check) -> None:
    with c.http() as h:
        r = h.get("/jobs")
    if r.status_code != 401:
        raise CheckFailed(f"GET /jobs without the API key answered {r.status_code}, not 401")


def training_file(c: Check) -> bytes:
    blocks = c.args.train.read_text(encoding="utf-8").split("\n\n")
    return ("\n\n".join(blocks[:c.args.sentences]) + "\n\n").encode()


def step_train(c: Check) -> None:
    """A small first-order job, run by the jobs container through to ``succeeded``, its two seeds' trainings as
    tasks on the Dask workers."""
    auth = {"Authorization": f"Bearer {c.key}"}
    config = {"name": MODEL, "order": 1, "epochs": 1, "components": ["parser"], "dim": 1 << 18, "seeds": 2}
    start = time.monotonic()
    with c.http() as h:
        r = h.post("/jobs", headers=auth, files={"train": ("train.conllu", training_file(c), "text/plain")},
                   data={"config": json.dumps(config)})
        if r.status_code != 202:
            raise CheckFailed(f"POST /jobs: {r.status_code} {r.text[:300]}")
        c.job_id = r.json()["id"]

        def finished() -> dict[str, Any] | None:
            require_running(c, "jobs")
            job: dict[str, Any] = h.get(f"/jobs/{c.job_id}", headers=auth).json()
            return job if job["status"] in ("succeeded", "failed", "cancelled") else None

        job = wait_for(finished, c.args.job_timeout, "the training job to finish (is the jobs service running?)")
    if job["status"] != "succeeded":
        raise c.fail_with_logs(f"the training job {job['status']}: {job.get('error')}")
    c.figures["job_s"] = round(time.monotonic() - start, 1)
    ran = tasks_per_worker(c, "run_task")
    c.figures["train_tasks_per_worker"] = sorted(ran.values())
    if sum(ran.values()) < 2:
        raise c.fail_with_logs(f"the seeds' trainings did not run on the Dask workers: {ran}")


def step_parse_job(c: Check) -> None:
    """A batch parse job whose chunks the Dask workers parse: one output block per input sentence."""
    auth = {"Authorization": f"Bearer {c.key}"}
    data = training_file(c)
    start = time.monotonic()
    with c.http() as h:
        r = h.post("/jobs", headers=auth, files={"input": ("input.conllu", data, "text/plain")},
                   data={"config": json.dumps({"kind": "parse", "model": "en_ewt"})})
        if r.status_code != 202:
            raise CheckFailed(f"POST /jobs (parse): {r.status_code} {r.text[:300]}")
        job_id = r.json()["id"]

        def finished() -> dict[str, Any] | None:
            job: dict[str, Any] = h.get(f"/jobs/{job_id}", headers=auth).json()
            return job if job["status"] in ("succeeded", "failed", "cancelled") else None

        job = wait_for(finished, c.args.job_timeout, "the parse job to finish")
        if job["status"] != "succeeded":
            raise c.fail_with_logs(f"the parse job {job['status']}: {job.get('error')}")
        result = h.get(f"/jobs/{job_id}/result", headers=auth)
    c.figures["parse_job_s"] = round(time.monotonic() - start, 1)
    blocks = [b for b in result.text.split("\n\n") if b.strip()]
    if result.status_code != 200 or len(blocks) != c.args.sentences:
        raise CheckFailed(f"GET /jobs/{job_id}/result: {result.status_code}, {len(blocks)} sentences, "
                          f"not {c.args.sentences}")
    ran = tasks_per_worker(c, "_remote_chunk")
    c.figures["parse_tasks_per_worker"] = sorted(ran.values())
    if not sum(ran.values()):
        raise c.fail_with_logs(f"the parse job's chunks did not run on the Dask workers: {ran}")


def model_listed(c: Check) -> bool:
    with c.http() as h:
        return any(m["name"] == MODEL for m in h.get("/models").json()["models"])


def step_parse_trained(c: Check) -> None:
    wait_for(lambda: model_listed(c), 60, f"the API to list the trained model {MODEL!r}")
    with c.http() as h:
        r = h.post("/parse", json={"tokens": [WORDS], "tags": [TAGS], "model": MODEL})
    if r.status_code != 200 or r.json()["model"]["name"] != MODEL:
        raise CheckFailed(f"POST /parse with the trained model: {r.status_code} {r.text[:300]}")


def step_restart(c: Check) -> None:
    start = time.monotonic()
    c.compose("restart", "api", timeout=120)
    wait_for(lambda: readyz(c), c.args.ready_timeout, "/readyz after the restart")
    c.figures["restart_to_ready_s"] = round(time.monotonic() - start, 1)
    if not model_listed(c):
        raise CheckFailed(f"after `restart api` the trained model {MODEL!r} is no longer listed")
    with c.http() as h:
        job = h.get(f"/jobs/{c.job_id}", headers={"Authorization": f"Bearer {c.key}"}).json()
    if job.get("status") != "succeeded":
        raise CheckFailed(f"after `restart api` the training job is {job.get('status')!r}")


STEPS: list[tuple[str, Callable[[Check], None]]] = [
    ("context", step_context), ("build", step_build), ("compose-needs-key", step_compose_needs_key),
    ("up", step_up), ("parse-text", step_parse_text), ("models", step_models), ("jobs-key", step_jobs_key),
    ("train", step_train), ("parse-trained", step_parse_trained), ("parse-job", step_parse_job),
    ("restart", step_restart)]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project-dir", type=Path, default=ROOT, help="the checkout to build (default: this one)")
    ap.add_argument("--train", type=Path, default=DATA / "ud" / "en_ewt" / "en_ewt-ud-train.conllu",
                    help="CoNLL-U whose first sentences make the training job")
    ap.add_argument("--sentences", type=int, default=40, help="sentences in the training job (default 40)")
    ap.add_argument("--ready-timeout", type=float, default=180, help="seconds to wait for /readyz")
    ap.add_argument("--job-timeout", type=float, default=600, help="seconds to wait for the training job")
    ap.add_argument("--dask-workers", type=int, default=2, help="Dask worker containers (--scale worker=N)")
    ap.add_argument("--no-cache", action="store_true", help="build every layer again (a cold build's time)")
    ap.add_argument("--keep-image", action="store_true", help="keep the image built for the check")
    ap.add_argument("--require-docker", action="store_true", help="fail (exit 1) instead of skipping "
                    "when Docker cannot run here")
    return ap.parse_args(argv)


def run_steps(c: Check) -> tuple[str | None, str | None]:
    """Run the steps in order until one fails; returns (failed step, error) or (None, None)."""
    for name, fn in STEPS:
        print(f"deploy check: {name} ...", file=sys.stderr, flush=True)
        try:
            fn(c)
        except CheckFailed as e:
            return name, str(e)
        except Exception as e:  # an unexpected answer (e.g. JSON without a member) is a failure too
            return name, f"{type(e).__name__}: {e}"
        c.passed.append(name)
    return None, None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.project_dir = args.project_dir.resolve()
    report: dict[str, Any] = {"check": "deploy", "date": dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), "project_dir": str(args.project_dir)}
    reason = why_docker_cannot_run()
    if reason is not None:
        print(f"deploy check SKIPPED: {reason}", file=sys.stderr)
        print(json.dumps({**report, "result": "skipped", "reason": reason}))
        return 1 if args.require_docker else 0
    if not args.train.is_file():
        print(json.dumps({**report, "result": "failed", "failed": "inputs",
                          "error": f"training file not found: {args.train} (--train, or BP_PARSER_DATA)"}))
        return 1
    token = secrets.token_hex(4)
    tag, key, port = f"bp-parser:check-{token}", secrets.token_urlsafe(16), free_port()
    compose = ComposeProject(args.project_dir, f"bpcheck{token}", {
        "API_KEY": key, "PARSER_ALLOW_OPEN_JOBS": "0", "BP_PARSER_PORT": str(port), "BP_PARSER_IMAGE": tag})
    c = Check(args, tag, compose, f"http://127.0.0.1:{port}", key)
    try:
        failed, error = run_steps(c)
    finally:
        print("deploy check: teardown ...", file=sys.stderr, flush=True)
        left = compose.down()
        if not args.keep_image:
            run(["docker", "image", "rm", "-f", tag], check=False)
    if left and failed is None:
        failed, error = "teardown", "`docker-compose down --volumes` left " + ", ".join(left)
    elif not left:
        c.passed.append("teardown")
    if failed is not None:
        print(f"deploy check FAILED at {failed}: {error}", file=sys.stderr)
    report.update(result="failed" if failed else "passed", passed=c.passed, failed=failed,
                  error=(error or "").splitlines()[0] if error else None, image=tag, **c.figures, **versions())
    print(json.dumps(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
