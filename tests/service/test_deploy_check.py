"""``bench/deploy_check.py``: skipping with a reason when Docker cannot run (fast, always), and the whole
deployment check for real (build, compose up, parse, train, restart, teardown: minutes, so only with
``BP_PARSER_DOCKER_TESTS=1`` on a machine where Docker runs, e.g. after ``../shared/tools/docker-local.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "deploy_check.py"


def run_check(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, dict[str, Any], str]:
    """Run the script; returns its exit status, its JSON line and its stderr."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)
    lines = done.stdout.strip().splitlines()
    assert lines, f"no JSON line; stderr:\n{done.stderr[-3000:]}"
    return done.returncode, json.loads(lines[-1]), done.stderr


@pytest.mark.parametrize(("flags", "status"), [((), 0), (("--require-docker",), 1)])
def test_skips_with_a_reason_without_docker(tmp_path: Path, flags: tuple[str, ...], status: int) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty directory: no docker client to be found
    code, report, err = run_check(*flags, env=env)
    assert code == status
    assert report["result"] == "skipped" and "no `docker` client" in report["reason"]
    assert "SKIPPED" in err


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("BP_PARSER_DOCKER_TESTS") != "1",
                    reason="builds and runs the Docker deployment for minutes: set BP_PARSER_DOCKER_TESTS=1")
def test_deploy_check_passes() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from deploy_check import STEPS

    code, report, err = run_check(timeout=1800)
    if report["result"] == "skipped":
        pytest.skip(report["reason"])
    assert code == 0 and report["result"] == "passed", f"{report}\n{err[-4000:]}"
    assert report["passed"] == [name for name, _ in STEPS] + ["teardown"]
    assert report["image_size_mb"] > 0 and report["up_to_ready_s"] > 0
