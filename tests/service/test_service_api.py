"""The HTTP API against the shipped models, through httpx (FastAPI's TestClient): every parsing endpoint,
the model list, operations routes, and every documented error as application/problem+json."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_helpers import CONLLU, TAGS, TAGS2, WORDS, WORDS2, running_app

from engine.kernels.mst import is_tree
from service.limits import Admission
from service.problems import ProblemError

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("svc"), max_words=60, max_body_bytes=64 * 1024,
                     max_request_words=100) as c:
        yield c


def body(**extra: object) -> dict[str, object]:
    return {"tokens": [WORDS, WORDS2], "tags": [TAGS, TAGS2], **extra}


def assert_problem(r: object, status: int, **members: object) -> dict[str, object]:
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    assert r.headers["content-type"].startswith(PROBLEM)  # type: ignore[attr-defined]
    doc = r.json()  # type: ignore[attr-defined]
    assert {"type", "title", "status", "detail"} <= set(doc) and doc["status"] == status
    for key, value in members.items():
        assert doc.get(key) == value, (key, doc)
    return doc


# -- parsing -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("model, method", [(None, "bp"), ("en_ewt-o1", "exact"), ("en_ewt-o1", "bp")])
def test_service_parse_returns_a_tree_per_sentence(client: TestClient, model: str | None, method: str) -> None:
    req = body(inference={"method": method, "iterations": 3}, **({"model": model} if model else {}))
    r = client.post("/parse", json=req)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["model"] == {"name": model or "en_ewt", "version": 1}
    assert [len(s["tokens"]) for s in doc["sentences"]] == [len(WORDS), len(WORDS2)]
    for s, words in zip(doc["sentences"], [WORDS, WORDS2], strict=True):
        assert [t["form"] for t in s["tokens"]] == words and [t["id"] for t in s["tokens"]] == list(
            range(1, len(words) + 1))
        heads = np.array([-1] + [t["head"] for t in s["tokens"]])
        assert is_tree(heads) and (heads[1:] == 0).sum() == 1
        assert all(0.0 < t["prob"] <= 1.0 and 0.0 < t["deprel_prob"] <= 1.0 and t["deprel"] for t in s["tokens"])
        assert s["inference"]["method"] == method
        if method == "bp":
            assert 1 <= s["inference"]["iterations"] <= 3
    # "tells" heads the sentence; "The" attaches to "parser"
    first = doc["sentences"][0]["tokens"]
    assert first[2]["head"] == 0 and first[0]["head"] == 2


def test_service_parse_conllu_in_and_out(client: TestClient) -> None:
    r = client.post("/parse", json={"conllu": CONLLU, "output": "conllu", "model": "en_ewt-o1"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/conllu")
    lines = [line.split("\t") for line in r.text.splitlines() if line and not line.startswith("#")]
    assert [cols[1] for cols in lines] == WORDS2
    assert lines[1][6] == "0" and lines[0][6] == "2"
    assert all("HeadProb=" in cols[9] for cols in lines) and "SpaceAfter=No" in lines[1][9]
    assert r.text.startswith("# sent_id = a\n")


def test_service_marginals_rows_are_head_distributions(client: TestClient) -> None:
    posted = client.post("/marginals", json=body(model="en_ewt-o1"))
    got = client.get("/marginals", params={"tokens": WORDS2, "tags": TAGS2, "model": "en_ewt-o1"})
    parsed = client.post("/parse", json=body(model="en_ewt-o1")).json()
    assert posted.status_code == 200 and got.status_code == 200
    sents = posted.json()["sentences"]
    for s, words in zip(sents, [WORDS, WORDS2], strict=True):
        m = np.array(s["marginals"])
        assert s["forms"] == words and m.shape == (len(words), len(words) + 1)
        assert np.allclose(m.sum(axis=1), 1.0, atol=1e-9) and (m >= 0).all()
        assert np.allclose(np.diag(m[:, 1:]), 0.0)  # no word heads itself
    # the GET form for one sentence equals the POST form
    assert np.allclose(np.array(got.json()["sentences"][0]["marginals"]), np.array(sents[1]["marginals"]))
    # /parse reports marginals[m-1][head] as the chosen head's probability
    for s, p in zip(sents, parsed["sentences"], strict=True):
        m = np.array(s["marginals"])
        assert all(math.isclose(t["prob"], m[t["id"] - 1, t["head"]], rel_tol=1e-9) for t in p["tokens"])


def test_service_confidence_is_a_point_for_full_inference(client: TestClient) -> None:
    for model in ("en_ewt-o1", "en_ewt"):
        r = client.post("/confidence", json=body(model=model))
        assert r.status_code == 200, r.text
        raw = client.post("/confidence", json=body(model=model, inference={"calibration": "none"}))
        for s, u in zip(r.json()["sentences"], raw.json()["sentences"], strict=True):
            assert s["eta"] == 0.0 and s["kl_bound"] == 0.0 and s["covers"]
            # the interval is the point of the model's own marginal (before calibration: en_ewt has a head power)
            assert all(t["lower"] == t["model_prob"] == t["upper"] and not t["vacuous"] for t in s["tokens"])
            assert s["vacuous_share"] == 0.0 and 0.0 <= s["p_tree"] <= 1.0
            for t, v in zip(s["tokens"], u["tokens"], strict=True):
                assert math.isclose(t["model_prob"], v["prob"], rel_tol=1e-9, abs_tol=1e-12)
                assert v["model_prob"] == v["prob"]
            assert s["expected_errors"] == pytest.approx(sum(1 - t["prob"] for t in s["tokens"]))


def test_service_relaxed_inference_reports_eta_and_intervals(client: TestClient) -> None:
    """Relaxed inference (Riedel & Smith 2010) on the second-order model: /parse, /marginals and /confidence
    accept it; /confidence reports the eta of the factors left out and intervals around each probability."""
    relaxed = {"method": "relaxed", "iterations": 20, "epsilon": 1e-4}
    parsed = client.post("/parse", json=body(model="en_ewt-o2", inference=relaxed))
    full = client.post("/parse", json=body(model="en_ewt-o2", inference={"method": "bp", "iterations": 20}))
    assert parsed.status_code == 200 and full.status_code == 200, parsed.text
    for s, f in zip(parsed.json()["sentences"], full.json()["sentences"], strict=True):
        report = s["inference"]
        assert report["method"] == "relaxed" and report["rounds"] >= 1
        assert 0.0 <= report["factor_fraction"] <= 1.0 and report["eta"] >= 0.0
        assert (report["factor_fraction"] < 1.0) == (report["eta"] > 0.0)  # eta > 0 iff something is left out
        assert f["inference"]["factor_fraction"] == 1.0 and f["inference"]["eta"] == 0.0
        assert all(abs(a["prob"] - b["prob"]) < 0.02 for a, b in zip(s["tokens"], f["tokens"], strict=True))
    assert parsed.json()["sentences"][0]["inference"]["factor_fraction"] < 1.0  # 9 words: some factors left out
    marg = client.get("/marginals", params={"tokens": WORDS2, "tags": TAGS2, "method": "relaxed",
                                            "model": "en_ewt-o2"})
    assert marg.status_code == 200 and np.allclose(np.array(marg.json()["sentences"][0]["marginals"]).sum(axis=1), 1)
    conf = client.post("/confidence", json=body(model="en_ewt-o2", inference=relaxed))
    assert conf.status_code == 200, conf.text
    for s, p in zip(conf.json()["sentences"], parsed.json()["sentences"], strict=True):
        assert s["method"] == "relaxed" and s["eta"] == p["inference"]["eta"] == s["kl_bound"]
        assert "left out" in s["covers"]
        width = math.expm1(min(s["eta"], 700.0))
        assert s["vacuous_share"] == pytest.approx(np.mean([t["vacuous"] for t in s["tokens"]]))
        for t in s["tokens"]:  # en_ewt-o2 is calibrated: the interval is around the model's own marginal
            q = t["model_prob"]
            assert t["vacuous"] == (t["lower"] == 0.0 and t["upper"] == 1.0)
            assert 0.0 <= t["lower"] <= q <= t["upper"] <= 1.0 and 0.0 <= t["prob"] <= 1.0
            assert math.isclose(t["upper"], min(1.0, q * (1 + width)), rel_tol=1e-9)
            assert math.isclose(t["lower"], max(0.0, q - width * (1 - q)), rel_tol=1e-9, abs_tol=1e-12)
    # a first-order model has nothing to relax: eta = 0, and the marginals are the exact ones
    o1 = client.post("/confidence", json=body(model="en_ewt-o1", inference={"method": "relaxed"})).json()
    exact = client.post("/confidence", json=body(model="en_ewt-o1")).json()
    for s, e in zip(o1["sentences"], exact["sentences"], strict=True):
        assert s["eta"] == 0.0 and all(t["lower"] == t["upper"] == t["prob"] for t in s["tokens"])
        assert all(math.isclose(a["prob"], b["prob"], rel_tol=1e-9) for a, b in zip(s["tokens"], e["tokens"],
                                                                                 strict=True))


@pytest.mark.parametrize("model, source", [("en_ewt-o1", "exact"), ("en_ewt", "bp-tree-factor")])
def test_service_kbest_sorted_and_distinct(client: TestClient, model: str, source: str) -> None:
    r = client.post("/kbest", json=body(model=model, k=5))
    assert r.status_code == 200, r.text
    for s in r.json()["sentences"]:
        assert s["distribution"] == source
        trees = s["trees"]
        n = len(s["forms"])
        assert 1 <= len(trees) <= 5 and len({tuple(t["heads"]) for t in trees}) == len(trees)
        probs = [t["log_prob"] for t in trees]
        assert probs == sorted(probs, reverse=True) and probs[0] <= 0.0
        assert math.fsum(math.exp(p) for p in probs) <= 1.0 + 1e-9
        assert all(len(t["heads"]) == n and is_tree(np.array([-1, *t["heads"]])) for t in trees)
    # 3 words have 3^2 = 9 single-root trees: k = 100 returns them all, and their probabilities sum to 1
    # (under BP the pruner may have removed arcs, so fewer trees, still summing to 1)
    small = client.post("/kbest", json={"tokens": [WORDS2], "tags": [TAGS2], "model": model, "k": 100}).json()
    trees = small["sentences"][0]["trees"]
    assert len(trees) == 9 if source == "exact" else 1 <= len(trees) <= 9
    assert math.isclose(math.fsum(math.exp(t["log_prob"]) for t in trees), 1.0, rel_tol=1e-9)


def test_service_sample_reproducible_with_seed(client: TestClient) -> None:
    a = client.post("/sample", json=body(n=20, seed=7)).json()
    b = client.post("/sample", json=body(n=20, seed=7)).json()
    assert a == b
    for s in a["sentences"]:
        assert len(s["trees"]) == 20 and s["distribution"] == "bp-tree-factor"
        assert all(is_tree(np.array([-1, *t["heads"]])) and t["log_prob"] <= 0 for t in s["trees"])


def test_service_models_lists_default_and_alias(client: TestClient) -> None:
    doc = client.get("/models").json()
    assert doc["default"] == "en_ewt"
    by_name = {m["name"]: m for m in doc["models"]}
    assert {"en_ewt", "en_ewt-joint", "en_ewt-o1", "en_ewt-o2", "en_ewt-pipeline"} <= set(by_name)
    assert by_name["en_ewt"]["alias_of"] == "en_ewt-joint" and by_name["en_ewt-o2"]["alias_of"] is None
    assert by_name["en_ewt"]["default_tag_average"] == "joint" and by_name["en_ewt"]["default_tag_samples"] == 0
    assert by_name["en_ewt-pipeline"]["default_tag_average"] == "potentials"
    assert not by_name["en_ewt"]["needs_tags"] and by_name["en_ewt-o2"]["needs_tags"]
    assert by_name["en_ewt-o1"]["settings"]["order"] == 1 and by_name["en_ewt-o2"]["settings"]["order"] == 2
    assert by_name["en_ewt-o1"]["metrics"]["dev"]["uas"] > 80 and by_name["en_ewt-o1"]["created"]
    parser_only = ("en_ewt-o1", "en_ewt-o2")
    assert all(m["version"] == 1 and m["needs_tags"] == (m["name"] in parser_only) for m in doc["models"])


def _cli_marginals(argv: list[str], conllu: str) -> np.ndarray:
    """The marginals of the one sentence of ``conllu`` as ``python -m engine parse`` with ``argv`` computes them
    (the parse function the CLI builds from its arguments), in the layout of ``/marginals``."""
    import io

    from engine.cli import build_parser
    from engine.cli_parse import load_parser
    from engine.data.conllu_io import read_conllu

    _, parse = load_parser(build_parser().parse_args(["parse", *argv]))
    (parsed,) = parse(read_conllu(io.StringIO(conllu), name="<test>", strict_heads=False))
    rows = np.clip(parsed.marginals[:, 1:].T, 0.0, 1.0)
    return rows / rows.sum(axis=1, keepdims=True)


def test_http_and_cli_relaxed_inference_give_the_same_beliefs(client: TestClient) -> None:
    """Relaxed inference with no settings given runs the same algorithm with the same defaults (BP iterations
    per round, epsilon, rounds) over HTTP as on the command line, so the beliefs are identical; and a setting
    given on both sides (epsilon) is applied on both."""
    words = [("That", "PRON", "DT"), ("'s", "AUX", "VBZ"), ("overstating", "VERB", "VBG"), ("it", "PRON", "PRP"),
             (",", "PUNCT", ","), ("I", "PRON", "PRP"), ("know", "VERB", "VBP"), (".", "PUNCT", ".")]
    # EWT dev: BP needs more than 5 iterations per round here (beliefs after 5 and after 50 differ by 1e-5)
    conllu = "".join(f"{i}\t{w}\t_\t{t}\t{x}\t_\t_\t_\t_\t_\n" for i, (w, t, x) in enumerate(words, start=1)) + "\n"
    o2 = str(Path(__file__).resolve().parents[2] / "models" / "en_ewt-o2")
    for http, cli in (({}, []), ({"epsilon": 1e-3}, ["--epsilon", "1e-3"])):
        r = client.post("/marginals", json={"conllu": conllu, "model": "en_ewt-o2",  # the beliefs: no calibration
                                            "inference": {"method": "relaxed", "calibration": "none", **http}})
        assert r.status_code == 200, r.text
        served = np.array(r.json()["sentences"][0]["marginals"])
        np.testing.assert_allclose(served, _cli_marginals(["--model", o2, "--inference", "relaxed", *cli], conllu),
                                   rtol=0, atol=1e-12)


# -- operations --------------------------------------------------------------------------------------
def test_service_health_ready_metrics_page(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    client.post("/parse", json=body())
    text = client.get("/metrics").text
    assert 'parser_requests_total{method="POST",route="/parse",status="200"}' in text
    assert "parser_request_seconds_bucket" in text and "parser_sentence_words_count" in text
    assert 'parser_jobs{state="queued"} 0.0' in text
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<svg" in page.text or "createElementNS" in page.text
    assert "http://" not in page.text.replace("http://www.w3.org", "") and "https://" not in page.text.replace(
        "https://www.w3.org", "")  # self-contained: no CDN


def test_service_not_ready_without_the_default_model(tmp_path: Path) -> None:
    empty = tmp_path / "models"
    empty.mkdir()
    from service_helpers import settings

    from service.app import create_app

    with TestClient(create_app(settings(tmp_path, models_dir=empty))) as c:
        for _ in range(200):
            r = c.get("/readyz")
            if r.json().get("status") == "failed":
                break
            asyncio.run(asyncio.sleep(0.02))
        assert r.status_code == 503 and "en_ewt" in r.json()["detail"]
        assert c.get("/healthz").status_code == 200
        assert_problem(c.post("/parse", json=body()), 503)


def test_service_ready_only_after_the_trained_models_are_in(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Start-up loads the shipped models, then the trained ones: /readyz waits for both (after a restart the
    models trained by jobs must be there as soon as the service says it is ready)."""
    import threading

    from service_helpers import settings, wait_ready

    from service.app import create_app
    from service.registry import ModelRegistry

    entered, release = threading.Event(), threading.Event()
    refresh = ModelRegistry.refresh

    def held_refresh(self: ModelRegistry) -> list[object]:
        entered.set()
        release.wait(60)
        return list(refresh(self))

    monkeypatch.setattr(ModelRegistry, "refresh", held_refresh)
    with TestClient(create_app(settings(tmp_path))) as c:
        try:
            assert entered.wait(60), "start-up never loaded the trained models"
            r = c.get("/readyz")  # the shipped default is in, the trained models are not yet
            assert r.status_code == 503 and r.json()["status"] == "loading"
        finally:
            release.set()
        wait_ready(c)


