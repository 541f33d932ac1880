"""Constituency models in the service (issue 26, "Service"): listed in /models with their formalism; /parse and
/marginals answer what ``engine.constituency.outputs`` computes (tested there against enumeration); text is split
by the default model's tokenizer and respelled as the Penn Treebank; the dependency-only routes and fields, bad
input and over-long sentences are 422s (never a 500); a training job takes ``.mrg`` uploads and publishes a model
that /parse then serves. The models are trained here on a tiny hand-written treebank (never PTB data)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from nltk import Tree
from service_helpers import CONSTITUENCY_TREEBANK, running_app, train_constituency

from engine.constituency.commands import load
from engine.constituency.outputs import parse_answer, span_answer
from engine.constituency.spelling import ptb_words

TREEBANK = CONSTITUENCY_TREEBANK
KEY = "constituency-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
NAME = "tiny-ptb"
LATENT = "tiny-latent"
MAX_WORDS = 12


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The service's data directory with ``tiny-ptb`` v1 in its trained models."""
    tmp = tmp_path_factory.mktemp("constituency")
    train_constituency(tmp / "data" / "models" / NAME / "v1")
    train_constituency(tmp / "data" / "models" / LATENT / "v1", "--factors", "2", "--epochs", "2")
    return tmp


@pytest.fixture(scope="module")
def client(model_dir: Path) -> Iterator[TestClient]:
    with running_app(model_dir, workers=1, API_KEY=KEY, max_words_constituency=MAX_WORDS) as c:
        yield c


