"""Arc potentials: ``scores[b, h, m] = sum_k weights[features[b, h, m, k]]`` (log space).

Impossible arcs (into ROOT, self loops) get ``-inf`` so that every inference kernel sees them as
forbidden. The gradient of any loss with respect to the weights is the scatter-add of the loss's
gradient with respect to the scores over the same feature indices (``scatter_gradient``).
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]


def arc_scores(weights: np.ndarray, features: np.ndarray) -> np.ndarray:
    """Log-potentials (B, n+1, n+1) float64 from feature indices (B, n+1, n+1, K)."""
    scores = weights[features].sum(axis=-1, dtype=np.float64)
    n1 = scores.shape[-1]
    scores[:, :, 0] = -np.inf
    idx = np.arange(n1)
    scores[:, idx, idx] = -np.inf
    return scores


def scatter_gradient(features: np.ndarray, score_grad: np.ndarray, dim: int,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Gradient w.r.t. the weights (dim,) from the gradient w.r.t. the scores (B, n+1, n+1).

    ``np.bincount`` with weights is the vectorised scatter-add; the null feature 0 gets no gradient.
    ``out``: a float64 buffer of ``dim`` zeros to add into instead (a trainer's, kept across batches and cleared
    by its optimiser step: no fresh 2^22-entry array, and its page faults, per batch). The sums are the same bit
    for bit: both add each feature's terms to 0.0 one at a time, in the order of the features.
    """
    k = features.shape[-1]
    if out is None:
        g = np.bincount(
            features.reshape(-1), weights=np.repeat(score_grad.reshape(-1), k), minlength=dim
        )
    else:
        if out.shape != (dim,) or out.dtype != np.float64:
            raise ValueError(f"out must be a float64 array of shape ({dim},)")
        g = out
        _scatter_add(features.reshape(-1, k), np.ascontiguousarray(score_grad, dtype=np.float64).reshape(-1), g)
    g[0] = 0.0
    return g


def add_into(out: np.ndarray, index: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``out[index[i]] += values[i]`` in order (``out``: float64): with ``out`` all zeros this is ``np.bincount(index,
    values, minlength=len(out))`` bit for bit, without a fresh array; returns ``out``."""
    if out.dtype != np.float64 or out.ndim != 1 or len(index) != len(values):
        raise ValueError("add_into needs a 1-d float64 buffer and as many values as indices")
    _scatter_add(np.asarray(index).reshape(-1, 1), np.asarray(values, dtype=np.float64), out)
    return out


@njit(cache=True, nogil=True)
def _scatter_add(features: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[features[r, j]] += values[r]`` for every row r and slot j, in that order (``np.bincount``'s); an index
    outside ``out`` raises ``IndexError`` (numba does not check bounds: this does, before the write)."""
    size = len(out)
    for r in range(features.shape[0]):
        v = values[r]
        for j in range(features.shape[1]):
            f = features[r, j]
            if f < 0 or f >= size:
                raise IndexError("a feature index lies outside the gradient buffer")
            out[f] += v
