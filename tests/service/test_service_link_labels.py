"""A model with labels inside its factor graph (``train --labels-in-graph``) served over HTTP: each word's label and
``deprel_prob`` on /parse are the graph's role model on the parse's arcs, as the engine gives them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_helpers import running_app

from engine.pipeline import Pipeline
from engine.scoring.link_labels import LinkLabels
from engine.training.pipeline import TrainOptions, train_model
from tests.engine.training.test_hidden_model import TOY


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Path]]:
    tmp = tmp_path_factory.mktemp("roles")
    data = tmp / "toy.conllu"
    data.write_text(TOY * 6, encoding="utf-8")
    models = tmp / "models"
    train_model(data, data, models / "roles", TrainOptions(order=2, labels_in_graph=True, epochs=2, dim=4099,
                                                          second_dim=1031, components=("parser",)), progress=False)
    with running_app(tmp, models_dir=models, default_model="roles") as client:
        yield client, models / "roles"


def test_parse_labels_come_from_the_graphs_role_model(served: tuple[TestClient, Path]) -> None:
    client, model = served
    words, tags = ["the", "dog", "barks", "."], ["DET", "NOUN", "VERB", "PUNCT"]
    r = client.post("/parse", json={"tokens": [words], "tags": [tags]})
    assert r.status_code == 200, r.text
    tokens = r.json()["sentences"][0]["tokens"]
    pipeline = Pipeline.load(model)
    roles = pipeline.parser.labeler
    assert isinstance(roles, LinkLabels)
    heads = np.array([-1, *[t["head"] for t in tokens]])
    sentence = SimpleNamespace(forms=words, upos=[t["upos"] for t in tokens], xpos=[t["xpos"] for t in tokens])
    assert sentence.upos == tags
    dist = roles.distribution(sentence, heads)  # the tags the service parsed under, as its response says
    assert [t["deprel"] for t in tokens] == [roles.labels[int(i)] for i in dist.argmax(axis=1)]
    assert [t["deprel_prob"] for t in tokens] == pytest.approx(dist.max(axis=1).tolist(), abs=1e-9)
