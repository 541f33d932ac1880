"""The count-based labeller: distributions sum to 1, learned contexts win, JSON round trip."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from engine.decode.labeler import CountLabeler


def _trees() -> list[SimpleNamespace]:
    s = SimpleNamespace(upos=["DET", "NOUN", "VERB"], heads=np.array([-1, 2, 3, 0]),
                        deprels=["det", "nsubj", "root"])
    return [s, s]


def test_labeler_learns_and_normalises() -> None:
    lab = CountLabeler.fit(_trees())
    p = lab.distribution(["DET", "NOUN", "VERB"], np.array([-1, 2, 3, 0]))
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    labels, probs = lab.predict(["DET", "NOUN", "VERB"], np.array([-1, 2, 3, 0]))
    assert labels == ["det", "nsubj", "root"]
    assert (probs > 0.5).all()
    again = CountLabeler.from_json(lab.to_json())
    np.testing.assert_allclose(again.distribution(["ADJ"], np.array([-1, 0])),
                               lab.distribution(["ADJ"], np.array([-1, 0])))
