"""CHILDSEQ: one global factor per head scoring its sequences of children (Smith & Eisner 2008 §3.4, §5.3).

CHILDSEQ_h looks at every variable ``L[h, *]``. Its value is the product of the scores of the consecutive
pairs of a weighted split head automaton (Eisner & Satta 1999): with children taken outward from the
head on each side and ``#`` the boundary symbol, head 5 with right children 7, 9 and left child 2 scores

    PAIR(5#, 57) PAIR(57, 59) PAIR(59, 5#)        (right sequence)
    PAIR(5#, 52) PAIR(52, 5#)                     (left sequence)

Index convention of the weights (log-potentials), both arrays of shape (n+1, n+1, n+1)::

    theta_right[h, a, b]   right children of h, a before b going outward (rightwards):
                           a == h: b is the first (nearest) right child  (PAIR(h#, hb));
                           b == h: a is the last (farthest) right child  (PAIR(ha, h#));
                           otherwise h < a < b: b is the right child right after a;
                           theta_right[h, h, h]: h has no right child.
    theta_left[h, a, b]    left children of h, a before b going outward (leftwards):
                           a == h: b is the first (nearest) left child;
                           b == h: a is the last (farthest, leftmost) left child;
                           otherwise b < a < h: b is the left child right after a;
                           theta_left[h, h, h]: h has no left child.

Other entries are never used. ROOT (h = 0) has no left children, so its left factor is the constant
``theta_left[0, 0, 0]``. The two sides of a head are independent given the variables, and each
``L[h, m]`` belongs to exactly one CHILDSEQ factor, so the family is an arc-shaped family with disjoint
factors. Pruned arcs (``valid`` false) are not variables: they are held false.

Propagation (§5.3) is forward-backward over the hidden state "position of the previous child" of an
HMM with one observation per position (the link variable) and a deterministic, sparse transition: the
state stays put when ``L[h, m]`` is false and moves to ``m`` when it is true. Everything is in log
space. Per side, with ``q_m`` the incoming odds and ``w(a, b)`` the pair weights (``b = #`` for stop)::

    alpha(h) = 1,  alpha(m) = q_m sum_{a < m} alpha(a) w(a, m)          (mass of prefixes ending in child m)
    beta(a)  = w(a, #) + sum_{b > a} w(a, b) q_b beta(b)              (mass of the rest after child a)
    true mass of m (without q_m):  sum_{a < m} alpha(a) w(a, m) beta(m)
    false mass of m:               sum_{a < m} alpha(a) [w(a, #) + sum_{b > m} w(a, b) q_b beta(b)]

The bracket is accumulated while sweeping ``m`` downwards, so no mass is ever subtracted. Each head's
side costs O(n^2); all ``2(n+1)`` sides run at once (vectorised over heads), with one Python loop over
positions per sweep: O(n^3) total. Left sequences are run as right sequences of the mirrored sentence
(position ``x -> n - x``).
"""

from __future__ import annotations

import numpy as np

from engine.graph.family import ArcFamily, Messages


def logsumexp_fast(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """log-sum-exp along ``axis``; ``-inf`` for empty or all ``-inf`` slices (no warnings)."""
    if x.shape[axis] == 0:
        return np.full(np.delete(x.shape, axis), -np.inf)
    m = x.max(axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - m).sum(axis=axis)) + np.squeeze(m, axis=axis)


