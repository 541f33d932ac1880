"""``HashedLogLinear.scores`` (a compiled sum of each row's weights) against the numpy expression it replaced,
``weights[rows].sum(axis=1, dtype=np.float64)``: equal bit for bit, for float32 and float64 weights, with unseen
keys (the rare row) and blocks of rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.text.linear import HashedLogLinear


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 40), st.integers(1, 7), st.integers(1, 9), st.sampled_from([np.float32, np.float64]),
       st.integers(1, 16), st.integers(0, 2**32))
def test_scores_equal_the_numpy_sum(n: int, f: int, k: int, dtype: type, block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 1 << 20, 30).astype(np.uint64))
    weights = (rng.standard_normal((len(keys) + 1, k)) * 10.0 ** rng.integers(-6, 3, (len(keys) + 1, k))).astype(dtype)
    model = HashedLogLinear(keys, weights)
    feats = np.where(rng.random((n, f)) < 0.8, rng.choice(keys, (n, f)), np.uint64(7))  # 7: an unseen key
    expected = weights[model.rows(feats)].sum(axis=1, dtype=np.float64) if n else np.zeros((0, k))
    np.testing.assert_array_equal(model.scores(feats, block=block), expected)
