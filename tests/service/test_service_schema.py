"""Schemathesis against the published OpenAPI document: generated requests (valid and invalid) to every
operation of a live in-process server, /jobs with its API key, and every one of Schemathesis's checks: no 5xx,
every schema-valid request accepted (``positive_data_acceptance``), every invalid one refused, answers as
documented, authentication enforced (``ignored_auth``).

A valid request must also keep the rules JSON Schema cannot state (``service.schemas.BEYOND_SCHEMA``: tags as
many as the words, CoNLL-U's grammar, what the tokenizer makes of a text, the model's components). The document
lists them per operation (``x-beyond-schema``) and says ``format: conllu``; Schemathesis is told in its own
ways: a strategy for the format, and a ``map_case`` hook that gives a generated valid request's tags the shape
of its tokens. What generation still draws against such a rule is answered 422 naming the rule (``rule``):
those cases are counted, not failed; a 422 naming no rule, or a rule the operation does not list, fails.

The server runs with ``workers=0`` so generated training jobs are only queued, never trained. Cost: about
500 cases (``MAX_EXAMPLES`` per operation and generation mode; fewer where the inputs run out), under 2 min on
2 shared cores.
"""

from __future__ import annotations

import collections
import string
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a test extra")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KEY = "schema-test-key"
MAX_EXAMPLES = 25
EXPECTED = {
    # 404: a model or job that does not exist (the document cannot list them: jobs publish models); 409: a job
    # that has finished; 413: the body limit is in bytes of the encoded request, JSON Schema counts characters
    "positive_data_acceptance": {"expected-statuses": ["2xx", "404", "409", "413"]},
    "negative_data_rejection": {"expected-statuses": ["400", "401", "403", "404", "405", "406", "409", "413",
                                                      "415", "422"]},
}
UPOS = ["ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X", "_"]


@st.composite
def conllu_documents(draw: st.DrawFn) -> str:
    """Valid CoNLL-U within the limits of ``tokens``: 1-3 sentences of 1-8 words (the format ``conllu``)."""
    form = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
                   min_size=1, max_size=12)
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 8))
        rows = [f"{i}\t{draw(form)}\t_\t{draw(st.sampled_from(UPOS))}\t_\t_\t{draw(st.integers(0, n))}\t_\t_\t_"
                for i in range(1, n + 1)]
        comment = [f"# sent_id = {draw(st.text(string.ascii_letters, min_size=1, max_size=5))}"]
        blocks.append("\n".join((comment if draw(st.booleans()) else []) + rows) + "\n")
    return "\n".join(blocks)


def _shaped(values: Any, tokens: list[list[str]]) -> Any:
    """``values`` (a valid tags or xpos list) reshaped to one entry per word of ``tokens``, reusing its entries."""
    if not (isinstance(values, list) and values and all(isinstance(v, list) and v for v in values)):
        return values
    return [[values[i % len(values)][j % len(values[i % len(values)])] for j in range(len(words))]
            for i, words in enumerate(tokens)]


def _conform(case: Any) -> Any:
    """A schema-valid generated case made to keep the rules beyond its schema that generation can keep: tags and
    xpos shaped like the tokens (``tags-shape``), and for GET /marginals one input (``one-input``)."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return case
    if isinstance(case.body, dict) and isinstance(case.body.get("tokens"), list):
        for name in ("tags", "xpos"):
            case.body[name] = _shaped(case.body.get(name), case.body["tokens"])
    if case.operation.label == "GET /marginals" and case.query:
        query = case.query
        if query.get("text") is not None:
            for name in ("tokens", "tags", "xpos"):
                query.pop(name, None)
        elif isinstance(query.get("tokens"), list):
            for name in ("tags", "xpos"):
                shaped = _shaped([query[name]] if query.get(name) else None, [query["tokens"]])
                if shaped is not None:
                    query[name] = shaped[0]
    return case


@pytest.fixture(scope="module")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import httpx
    import uvicorn
    from service_helpers import free_port
    from service_helpers import settings as make_settings

    from service.app import create_app

    port = free_port()
    app = create_app(make_settings(tmp_path_factory.mktemp("schema"), max_pending=64, API_KEY=KEY))
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


class Run:
    """What the generated cases did: failed checks, statuses, and 422s for a documented rule beyond the schema."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.statuses: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.beyond: collections.Counter[tuple[str, str]] = collections.Counter()

    def check(self, case: Any, response: Any, checks: list[Any]) -> None:
        """Every check on the answer; a valid case's 422 for a rule the operation lists skips only
        ``positive_data_acceptance`` (the schema cannot say the request was invalid)."""
        from schemathesis.core.failures import FailureGroup

        mode = case.meta.generation.mode if case.meta is not None else schemathesis.GenerationMode.POSITIVE
        self.statuses[(case.operation.label, mode.value, response.status_code)] += 1
        rules = case.operation.definition.raw.get("x-beyond-schema", {})
        if mode.is_positive and response.status_code == 422 and response.json().get("rule") in rules:
            self.beyond[(case.operation.label, response.json()["rule"])] += 1
            checks = [check for check in checks if check.__name__ != "positive_data_acceptance"]
        try:
            case.validate_response(response, checks=checks, headers=self.headers(case))
        except (AssertionError, FailureGroup) as e:
            self.failures.append(f"{case.operation.label} {mode.value} {str(case.body)[:300]} "
                                 f"{str(case.query)[:200]}: {str(e)[:1500]}")

    @staticmethod
    def headers(case: Any) -> dict[str, str] | None:
        return {"Authorization": f"Bearer {KEY}"} if case.operation.path.startswith("/jobs") else None


