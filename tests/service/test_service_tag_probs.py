"""Tag probabilities over HTTP: each word's ``upos_prob`` on /parse and /marginals (null for given tags), and the
whole UPOS distribution with ``tag_marginals``, equal to the tagger's marginals the command line scores."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_helpers import MODELS, TAGS, WORDS, running_app

from engine.data.conllu_io import read_conllu
from engine.pipeline import Pipeline

TEXT = "My neighbour's cat didn't like the new vet, so she bit him twice."


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("tags")) as c:
        yield c


def test_parse_reports_the_chosen_tags_probability(client: TestClient) -> None:
    tokens = client.post("/parse", json={"text": TEXT}).json()["sentences"][0]["tokens"]
    probs = [t["upos_prob"] for t in tokens]
    assert all(0.0 < p <= 1.0 for p in probs) and min(probs) < 0.999  # some word is uncertain
    given = client.post("/parse", json={"tokens": [WORDS], "tags": [TAGS], "model": "en_ewt"}).json()
    assert all(t["upos_prob"] is None for t in given["sentences"][0]["tokens"])


def test_tag_marginals_are_the_taggers_and_hold_upos_prob(client: TestClient) -> None:
    """Each word's distribution sums to 1, gives its chosen tag ``upos_prob``, and equals the tagger's own
    marginals for the same words (``Pipeline.tag_and_sample``)."""
    words = ["She", "bit", "him", "twice", "."]
    r = client.post("/marginals", json={"tokens": [words], "tag_marginals": True})
    assert r.status_code == 200, r.text
    sentence = r.json()["sentences"][0]
    parsed = client.post("/parse", json={"tokens": [words]}).json()["sentences"][0]["tokens"]
    pipeline = Pipeline.load(MODELS / "en_ewt")
    conllu = "".join(f"{j}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\n" for j, w in enumerate(words, 1)) + "\n"
    mine = read_conllu(io.StringIO(conllu), strict_heads=False)
    marginals: dict[int, np.ndarray] = {}
    pipeline.tag_and_sample(mine, upos_marginals=marginals)
    for j, dist in enumerate(sentence["tag_marginals"]):
        assert sum(dist.values()) == pytest.approx(1.0, abs=1e-9)
        assert dist[parsed[j]["upos"]] == pytest.approx(sentence["upos_prob"][j], abs=1e-12)
        assert sentence["upos_prob"][j] == pytest.approx(parsed[j]["upos_prob"], abs=1e-12)
        assert list(dist) == list(pipeline.tagger.upos_labels)  # type: ignore[union-attr]
        assert list(dist.values()) == pytest.approx(list(marginals[0][j]), abs=1e-12)
    get = client.get("/marginals", params={"tokens": words, "tag_marginals": "true"}).json()["sentences"][0]
    assert get["tag_marginals"] == sentence["tag_marginals"]
    plain = client.post("/marginals", json={"tokens": [words]}).json()["sentences"][0]
    assert "tag_marginals" not in plain and plain["upos_prob"] == sentence["upos_prob"]


def test_given_tags_have_no_tag_marginals_and_confidence_refuses_them(client: TestClient) -> None:
    sentence = client.post("/marginals", json={"tokens": [WORDS], "tags": [TAGS], "tag_marginals": True,
                                               "model": "en_ewt"}).json()["sentences"][0]
    assert sentence["tag_marginals"] is None and sentence["upos_prob"] == [None] * len(WORDS)
    r = client.post("/confidence", json={"tokens": [WORDS], "tag_marginals": True})
    assert r.status_code == 422