def test_default_pipeline_parses_raw_text_and_untagged_tokens(client: TestClient) -> None:
    r = client.post("/parse", json={"text": "The parser tells you how sure it is. Try it!"})
    assert r.status_code == 200, r.text
    sentences = r.json()["sentences"]
    assert len(sentences) == 2 and [t["form"] for t in sentences[1]["tokens"]] == ["Try", "it", "!"]
    for s in sentences:
        heads = np.array([-1] + [t["head"] for t in s["tokens"]])
        assert is_tree(heads) and all(t["upos"] and t["upos"] != "_" and t["deprel"] for t in s["tokens"])
    untagged = client.post("/parse", json={"tokens": [WORDS]})
    assert untagged.status_code == 200, untagged.text
    predicted = [t["upos"] for t in untagged.json()["sentences"][0]["tokens"]]
    assert sum(p == g for p, g in zip(predicted, TAGS, strict=True)) >= len(TAGS) - 1  # the model's tagger ran


def test_tag_samples_average_the_marginals_of_tagged_sentences(client: TestClient) -> None:
    """inference.tag_samples: untagged words get marginals averaged over tag samples (a tree still comes out,
    each word's head probabilities still sum to 1); given tags are used as they are; /confidence takes it too
    (the same heads and probabilities as /parse); k-best and sampled trees refuse it."""
    words = ["Time", "flies", "like", "an", "arrow", "."]  # the default model's tagger is unsure of "flies"
    req = {"tokens": [words], "inference": {"tag_samples": 4}}
    r = client.post("/marginals", json=req)
    assert r.status_code == 200, r.text
    rows = np.array(r.json()["sentences"][0]["marginals"])
    single = {"tokens": [words], "inference": {"tag_samples": 0}}
    plain = np.array(client.post("/marginals", json=single).json()["sentences"][0]["marginals"])
    assert rows.shape == plain.shape and not np.allclose(rows, plain)  # the samples moved some head probabilities
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-6)
    parsed = client.post("/parse", json=req)
    assert parsed.status_code == 200, parsed.text
    (sentence,) = parsed.json()["sentences"]
    assert sentence["inference"]["tag_samples"] == 4
    assert is_tree(np.array([-1] + [t["head"] for t in sentence["tokens"]]))
    given = client.post("/parse", json=body(inference={"tag_samples": 4})).json()["sentences"]
    assert all(s["inference"]["tag_samples"] == 0 for s in given)  # tags came with the request
    for route in ("/kbest", "/sample"):
        assert_problem(client.post(route, json=req), 422, field="inference.tag_samples")
    conf = client.post("/confidence", json=req).json()["sentences"][0]
    assert [t["head"] for t in conf["tokens"]] == [t["head"] for t in sentence["tokens"]]
    np.testing.assert_allclose([t["prob"] for t in conf["tokens"]], [t["prob"] for t in sentence["tokens"]],
                               atol=1e-12)
    assert conf["tag_samples"] == 4
    # without tag_samples: the model's default on /parse, /marginals and /confidence, one tagging on the others
    (info,) = [m for m in client.get("/models").json()["models"] if m["name"] == "en_ewt"]
    default = client.post("/parse", json={"tokens": [words]}).json()["sentences"][0]["inference"]
    assert default["tag_samples"] == info["default_tag_samples"]
    got = client.get("/marginals", params={"tokens": words, "tag_samples": 0}).json()["sentences"][0]["marginals"]
    np.testing.assert_allclose(got, plain, atol=1e-12)
    for route in ("/kbest", "/sample", "/confidence"):
        assert client.post(route, json={"tokens": [words]}).status_code == 200, route
    conf = client.post("/confidence", json={"tokens": [words]}).json()["sentences"][0]
    assert conf["tag_samples"] == info["default_tag_samples"]
    assert_problem(client.post("/parse", json={"tokens": [WORDS], "inference": {"tag_samples": 17}}), 422,
                   field="inference.tag_samples")


