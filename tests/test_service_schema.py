"""Schemathesis against the published OpenAPI schema: generated requests (valid and invalid) to every
operation of a live in-process server; no answer may be a 5xx.

The server runs with ``workers=0`` so generated training jobs are only queued, never trained.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a test extra")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402


@pytest.fixture(scope="module")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import httpx
    import uvicorn
    from service_helpers import free_port
    from service_helpers import settings as make_settings

    from service.app import create_app

    port = free_port()
    app = create_app(make_settings(tmp_path_factory.mktemp("schema"), max_pending=64))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    else:
        raise AssertionError("in-process server did not become ready")
    yield url
    server.should_exit = True
    thread.join(20)


@pytest.fixture(scope="module")
def api_schema(live_url: str) -> object:
    loaded = schemathesis.openapi.from_url(live_url + "/openapi.json")
    loaded.config.generation.update(modes=list(schemathesis.GenerationMode))  # valid and invalid requests
    return loaded


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_service_schema_no_server_errors(case: object, live_url: str) -> None:
    response = case.call(base_url=live_url, timeout=60)  # type: ignore[attr-defined]
    case.validate_response(response, checks=[not_a_server_error])  # type: ignore[attr-defined]


def test_service_schema_documents_limits(live_url: str) -> None:
    """Runs after the generated cases: they reached the server, valid and invalid ones."""
    import httpx

    doc = httpx.get(live_url + "/openapi.json").json()
    assert "words per sentence" in doc["info"]["description"]
    counted = httpx.get(live_url + "/metrics").text
    for status in ("200", "422"):
        assert f'route="/parse",status="{status}"' in counted
    assert {"/parse", "/marginals", "/confidence", "/kbest", "/sample", "/models", "/jobs"} <= set(doc["paths"])
