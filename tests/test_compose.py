"""``docker-compose.yml`` to issue 27's contract, checked without Docker: services ``api``, ``jobs`` (the job
runner), ``scheduler`` (``dask scheduler``) and ``worker`` (``dask worker scheduler:8786``, scalable), all from the
one image, the shared volume for uploads, results and models, a health check for each; and ``docker-compose
config`` accepts the file where that client exists. The real build and run: ``bench/deploy_check.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "${BP_PARSER_IMAGE:-bp-parser:latest}"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"])


def test_the_services_are_the_issues(services: dict[str, Any]) -> None:
    assert set(services) == {"api", "jobs", "scheduler", "worker"}
    assert services["scheduler"]["command"][:2] == ["dask", "scheduler"]
    assert "--port" in services["scheduler"]["command"] and "8786" in services["scheduler"]["command"]
    assert services["worker"]["command"][:3] == ["dask", "worker", "scheduler:8786"]
    assert "engine.training.dask_nanny" in services["worker"]["command"]  # without Dask's malloc trim threshold
    assert services["jobs"]["command"][:3] == ["python", "-m", "service.worker"]
    assert services["api"]["command"][:3] == ["python", "-m", "service"]
    # --scale worker=N: nothing that two containers of a service cannot share (a name, a host port)
    assert "container_name" not in services["worker"] and "ports" not in services["worker"]
    assert "hostname" not in services["worker"]


def test_one_image_one_shared_volume(services: dict[str, Any]) -> None:
    assert {s["image"] for s in services.values()} == {IMAGE}
    for name in ("api", "jobs", "worker"):  # uploads, results and models: the job store's /data, everywhere
        assert "parser-data:/data" in services[name]["volumes"], name
    for name in ("api", "jobs"):  # the job processes send their work to the cluster
        assert services[name]["environment"]["PARSER_DASK_SCHEDULER"] == "tcp://scheduler:8786"


def test_every_service_has_a_health_check(services: dict[str, Any]) -> None:
    assert "HEALTHCHECK" in (ROOT / "Dockerfile").read_text(encoding="utf-8")  # api: the image's own (/readyz)
    assert "healthcheck" not in services["api"]
    for name in ("jobs", "scheduler", "worker"):
        check = services[name]["healthcheck"]
        assert not check.get("disable") and check["test"][0] == "CMD", name
    # the Dask services' checks ask the HTTP port each one opens
    assert ":8787" in " ".join(services["scheduler"]["command"]) and "8787/health" in services["scheduler"][
        "healthcheck"]["test"][-1]
    assert ":8788" in " ".join(services["worker"]["command"]) and "8788/health" in services["worker"][
        "healthcheck"]["test"][-1]
    jobs = services["jobs"]
    health_file = jobs["command"][jobs["command"].index("--health-file") + 1]
    assert health_file in jobs["healthcheck"]["test"][-1]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="no docker-compose client here")
def test_docker_compose_accepts_the_file() -> None:
    done = subprocess.run(["docker-compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "API_KEY": "x"})
    assert done.returncode == 0, done.stderr
