"""Compiled linear-chain kernels for tagging a batch of chains of any lengths at once.

The chains are *ragged*: their positions are concatenated, ``emissions`` is (N, S) for all N positions and
``offsets`` (B+1,) says where each chain starts, so sentences of different lengths share one call instead of
one call per length (``engine.text.crf`` stacks equal-length chains and steps through the positions with numpy,
which for the few sentences of a service batch costs more in calls than in arithmetic). Each kernel computes
the recurrence of its ``engine.text.crf`` counterpart, in the same scaled log space (Lafferty, McCallum &
Pereira 2001, §3):

- ``marginals``: the forward pass ``alpha_t[j] = log(sum_i exp(alpha_{t-1}[i] - m) exp(A[i, j] - max A)) + m +
  max A + E[t, j]`` (``chain_forward``), the backward pass likewise, ``log Z`` and the unary marginals
  ``exp(alpha + beta - log Z)`` (``chain_forward_backward``). The sums over states run in index order where
  BLAS's matrix product chooses its own, so the results agree to rounding (about 1e-15), not bit for bit.
- ``viterbi``: the best path through each position's candidate states (``chain_viterbi``), the same
  operations in the same order, ties to the first candidate as numpy's ``argmax``.
- ``sample``: forward filtering, backward sampling (Carter & Kohn 1994) by inverting each cumulative
  distribution at given uniform numbers (``chain_sample``), with the same cumulative sums, each built once per
  position and next state rather than once per draw.

The transitions are an (S+1, S+1) matrix whose last row holds the start scores and last column the end scores.
``tests/engine/text/test_crf_ragged.py`` checks each kernel against its ``engine.text.crf`` counterpart.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.text.crf import scaled_transitions


def _scaled(transitions: np.ndarray) -> tuple[float, np.ndarray]:
    """``(max A, exp(A - max A))`` of the inner (S, S) transitions (``engine.text.crf.scaled_transitions``)."""
    s = transitions.shape[0] - 1
    return scaled_transitions(transitions[:s, :s])


@njit(cache=True, nogil=True)
def _finite_max(v: np.ndarray) -> float:
    m = -np.inf
    for x in v:
        if x > m:
            m = x
    return m if np.isfinite(m) else 0.0


@njit(cache=True, nogil=True)
def _marginals(em: np.ndarray, trans: np.ndarray, exp_a_t: np.ndarray, a_max: float, offsets: np.ndarray,
               alpha: np.ndarray, unary: np.ndarray, log_z: np.ndarray) -> None:
    """``exp_a_t`` is ``exp(A - max A)`` transposed: the backward step's sums over ``j`` of ``row[j] exp_a[i, j]``
    then run as one vector update per ``j`` (in the same order of ``j`` for every ``i``)."""
    s = em.shape[1]
    beta = np.empty_like(em)
    row = np.empty(s)
    acc = np.empty(s)
    for b in range(offsets.shape[0] - 1):
        start, stop = offsets[b], offsets[b + 1]
        if stop == start:
            log_z[b] = 0.0
            continue
        for j in range(s):
            row[j] = alpha[stop - 1, j] + trans[j, s]
        m = _finite_max(row)
        total = 0.0
        for j in range(s):
            total += math.exp(row[j] - m)
        z = math.log(total) + m
        log_z[b] = z
        for j in range(s):
            beta[stop - 1, j] = trans[j, s]
        for t in range(stop - 2, start - 1, -1):
            for j in range(s):
                row[j] = em[t + 1, j] + beta[t + 1, j]
            m = _finite_max(row)
            acc[:] = 0.0
            for j in range(s):
                r = math.exp(row[j] - m)
                for i in range(s):
                    acc[i] += r * exp_a_t[j, i]
            for i in range(s):
                beta[t, i] = (math.log(acc[i]) if acc[i] > 0.0 else -np.inf) + m + a_max
        for t in range(start, stop):
            for j in range(s):
                unary[t, j] = math.exp(alpha[t, j] + beta[t, j] - z)


def forward(emissions: np.ndarray, transitions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Log forward scores ``alpha`` (N, S) of ragged chains: ``emissions`` (N, S), ``offsets`` (B+1,)."""
    em = np.ascontiguousarray(emissions, dtype=np.float64)
    trans = np.ascontiguousarray(transitions, dtype=np.float64)
    a_max, exp_a = _scaled(trans)
    alpha = np.empty_like(em)
    _forward(em, trans, exp_a, a_max, np.asarray(offsets, dtype=np.int64), alpha)
    return alpha


