"""Assertions shared by the tests of tree decoders."""

from __future__ import annotations

import numpy as np

from engine.inference.brute_force import is_projective


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
