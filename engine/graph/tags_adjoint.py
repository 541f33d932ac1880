"""Adjoints of the tag factors' propagators (``engine.graph.tags``), for reverse mode through joint BP
(Gormley, Dredze & Eisner 2015 §3.3 on the factor graph of Smith & Eisner 2008 §3.4).

Each function takes a propagator's incoming messages and the gradient of an objective with respect to its
outgoing messages, and returns the gradient with respect to the incoming messages (and, for TAGLINK, to its
log-potentials ``theta``), as ``FactorFamily.vjp`` does for the link families.

**TAGLINK** (per arc, with ``u~ = u - lse(u)``, ``v~ = v - lse(v)`` over the allowed slots and
``e[a, b] = log(1 + exp(r + theta[a, b]))``):

    L      = lse_{a,b} (theta[a, b] + u~[a] + v~[b])            P[a, b] = exp(theta + u~ + v~ - L)
    H'[a]  = lse_b (v~[b] + e[a, b]),   H = H' - lse(H')         Q[a, b] = exp(v~[b] + e[a, b] - H'[a])
    D'[b]  = lse_a (u~[a] + e[a, b]),   D = D' - lse(D')         R[a, b] = exp(u~[a] + e[a, b] - D'[b])

so that, with ``gH' = gH - softmax(H') sum gH`` (the normalisation's adjoint) and ``ge = gH'[a] Q + gD'[b] R``:
``g theta = gL P + ge sigmoid(r + theta)``, ``g r = sum ge sigmoid(r + theta)``, ``g u~[a] = gL sum_b P +
sum_b gD'[b] R``, ``g v~[b] = gL sum_a P + sum_a gH'[a] Q``, and ``g u = g u~ - softmax(u) sum g u~``. On an
arc whose words have one candidate each the message to the link is ``theta[0, 0]`` whatever comes in.

**CHAIN**: forward-backward in log space is a circuit of log-sum-exps; its adjoint runs the two recursions
backwards, each ``lse`` passing its adjoint to its terms in proportion to their softmax weights
(``_chain_messages_vjp``).
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.graph.childseq import logsumexp_fast
from engine.graph.tags import TagChain, TagLink, _chain_messages, chain_tables, normalised
from engine.kernels.logistic import expit


def _log_softmax(x: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``normalised`` with ``-inf`` (not 0) on the slots that are not ``ok``."""
    return np.where(ok, normalised(x, ok), -np.inf)


