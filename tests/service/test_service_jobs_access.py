"""Who may use the /jobs routes: the API key, the closed default without one, and the explicit opt-out
``PARSER_ALLOW_OPEN_JOBS=1``, each stated in the start-up log.

The apps here have no models (an empty models directory), so start-up is quick: the job store opens all the
same, and the /jobs routes do not need a model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_helpers import settings

from service.app import create_app

ENV = ("API_KEY", "PARSER_API_KEY", "PARSER_ALLOW_OPEN_JOBS")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV:
        monkeypatch.delenv(var, raising=False)


@contextmanager
def app_client(tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "no-models").mkdir(exist_ok=True)
    app = create_app(settings(tmp_path, models_dir=tmp_path / "no-models"))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def get_jobs(client: TestClient, headers: dict[str, str] | None = None) -> int:
    """GET /jobs once the job store is open (503 before); returns the status code."""
    deadline = time.monotonic() + 60
    while True:
        status = client.get("/jobs", headers=headers or {}).status_code
        if status != 503 or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "service" and r.levelno >= logging.WARNING]


def test_jobs_closed_without_a_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="service")
    with app_client(tmp_path) as client:
        r = client.post("/jobs", files={"train": ("t.conllu", b"x", "text/plain")})
        assert r.status_code == 403, r.text
        problem = r.json()
        assert problem["type"].endswith(":jobs-disabled") and "PARSER_ALLOW_OPEN_JOBS=1" in problem["detail"]
        assert r.headers["content-type"].startswith("application/problem+json")
        assert get_jobs(client) == 403
        assert get_jobs(client, {"Authorization": "Bearer anything"}) == 403
        assert client.get("/healthz").status_code == 200  # only the job routes are closed
    assert any("/jobs is closed" in m and "API_KEY is not set" in m for m in warnings(caplog))


def test_jobs_opened_explicitly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PARSER_ALLOW_OPEN_JOBS", "1")
    caplog.set_level(logging.INFO, logger="service")
    with app_client(tmp_path) as client:
        assert get_jobs(client) == 200
    assert any("/jobs is open to anyone" in m for m in warnings(caplog))


def test_key_wins_over_the_opt_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PARSER_ALLOW_OPEN_JOBS", "1")
    monkeypatch.setenv("API_KEY", "k3y")
    caplog.set_level(logging.INFO, logger="service")
    with app_client(tmp_path) as client:
        assert get_jobs(client) == 401
        assert get_jobs(client, {"Authorization": "Bearer k3y"}) == 200
    assert not any("/jobs is" in m for m in warnings(caplog))


@pytest.mark.parametrize(("env", "access"), [({}, "closed"), ({"PARSER_ALLOW_OPEN_JOBS": "0"}, "closed"),
                                             ({"PARSER_ALLOW_OPEN_JOBS": "true"}, "open"),
                                             ({"API_KEY": ""}, "closed"), ({"PARSER_API_KEY": "x"}, "key")])
def test_jobs_access_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                          access: str) -> None:
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert settings(tmp_path).jobs_access() == access
