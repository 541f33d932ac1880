"""Linear-chain CRF kernels (Lafferty, McCallum & Pereira 2001): pure functions of the emission and transition
scores, vectorised over the states and over a batch of equal-length chains.

``chain_forward`` (scaled forward pass), ``chain_sample`` (forward filtering, backward sampling: exact draws
from p(y | x)), ``chain_forward_backward`` (log Z, unary and pairwise marginals: the sum-product propagator the
TAG/TRIGRAM factors of joint tagging and parsing under BP can call, Smith & Eisner 2008 §3.4), ``chain_viterbi``,
``chain_score`` and ``chain_nll`` (negative log-likelihood and its expected-minus-observed gradient). Transitions
are an ``(S+1, S+1)`` matrix whose last row holds the start scores and whose last column the end scores.
``engine.text.tagger`` builds its CRF tagger on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

# ---------------------------------------------------------------------------------------------------------
# Chain kernels (pure functions of scores)
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ChainMarginals:
    """What ``chain_forward_backward`` returns for a batch of ``B`` chains of length ``n`` over ``T`` tags."""

    log_z: np.ndarray  # (B,) log partition function
    unary: np.ndarray  # (B, n, T) p(y_t = j); every row sums to 1
    pair_counts: np.ndarray | None  # (T+1, T+1) expected transition counts summed over the batch (incl. start/end)
    pairwise: np.ndarray | None  # (B, n-1, T, T) p(y_t = i, y_{t+1} = j)


def _row_max(v: np.ndarray) -> np.ndarray:
    """Max over the last axis (keepdims), 0 where a row is entirely -inf (so subtracting it is safe)."""
    m = v.max(axis=-1, keepdims=True)
    return np.where(np.isfinite(m), m, 0.0)


# Matrix products are kept below this many multiply-adds: OpenBLAS multithreads larger ones, which for these
# small matrices (and on a busy machine) is many times slower than one thread.
_SMALL_PRODUCT = 1 << 18


def _small_matmul(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``x @ m`` for (B, T) @ (T, T), in row blocks small enough to stay single-threaded."""
    rows = max(1, _SMALL_PRODUCT // m.size)
    if len(x) <= rows:
        return x @ m
    return np.concatenate([x[i : i + rows] @ m for i in range(0, len(x), rows)])


def scaled_transitions(inner: np.ndarray) -> tuple[float, np.ndarray]:
    """``(max A, exp(A - max A))`` of the inner transition scores (a matrix product then stays in range)."""
    a_max = float(_row_max(inner.reshape(1, -1))[0, 0])
    return a_max, np.exp(inner - a_max)


def chain_forward(emissions: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    """Log forward scores ``alpha`` (B, n, T) of a batch of chains (n >= 1): ``alpha_t[j]`` is the log of the
    summed potential of all tag prefixes ending in tag ``j`` at ``t``, emission ``t`` included.

    Each step ``alpha_t[j] = logsumexp_i(alpha_{t-1}[i] + A[i, j]) + E[t, j]`` is computed as
    ``log(exp(alpha - max) @ exp(A - max A)) + maxes``: exact in log space (``-inf`` scores stay hard
    zeros) and a matrix product over the tags instead of a (B, T, T) logsumexp."""
    b, n, t = emissions.shape
    a_max, exp_a = scaled_transitions(transitions[:t, :t])
    alpha = np.empty((b, n, t))
    alpha[:, 0] = transitions[t, :t] + emissions[:, 0]
    with np.errstate(divide="ignore"):
        for i in range(1, n):
            prev = alpha[:, i - 1]
            m = _row_max(prev)
            alpha[:, i] = np.log(_small_matmul(np.exp(prev - m), exp_a)) + m + a_max + emissions[:, i]
    return alpha


def _inverse_cdf(scores: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index drawn from ``p ∝ exp(scores)`` along the last axis by the uniform numbers ``u`` (shape without
    that axis): the first index whose cumulative probability exceeds ``u`` (so never one of probability 0)."""
    with np.errstate(invalid="ignore"):
        weights = np.exp(scores - _row_max(scores))
    cum = np.cumsum(weights, axis=-1)
    return np.minimum((cum <= u[..., None] * cum[..., -1:]).sum(axis=-1), scores.shape[-1] - 1)


def chain_sample(emissions: np.ndarray, transitions: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Tag sequences drawn exactly from ``p(y | x)``, ``k`` per chain -> int64 (B, k, n).

    Forward filtering, backward sampling (Carter & Kohn 1994; for chain CRFs e.g. Sutton & McCallum 2012,
    §4.1): the last tag is drawn from ``p(y_n) ∝ exp(alpha_n + end)``, then each earlier one from
    ``p(y_t | y_t+1) ∝ exp(alpha_t[y_t] + A[y_t, y_t+1])``, by inverting the cumulative distribution at
    the given uniform numbers ``uniform`` (B, k, n) in [0, 1). All chains and samples move together (one
    vectorised step per position), and the caller decides where the randomness comes from.
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    transitions = np.asarray(transitions, dtype=np.float64)
    b, n, t = emissions.shape
    k = uniform.shape[1] if uniform.ndim == 3 else -1
    if uniform.shape != (b, k, n):
        raise ValueError(f"uniform numbers must have shape ({b}, k, {n}), got {uniform.shape}")
    out = np.zeros((b, k, n), dtype=np.int64)
    if n == 0 or k == 0:
        return out
    alpha = chain_forward(emissions, transitions)
    last = np.broadcast_to((alpha[:, n - 1] + transitions[:t, t])[:, None, :], (b, k, t))
    out[:, :, n - 1] = _inverse_cdf(last, uniform[:, :, n - 1])
    inner_t = transitions[:t, :t].T
    for i in range(n - 2, -1, -1):
        # scores[b, s, j] = alpha_i[b, j] + A[j, y_{i+1}[b, s]]
        out[:, :, i] = _inverse_cdf(alpha[:, i, None, :] + inner_t[out[:, :, i + 1]], uniform[:, :, i])
    return out


def chain_forward_backward(
    emissions: np.ndarray,
    transitions: np.ndarray,
    *,
    pairwise: Literal["none", "sum", "full"] = "none",
) -> ChainMarginals:
    """Forward-backward in log space for a batch of linear chains (Lafferty et al. 2001, §3).

    ``emissions`` (B, n, T) are log-potentials of each position's tags, ``transitions`` (T+1, T+1) the
    log-potentials of tag bigrams, row ``T`` being the start state and column ``T`` the end state.
    The forward pass is ``chain_forward``; the backward pass uses the same scaled matrix products.
    ``pairwise="sum"`` also returns the expected transition counts summed over the batch (the CRF gradient
    needs only those), ``"full"`` the per-position pairwise marginals (as a TAG/TRIGRAM factor's outgoing
    beliefs would).
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    transitions = np.asarray(transitions, dtype=np.float64)
    b, n, t = emissions.shape
    if transitions.shape != (t + 1, t + 1):
        raise ValueError(f"transitions must be ({t + 1}, {t + 1}) for {t} tags, got {transitions.shape}")
    if n == 0:
        counts = np.zeros((t + 1, t + 1)) if pairwise == "sum" else None
        full = np.zeros((b, 0, t, t)) if pairwise == "full" else None
        return ChainMarginals(np.zeros(b), np.zeros((b, 0, t)), counts, full)
    end = transitions[:t, t]
    a_max, exp_a = scaled_transitions(transitions[:t, :t])
    exp_a_t = np.ascontiguousarray(exp_a.T)
    alpha = chain_forward(emissions, transitions)
    beta = np.empty((b, n, t))
    with np.errstate(divide="ignore"):
        last = alpha[:, n - 1] + end
        m = _row_max(last)
        log_z = np.log(np.exp(last - m).sum(axis=1)) + m[:, 0]
        beta[:, n - 1] = end
        for i in range(n - 2, -1, -1):
            nxt = emissions[:, i + 1] + beta[:, i + 1]
            m = _row_max(nxt)
            beta[:, i] = np.log(_small_matmul(np.exp(nxt - m), exp_a_t)) + m + a_max
    with np.errstate(invalid="ignore"):
        unary = np.exp(alpha + beta - log_z[:, None, None])
    counts = full = None
    if pairwise in ("sum", "full") and n > 1:
        left = alpha[:, :-1]  # (B, n-1, T)
        right = emissions[:, 1:] + beta[:, 1:]
        ml, mr = _row_max(left), _row_max(right)
        with np.errstate(over="ignore", invalid="ignore"):
            scale = np.exp(ml + mr + a_max - log_z[:, None, None])  # (B, n-1, 1)
            el, er = np.exp(left - ml), np.exp(right - mr) * scale
        if pairwise == "sum":
            # sum over sentences and positions of outer(el, er): (T, chunk) @ (chunk, T) products per sentence
            step = max(1, _SMALL_PRODUCT // (t * t))
            inner_counts = sum(np.matmul(el[:, j : j + step].transpose(0, 2, 1), er[:, j : j + step]).sum(axis=0)
                               for j in range(0, n - 1, step)) * exp_a
        else:
            full = el[..., :, None] * exp_a * er[..., None, :]
    if pairwise == "sum":
        counts = np.zeros((t + 1, t + 1))
        if n > 1:
            counts[:t, :t] = inner_counts
        counts[t, :t] = unary[:, 0].sum(axis=0)
        counts[:t, t] = unary[:, n - 1].sum(axis=0)
    elif pairwise == "full" and n == 1:
        full = np.zeros((b, 0, t, t))
    return ChainMarginals(log_z, unary, counts, full)


def chain_viterbi(
    emissions: np.ndarray, transitions: np.ndarray, candidates: np.ndarray | None = None
) -> np.ndarray:
    """Best tag sequence of each chain (B, n, T) under ``transitions`` (T+1, T+1) -> int64 (B, n).

    ``candidates`` (B, n, k) optionally restricts position ``t`` to the tags ``candidates[:, t]`` (for
    example the ``k`` most probable by marginal), so a step costs ``k^2`` instead of ``T^2``; the result
    is the best sequence within the restriction (exact when every position lists all tags).
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    b, n, t = emissions.shape
    if n == 0:
        return np.zeros((b, 0), dtype=np.int64)
    if candidates is None:
        candidates = np.broadcast_to(np.arange(t), (b, n, t))
    cand_em = np.take_along_axis(emissions, candidates, axis=2)  # (B, n, k)
    inner = transitions[:t, :t]
    back = np.empty(cand_em.shape, dtype=np.int64)
    delta = transitions[t, candidates[:, 0]] + cand_em[:, 0]
    for i in range(1, n):
        scores = delta[:, :, None] + inner[candidates[:, i - 1, :, None], candidates[:, i, None, :]]  # (B, k, k)
        back[:, i] = scores.argmax(axis=1)
        delta = np.take_along_axis(scores, back[:, i][:, None, :], axis=1)[:, 0] + cand_em[:, i]
    local = np.empty((b, n), dtype=np.int64)
    local[:, n - 1] = (delta + transitions[candidates[:, n - 1], t]).argmax(axis=1)
    rows = np.arange(b)
    for i in range(n - 1, 0, -1):
        local[:, i - 1] = back[rows, i, local[:, i]]
    return np.take_along_axis(candidates, local[:, :, None], axis=2)[:, :, 0].astype(np.int64)


def chain_score(emissions: np.ndarray, transitions: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """Log-potential of given tag sequences ``tags`` (B, n) -> (B,)."""
    b, n, t = emissions.shape
    if n == 0:
        return np.zeros(b)
    em = np.take_along_axis(emissions, tags[:, :, None], axis=2)[:, :, 0].sum(axis=1)
    prev = np.concatenate([np.full((b, 1), t), tags], axis=1)
    nxt = np.concatenate([tags, np.full((b, 1), t)], axis=1)
    return em + transitions[prev, nxt].sum(axis=1)


def chain_nll(
    emissions: np.ndarray, transitions: np.ndarray, gold: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Negative log-likelihood summed over the batch and its gradients (expected minus observed counts).

    Returns ``(nll, d_emissions (B, n, T), d_transitions (T+1, T+1))``.
    """
    b, n, t = emissions.shape
    fb = chain_forward_backward(emissions, transitions, pairwise="sum")
    gold = np.asarray(gold, dtype=np.int64)
    nll = float((fb.log_z - chain_score(emissions, transitions, gold)).sum())
    d_em = fb.unary
    d_em[np.arange(b)[:, None], np.arange(n)[None, :], gold] -= 1.0  # one gold tag per position: no repeats
    assert fb.pair_counts is not None
    prev = np.concatenate([np.full((b, 1), t), gold], axis=1).ravel()
    nxt = np.concatenate([gold, np.full((b, 1), t)], axis=1).ravel()
    d_tr = fb.pair_counts - np.bincount(prev * (t + 1) + nxt, minlength=(t + 1) ** 2).reshape(t + 1, t + 1)
    return nll, d_em, d_tr
