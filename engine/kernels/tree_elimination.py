"""Subtraction-free Matrix-Tree inference in log space (the robust fallback for extreme scores).

The determinant of the Kirchhoff matrix (Smith & Smith 2007 eq. 6) is computed by eliminating one
word at a time, as the Grassmann-Taksar-Heyman (GTH) algorithm does for Markov chains: eliminating
word ``k`` multiplies ``Z`` by its total incoming weight ``D_k`` and turns every two-arc path
``h -> k -> m`` into an arc ``h -> m`` of weight ``A[h, k] A[k, m] / D_k``. The reduced matrix is again
a Kirchhoff matrix whose diagonal is recomputed as a sum of positive weights, so no subtraction ever
happens; done in log space, no underflow either. The LU determinant, by contrast, cancels
catastrophically when a cycle of dominant arcs is left only through arcs ``exp(-700)`` weaker.

Single-root trees (Koo et al. 2007) are the ``eps -> 0`` leading term of ``Z`` when every ROOT arc
is scaled by ``eps``: the ROOT weights are carried through the elimination but left out of
``D_k`` except for the last word eliminated, whose ``D`` is its accumulated ROOT weight.

Marginals are ``d log Z / d scores`` by reverse-mode differentiation of the elimination. Every
adjoint is a bounded probability-like quantity, so marginals are accurate in absolute terms.
Cost: O(n^3) time and O(n^3) memory per sentence, with a Python loop over the ``n`` eliminations.
"""

from __future__ import annotations

import numpy as np

__all__ = ["eliminate_log_partition", "eliminate_marginals"]


def _forward(scores: np.ndarray, single_root: bool, keep_tape: bool) -> tuple[float, list]:
    n = scores.shape[0] - 1
    from scipy.special import logsumexp  # here: only this reference path uses it, parsing does not

    w = scores.astype(np.float64, copy=True)
    w[:, 0] = -np.inf
    np.fill_diagonal(w, -np.inf)
    log_z = 0.0
    tape: list = []
    alive = list(range(1, n + 1))
    while alive:
        k = _next_word(w, alive, single_root)
        alive.remove(k)
        rest = np.array(alive, dtype=np.int64)  # remaining words
        heads = np.concatenate([[0], rest])  # ROOT + remaining words
        use_root = (not single_root) or not alive
        inputs = heads if use_root else rest
        d = float(logsumexp(w[inputs, k])) if len(inputs) else -np.inf
        if not np.isfinite(d):
            raise ValueError("no tree is possible under these scores (a word has no allowed head)")
        log_z += d
        if alive:
            col = w[heads, k]
            row = w[k, rest]
            old = w[np.ix_(heads, rest)]
            path = col[:, None] + row[None, :] - d
            path[np.arange(1, len(heads)), np.arange(len(rest))] = -np.inf  # h -> k -> h is a cycle
            new = np.logaddexp(old, path)
            w[np.ix_(heads, rest)] = new
            if keep_tape:
                with np.errstate(invalid="ignore"):
                    sigma = np.where(np.isfinite(new), np.exp(old - new), 0.0)
                    tau = np.where(np.isfinite(new), np.exp(path - new), 0.0)
                tape.append((k, heads, rest, inputs, w[inputs, k] - d, sigma, tau))
        elif keep_tape:
            tape.append((k, heads, rest, inputs, w[inputs, k] - d, None, None))
    return log_z, tape


def _next_word(w: np.ndarray, alive: list[int], single_root: bool) -> int:
    """The next word to eliminate: the last one alive, except that in single-root mode a word that
    only ROOT can still head (no finite arc from a remaining word) must be eliminated last."""
    if not single_root or len(alive) == 1:
        return alive[-1]
    idx = np.array(alive)
    sub = w[np.ix_(idx, idx)]
    has_word_head = np.isfinite(sub).any(axis=0)
    candidates = idx[has_word_head]
    if len(candidates) == 0:
        raise ValueError("no single-root tree is possible under these scores (several words can only "
                         "attach to ROOT)")
    return int(candidates[-1])


def eliminate_log_partition(scores: np.ndarray, *, single_root: bool) -> float:
    """Log partition over non-projective trees; ``scores`` (n+1, n+1) log-potentials. O(n^3)."""
    return _forward(np.asarray(scores, dtype=np.float64), single_root, keep_tape=False)[0]


def eliminate_marginals(scores: np.ndarray, *, single_root: bool) -> tuple[float, np.ndarray]:
    """``(log Z, marginals)``; ``marginals[h, m] = p(head of m = h)``, by reverse-mode elimination."""
    scores = np.asarray(scores, dtype=np.float64)
    log_z, tape = _forward(scores, single_root, keep_tape=True)
    grad = np.zeros_like(scores)  # adjoint of the current log weights
    for k, heads, rest, inputs, log_soft, sigma, tau in reversed(tape):
        d_bar = 1.0  # d log Z / d D_k through the sum log Z = sum_k D_k ...
        if sigma is not None:
            g = grad[np.ix_(heads, rest)]
            gt = g * tau
            grad[np.ix_(heads, rest)] = g * sigma
            grad[heads, k] += gt.sum(axis=1)
            grad[k, rest] += gt.sum(axis=0)
            d_bar -= gt.sum()  # ... and through the paths h -> k -> m, which divide by D_k
        grad[inputs, k] += d_bar * np.exp(log_soft)
    grad[:, 0] = 0.0
    np.fill_diagonal(grad, 0.0)
    np.clip(grad, 0.0, 1.0, out=grad)
    return log_z, grad