def _generated(strategy: Any, live_url: str, checks: list[Any], run: Run) -> Any:
    """A hypothesis test sending cases drawn from ``strategy`` and checking each answer."""
    from hypothesis import given

    @given(data=st.data())
    @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True, database=None)
    def send(data: st.DataObject) -> None:
        case = _conform(data.draw(strategy))
        run.check(case, case.call(base_url=live_url, timeout=60, headers=Run.headers(case)), checks)

    return send


@pytest.mark.slow
def test_service_schema_conformance(live_url: str) -> None:
    """For every operation, positive and negative generated cases and the documented examples: every
    Schemathesis check passes, and the valid cases reach the service (a 2xx on every parsing operation)."""
    from hypothesis.errors import Unsatisfiable
    from schemathesis.checks import CHECKS, load_all_checks
    from schemathesis.config import SchemathesisConfig

    load_all_checks()
    checks = list(CHECKS.get_all())
    assert "positive_data_acceptance" in {check.__name__ for check in checks}
    schemathesis.openapi.format("conllu", conllu_documents())
    schemathesis.hook("map_case")(lambda ctx, case: _conform(case))
    api = schemathesis.openapi.from_url(live_url + "/openapi.json",
                                        config=SchemathesisConfig.from_dict({"checks": EXPECTED}))
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 12
    run = Run()
    for operation in operations:
        strategies = [(mode, operation.as_strategy(generation_mode=mode)) for mode in schemathesis.GenerationMode]
        strategies += [(schemathesis.GenerationMode.POSITIVE, example)  # the documented examples, as sent
                       for example in operation.schema.get_strategies_from_examples(operation)]
        for mode, strategy in strategies:
            try:
                _generated(strategy, live_url, checks, run)()
            except Unsatisfiable:
                # an operation without any input (GET /healthz) has no invalid request to generate
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
    cases = sum(run.statuses.values())
    modes = collections.Counter(mode for (_, mode, _), n in run.statuses.items() for _ in range(n))
    print(f"schemathesis: {cases} cases ({modes['positive']} valid, {modes['negative']} invalid) on "
          f"{len(operations)} operations, {len(run.failures)} failed checks, "
          f"{sum(n for (_, _, status), n in run.statuses.items() if status >= 500)} x 5xx, "
          f"{sum(run.beyond.values())} valid cases refused by a rule beyond the schema: {dict(run.beyond)}",
          file=sys.stderr)
    assert not run.failures, f"{len(run.failures)} failed checks:\n" + "\n".join(run.failures[:50])
    assert not [key for key in run.statuses if key[2] >= 500]
    accepted = {label for (label, mode, status) in run.statuses if mode == "positive" and 200 <= status < 300}
    assert {"POST /parse", "POST /marginals", "GET /marginals", "POST /confidence", "POST /kbest", "POST /sample",
            "GET /models", "GET /jobs", "POST /jobs"} <= accepted, accepted
    negative = {label for (label, mode, _) in run.statuses if mode == "negative"}
    assert len(negative) >= 10, negative
    assert sum(run.beyond.values()) < cases // 5, run.beyond  # the rules beyond the schema are the exception


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
    in both (oneOf), one input is valid in both, an integer written 5.0 is an integer in both, tags go with
    tokens only, and the word and tag rules (not blank, no tab, at most 200 characters, a UPOS tag) hold in both."""
    import httpx
    from jsonschema import Draft202012Validator

    doc = httpx.get(live_url + "/openapi.json").json()
    tags = {"tags": [["NOUN", "VERB"]]}
    cases: list[tuple[dict[str, object], bool]] = [
        ({}, False), ({"text": "Dogs bark.", "tokens": [["Dogs", "bark"]]}, False),
        ({"text": None, "tokens": None}, False), ({"tokens": [["Dogs", "bark"]], "conllu": None, **tags}, True),
        ({"tokens": [["Dogs", "bark"]], "inference": {"iterations": 5.0}, **tags}, True),
        ({"tokens": [["Dogs", "bark"]], "inference": {"iterations": "5"}}, False),
        ({"text": "Dogs bark.", **tags}, False), ({"text": "Dogs bark.", "xpos": [["NNS", "VBP"]]}, False),
        ({"text": " \u3000\x85"}, False), ({"text": "\u200b\u00ad"}, False), ({"text": "a\u200b"}, True),
        ({"tokens": [["Dogs", " "]]}, False),
        ({"tokens": [["Dogs", "b\tark"]]}, False), ({"tokens": [["Dogs", "b" * 201]]}, False),
        ({"tokens": [["Dogs", "b" * 200]]}, True), ({"tokens": [["Dogs", "bark"]], "tags": [["NOUN", "FOO"]]}, False),
        ({"tokens": [["Dogs", "bark"]], "tags": [["NOUN", "_"]]}, True), ({"tokens": [[]]}, False),
        ({"tokens": [["Dogs"]] * 201}, False), ({"tokens": [["Dogs"] * 501]}, False)]
    for route, name in (("/parse", "ParseRequest"), ("/kbest", "KBestRequest"), ("/sample", "SampleRequest")):
        validator = Draft202012Validator({"$ref": f"#/components/schemas/{name}", **doc})
        for body, valid in cases:
            if route != "/parse" and body.get("tokens") == [["Dogs"] * 501]:
                continue  # the same for /kbest and /sample at their 150 words (below)
            assert validator.is_valid(body) is valid, (name, body)
            r = httpx.post(live_url + route, json=body, timeout=60)
            assert (r.status_code == 200) is valid, (route, body, r.text)
            if not valid:
                assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
                assert "rule" not in r.json(), r.json()  # broke the schema, not a rule beyond it
        long = {"tokens": [["Dogs"] * 151], "inference": {"iterations": 1}}
        assert validator.is_valid(long) is (route == "/parse")
        assert (httpx.post(live_url + route, json=long, timeout=60).status_code == 200) is (route == "/parse")


def test_whitespace_is_pythons_on_every_code_point() -> None:
    """The schema's whitespace class (JSON Schema's ``\\s`` is ECMA-262's, another set) is exactly
    ``str.isspace``, which the service's word checks and the tokenizer use."""
    import re

    from service.schemas import WHITESPACE

    whitespace = re.compile(f"[{WHITESPACE}]")
    assert [c for c in range(sys.maxunicode + 1) if chr(c).isspace() != bool(whitespace.fullmatch(chr(c)))] == []


