"""The gradient scatter-add into a trainer's buffer (``scatter_gradient(..., out=)``) against ``np.bincount``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.scoring.potentials import add_into, scatter_gradient


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), b=st.integers(1, 4), n=st.integers(1, 7), k=st.integers(1, 9),
       dim=st.sampled_from([2, 17, 1 << 10]))
def test_the_buffer_scatter_is_bincounts_bit_for_bit(seed: int, b: int, n: int, k: int, dim: int) -> None:
    """Features repeat (a small ``dim``) and values span magnitudes, so the order of the additions shows in the
    bits; two batches in a row add into the buffer as two fresh arrays would, once it is cleared between them."""
    rng = np.random.default_rng(seed)
    buffer = np.zeros(dim)
    for _ in range(2):
        features = rng.integers(0, dim, size=(b, n + 1, n + 1, k)).astype(np.int32)
        score_grad = rng.normal(size=(b, n + 1, n + 1)) * rng.choice([1e-12, 1.0, 1e9], size=(b, n + 1, n + 1))
        expected = scatter_gradient(features, score_grad, dim)
        got = scatter_gradient(features, score_grad, dim, out=buffer)
        assert got is buffer and np.array_equal(got.view(np.int64), expected.view(np.int64))
        buffer[:] = 0.0


def test_a_buffer_of_the_wrong_shape_or_type_is_refused() -> None:
    features, score_grad = np.zeros((1, 2, 2, 1), dtype=np.int32), np.zeros((1, 2, 2))
    for bad in (np.zeros(3), np.zeros(4, dtype=np.float32)):
        with pytest.raises(ValueError, match="float64"):
            scatter_gradient(features, score_grad, 4, out=bad)
    with pytest.raises(IndexError, match="outside"):  # features hashed for a larger table
        scatter_gradient(np.full((1, 2, 2, 1), 9, dtype=np.int32), score_grad, 4, out=np.zeros(4))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(0, 300), dim=st.sampled_from([1, 5, 1 << 12]))
def test_add_into_is_bincount_bit_for_bit(seed: int, size: int, dim: int) -> None:
    """The surrogate trainer's scatter of (index, value) terms into its buffer equals ``np.bincount``'s array."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, dim, size)
    values = rng.normal(size=size) * rng.choice([1e-12, 1.0, 1e9], size=size)
    expected = np.bincount(index, weights=values, minlength=dim)
    got = add_into(np.zeros(dim), index, values)
    assert np.array_equal(got.view(np.int64), expected.view(np.int64))
    for outside in (dim, -1):
        with pytest.raises(IndexError, match="outside"):
            add_into(np.zeros(dim), np.array([outside]), np.ones(1))
    with pytest.raises(ValueError, match="float64"):
        add_into(np.zeros(dim, dtype=np.float32), index, values)
