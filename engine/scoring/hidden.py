"""Latent dependency clusters on edges (Smith & Smith 2007 §5.1, eq. 18), summed out edge by edge.

Each candidate edge ``h -> m`` carries a hidden cluster ``z`` in ``{0 .. K-1}``; the features of the edge are
the first-order features conjoined with ``z``, and the edge's log-potential is

    s(h, m) = log sum_z exp(theta . f(h, m, z))                                    (eq. 18, in log space)

Because the clusters are edge-factored, a tree's probability summed over every assignment of clusters is the
first-order model's over ``s``: ``p(y | x) = sum_z p(y, z | x) = prod_{(h,m) in y} exp s(h, m) / Z(x)`` with
``Z(x)`` the Matrix-Tree (or Eisner) partition function of ``s``. Exact first-order inference on ``s`` is
therefore exact inference of the hidden-variable model, and the edge's cluster posterior given that the
edge is in the tree is ``p(z | h, m) = exp(theta . f(h, m, z) - s(h, m))``.

The conjunction with ``z`` is a separate weight block per cluster: ``weights`` is ``(K, dim)`` and
``theta . f(h, m, z) = sum_k weights[z, features[h, m, k]]``. It reuses the first-order feature indices as they
are (no re-hashing, no extra feature memory; K weight vectors cost K times ``dim`` floats), and with K = 1 the
scores and gradients are today's first-order ones bit for bit (``tests/engine/scoring/test_hidden.py``).

Gradient of the conditional log-likelihood (eq. 17) w.r.t. ``weights[z, f]``: over the edges of a sentence,
``(p(h -> m) - [h -> m in gold]) * p(z | h, m) * count of f on h -> m`` (``scatter_cluster_gradient`` given the
score gradient ``p - gold`` and the posteriors).
"""

from __future__ import annotations

import numpy as np

from engine.scoring.potentials import arc_scores

# Symmetry breaking (Smith & Smith 2007 §5.2: "initialized near zero, with Gaussian noise added to break
# symmetry among clusters"): with K > 1 every cluster weight starts as N(0, HIDDEN_INIT_SCALE^2). With equal
# starting weights all clusters would receive equal gradients and stay equal forever (then s = theta.f + log K,
# the model without clusters). The null feature 0 stays at weight 0. K = 1 starts from zeros, as today.
HIDDEN_INIT_SCALE = 0.01


def initial_cluster_weights(clusters: int, dim: int, seed: int, scale: float = HIDDEN_INIT_SCALE) -> np.ndarray:
    """Starting weights ``(clusters, dim)`` float64: zeros for one cluster, else Gaussian noise of standard
    deviation ``scale`` drawn from ``numpy.random.default_rng(seed)`` (null feature 0 kept at 0)."""
    if clusters < 1:
        raise ValueError(f"clusters must be at least 1, got {clusters}")
    if clusters == 1:
        return np.zeros((1, dim))
    w = np.random.default_rng(seed).normal(scale=scale, size=(clusters, dim))
    w[:, 0] = 0.0
    return w


def cluster_scores(weights: np.ndarray, features: np.ndarray) -> np.ndarray:
    """Per-cluster log-potentials ``(K, B, n+1, n+1)``: ``arc_scores`` of each cluster's weight block
    ``weights[z]`` (``-inf`` on impossible arcs)."""
    if weights.ndim != 2:
        raise ValueError(f"cluster weights must be (K, dim), got shape {weights.shape}")
    return np.stack([arc_scores(weights[z], features) for z in range(len(weights))])


