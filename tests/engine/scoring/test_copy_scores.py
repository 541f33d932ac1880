"""Copies' link potentials on listed arcs (``ArcScorer.copy_scores``: the sentence's score where the copy leaves an
arc's features alone, else the arc scored again) against scoring every arc of each copy in full: equal bit for bit
with a float16 weight table, to rounding with float64 weights; with every kind of template (head, dependent,
both, contexts, "between" tags)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.extract import UPOS_TAGS, FeatureExtractor
from engine.features.templates import default_first_order
from engine.scoring.fused import ArcScorer, stored_table

FORMS = ["The", "dog", "barks", ",", "RUN", "x", "é"]
TAGS = list(UPOS_TAGS[:5])
XPOS = ["NN", "VB", "DT"]


class Toks:
    def __init__(self, forms: list[str], upos: list[str], xpos: list[str]) -> None:
        self.forms, self.upos, self.xpos = forms, upos, xpos


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 9), st.booleans())
def test_copy_scores_equal_full_scores_of_the_copies(data: st.DataObject, n: int, half: bool) -> None:
    extractor = FeatureExtractor(tuple(default_first_order()), 1 << 12)
    assert any(t.between for t in extractor.templates)
    rng = np.random.default_rng(n)
    values = rng.normal(size=extractor.dim)
    if half:  # a stored float16 model: the kernel reads the bits
        stored = values.astype(np.float16)
        weights = stored.astype(np.float64)
        weights.flags.writeable = False
        scorer = ArcScorer(extractor, [weights], stored_table([stored], extractor.dim))
    else:
        values.flags.writeable = False
        scorer = ArcScorer(extractor, [values])

    def draw(pool: list[str]) -> list[str]:
        return data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))

    sentences = [Toks(draw(FORMS), draw(TAGS), draw(XPOS)) for _ in range(data.draw(st.integers(1, 2)))]
    copies, owner = [], []
    for j, s in enumerate(sentences):
        for _ in range(data.draw(st.integers(1, 3))):
            upos, xpos = list(s.upos), list(s.xpos)
            for p in data.draw(st.lists(st.integers(0, n - 1), max_size=3)):
                upos[p], xpos[p] = data.draw(st.sampled_from(TAGS)), data.draw(st.sampled_from(XPOS))
            copies.append(Toks(s.forms, upos, xpos))
            owner.append(j)
    own = scorer(sentences)[0]
    full = scorer(copies)[0]
    h, m = np.nonzero(np.isfinite(own[0]))
    arcs = np.array([(c, a, b) for c in range(len(copies)) for a, b in zip(h, m, strict=True)], dtype=np.int64)
    if not len(arcs):
        return
    owners = np.array(owner)[arcs[:, 0]]
    got = scorer.copy_scores(sentences, copies, np.array(owner), arcs, own[owners, arcs[:, 1], arcs[:, 2]])
    expected = full[arcs[:, 0], arcs[:, 1], arcs[:, 2]]
    if half:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)