def marginals(emissions: np.ndarray, transitions: np.ndarray, offsets: np.ndarray,
              alpha: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unary marginals (N, S) and log Z (B,) of ragged chains (``alpha``: their ``forward`` scores, if known)."""
    em = np.ascontiguousarray(emissions, dtype=np.float64)
    trans = np.ascontiguousarray(transitions, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    a_max, exp_a = _scaled(trans)
    if alpha is None:
        alpha = forward(em, trans, offsets)
    unary, log_z = np.empty_like(em), np.empty(len(offsets) - 1)
    _marginals(em, trans, np.ascontiguousarray(exp_a.T), a_max, offsets, alpha, unary, log_z)
    return unary, log_z


@njit(cache=True, nogil=True)
def _viterbi(em: np.ndarray, trans: np.ndarray, cand: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    s, k = em.shape[1], cand.shape[1]
    delta = np.empty(k)
    nxt = np.empty(k)
    back = np.empty(cand.shape, dtype=np.int64)
    for b in range(offsets.shape[0] - 1):
        start, stop = offsets[b], offsets[b + 1]
        if stop == start:
            continue
        for c in range(k):
            delta[c] = trans[s, cand[start, c]] + em[start, cand[start, c]]
        for t in range(start + 1, stop):
            for c in range(k):
                best, arg = -np.inf, 0
                for p in range(k):
                    v = delta[p] + trans[cand[t - 1, p], cand[t, c]]
                    if v > best or p == 0:
                        best, arg = v, p
                back[t, c] = arg
                nxt[c] = best + em[t, cand[t, c]]
            delta[:] = nxt
        best, arg = -np.inf, 0
        for c in range(k):
            v = delta[c] + trans[cand[stop - 1, c], s]
            if v > best or c == 0:
                best, arg = v, c
        for t in range(stop - 1, start - 1, -1):
            out[t] = cand[t, arg]
            if t > start:
                arg = back[t, arg]


def viterbi(emissions: np.ndarray, transitions: np.ndarray, candidates: np.ndarray,
            offsets: np.ndarray) -> np.ndarray:
    """The best state of every position (N,) int64 of ragged chains, each position restricted to its
    ``candidates`` (N, k) states."""
    out = np.zeros(len(emissions), dtype=np.int64)
    _viterbi(np.ascontiguousarray(emissions, dtype=np.float64), np.ascontiguousarray(transitions, dtype=np.float64),
             np.ascontiguousarray(candidates, dtype=np.int64), np.asarray(offsets, dtype=np.int64), out)
    return out


@njit(cache=True, nogil=True)
def _forward(em: np.ndarray, trans: np.ndarray, exp_a: np.ndarray, a_max: float, offsets: np.ndarray,
             alpha: np.ndarray) -> None:
    s = em.shape[1]
    row = np.empty(s)
    acc = np.empty(s)
    for b in range(offsets.shape[0] - 1):
        start, stop = offsets[b], offsets[b + 1]
        if stop == start:
            continue
        for j in range(s):
            alpha[start, j] = trans[s, j] + em[start, j]
        for t in range(start + 1, stop):
            m = _finite_max(alpha[t - 1])
            for i in range(s):
                row[i] = math.exp(alpha[t - 1, i] - m)
            acc[:] = 0.0
            for i in range(s):
                r = row[i]
                for j in range(s):
                    acc[j] += r * exp_a[i, j]
            for j in range(s):
                alpha[t, j] = (math.log(acc[j]) if acc[j] > 0.0 else -np.inf) + m + a_max + em[t, j]


@njit(cache=True, nogil=True)
def _cumulative(scores: np.ndarray, cum: np.ndarray) -> None:
    """``cum`` = the running sums of ``exp(scores - max)`` (``np.cumsum`` sums in the same order)."""
    m = _finite_max(scores)
    total = 0.0
    for j in range(scores.shape[0]):
        total += math.exp(scores[j] - m)
        cum[j] = total


@njit(cache=True, nogil=True)
def _draw(cum: np.ndarray, u: float) -> int:
    """The first index whose cumulative probability exceeds ``u`` (``engine.text.crf._inverse_cdf``): the number
    of running sums ``<= u * total``, found by bisection since they never decrease."""
    threshold = u * cum[-1]
    lo, hi = 0, cum.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] <= threshold:
            lo = mid + 1
        else:
            hi = mid
    return min(lo, cum.shape[0] - 1)


@njit(cache=True, nogil=True)
def _sample(alpha: np.ndarray, trans: np.ndarray, uniform: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    """Backward sampling of every draw. At a position, the distribution of a draw's state depends only on the state
    it drew at the next position, so it is built once per distinct next state and shared by the draws that have it
    (the draws mostly agree: few distributions per position instead of one per draw)."""
    s, k = alpha.shape[1], uniform.shape[0]
    scores = np.empty(s)
    cums = np.empty((max(k, 1), s))
    keys = np.empty(max(k, 1), dtype=np.int64)
    for b in range(offsets.shape[0] - 1):
        start, stop = offsets[b], offsets[b + 1]
        if stop == start or k == 0:
            continue
        for j in range(s):
            scores[j] = alpha[stop - 1, j] + trans[j, s]
        _cumulative(scores, cums[0])
        for d in range(k):
            out[d, stop - 1] = _draw(cums[0], uniform[d, stop - 1])
        for t in range(stop - 2, start - 1, -1):
            used = 0
            for d in range(k):
                y = out[d, t + 1]
                slot = -1
                for c in range(used):
                    if keys[c] == y:
                        slot = c
                        break
                if slot < 0:
                    slot, used = used, used + 1
                    keys[slot] = y
                    for j in range(s):
                        scores[j] = alpha[t, j] + trans[j, y]
                    _cumulative(scores, cums[slot])
                out[d, t] = _draw(cums[slot], uniform[d, t])


def sample(alpha: np.ndarray, transitions: np.ndarray, uniform: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """State sequences drawn exactly from ``p(y | x)`` for ragged chains whose ``forward`` scores are ``alpha``
    -> int64 (k, N): draw ``d`` of the chain at ``offsets[b]:offsets[b+1]`` inverts its distributions at
    ``uniform[d, offsets[b]:offsets[b+1]]``."""
    uniform = np.ascontiguousarray(uniform, dtype=np.float64)
    if uniform.ndim != 2 or uniform.shape[1] != len(alpha):
        raise ValueError(f"uniform numbers must have shape (k, {len(alpha)}), got {uniform.shape}")
    out = np.zeros(uniform.shape, dtype=np.int64)
    _sample(np.ascontiguousarray(alpha, dtype=np.float64), np.ascontiguousarray(transitions, dtype=np.float64),
            uniform, np.asarray(offsets, dtype=np.int64), out)
    return out