def marginalise_clusters(per_cluster: np.ndarray | list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(s, posterior)`` from per-cluster log-potentials ``(K, ...)``: ``s = log sum_z exp(per_cluster[z])``
    (eq. 18) and ``posterior[z] = p(z | edge) = exp(per_cluster[z] - s)``.

    The log-sum-exp is shifted by the largest term; when the shifted sum is exactly 1 (K = 1, or every other
    cluster underflows) ``s`` is that term itself, so one cluster gives its scores back bit for bit. Forbidden
    edges (``-inf`` in every cluster) keep ``s = -inf`` and get posterior 0."""
    x = np.asarray(per_cluster, dtype=np.float64)
    top = x.max(axis=0)
    finite = np.isfinite(top)
    shifted = x - np.where(finite, top, 0.0)
    with np.errstate(under="ignore"):
        total = np.exp(shifted).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(finite & (total != 1.0), top + np.log(total), top)
        posterior = np.where(finite, np.exp(x - np.where(finite, s, 0.0)), 0.0)
    return s, posterior


def scatter_cluster_gradient(features: np.ndarray, score_grad: np.ndarray, posterior: np.ndarray,
                             dim: int) -> np.ndarray:
    """Gradient ``(K, dim)`` w.r.t. the cluster weights from the gradient w.r.t. the marginalised scores
    ``score_grad`` (B, n+1, n+1) and the posteriors ``(K, B, n+1, n+1)``: by the chain rule through eq. 18,
    ``d s / d theta_{z,f} = p(z | edge) * [f on edge]``: ``cluster_gradient_terms`` summed by one ``np.bincount``
    (each entry adds its own cluster's terms in the features' order, as ``scatter_gradient``); the null feature
    gets no gradient."""
    idx, val = cluster_gradient_terms(features, score_grad, posterior, dim)
    grad = np.bincount(np.concatenate(idx), np.concatenate(val), len(posterior) * dim).reshape(len(posterior), dim)
    grad[:, 0] = 0.0
    return grad


# -- clusters inside a BP model's LINK factors ------------------------------------------------------------------
# A BP model keeps its weights in one flat vector (``engine.bp_parser.BPParser``); with K clusters its first
# ``K * dim`` entries are the cluster blocks, cluster-major (block z = entries ``z*dim .. (z+1)*dim``), and its
# higher-order block follows them. The LINK factor of an edge gets the marginalised score ``s(h, m)`` of eq. 18,
# so BP runs unchanged, and the surrogate gradient (Smith & Eisner 2008 eq. 10) reaches block z through
# ``d s / d theta_z = p(z | h, m) f(h, m)``.

def cluster_blocks(weights: np.ndarray, clusters: int, dim: int) -> np.ndarray:
    """The ``clusters`` weight blocks of a flat vector whose first ``clusters * dim`` entries hold them: a
    ``(clusters, dim)`` view, whose rows are the blocks."""
    if len(weights) < clusters * dim:
        raise ValueError(f"{clusters} cluster blocks of {dim} need at least {clusters * dim} weights, "
                         f"got {len(weights)}")
    return weights[:clusters * dim].reshape(clusters, dim)


def flat_cluster_weights(first_order: np.ndarray, clusters: int, seed: int,
                         scale: float = HIDDEN_INIT_SCALE) -> np.ndarray:
    """K blocks started from an unclustered first-order model's weights ``first_order`` (dim,): each block is
    those weights plus the noise of ``initial_cluster_weights`` (the null feature stays 0), so that
    ``s(h, m)`` starts at about ``theta . f(h, m) + log K``: the same tree distribution as the warm start."""
    noise = initial_cluster_weights(clusters, len(first_order), seed, scale)
    return (np.asarray(first_order, dtype=np.float64)[None, :] + noise).reshape(-1)


def cluster_gradient_terms(features: np.ndarray, score_grad: np.ndarray, posterior: np.ndarray,
                           dim: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``scatter_cluster_gradient`` as (indices, values) into the flat layout of ``cluster_blocks``: block z gets
    ``score_grad * p(z | edge)`` on each of the edge's features (``features`` (..., F), ``score_grad`` and each
    ``posterior[z]`` the shape of ``features[..., 0]``). The caller zeroes the null feature of every block."""
    k = features.shape[-1]
    flat = features.reshape(-1)
    idx = [flat + z * dim for z in range(len(posterior))]
    val = [np.repeat((score_grad * posterior[z]).reshape(-1), k) for z in range(len(posterior))]
    return idx, val
