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
    app = create_app(make_settings(tmp_path_factory.mktemp("schema"), max_pending=64,
                                   allow_open_jobs=True))
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


def _no_server_error(strategy: object, live_url: str) -> object:
    """A hypothesis test sending cases drawn from ``strategy`` and failing on any 5xx."""
    from hypothesis import given
    from hypothesis import strategies as st

    @given(data=st.data())
    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    def check(data: st.DataObject) -> None:
        case = data.draw(strategy)  # type: ignore[arg-type]
        response = case.call(base_url=live_url, timeout=60)
        case.validate_response(response, checks=[not_a_server_error])

    return check


def test_service_schema_no_server_errors(live_url: str) -> None:
    """For every operation, positive and negative generated cases (hypothesis, a bounded number each)."""
    from hypothesis.errors import Unsatisfiable

    api = schemathesis.openapi.from_url(live_url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 12
    runs = {mode: 0 for mode in schemathesis.GenerationMode}
    for operation in operations:
        strategies = [(mode, operation.as_strategy(generation_mode=mode)) for mode in schemathesis.GenerationMode]
        strategies += [(schemathesis.GenerationMode.POSITIVE, example)  # the documented examples, as sent
                       for example in operation.schema.get_strategies_from_examples(operation)]
        for mode, strategy in strategies:
            check = _no_server_error(strategy, live_url)
            try:
                check()  # type: ignore[operator]
            except Unsatisfiable:
                # an operation without any input (GET /healthz) has no invalid request to generate
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
                continue
            runs[mode] += 1
    assert all(count >= 8 for count in runs.values()), runs  # both kinds ran for most operations


def test_service_schema_documents_limits(live_url: str) -> None:
    """Runs after the generated cases: they reached the server, valid and invalid ones."""
    import httpx

    doc = httpx.get(live_url + "/openapi.json").json()
    assert "words per sentence" in doc["info"]["description"]
    counted = httpx.get(live_url + "/metrics").text
    for status in ("200", "422"):
        assert f'route="/parse",status="{status}"' in counted
    assert {"/parse", "/marginals", "/confidence", "/kbest", "/sample", "/models", "/jobs"} <= set(doc["paths"])
