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
from engine.decode.calibration import calibrated_all
from engine.pipeline import Pipeline
from engine.text.tag_candidates import CandidateSettings

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


def test_tag_marginals_hold_upos_prob_and_are_the_taggers_without_joint_tags(client: TestClient) -> None:
    """Each word's distribution sums to 1 and gives its chosen tag ``upos_prob``: under the default model's joint
    tags from the tag beliefs (``engine.decode.joint_tags``, as the engine's joint parse gives them), and with
    ``tag_average`` potentials the tagger's own marginals for the same words (``Pipeline.tag_and_sample``)."""
    words = ["She", "bit", "him", "twice", "."]
    pipeline = Pipeline.load(MODELS / "en_ewt")
    assert pipeline.default_tag_average == "joint"
    conllu = "".join(f"{j}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\n" for j, w in enumerate(words, 1)) + "\n"
    for options, average in (({}, "joint"), ({"inference": {"tag_average": "potentials"}}, "potentials")):
        r = client.post("/marginals", json={"tokens": [words], "tag_marginals": True, **options})
        assert r.status_code == 200, r.text
        sentence = r.json()["sentences"][0]
        parsed = client.post("/parse", json={"tokens": [words], **options}).json()["sentences"][0]["tokens"]
        mine = read_conllu(io.StringIO(conllu), strict_heads=False)
        marginals: dict[int, np.ndarray] = {}
        found: dict = {}
        pipeline.tag_and_sample(mine, upos_marginals=marginals,
                                candidates=(CandidateSettings.resolve(pipeline.manifest), found))
        engine = calibrated_all(pipeline.parser.parse(mine, candidates=[found[0]]), pipeline.default_powers)[0]
        for j, dist in enumerate(sentence["tag_marginals"]):
            assert sum(dist.values()) == pytest.approx(1.0, abs=1e-9)
            assert dist[parsed[j]["upos"]] == pytest.approx(sentence["upos_prob"][j], abs=1e-12)
            assert sentence["upos_prob"][j] == pytest.approx(parsed[j]["upos_prob"], abs=1e-12)
            assert list(dist) == list(pipeline.tagger.upos_labels)  # type: ignore[union-attr]
            expected = marginals[0][j] if average == "potentials" else engine.diagnostics["upos_marginals"][1][j]
            assert list(dist.values()) == pytest.approx(list(expected), abs=1e-9)
        if average == "joint":
            assert [t["upos"] for t in parsed] == engine.upos
        if not options:
            get = client.get("/marginals", params={"tokens": words, "tag_marginals": "true"})
            assert get.json()["sentences"][0]["tag_marginals"] == sentence["tag_marginals"]
        plain = client.post("/marginals", json={"tokens": [words], **options}).json()["sentences"][0]
        assert "tag_marginals" not in plain and plain["upos_prob"] == sentence["upos_prob"]


def test_joint_tags_give_way_or_are_refused_where_they_cannot_run(client: TestClient) -> None:
    """The default model's joint tags give way to tag-averaged potentials when tag samples or relaxed inference
    are asked for; asking for joint tags with either is a 422 that names the field."""
    words = {"tokens": [["She", "bit", "him", "twice", "."]]}
    for inference in ({"tag_samples": 2}, {"method": "relaxed"}):
        assert client.post("/parse", json={**words, "inference": inference}).status_code == 200
        r = client.post("/parse", json={**words, "inference": {**inference, "tag_average": "joint"}})
        assert r.status_code == 422 and r.json()["field"] == "inference.tag_average", r.text
        assert r.json()["rule"] == "joint-tags"


def test_given_tags_have_no_tag_marginals_and_confidence_refuses_them(client: TestClient) -> None:
    sentence = client.post("/marginals", json={"tokens": [WORDS], "tags": [TAGS], "tag_marginals": True,
                                               "model": "en_ewt"}).json()["sentences"][0]
    assert sentence["tag_marginals"] is None and sentence["upos_prob"] == [None] * len(WORDS)
    r = client.post("/confidence", json={"tokens": [WORDS], "tag_marginals": True})
    assert r.status_code == 422
