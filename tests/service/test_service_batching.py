"""Micro-batching through the app (``service.batcher`` + ``service.parse_batch``) with the default model:
a request gets the same answer in a batch as alone, errors reach only their own request, the time budget
(503 never started / 504 started), and admission by words in flight."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_helpers import WORDS, WORDS2, running_app

from service import parse_batch, parsing
from service.parse_batch import ParseWork, run_batch
from service.schemas import ParseRequest
from service.state import ServiceState

PROBLEM = "application/problem+json"
DEADLINE = 60.0
SENTENCES = [WORDS, ["A", "second", "sentence", "of", "nine", "words", "is", "here", "."], WORDS2,
             ["Time", "flies", "like", "an", "arrow", "."]]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # one parse process (one batcher worker): the batch below is not split between idle workers
    with running_app(tmp_path_factory.mktemp("batching"), request_timeout_s=4.0, parse_processes=1) as c:
        yield c


def state_of(client: TestClient) -> ServiceState:
    state: ServiceState = client.app.state.service  # type: ignore[attr-defined]
    return state


def metric(client: TestClient, name: str, **labels: str) -> float:
    return state_of(client).metrics.registry.get_sample_value(name, labels) or 0.0


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@contextmanager
def batcher_set(client: TestClient, **attrs: Any) -> Iterator[None]:
    batcher = state_of(client).batcher
    saved = {k: getattr(batcher, k) for k in attrs}
    for k, v in attrs.items():
        setattr(batcher, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(batcher, k, v)


@contextmanager
def gated_runner(client: TestClient) -> Iterator[threading.Event]:
    """Batches wait for the returned event before they parse (the worker is busy until then)."""
    gate = threading.Event()

    def held(works: list[ParseWork]) -> list[Any]:
        assert gate.wait(DEADLINE)
        return run_batch(works)

    with batcher_set(client, run=held):
        try:
            yield gate
        finally:
            gate.set()


def assert_same_parse(alone: dict[str, Any], batched: dict[str, Any]) -> None:
    """Trees, labels and tags identical; probabilities equal up to rounding (the engine's stacked BP and the
    tagger sum in an order that depends on the stack, ``service.parse_batch``); everything else identical."""
    def split(doc: dict[str, Any]) -> tuple[str, list[float]]:
        floats: list[float] = []
        for s in doc["sentences"]:
            for t in s["tokens"]:
                floats += [t.pop("prob"), t.pop("deprel_prob")]
                upos_prob = t.pop("upos_prob")  # the tagger's forward-backward is stacked over sentences too
                floats.append(-1.0 if upos_prob is None else upos_prob)
            floats.append(s["inference"].pop("residual"))
            for key in ("p_tree", "expected_errors"):  # the sentence's confidence, read off the same beliefs
                if key in s:
                    floats.append(s.pop(key))
        return json.dumps(doc, sort_keys=True), floats

    (a, fa), (b, fb) = split(alone), split(batched)
    assert a == b
    assert fa == pytest.approx(fb, rel=0, abs=1e-12)


def test_a_request_gets_the_same_answer_in_a_batch_as_alone_and_errors_stay_its_own(client: TestClient) -> None:
    bodies: list[dict[str, Any]] = [{"tokens": [s]} for s in SENTENCES]
    bodies.append({"tokens": [SENTENCES[1], SENTENCES[2]]})
    bodies.insert(3, {"tokens": [["bad\tword"]]})  # 422, in the middle of the batch
    words = sum(len(s) for b in bodies for s in b["tokens"])
    batches, requests = metric(client, "parser_batch_requests_count"), metric(client, "parser_batch_requests_sum")
    # the batch goes when all its words are in (not after a wait): one batch however slow the machine
    with batcher_set(client, wait_s=DEADLINE, gap_s=DEADLINE, max_words=words, wait_only_when_busy=False), \
            ThreadPoolExecutor(len(bodies)) as pool:
        batched = list(pool.map(lambda b: client.post("/parse", json=b), bodies))
    assert metric(client, "parser_batch_requests_count") - batches == 1
    assert metric(client, "parser_batch_requests_sum") - requests == len(bodies)
    with batcher_set(client, enabled=False):
        alone = [client.post("/parse", json=b) for b in bodies]
    for a, b in zip(alone, batched, strict=True):
        assert a.status_code == b.status_code, (a.text, b.text)
        if a.status_code == 200:
            assert_same_parse(a.json(), b.json())
    bad = batched[3]
    assert bad.status_code == 422 and bad.headers["content-type"].startswith(PROBLEM)
    assert bad.json()["field"] == "tokens" and bad.json()["sentence"] == 0
    assert all(r.status_code == 200 for i, r in enumerate(batched) if i != 3)


def test_a_failing_stacked_parse_is_retried_per_request(client: TestClient,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """If the stacked engine call fails, each request is parsed alone: the failure reaches only the request
    that causes it, the others get their normal answer."""
    state = state_of(client)
    entry = state.registry.get(None)
    real = parsing.run_inference

    def fragile(entry: Any, sentences: list[Any], *args: Any) -> Any:
        if any("BOOM" in s.forms for s in sentences):
            raise FloatingPointError("cannot parse BOOM")
        return real(entry, sentences, *args)

    def work(words: list[str]) -> ParseWork:
        req = ParseRequest(tokens=[words], tags=[["X"] * len(words)], inference={"tag_samples": 0})
        return ParseWork(req, entry, parsing.parse_json, state.settings)

    expected = parse_batch.run_alone(work(WORDS2))
    monkeypatch.setattr(parsing, "run_inference", fragile)
    good, boom, also_good = run_batch([work(WORDS2), work(["BOOM", "!"]), work(WORDS2)])
    assert isinstance(boom, FloatingPointError)
    assert good == also_good == expected


@pytest.mark.slow
def test_time_budget_503_if_never_started_504_if_started(client: TestClient) -> None:
    state = state_of(client)
    before = metric(client, "parser_dropped_work_total", reason="timeout")
    # the batch waits longer than the budget
    with batcher_set(client, wait_s=DEADLINE, gap_s=DEADLINE, max_words=10**6, wait_only_when_busy=False):
        r = client.post("/parse", json={"tokens": [WORDS]})
    assert r.status_code == 503 and r.headers["content-type"].startswith(PROBLEM), r.text
    assert r.headers["retry-after"] == str(state.settings.retry_after_seconds) and "time budget" in r.json()["detail"]
    assert metric(client, "parser_dropped_work_total", reason="timeout") == before + 1
    assert state.admission.words == 0  # its words came back when it was dropped
    with gated_runner(client) as gate:
        r = client.post("/parse", json={"tokens": [WORDS]})
        assert r.status_code == 504 and r.headers["content-type"].startswith(PROBLEM), r.text
        assert r.json()["type"].endswith(":timeout") and state.admission.words == len(WORDS)  # still running
        gate.set()
        wait_until(lambda: state.admission.words == 0, "the abandoned parse to end")
    assert client.post("/parse", json={"tokens": [WORDS]}).status_code == 200


def test_admission_counts_words_in_flight(client: TestClient) -> None:
    state = state_of(client)
    saved = state.admission.max_words
    state.admission.max_words = len(WORDS) + 1
    rejected = metric(client, "parser_rejected_total")
    try:
        with gated_runner(client) as gate, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/parse", json={"tokens": [WORDS]})
            wait_until(lambda: state.admission.words == len(WORDS), "the first request to be admitted")
            assert metric(client, "parser_words_in_flight") == len(WORDS)
            r = client.post("/parse", json={"tokens": [WORDS2]})  # 9 + 3 words > 10
            assert r.status_code == 503 and r.headers["content-type"].startswith(PROBLEM), r.text
            assert "retry-after" in r.headers and "words" in r.json()["detail"]
            small = pool.submit(client.post, "/parse", json={"tokens": [["Hello"]]})  # 9 + 1 words fit
            wait_until(lambda: state.admission.words == len(WORDS) + 1, "the one-word request to be admitted")
            gate.set()
            assert first.result().status_code == 200 and small.result().status_code == 200
    finally:
        state.admission.max_words = saved
    assert metric(client, "parser_rejected_total") == rejected + 1 and state.admission.words == 0


def test_estimated_words_of_each_input_form(tmp_path: Path) -> None:
    from service.inputs import estimated_words

    assert estimated_words(ParseRequest(tokens=[WORDS, WORDS2])) == len(WORDS) + len(WORDS2)
    conllu = "# text = Dogs bark.\n1-2\tDogs\t_\t_\t_\t_\t_\t_\t_\t_\n1\tDogs\t_\n2\tbark\t_\n3\t.\t_\n\n"
    assert estimated_words(ParseRequest(conllu=conllu)) == 3
    assert estimated_words(ParseRequest(text="The parser tells you how sure it is. Try it!")) == 12


def test_a_failing_batch_morphology_is_retried_per_request(client: TestClient,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """LEMMA and FEATS are filled for the whole batch in one call; if that call fails, each request fills its
    own: the failure reaches only the request that causes it, the others get their normal answer."""
    state = state_of(client)
    entry = state.registry.get(None)
    assert entry.pipeline.lemmatizer is not None  # the default model has the components
    real = parsing.fill_morphology
    calls: list[int] = []

    def fragile(pipeline: Any, sentences: list[Any], parsed: list[Any]) -> None:
        calls.append(len(sentences))
        if any("BOOM" in s.forms for s in sentences):
            raise FloatingPointError("cannot analyse BOOM")
        real(pipeline, sentences, parsed)

    def work(words: list[str]) -> ParseWork:
        req = ParseRequest(tokens=[words], tags=[["X"] * len(words)], inference={"tag_samples": 0})
        return ParseWork(req, entry, parsing.parse_json, state.settings, morphology=True)

    expected = parse_batch.run_alone(work(WORDS2))
    assert {t["lemma"] for t in expected["sentences"][0]["tokens"]} != {"_"}
    monkeypatch.setattr(parsing, "fill_morphology", fragile)
    calls.clear()
    good, boom, also_good = run_batch([work(WORDS2), work(["BOOM", "!"]), work(WORDS2)])
    assert calls[0] == 3  # one call for the batch's three sentences first
    assert isinstance(boom, FloatingPointError)
    for answer in (good, also_good):  # parsed in the stack of three: probabilities equal up to rounding
        assert_same_parse(copy.deepcopy(expected), answer)