# -- errors ------------------------------------------------------------------------------------------
def test_service_errors_are_problems(client: TestClient) -> None:
    r = client.post("/parse", content=b'{"tokens": [["a"]', headers={"content-type": "application/json"})
    assert_problem(r, 400)
    assert_problem(client.post("/parse", json={"text": "Hi there.", "tokens": [["Hi"]]}), 422, field="")
    assert_problem(client.post("/parse", json={}), 422)
    assert_problem(client.post("/parse", json={"tokens": [WORDS, []], "tags": [TAGS, []]}), 422, sentence=1,
                   field="tokens")
    assert_problem(client.post("/parse", json={"tokens": [["w"] * 61], "tags": [["X"] * 61]}), 422, sentence=0)
    # words per request, all sentences together: 2 x 50 words pass, 2 x 51 do not (whatever the input form)
    ok = client.post("/parse", json={"tokens": [["w"] * 50] * 2, "tags": [["X"] * 50] * 2})
    assert ok.status_code == 200 and len(ok.json()["sentences"]) == 2
    r = client.post("/parse", json={"tokens": [["w"] * 51] * 2, "tags": [["X"] * 51] * 2})
    assert_problem(r, 422, field="tokens")
    assert "102 words; at most 100" in r.json()["detail"]
    assert_problem(client.post("/parse", json={"text": " ".join(["Dogs bark ."] * 40)}), 422, field="text")
    block = "".join(f"{i}\tw\t_\tX\t_\t_\t_\t_\t_\t_\n" for i in range(1, 52)) + "\n"
    assert_problem(client.post("/parse", json={"conllu": block * 2}), 422, field="conllu")
    assert_problem(client.post("/parse", json=body(model="nope")), 404, field="model")
    assert_problem(client.post("/parse", json=body(model="en_ewt@9")), 404, field="model")
    assert_problem(client.post("/parse", json=body(model="../models")), 422, field="model")
    # a parser-only model cannot split text or tag words (the default pipeline can: see the test below)
    assert_problem(client.post("/parse", json={"text": "Dogs bark.", "model": "en_ewt-o2"}), 422, field="text")
    assert_problem(client.post("/parse", json={"tokens": [WORDS], "model": "en_ewt-o2"}), 422, field="tags")
    assert_problem(client.post("/parse", json={"tokens": [WORDS, WORDS2], "tags": [TAGS, TAGS]}), 422,
                   field="tags", sentence=1)
    assert_problem(client.post("/parse", json={"tokens": [["a\tb"]], "tags": [["X"]]}), 422, word=0)
    assert_problem(client.post("/parse", json=body(inference={"method": "exact"})), 422, field="inference.method")
    assert_problem(client.post("/parse", json=body(inference={"method": "relaxed", "rounds": 0})), 422,
                   field="inference.rounds")
    assert_problem(client.post("/parse", json=body(inference={"iterations": 0})), 422, field="inference.iterations")
    assert_problem(client.post("/parse", json=body(unknown=1)), 422, field="unknown")
    bad = CONLLU.replace("2\tbark", "7\tbark")
    assert_problem(client.post("/parse", json={"conllu": bad}), 422, field="conllu", line=3)
    assert_problem(client.post("/parse", json={"conllu": CONLLU.replace("NOUN", "_").replace("VERB", "_")
                                               .replace("PUNCT", "_"), "model": "en_ewt-o2"}), 422, field="conllu",
                   line=1)
    assert_problem(client.post("/kbest", json=body(k=0)), 422, field="k")
    assert_problem(client.post("/kbest", json=body(k=101)), 422, field="k")
    assert_problem(client.post("/sample", json=body(n=1001)), 422, field="n")
    assert_problem(client.post("/marginals", json=body(output="conllu")), 422, field="output")
    assert_problem(client.get("/marginals", params={"tokens": WORDS2, "model": "en_ewt-o2"}), 422, field="tags")
    assert_problem(client.get("/no/such/route"), 404)
    huge = json.dumps({"tokens": [["word"] * 50] * 400}).encode()
    assert_problem(client.post("/parse", content=huge, headers={"content-type": "application/json"}), 413)


