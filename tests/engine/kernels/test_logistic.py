"""``engine.kernels.logistic.expit`` against ``scipy.special.expit``: the same bits for every float64 input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import expit as scipy_expit

from engine.kernels.logistic import expit


def test_equals_scipy_bit_for_bit_over_every_magnitude() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.0, scale, 200_000) for scale in (1e-3, 0.1, 1.0, 5.0, 30.0, 300.0)]
                       + [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.8, -709.8, 745.2, -745.2, 1e-300,
                                    -1e-300, 36.7, -36.7, 5e-324, np.finfo(float).max, -np.finfo(float).max])])
    ours, theirs = expit(x), scipy_expit(x)
    assert ours.dtype == np.float64 and ours.shape == x.shape
    np.testing.assert_array_equal(ours.view(np.uint64)[~np.isnan(x)], theirs.view(np.uint64)[~np.isnan(x)])
    assert np.isnan(ours[np.isnan(x)]).all()


@given(arrays(np.float64, st.tuples(st.integers(0, 5), st.integers(0, 7)),
              elements=st.floats(allow_nan=False, width=64)))
def test_any_shape_and_value(x: np.ndarray) -> None:
    np.testing.assert_array_equal(expit(x), scipy_expit(x))


def test_in_place_into_out_and_strided_input() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 10.0, (6, 8))
    want = scipy_expit(x)
    same = x.copy()
    assert expit(same, out=same) is same
    np.testing.assert_array_equal(same, want)
    np.testing.assert_array_equal(expit(x[:, ::2]), want[:, ::2])  # a strided view in
    out = np.empty((8, 6)).T  # not C-contiguous: written through a copy
    assert expit(x, out=out) is out
    np.testing.assert_array_equal(out, want)
    zero_d = expit(np.array(-3.5))
    assert zero_d.shape == () and float(zero_d) == scipy_expit(-3.5)
    assert expit(2.0).shape == () and float(expit(2.0)) == scipy_expit(2.0)
    with pytest.raises(ValueError, match="out must be float64"):
        expit(x, out=np.empty((6, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="out must be float64"):
        expit(x, out=np.empty((8, 6)))