def _norm_vjp(log_p: np.ndarray, grad: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Adjoint of ``x -> x - lse(x)`` over the ``ok`` slots of the last axis, at the output ``log_p``."""
    g = np.where(ok, grad, 0.0)
    p = np.where(ok, np.exp(np.where(ok, log_p, 0.0)), 0.0)
    return np.where(ok, g - p * g.sum(axis=-1, keepdims=True), 0.0)


def taglink_vjp(taglink: TagLink, link_in: np.ndarray, head_in: np.ndarray, dep_in: np.ndarray,
                g_link: np.ndarray, g_head: np.ndarray, g_dep: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Adjoint of ``TagLink.propagate`` at the incoming messages (``link_in`` (A,), ``head_in``, ``dep_in`` (A, g))
    given the gradients of its outgoing ones: (d/d link_in, d/d head_in, d/d dep_in, d/d theta (A, g, g)); 0 on the
    slots and pairs that are not allowed. One sentence's factors or a stack's alike."""
    size, g = taglink.size, taglink.allowed.shape[1]
    g_r, g_u, g_v = np.zeros(size), np.zeros((size, g)), np.zeros((size, g))
    g_theta = np.zeros((size, g, g))
    fixed = np.ones(size, dtype=bool)
    k = taglink.varying
    fixed[k] = False
    g_theta[fixed, 0, 0] = g_link[fixed]  # one pair: the link's message is theta[0, 0]
    if not len(k):
        return g_r, g_u, g_v, g_theta
    theta = taglink.theta[k]
    h_ok, d_ok = taglink.allowed[taglink.heads[k]], taglink.allowed[taglink.deps[k]]
    pair = h_ok[:, :, None] & d_ok[:, None, :]
    ut, vt = _log_softmax(head_in[k], h_ok), _log_softmax(dep_in[k], d_ok)
    with np.errstate(invalid="ignore"):
        s = np.where(pair, theta + ut[:, :, None] + vt[:, None, :], -np.inf)
        p_link = np.where(pair, np.exp(s - logsumexp_fast(logsumexp_fast(s, 2), 1)[:, None, None]), 0.0)
        shifted = np.where(pair, np.asarray(link_in, dtype=np.float64)[k][:, None, None] + theta, 0.0)
        e = np.where(pair, np.logaddexp(0.0, shifted), -np.inf)
        sig = np.where(pair, expit(shifted), 0.0)
        hx = np.where(pair, vt[:, None, :] + e, -np.inf)
        dx = np.where(pair, ut[:, :, None] + e, -np.inf)
        h_raw, d_raw = logsumexp_fast(hx, 2), logsumexp_fast(dx, 1)
        q = np.where(pair, np.exp(hx - h_raw[:, :, None]), 0.0)
        r = np.where(pair, np.exp(dx - d_raw[:, None, :]), 0.0)
    g_h = _norm_vjp(_log_softmax(h_raw, h_ok), g_head[k], h_ok)
    g_d = _norm_vjp(_log_softmax(d_raw, d_ok), g_dep[k], d_ok)
    g_hq, g_dr = g_h[:, :, None] * q, g_d[:, None, :] * r
    g_e = (g_hq + g_dr) * sig
    gl = np.asarray(g_link, dtype=np.float64)[k]
    g_theta[k] = gl[:, None, None] * p_link + g_e
    g_r[k] = g_e.sum(axis=(1, 2))
    g_u[k] = _norm_vjp(ut, gl[:, None] * p_link.sum(axis=2) + g_dr.sum(axis=2), h_ok)
    g_v[k] = _norm_vjp(vt, gl[:, None] * p_link.sum(axis=1) + g_hq.sum(axis=1), d_ok)
    return g_r, g_u, g_v, g_theta


@njit(cache=True, nogil=True)
def _chain_messages_vjp(incoming: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray,
                        g_out: np.ndarray, g_in: np.ndarray) -> None:
    """Adds into ``g_in`` (n, g) the adjoint of ``_chain_messages``'s ``incoming`` given ``g_out``, the gradient
    of its (unnormalised) output: the forward and backward recursions (``chain_tables``) recomputed, then run in
    reverse."""
    n, g = incoming.shape
    fwd = np.empty((n, g))
    alpha = np.empty((n, g))
    beta = np.empty((n, g))
    chain_tables(incoming, transitions, start, end, fwd, alpha, beta)
    g_fwd = g_out.copy()
    g_beta = g_out.copy()
    g_alpha = np.zeros((n, g))
    for i in range(n - 1):  # the backward recursion in reverse: beta[i] from beta[i + 1]
        for a in range(g):
            if beta[i, a] == -np.inf or g_beta[i, a] == 0.0:
                continue
            for b in range(g):
                x = transitions[i, a, b] + incoming[i + 1, b] + beta[i + 1, b]
                if x == -np.inf:
                    continue
                w = np.exp(x - beta[i, a]) * g_beta[i, a]
                g_in[i + 1, b] += w
                g_beta[i + 1, b] += w
    for i in range(n - 1, 0, -1):  # the forward recursion in reverse: alpha[i] = fwd[i] + incoming[i]
        for b in range(g):
            g_fwd[i, b] += g_alpha[i, b]
            g_in[i, b] += g_alpha[i, b]
        for b in range(g):
            if fwd[i, b] == -np.inf or g_fwd[i, b] == 0.0:
                continue
            for a in range(g):
                x = alpha[i - 1, a] + transitions[i - 1, a, b]
                if x == -np.inf:
                    continue
                g_alpha[i - 1, a] += np.exp(x - fwd[i, b]) * g_fwd[i, b]
    for a in range(g):
        g_in[0, a] += g_alpha[0, a]


def chain_vjp(chain: TagChain, incoming: np.ndarray, g_out: np.ndarray) -> np.ndarray:
    """Adjoint of ``TagChain.propagate`` (one sentence's chain) at ``incoming`` (n, g) given the gradient of its
    normalised messages ``g_out`` (n, g): d/d incoming, 0 on the slots that are not allowed."""
    if chain.count != 1:
        raise ValueError("chain_vjp is of one sentence's chain, not a stack's")
    words = chain.allowed[1:]
    g_in = np.zeros(incoming.shape)
    if not chain.n:
        return g_in
    inc = np.ascontiguousarray(np.where(words, incoming, -np.inf))
    raw = np.empty(inc.shape)
    _chain_messages(inc, chain.transitions, chain.start, chain.end, raw)
    g_raw = np.ascontiguousarray(_norm_vjp(normalised(raw, words), g_out, words))
    _chain_messages_vjp(inc, chain.transitions, chain.start, chain.end, g_raw, g_in)
    return np.where(words, g_in, 0.0)
