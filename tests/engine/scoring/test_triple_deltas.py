"""A copy's change to the higher-order potentials (engine.scoring.triple_deltas) against full rows.

``copy_deltas`` hashes each (copy, factor) pair's templates and reads only the weights whose index changed; the
direct computation hashes the copy's full feature rows and sums them. With float16 weights the two are equal bit
for bit (every partial sum is exact in float64), with float64 weights to rounding."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.second_order import (
    attribute_codes,
    default_second_order,
    extract_triples,
    template_attributes,
    triple_tables,
)
from engine.scoring.triple_deltas import copy_deltas

FORMS = ["The", "dog", "barks", ",", "RUN", "x", "é"]
TAGS = ["DET", "NOUN", "VERB", "PUNCT", "ADV"]


class Toks:
    def __init__(self, forms: list[str], upos: list[str], xpos: list[str]) -> None:
        self.forms, self.upos, self.xpos = forms, upos, xpos


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(2, 9), st.sampled_from(["grand", "sib", "childseq"]),
       st.sampled_from([np.float16, np.float64]), st.integers(0, 3))
def test_copy_deltas_equal_full_rows(data: st.DataObject, n: int, family: str, dtype: type, offset: int) -> None:
    def words(pool: list[str]) -> list[str]:
        return data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))

    sentence = Toks(words(FORMS), words(TAGS), words(["NN", "VB", "DT"]))
    copies = [Toks(sentence.forms, words(TAGS), words(["NN", "VB", "DT"])) for _ in range(data.draw(st.integers(1, 4)))]
    templates = default_second_order([family])
    rng = np.random.default_rng(n)
    f = data.draw(st.integers(1, 30))
    triples = np.stack([rng.integers(0, n + 1, f), rng.integers(1, n + 1, f), rng.integers(0, n + 1, f)])
    weights = rng.normal(size=offset + (1 << 9)).astype(dtype)
    dim = len(weights) - offset
    attrs = template_attributes(templates)
    mine = attribute_codes(sentence, attrs)
    stacked = np.concatenate([attribute_codes(c, attrs) for c in copies])
    tables = triple_tables(sentence, templates, triples, codes=mine)
    feats = extract_triples(sentence, templates, triples, dim) + offset
    own = weights[feats].astype(np.float64)
    which = rng.integers(0, len(copies), 2 * f)
    factors = rng.integers(0, f, 2 * f)
    got = copy_deltas(stacked, tables[1:], factors, which, n + 1, feats, own, weights, offset)
    theirs = np.array([weights[extract_triples(copies[c], templates, triples[:, [i]], dim) + offset].astype(np.float64)
                       .sum() for c, i in zip(which, factors, strict=True)])
    expected = theirs - own.sum(axis=1)[factors]
    if dtype == np.float16:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