def post(c: TestClient, route: str, body: dict[str, Any]) -> Any:
    r = c.post(route, json={"model": NAME, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_models_lists_the_formalism(client: TestClient) -> None:
    models = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert models[NAME]["formalism"] == "constituency" and models[NAME]["version"] == 1
    assert models[NAME]["settings"]["model"] == "xbar-pcfg" and models[NAME]["components"] == ["parser"]
    assert models["en_ewt"]["formalism"] == "dependency"


def test_parse_and_marginals_are_the_engines(client: TestClient, model_dir: Path) -> None:
    parser = load(model_dir / "data" / "models" / NAME / "v1")
    sentences = [["the", "dog", "saw", "a", "cat", "with", "a", "hat", "."], ["he", "said", "``", "look", "''", "."]]
    parsed = post(client, "/parse", {"tokens": sentences})
    spans = post(client, "/marginals", {"tokens": sentences})
    assert parsed["model"] == {"name": NAME, "version": 1}
    for words, p, s in zip(sentences, parsed["sentences"], spans["sentences"], strict=True):
        tree, marginals = parser.parse_with_marginals(words)
        assert p == parse_answer(tree, marginals, parser.model.grammar)
        assert s == span_answer(words, marginals, parser.model.grammar)
        assert p["constituents"] and all(0 <= c["prob"] <= 1 for c in p["constituents"] if c["prob"] is not None)
    tree = "(TOP (S (NP (PRP he)) (VP (VBD said) (`` ``) (S (VP (VB look))) ('' '')) (. .)))"
    assert parsed["sentences"][1]["tree"] == tree
    assert [c["layer"] for c in parsed["sentences"][1]["constituents"]] == ["bot", "top", "bot", "top", "inner"]
    got = client.get("/marginals", params={"model": NAME, "tokens": sentences[1]})
    assert got.status_code == 200 and got.json()["sentences"] == spans["sentences"][1:]


def test_a_latent_model_answers_as_the_engine(client: TestClient, model_dir: Path) -> None:
    """The EP-trained factored model (two one-bit factors) behind the same routes: the engine's trees and
    posteriors, each a probability."""
    parser = load(model_dir / "data" / "models" / LATENT / "v1")
    models = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert models[LATENT]["formalism"] == "constituency" and models[LATENT]["settings"]["model"] == "latent-pcfg"
    sentences = [["the", "dog", "saw", "a", "cat", "."], ["he", "said", "``", "look", "''", "."]]
    parsed = post(client, "/parse", {"model": LATENT, "tokens": sentences})
    spans = post(client, "/marginals", {"model": LATENT, "tokens": sentences})
    for words, p, s in zip(sentences, parsed["sentences"], spans["sentences"], strict=True):
        tree, marginals = parser.parse_with_marginals(words)
        assert marginals is not None and p == parse_answer(tree, marginals, parser.model.grammar)
        assert s == span_answer(words, marginals, parser.model.grammar)
        assert Tree.fromstring(p["tree"]).leaves() == words
        assert all(0 <= c["prob"] <= 1 for c in p["constituents"] if c["prob"] is not None)


def test_text_is_tokenized_and_spelled_as_the_treebank(client: TestClient) -> None:
    out = post(client, "/parse", {"text": 'He said "look" (fast).\n\nThe dog ran.'})["sentences"]
    assert [s["words"] for s in out] == [["He", "said", "``", "look", "''", "-LRB-", "fast", "-RRB-", "."],
                                         ["The", "dog", "ran", "."]]
    assert all(s["tree"].startswith("(TOP ") for s in out)


def test_any_words_give_a_tree_that_reads_back(model_dir: Path) -> None:
    """Random words of brackets, quotes, backslashes, spaces and other scripts, respelled: the tree is one line
    that nltk reads back to the same words, and the answer is JSON without NaN."""
    parser = load(model_dir / "data" / "models" / NAME / "v1")
    rng = random.Random(0)
    alphabet = "aZ09.,;:!?'\"()[]{}-\u2013\u2014\u2026\u201c\u201d\u2018\u2019 $%&*/\\_\u00e9\u6f22\U0001f600\u0301"
    for _ in range(100):
        words = ptb_words(["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
                           for _ in range(rng.randint(1, 10))])
        tree, marginals = parser.parse_with_marginals(words)
        answer = parse_answer(tree, marginals, parser.model.grammar)
        json.dumps([answer, span_answer(words, marginals, parser.model.grammar)], allow_nan=False)
        assert "\n" not in answer["tree"] and Tree.fromstring(answer["tree"]).leaves() == words, answer["tree"]


REFUSED = [
    ("/confidence", {"tokens": [["look"]]}, "model"),
    ("/kbest", {"tokens": [["look"]]}, "model"),
    ("/sample", {"tokens": [["look"]]}, "model"),
    ("/parse", {"tokens": [["look"]], "tags": [["VERB"]]}, "tags"),
    ("/parse", {"tokens": [["look"]], "xpos": [["VB"]]}, "xpos"),
    ("/parse", {"conllu": "1\tlook\t_\t_\t_\t_\t_\t_\t_\t_\n\n"}, "conllu"),
    ("/parse", {"tokens": [["look"]], "output": "conllu"}, "output"),
    ("/parse", {"tokens": [["look"]], "inference": {"method": "bp"}}, "inference.method"),
    ("/parse", {"tokens": [["look"]], "inference": {"tag_samples": 2}}, "inference.tag_samples"),
    ("/marginals", {"tokens": [["look"]], "tag_marginals": True}, "tag_marginals"),
]


@pytest.mark.parametrize(("route", "body", "field"), REFUSED)
def test_dependency_only_routes_and_fields_are_422(client: TestClient, route: str, body: dict[str, Any],
                                                   field: str) -> None:
    r = client.post(route, json={"model": NAME, **body})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == field and problem["rule"] == "model-capability"
    assert f"model '{NAME}' is a constituency model" in problem["detail"]


BAD = [
    ({"tokens": []}, "tokens", "no sentences"),
    ({"tokens": [[]]}, "tokens", "no words"),
    ({"tokens": [["look", ""]]}, "tokens", "is empty"),
    ({"tokens": [["look", "a\tb"]]}, "tokens", "tab"),
    ({"tokens": [["look"] * (MAX_WORDS + 1)]}, "tokens", f"at most {MAX_WORDS}"),
    ({"text": " ".join(["look"] * (MAX_WORDS + 1))}, "text", f"at most {MAX_WORDS}"),
    ({"text": "   "}, "text", "no words"),
    ({"tokens": [["look"]] * 201}, "tokens", "at most 200"),
    ({"tokens": [["look"]], "blank_line": "newdoc"}, "blank_line", "goes with text"),
]


@pytest.mark.parametrize(("body", "field", "says"), BAD)
def test_bad_input_is_422(client: TestClient, body: dict[str, Any], field: str, says: str) -> None:
    for route in ("/parse", "/marginals"):
        r = client.post(route, json={"model": NAME, **body})
        assert r.status_code == 422 and r.json()["field"] == field and says in r.json()["detail"], r.text


def test_a_sentence_without_a_tree_gets_the_flat_fallback(client: TestClient) -> None:
    (s,) = post(client, "/parse", {"tokens": [["the", "the"]]})["sentences"]
    assert s["fallback"] and s["constituents"] == [] and [t["prob"] for t in s["tags"]] == [None, None]
    (m,) = post(client, "/marginals", {"tokens": [["the", "the"]]})["sentences"]
    assert m == {"words": ["the", "the"], "spans": None, "labels": None, "label_probs": None, "fallback": True}


def _job(client: TestClient, config: dict[str, Any], train: str | None = TREEBANK, dev: str | None = None) -> Any:
    files = {}
    if train is not None:
        files["train"] = ("train.mrg", train.encode(), "text/plain")
    if dev is not None:
        files["dev"] = ("dev.mrg", dev.encode(), "text/plain")
    return client.post("/jobs", files=files, data={"config": json.dumps(config)}, headers=AUTH)


def test_training_job_publishes_a_constituency_model(client: TestClient) -> None:
    r = _job(client, {"formalism": "constituency", "name": "job-ptb"}, dev=TREEBANK.splitlines()[0] + "\n")
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    deadline = time.monotonic() + 300
    while (job := client.get(f"/jobs/{job_id}", headers=AUTH).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job["status"] == "succeeded", job
    assert job["model"] == {"name": "job-ptb", "version": 1} and job["config"]["formalism"] == "constituency"
    assert job["metrics"]["sentences"] == 5 and job["metrics"]["dev"]["f1"] == 100.0
    out = post(client, "/parse", {"model": "job-ptb", "tokens": [["the", "dog", "saw", "a", "cat", "."]]})
    assert out["model"] == {"name": "job-ptb", "version": 1}
    assert out["sentences"][0]["tree"] == "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .)))"
    (info,) = [m for m in client.get("/models").json()["models"] if m["name"] == "job-ptb"]
    assert info["formalism"] == "constituency"


def test_training_job_refusals(client: TestClient) -> None:
    bad = _job(client, {"formalism": "constituency"}, train=TREEBANK + "(TOP (S (NP (DT the))\n")
    assert bad.status_code == 422 and bad.json()["field"] == "train" and bad.json()["line"] == 6, bad.text
    bad_dev = _job(client, {"formalism": "constituency"}, dev="(TOP (S (NN x))\n")
    assert bad_dev.status_code == 422 and bad_dev.json()["field"] == "dev", bad_dev.text
    empty = _job(client, {"formalism": "constituency"}, train="\n")
    assert empty.status_code == 422 and "no trees" in empty.json()["detail"]
    missing = _job(client, {"formalism": "constituency"}, train=None)
    assert missing.status_code == 422 and missing.json()["field"] == "train"
    unknown = _job(client, {"formalism": "constituency", "epochs": 3})
    assert unknown.status_code == 422 and unknown.json()["field"] == "config.epochs"
    other = _job(client, {"formalism": "semantic"})
    assert other.status_code == 422 and other.json()["field"] == "config.formalism"
    shipped = _job(client, {"formalism": "constituency", "name": "en_ewt"})
    assert shipped.status_code == 422 and shipped.json()["field"] == "config.name"
    parse_job = client.post("/jobs", files={"input": ("in.conllu", b"1\tlook\t_\t_\t_\t_\t_\t_\t_\t_\n\n")},
                            data={"config": json.dumps({"kind": "parse", "model": NAME})}, headers=AUTH)
    assert parse_job.status_code == 422 and parse_job.json()["field"] == "config.model", parse_job.text
