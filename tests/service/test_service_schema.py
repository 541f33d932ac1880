"""Schemathesis against the published OpenAPI schema: generated requests (valid and invalid) to every
operation of a live in-process server; no answer may be a 5xx, and on the parsing routes every answer must
agree with the document (all of schemathesis's checks).

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


PARSING = ("/parse", "/marginals", "/confidence", "/kbest", "/sample")


def _checks(path: str) -> list[object]:
    """Every check schemathesis has for the parsing routes (status codes, content types, headers, response
    schemas, valid data accepted, invalid data rejected, unsupported methods...); only ``not_a_server_error``
    for the others (jobs, models, operations)."""
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    if path not in PARSING:
        return [not_a_server_error]
    # positive_data_acceptance is left out: it wants a 2xx for every schema-valid request, but validity here
    # also depends on what JSON Schema cannot say (tags as many as the words, a CoNLL-U with a sentence, no
    # empty word, the model named exists, settings-dependent limits, GET /marginals needing text or tokens),
    # which the service answers with a 422 naming the field. What the schema can say it does: ``{}`` and two
    # inputs at once are invalid (oneOf), and 5.0 is accepted as an integer (test_schema_matches_service).
    from schemathesis.checks import positive_data_acceptance

    return [check for check in CHECKS.get_all() if check is not positive_data_acceptance]


def _generated(strategy: object, live_url: str, checks: list[object], failures: list[str]) -> object:
    """A hypothesis test sending cases drawn from ``strategy``; each failed check is recorded in ``failures``."""
    from hypothesis import given
    from hypothesis import strategies as st
    from schemathesis.core.failures import FailureGroup

    @given(data=st.data())
    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    def check(data: st.DataObject) -> None:
        case = data.draw(strategy)  # type: ignore[arg-type]
        response = case.call(base_url=live_url, timeout=60)
        try:
            case.validate_response(response, checks=checks)  # type: ignore[arg-type]
        except (AssertionError, FailureGroup) as e:
            failures.append(f"{case.operation.label} {str(case.body)[:200]!r} {case.query!r}: {e}"[:3000])

    return check


@pytest.mark.slow
def test_service_schema_conformance(live_url: str) -> None:
    """For every operation, positive and negative generated cases (hypothesis, a bounded number each):
    no 5xx anywhere, and every schemathesis check passes on the parsing routes."""
    from hypothesis.errors import Unsatisfiable

    api = schemathesis.openapi.from_url(live_url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 12
    runs = {mode: 0 for mode in schemathesis.GenerationMode}
    failures: list[str] = []
    for operation in operations:
        checks = _checks(operation.path)
        strategies = [(mode, operation.as_strategy(generation_mode=mode)) for mode in schemathesis.GenerationMode]
        strategies += [(schemathesis.GenerationMode.POSITIVE, example)  # the documented examples, as sent
                       for example in operation.schema.get_strategies_from_examples(operation)]
        for mode, strategy in strategies:
            try:
                _generated(strategy, live_url, checks, failures)()  # type: ignore[operator]
            except Unsatisfiable:
                # an operation without any input (GET /healthz) has no invalid request to generate
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
                continue
            runs[mode] += 1
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures[:400])
    assert all(count >= 8 for count in runs.values()), runs  # both kinds ran for most operations


@pytest.mark.slow  # reads what test_service_schema_conformance left in the metrics: selected (and skipped) with it
def test_service_schema_documents_limits(live_url: str) -> None:
    """Runs after the generated cases: they reached the server, valid and invalid ones."""
    import httpx

    doc = httpx.get(live_url + "/openapi.json").json()
    assert "words per sentence" in doc["info"]["description"]
    counted = httpx.get(live_url + "/metrics").text
    for status in ("200", "422"):
        assert f'route="/parse",status="{status}"' in counted
    assert {"/parse", "/marginals", "/confidence", "/kbest", "/sample", "/models", "/jobs"} <= set(doc["paths"])


def test_schema_matches_service(live_url: str) -> None:
    """What the request schemas admit is what the service accepts: ``{}`` and two inputs at once are invalid
    in both (oneOf), one input is valid in both, and an integer written 5.0 is an integer in both."""
    import httpx
    from jsonschema import Draft202012Validator

    doc = httpx.get(live_url + "/openapi.json").json()
    cases: list[tuple[dict[str, object], bool]] = [
        ({}, False), ({"text": "Dogs bark.", "tokens": [["Dogs", "bark"]]}, False),
        ({"text": None, "tokens": None}, False), ({"tokens": [["Dogs", "bark"]], "conllu": None}, True),
        ({"tokens": [["Dogs", "bark"]], "inference": {"iterations": 5.0}}, True),
        ({"tokens": [["Dogs", "bark"]], "inference": {"iterations": "5"}}, False)]
    for route, name in (("/parse", "ParseRequest"), ("/kbest", "KBestRequest"), ("/sample", "SampleRequest")):
        validator = Draft202012Validator({"$ref": f"#/components/schemas/{name}", **doc})
        for body, valid in cases:
            assert validator.is_valid(body) is valid, (name, body)
            r = httpx.post(live_url + route, json={**body, "tags": [["NOUN", "VERB"]]} if valid else body,
                           timeout=60)
            assert (r.status_code == 200) is valid, (route, body, r.text)
            if not valid:
                assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")


def test_errors_documented_as_problems(live_url: str) -> None:
    """Every documented error response with a body is application/problem+json with the Problem schema,
    as the service sends it (it was documented as application/json)."""
    import httpx

    doc = httpx.get(live_url + "/openapi.json").json()
    errors = [(path, method, code, response) for path, operations in doc["paths"].items()
              for method, operation in operations.items() for code, response in operation["responses"].items()
              if code[0] in "45" and response.get("content")]
    assert len(errors) > 40
    for path, method, code, response in errors:
        assert response["content"] == {"application/problem+json": {"schema": {
            "$ref": "#/components/schemas/Problem"}}}, (path, method, code)
    r = httpx.post(live_url + "/parse", json={})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"


def test_405_allows_every_method_of_the_path(live_url: str) -> None:
    """A 405 lists every method the path allows: /jobs/{id} is GET and DELETE on two routes, and Starlette
    named only the first route's (OPTIONS /jobs/{id} -> Allow: GET)."""
    import httpx

    for path, allowed in (("/jobs/abc", {"GET", "DELETE"}), ("/jobs", {"GET", "POST"}),
                          ("/marginals", {"GET", "POST"}), ("/parse", {"POST"})):
        for method in ("OPTIONS", "PUT", "PATCH", "HEAD"):
            r = httpx.request(method, live_url + path)
            assert r.status_code == 405, (method, path, r.text)
            assert set(r.headers["allow"].split(", ")) == allowed, (method, path, r.headers["allow"])
            assert method == "HEAD" or r.headers["content-type"] == "application/problem+json"
        for method in allowed:  # and each listed method is answered (whatever the status), not 405
            assert httpx.request(method, live_url + path, timeout=60).status_code != 405, (method, path)


def test_openapi_bounds_are_json_schema_keywords(tmp_path: pytest.TempPathFactory) -> None:
    """Every bound reaches the document as JSON Schema's minimum/maximum: pydantic writes a bound it cannot
    place on the type (an optional field, or one behind a validator) as "ge"/"le", which no client reads."""
    from service_helpers import settings as make_settings

    from service.app import create_app

    document = create_app(make_settings(tmp_path)).openapi()  # type: ignore[arg-type]
    stray: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            stray.extend(f"{path}.{key}" for key in ("ge", "le", "gt", "lt") if key in node)
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(document, "openapi")
    assert stray == []
