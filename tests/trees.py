"""Assertions shared by the tests of tree decoders."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engine.kernels.brute_force import is_projective


def assert_valid_tree(heads: np.ndarray, n: int, single_root: bool, *, projective: bool = True) -> None:
    """``heads`` (n+1,) int64 is a dependency tree over n words rooted at 0 (projective if asked)."""
    assert heads.shape == (n + 1,) and heads.dtype == np.int64
    assert heads[0] == -1
    words = np.arange(1, n + 1)
    assert ((heads[1:] >= 0) & (heads[1:] <= n) & (heads[1:] != words)).all()
    cur = words.copy()
    for _ in range(n):  # every word reaches ROOT within n steps: no cycles
        cur = np.where(cur == 0, 0, heads[cur])
    assert (cur == 0).all()
    if projective:
        assert is_projective(heads)
    if single_root:
        assert (heads[1:] == 0).sum() == 1


def score_matrices(max_n: int, bound: float = 30.0) -> st.SearchStrategy[np.ndarray]:
    """Hypothesis strategy: (n+1, n+1) float score matrices, 1 <= n <= max_n, entries in [-bound, bound]."""
    return st.integers(1, max_n).flatmap(
        lambda n: arrays(np.float64, (n + 1, n + 1), elements=st.floats(-bound, bound, allow_nan=False))
    )
