"""POST /confidence with alpha: conformal head and label sets (engine.decode.conformal) from the thresholds the
shipped pipeline stores, the same as a direct computation on /marginals; 422 for a bad alpha or a model without
thresholds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_helpers import TAGS, TAGS2, WORDS, WORDS2, running_app

from engine.decode.conformal import threshold_for
from engine.model.store import read_manifest

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("svc"), max_words=60) as c:
        yield c


def body(**extra: object) -> dict[str, object]:
    return {"tokens": [WORDS, WORDS2], "tags": [TAGS, TAGS2], **extra}


def test_head_sets_are_the_direct_computation_on_the_marginals(client: TestClient) -> None:
    """Each word's set: its heads by probability (highest first, ties by index) while the probability ranked
    before the head is at most the stored threshold for alpha, the probabilities being the model's marginals
    after the head power alone (``aps-power-nonrandomised``: the uncalibrated /marginals, p^a renormalised; the
    chosen-head stage after the power is left out of the scores); its mass the sum of the calibrated /marginals;
    sets nested as alpha shrinks."""
    inference = read_manifest(ROOT / "models" / "en_ewt")["inference"]
    conformal, power = inference["conformal"], inference["head_power"]
    assert conformal["score"] == "aps-power-nonrandomised"
    marginals = client.post("/marginals", json=body()).json()["sentences"]
    raw = client.post("/marginals", json=body(inference={"calibration": "none"})).json()["sentences"]
    parsed = client.post("/parse", json=body()).json()["sentences"]
    previous = None
    for alpha in (0.3, 0.1, 0.05, 0.011):
        r = client.post("/confidence", json=body(alpha=alpha))
        assert r.status_code == 200, r.text
        q = threshold_for(conformal["heads"], alpha)
        sets = []
        for sentence, rows, raw_rows, tree in zip(r.json()["sentences"], marginals, raw, parsed, strict=True):
            for token, row, raw_row, word in zip(sentence["tokens"], rows["marginals"], raw_rows["marginals"],
                                                 tree["tokens"], strict=True):
                total = sum(p ** power for p in raw_row if p > 0)
                scored = [p ** power / total if p > 0 else 0.0 for p in raw_row]
                order = sorted(range(len(scored)), key=lambda h: (-scored[h], h))
                expected = [h for k, h in enumerate(order) if sum(scored[g] for g in order[:k]) <= q + 1e-9
                            and h != token["id"]]
                assert token["head_set"] == expected
                assert token["head_set_prob"] == pytest.approx(sum(row[h] for h in expected), abs=1e-6)
                assert token["head"] in token["head_set"]  # the chosen (MBR) head is the most probable here
                assert token["deprel_set"][0] == word["deprel"]  # the chosen label is the most probable
                sets.append((set(token["head_set"]), set(token["deprel_set"])))
        if previous is not None:
            assert all(p[0] <= s[0] and p[1] <= s[1] for p, s in zip(previous, sets, strict=True))
        previous = sets
    assert any(len(s[0]) > 1 for s in previous or [])  # at alpha 0.011 some word has more than one head


def test_confidence_without_alpha_has_no_sets(client: TestClient) -> None:
    doc = client.post("/confidence", json=body()).json()
    assert all(not {"head_set", "head_set_prob", "deprel_set"} & set(t) for s in doc["sentences"]
               for t in s["tokens"])


@pytest.mark.parametrize("alpha", [0, 1, 1.5, -0.1, 0.005, "0.1", True, None])
def test_bad_alpha_is_a_422(client: TestClient, alpha: object) -> None:
    r = client.post("/confidence", json=body(alpha=alpha))
    if alpha is None:  # null: no sets
        assert r.status_code == 200
        return
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), r.text


def test_a_model_without_thresholds_or_without_calibration_is_a_422(client: TestClient) -> None:
    r = client.post("/confidence", json=body(model="en_ewt-o1", alpha=0.1))
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), r.text
    doc = r.json()
    assert "calibrate" in doc["detail"] and doc.get("rule") == "model-capability"
    r = client.post("/confidence", json=body(alpha=0.1, inference={"calibration": "none"}))
    assert r.status_code == 422 and "calibration" in r.json()["detail"], r.text
    models = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert models["en_ewt"]["head_sets"] and not models["en_ewt-o1"]["head_sets"]
