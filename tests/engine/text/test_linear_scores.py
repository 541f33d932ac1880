"""``HashedLogLinear.scores`` (a compiled sum of each row's weights) against the numpy expression it replaced,
``weights[rows].sum(axis=1, dtype=np.float64)``: equal bit for bit, for float16 (a loaded model's, read as stored),
float32 and float64 weights, with unseen keys (the rare row) and blocks of rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.text.linear import HashedLogLinear, row_sums


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 40), st.integers(1, 7), st.integers(1, 9), st.sampled_from([np.float16, np.float32, np.float64]),
       st.integers(1, 16), st.integers(0, 2**32))
def test_scores_equal_the_numpy_sum(n: int, f: int, k: int, dtype: type, block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 1 << 20, 30).astype(np.uint64))
    weights = (rng.standard_normal((len(keys) + 1, k)) * 10.0 ** rng.integers(-6, 3, (len(keys) + 1, k))).astype(dtype)
    model = HashedLogLinear(keys, weights)
    feats = np.where(rng.random((n, f)) < 0.8, rng.choice(keys, (n, f)), np.uint64(7))  # 7: an unseen key
    expected = weights[model.rows(feats)].sum(axis=1, dtype=np.float64) if n else np.zeros((0, k))
    np.testing.assert_array_equal(model.scores(feats, block=block), expected)


def test_tagger_emission_sums_of_float16_weights_equal_those_of_the_widened_weights() -> None:
    """``row_sums`` reads float16 weights through ``HALF_VALUES``: the sums of the float32 (or float64) copy."""
    rng = np.random.default_rng(5)
    weights = (rng.standard_normal((500, 49)) * 10.0 ** rng.integers(-7, 4, (500, 49))).astype(np.float16)
    weights[3, :4] = [0.0, -0.0, 6.0e-8, -65504.0]  # zeros, the smallest subnormal, the most negative finite
    rows = rng.integers(0, 500, (300, 25)).astype(np.int32)
    for wide in (np.float32, np.float64):
        half, widened = np.full((300, 49), 0.5), np.full((300, 49), 0.5)  # sums are added to what out holds
        row_sums(weights, rows, half)
        row_sums(weights.astype(wide), rows, widened)
        np.testing.assert_array_equal(half, widened)
    np.testing.assert_array_equal(half - 0.5, weights[rows].sum(axis=1, dtype=np.float64))