def test_service_admission_counts_requests_and_words() -> None:
    rejected: list[int] = []
    admission = Admission(max_pending=3, max_words=100, retry_after=3, on_reject=lambda: rejected.append(1))
    first = admission.admit(60)
    with pytest.raises(ProblemError) as info:
        admission.admit(41)  # 60 + 41 words > 100
    assert info.value.status == 503 and info.value.headers == {"Retry-After": "3"} and "words" in info.value.detail
    second = admission.admit(40)
    third = admission.admit(0)
    with pytest.raises(ProblemError) as info:
        admission.admit(0)  # a fourth request
    assert "requests" in info.value.detail and rejected == [1, 1]
    for admitted in (first, second, third, first):  # releasing twice gives back once
        admitted.release()
    assert (admission.pending, admission.words) == (0, 0)
    big = admission.admit(500)  # larger than the budget: admitted when nothing else is in flight
    with pytest.raises(ProblemError):
        admission.admit(1)
    big.release()


def test_service_concurrent_requests_all_answered(client: TestClient) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: client.post("/parse", json=body(model="en_ewt-o1")).status_code, range(16)))
    assert codes == [200] * 16


def test_service_parse_reports_sentence_confidence(client: TestClient) -> None:
    """``p_tree`` of an exact first-order parse is the MBR tree's probability (as /kbest lists it); the
    pipeline's tag-averaged BP parse estimates it; CoNLL-U carries both as comments."""
    exact = client.post("/parse", json=body(model="en_ewt-o1")).json()["sentences"]
    kbest = client.post("/kbest", json=body(model="en_ewt-o1", k=100)).json()["sentences"]
    for s, k in zip(exact, kbest, strict=True):
        assert s["p_tree_source"] == "exact"
        heads = [t["head"] for t in s["tokens"]]
        (log_prob,) = [t["log_prob"] for t in k["trees"] if t["heads"] == heads]
        assert s["p_tree"] == pytest.approx(math.exp(log_prob), rel=1e-6)
        assert s["expected_errors"] == pytest.approx(sum(1 - t["prob"] for t in s["tokens"]))
    for s in client.post("/parse", json=body(model="en_ewt")).json()["sentences"]:
        assert s["p_tree_source"] == "estimate" and 0.0 < s["p_tree"] < 1.0
    r = client.post("/parse", json={"conllu": CONLLU, "output": "conllu", "model": "en_ewt-o1"})
    assert "\n# p_tree = " in r.text and "\n# p_tree_source = exact\n" in r.text and "# expected_errors = " in r.text


def test_the_shipped_constituency_model_parses_out_of_the_box(client: TestClient) -> None:
    """``models/ptb-epic`` (issue 26) is listed with its formalism and answers ``/parse`` and ``/marginals``."""
    models = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert models["ptb-epic"]["formalism"] == "constituency" and models["en_ewt"]["formalism"] == "dependency"
    r = client.post("/parse", json={"model": "ptb-epic", "text": "Stocks rose (slightly) on Friday."})
    assert r.status_code == 200, r.text
    [sentence] = r.json()["sentences"]
    assert sentence["words"] == ["Stocks", "rose", "-LRB-", "slightly", "-RRB-", "on", "Friday", "."]
    assert sentence["tree"].startswith("(TOP ") and not sentence["fallback"]
    assert sentence["constituents"] and all(0.0 <= c["prob"] <= 1.0 for c in sentence["constituents"]
                                            if c["prob"] is not None)
    r = client.post("/marginals", json={"model": "ptb-epic", "tokens": [["Stocks", "rose", "."]]})
    assert r.status_code == 200 and r.json()["sentences"][0]["spans"][0][3] == pytest.approx(1.0)