def logaddexp_fast(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``np.logaddexp`` for finite or ``-inf`` inputs, from vectorised exp/log1p in place (numpy's
    ``logaddexp`` ufunc is several times slower on large arrays)."""
    hi = np.maximum(x, y)
    d = np.minimum(x, y)
    with np.errstate(invalid="ignore"):
        d -= hi  # nan where both are -inf; fmax below then returns hi = -inf
        np.exp(d, out=d)
        np.log1p(d, out=d)
        d += hi
    return np.fmax(d, hi, out=d)


def _log_odds(true: np.ndarray, false: np.ndarray) -> np.ndarray:
    """``true - false`` for log masses, 0 where both are ``-inf`` (a factor with no support)."""
    with np.errstate(invalid="ignore"):
        d = true - false
    return np.where(np.isnan(d), 0.0, d)


class ChildSeq(ArcFamily):
    """CHILDSEQ_h for every head h; weights ``theta_right``, ``theta_left`` as in the module docstring.

    Internally the ``2(n+1)`` child sequences are *chains*: chain ``2g`` is the right sequence of head
    ``g``; chain ``2g + 1`` is the left sequence of head ``n - g`` in mirrored coordinates
    (``x' = n - x``), so that every chain runs rightwards from its head ``g``. Chains are ordered by
    head so the chains with head ``< p`` are exactly the first ``2p``. Used weights should be finite
    (``-inf`` forbids a pair; a head left with no allowed sequence sends 0 messages); unused entries
    are ignored, whatever they hold.
    """

    name = "childseq"

    def __init__(self, n: int, valid: np.ndarray, theta_right: np.ndarray, theta_left: np.ndarray) -> None:
        super().__init__(n, valid)
        size = n + 1
        self.theta_right = np.asarray(theta_right, dtype=np.float64)
        self.theta_left = np.asarray(theta_left, dtype=np.float64)
        for t in (self.theta_right, self.theta_left):
            if t.shape != (size, size, size):
                raise ValueError(f"CHILDSEQ weights must have shape {(size, size, size)}, got {t.shape}")
        chains = 2 * size
        self._head = np.repeat(np.arange(size), 2)  # head position of each chain (chain coordinates)
        into = np.empty((chains, size, size))  # into[c, b, a] = w(a -> b), a transition into b
        into[0::2] = self.theta_right.transpose(0, 2, 1)
        into[1::2] = self.theta_left[::-1, ::-1, ::-1].transpose(0, 2, 1)
        pos = np.arange(size)
        head = self._head[:, None, None]
        a, b = pos[None, None, :], pos[None, :, None]
        used = (a >= head) & ((b > a) | (b == head))
        self._into = np.where(used, into, 0.0)  # unused entries may hold anything (nan, inf)
        self._stop = self._into[np.arange(chains), self._head, :]  # _stop[c, a] = w(a -> #)
        self._chain_valid = self._to_chains(valid) & (np.arange(size) > self._head[:, None])

    # chain coordinates ---------------------------------------------------------------------------

    def _to_chains(self, arc: np.ndarray) -> np.ndarray:
        out = np.empty((2 * (self.n + 1), self.n + 1), dtype=arc.dtype)
        out[0::2] = arc
        out[1::2] = arc[::-1, ::-1]
        return out

    def _from_chains(self, chain: np.ndarray) -> np.ndarray:
        """Arc array from chain values that are 0 off each chain's own side."""
        return chain[0::2] + chain[1::2][::-1, ::-1]

    def _sweep(self, r: np.ndarray, *, false_mass: bool) -> tuple[np.ndarray, ...]:
        """Forward-backward on all chains. Returns ``(R, A, into, B, F)`` (chain coordinates, logs):
        ``R`` incoming log-odds (``-inf`` off the variables), ``A[c, m] = log alpha(m)``,
        ``into[c, m] = log sum_{a<m} alpha(a) w(a, m)``, ``B[c, a] = log beta(a)`` and, when asked,
        ``F[c, m]`` the log false mass of ``m``."""
        size = self.n + 1
        chains = 2 * size
        head, w_in = self._head, self._into
        rr = np.where(self._chain_valid, self._to_chains(np.asarray(r, dtype=np.float64)), -np.inf)
        alpha = np.full((chains, size), -np.inf)
        alpha[np.arange(chains), head] = 0.0
        into = np.full((chains, size), -np.inf)
        for m in range(1, size):  # forward: chains with head < m are the first 2m
            live = slice(0, 2 * m)
            into[live, m] = logsumexp_fast(alpha[live, :m] + w_in[live, m, :m], axis=1)
            alpha[live, m] = into[live, m] + rr[live, m]
        # backward: rest[c, a] = log (w(a, #) + sum_{b > m} w(a, b) q_b beta(b)) for the current m
        rest = self._stop.copy()
        beta = np.empty((chains, size))
        false = np.full((chains, size), -np.inf)
        for m in range(size - 1, -1, -1):
            beta[:, m] = rest[:, m]
            live = slice(0, 2 * m)  # chains for which m can be a child
            if false_mass:
                false[live, m] = logsumexp_fast(alpha[live, :m] + rest[live, :m], axis=1)
            add = (beta[live, m] + rr[live, m])[:, None] + w_in[live, m, :m]
            rest[live, :m] = logaddexp_fast(rest[live, :m], add)
        return rr, alpha, into, beta, false

    # the family interface ------------------------------------------------------------------------

    def propagate(self, incoming: Messages) -> Messages:
        _, _, into, beta, false = self._sweep(incoming[0], false_mass=True)
        out = np.where(self._chain_valid, _log_odds(into + beta, false), 0.0)
        return (np.where(self.valid, self._from_chains(out), 0.0),)

    def log_partition(self, incoming: Messages) -> np.ndarray:
        """``log sum_y CHILDSEQ_h(y) prod_m q[h, m]^y[h, m]`` per head, both sides: shape (n+1,)."""
        _, _, _, beta, _ = self._sweep(incoming[0], false_mass=False)
        z = beta[np.arange(2 * (self.n + 1)), self._head]
        return z[0::2] + z[1::2][::-1]

    def expected_pairs(self, incoming: Messages | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Factor beliefs of the pairs: ``(pair_right, pair_left)``, indexed like ``theta_right`` and
        ``theta_left``: ``pair_right[h, a, b]`` is the probability, under CHILDSEQ_h times its
        incoming messages, that the right sequence of h contains the consecutive pair (a, b) (with
        ``a == h`` start and ``b == h`` stop). These are the expected counts of the pair features
        (Smith & Eisner §7 eq. 10). ``pair_right[h].sum()`` is 1 + the expected number of right
        children of h (k children make k + 1 pairs); unused entries are 0."""
        r = incoming[0] if isinstance(incoming, tuple) else incoming
        rr, alpha, _, beta, _ = self._sweep(r, false_mass=False)
        chains, size = rr.shape
        log_z = beta[np.arange(chains), self._head]
        log_p = alpha[:, :, None] + self._into.transpose(0, 2, 1) + (rr + beta)[:, None, :]
        upper = np.arange(size)[:, None] < np.arange(size)[None, :]
        log_p = np.where(upper, log_p, -np.inf)
        log_p[np.arange(chains), :, self._head] = alpha + self._stop
        pairs = np.exp(log_p - log_z[:, None, None])
        return pairs[0::2], pairs[1::2][::-1, ::-1, ::-1]

    def log_potential(self, y: np.ndarray) -> float:
        """Sum of the pair weights of both child sequences of every head (arcs off ``valid`` ignored)."""
        y = np.asarray(y, dtype=bool) & self.valid
        total = 0.0
        for h in range(self.n + 1):
            right = np.flatnonzero(y[h, h + 1:]) + h + 1
            left = np.flatnonzero(y[h, :h])[::-1]
            for theta, kids in ((self.theta_right, right), (self.theta_left, left)):
                seq = np.concatenate([[h], kids, [h]])
                total += float(theta[h, seq[:-1], seq[1:]].sum())
        return total
