"""Arc potentials: ``scores[b, h, m] = sum_k weights[features[b, h, m, k]]`` (log space).

Impossible arcs (into ROOT, self loops) get ``-inf`` so that every inference kernel sees them as
forbidden. The gradient of any loss with respect to the weights is the scatter-add of the loss's
gradient with respect to the scores over the same feature indices (``scatter_gradient``).
"""

from __future__ import annotations

import numpy as np


def arc_scores(weights: np.ndarray, features: np.ndarray) -> np.ndarray:
    """Log-potentials (B, n+1, n+1) float64 from feature indices (B, n+1, n+1, K)."""
    scores = weights[features].sum(axis=-1, dtype=np.float64)
    n1 = scores.shape[-1]
    scores[:, :, 0] = -np.inf
    idx = np.arange(n1)
    scores[:, idx, idx] = -np.inf
    return scores


def scatter_gradient(features: np.ndarray, score_grad: np.ndarray, dim: int) -> np.ndarray:
    """Gradient w.r.t. the weights (dim,) from the gradient w.r.t. the scores (B, n+1, n+1).

    ``np.bincount`` with weights is the vectorised scatter-add; the null feature 0 gets no gradient.
    """
    k = features.shape[-1]
    g = np.bincount(
        features.reshape(-1), weights=np.repeat(score_grad.reshape(-1), k), minlength=dim
    )
    g[0] = 0.0
    return g