def test_limits_in_the_document_are_the_settings(tmp_path: pytest.TempPathFactory) -> None:
    """The bounds the settings fix reach the document as JSON Schema keywords (``x-limit`` names the setting),
    at most the model's own bounds; with open /jobs their authentication is documented as optional."""
    from service_helpers import settings as make_settings

    from service.app import create_app

    doc = create_app(make_settings(tmp_path, max_sentences=7, max_words=9, max_words_kbest=4, max_k=500,  # type: ignore[arg-type]
                                   max_n=5, max_iterations=3, allow_open_jobs=True)).openapi()
    schemas = doc["components"]["schemas"]
    tokens = schemas["ParseRequest"]["properties"]["tokens"]["anyOf"][0]
    assert (tokens["maxItems"], tokens["items"]["maxItems"]) == (7, 9)
    assert schemas["KBestRequest"]["properties"]["tokens"]["anyOf"][0]["items"]["maxItems"] == 4
    assert schemas["KBestRequest"]["properties"]["k"]["maximum"] == 100  # the request model's own bound is lower
    assert schemas["SampleRequest"]["properties"]["n"]["maximum"] == 5
    assert schemas["InferenceOptions"]["properties"]["iterations"]["anyOf"][0]["maximum"] == 3
    assert schemas["SingleTaggingOptions"]["properties"]["tag_samples"]["anyOf"][0]["maximum"] == 0
    query = {p["name"]: p["schema"] for p in doc["paths"]["/marginals"]["get"]["parameters"]}
    assert query["tokens"]["maxItems"] == 9
    assert doc["paths"]["/jobs"]["post"]["security"] == [{}, {"HTTPBearer": []}]
    assert doc["paths"]["/jobs"]["post"]["x-beyond-schema"].keys() == {"job-config", "treebank", "idempotency-key",
                                                                             "parse-job"}


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
