"""The gain of a candidate factor and the bound on what relaxed inference leaves out (Riedel & Smith 2010
Propositions 1 and 2), vectorised over all candidates of a family: O(F) numpy work for F candidates. The
controller that uses them is ``engine.inference.relaxed`` (whose docstring states the formulas and the
choices behind them: the direction of the KL divergence, the product approximation of mu, the sound lower
end of the interval)."""

from __future__ import annotations

import math

import numpy as np

from engine.graph.pairwise import PairFamily

__all__ = ["eq3_exceeds", "eta_bound", "factor_gain", "first_limit", "gain_exceeds", "marginal_interval",
           "pair_feature_expectations", "positive_form", "square_bound"]

def positive_form(mu: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Negated form of Prop. 2: (|theta|, probability that the possibly negated feature fires)."""
    mu = np.minimum(np.maximum(np.asarray(mu, dtype=np.float64), 0.0), 1.0)  # np.clip, in fewer calls
    theta = np.asarray(theta, dtype=np.float64)
    return np.abs(theta), np.where(theta >= 0.0, mu, 1.0 - mu)


def factor_gain(mu: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Gain of adding each binary factor (Riedel & Smith Prop. 1, eq. 3), elementwise, >= 0:
    ``g = log(1 - mu + mu e^theta) - mu theta = D(p_F' || p_F'+i)``.

    ``mu`` (F,) probability that the factor's feature fires under the current graph, ``theta`` (F,)
    finite weights. Evaluated on the negated form (theta >= 0, the gain does not change) as
    ``(1 - m) t + log(s)`` with ``s = m + (1 - m) e^-t``: by ``log1p(s - 1)``, with ``s - 1 = (1 - m)
    expm1(-t)`` exact to rounding, where s >= 1/2, and as ``log(s)`` (a sum of two non-negative terms,
    also exact to rounding) where s < 1/2. No overflow for any finite weight. O(F).

    >>> float(np.round(factor_gain(np.array([0.5]), np.array([2.0]))[0], 6))
    0.433781
    """
    return _gain(*positive_form(mu, theta))


def _gain(t: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``factor_gain`` on the negated form: weights ``t >= 0``, probabilities ``m`` in [0, 1]."""
    off = 1.0 - m
    minus_t = -t
    inner = off * np.expm1(minus_t)  # s - 1
    with np.errstate(divide="ignore"):  # s = 0 (m = 0, e^-t below the smallest double): log -inf, gain 0
        log_s = np.where(inner < -0.5, np.log(m + off * np.exp(minus_t)), np.log1p(inner))
    return np.maximum(off * t + log_s, 0.0)


def eta_bound(mu: np.ndarray, theta: np.ndarray) -> float:
    """eta of Riedel & Smith Prop. 2 over left-out factors with weights ``theta`` (F,) whose features
    fire with probability ``mu`` (F,) under the sub-graph: ``sum |theta| (1 - mu~)`` with mu~ the
    probability of the (negated where theta < 0) feature. Bounds D(p_F' || p_F). O(F)."""
    t, m = positive_form(mu, theta)
    return float(np.dot(t, 1.0 - m))


def marginal_interval(mu: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """Interval for the full model's marginal of an event with probability ``mu`` under the sub-graph
    (Riedel & Smith Prop. 2 from ``p_F <= e^eta p_F'``, applied to the event and its complement):
    ``[mu - (e^eta - 1)(1 - mu), mu + (e^eta - 1) mu]`` clipped to [0, 1]; the upper end is the
    paper's, the lower end the sound one (see the module docstring)."""
    mu = np.clip(np.asarray(mu, dtype=np.float64), 0.0, 1.0)
    width = math.expm1(eta) if eta < 700.0 else math.inf
    with np.errstate(invalid="ignore"):  # inf * 0 where mu is exactly 0 or 1
        lower = np.where(mu >= 1.0, 1.0, mu - width * (1.0 - mu))
        upper = np.where(mu <= 0.0, 0.0, mu + width * mu)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def pair_feature_expectations(family: PairFamily, beliefs: np.ndarray,
                              index: np.ndarray | None = None) -> np.ndarray:
    """mu ~ b(L_a) b(L_b) for the factors ``index`` of ``family`` (all by default): the probability that
    both links are on, approximated by the product of the link beliefs (n+1, n+1)."""
    b_a, b_b = family.unpack(family.gather_flat(beliefs.reshape(-1)))
    if index is not None:
        b_a, b_b = b_a[index], b_b[index]
    return b_a * b_b


def gain_exceeds(mu: np.ndarray, theta: np.ndarray, epsilon: float) -> np.ndarray:
    """Indices of the factors whose gain (Prop. 1, eq. 3) exceeds ``epsilon``, for features firing with
    probability ``mu`` (F,) and weights ``theta`` (F,). Two upper bounds on the gain rule out most
    candidates before eq. 3 proper (``factor_gain``) is evaluated, each with a factor-2 margin that
    absorbs rounding. Since log(1 + x) <= x, eq. 3 gives ``g <= mu c(theta)`` with ``c(theta) = e^theta - 1
    - theta``; and ``c(theta) <= kappa theta^2`` for every ``theta <= t``, the family's largest weight,
    with ``kappa = max(c(t) / t^2, 1/2)`` (``c(theta) / theta^2`` is a power series in theta with positive
    coefficients, so it increases for theta > 0, and it is at most 1/2 for theta <= 0). The looser bound,
    ``mu kappa theta^2``, needs no exponential per factor (one costs tens of multiplications) and rules
    out most candidates (about 88% on EWT), because most arcs have a small belief; ``mu c(theta)`` is
    evaluated only on the rest, and eq. 3 on what is left after that. O(F)."""
    if epsilon <= 0.0:
        return np.flatnonzero(factor_gain(mu, theta) > epsilon)
    with np.errstate(over="ignore", invalid="ignore"):  # theta > 709: inf, and 0 * inf where mu = 0
        rest = np.flatnonzero(mu * (theta * theta) > first_limit(float(np.max(theta, initial=0.0)), epsilon))
        if not len(rest):
            return rest
        mu, theta = mu[rest], theta[rest]
        keep = mu * (np.expm1(theta) - theta) > 0.5 * epsilon
    return eq3_exceeds(rest[keep], mu[keep], theta[keep], epsilon)


def first_limit(top: float, epsilon: float) -> float:
    """The first bound's test of ``gain_exceeds``, ``mu theta^2 > first_limit(top, epsilon)``, for weights
    ``theta <= top``: it rules out only factors whose gain is at most epsilon / 2."""
    return 0.5 * epsilon / square_bound(top)


def eq3_exceeds(rest: np.ndarray, mu: np.ndarray, theta: np.ndarray, epsilon: float) -> np.ndarray:
    """Of the factors ``rest`` (F',) with probabilities ``mu`` in [0, 1] and weights ``theta`` (F',), those
    whose gain (eq. 3, ``factor_gain``) exceeds ``epsilon``."""
    if not len(rest):
        return rest
    return rest[_gain(np.abs(theta), np.where(theta >= 0.0, mu, 1.0 - mu)) > epsilon]


def square_bound(t: float) -> float:
    """``kappa`` with ``e^theta - 1 - theta <= kappa theta^2`` for every ``theta <= t`` (``gain_exceeds``);
    inf where ``e^t`` (nearly) overflows."""
    if t <= 0.0:
        return 0.5
    return max((math.expm1(t) - t) / (t * t), 0.5) if t < 700.0 else math.inf
