"""Expectation propagation and assumed density filtering over anchored PCFGs (Hall & Klein 2012, §5.2-5.4).

The product ``P(T[X] | w) ~ prod_m f_m`` is approximated by an anchored PCFG ``q = sum_m f~_m`` (log scores, brief
§1.3), one approximate factor ``f~_m`` per factor. Starting from ``f~_m = 0`` (``q`` uniform over live trees),
each sweep visits the factors in a fixed order and for factor ``m``:

1. removes its approximation, the cavity ``q\\m = q - f~_m`` (``anchored`` module: dead stays dead);
2. runs inside-outside of the augmented ``f_m * q\\m`` (paper eq. 4): ``log Z_m``, marginals, expected counts;
3. projects onto an anchored PCFG ``q_new`` (``projection``);
4. sets ``f~_m = q_new - q\\m``, damped in log space if ``step < 1``: ``f~_m <- (1 - step) f~_m + step (q_new -
   q\\m)``, and ``q = q\\m + f~_m``.

**ADF** is one sweep (``max_sweeps=1``). **EP** repeats sweeps until no live item of ``q`` moves: every item finite
in both sweeps with ``|a - b| / max(|a|, |b|, 1e-4) <= tolerance`` and none changing between finite and ``-inf``
(Epic's rule without its bug that called a newly infinite score converged, brief §5); the first sweep never
counts as converged, and ``max_sweeps`` caps the loop (the paper stops at 4, §5.5).

**Failures.** A factor pass whose partition is 0 or not finite is counted; in the first sweep that factor keeps
its approximation, in a later one EP stops and falls back to the state after the first sweep (the ADF ``q``),
instead of Epic's silent skip of the sentence.

**log Z_EP** (brief §1.4) ``= sum_m log Z(f_m q\\m) - (M - 1) log Z(q)``, with the last sweep's ``log Z_m``;
``log Z(q)`` (0 for an undamped ``q``, which is locally normalised) is computed with a one-substate pass. At a
fixed point ``d log Z_EP / d theta_m`` is the expected features of ``f_m`` under ``q^m``: the returned counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.constituency.anchored import AnchoredItems, AnchoredScores, BoolArray
from engine.constituency.factor import Factor, FactorMarginals, unit_like
from engine.constituency.inside_outside import inside_outside, log_partition
from engine.constituency.projection import PROJECTION_FLOOR, project

__all__ = ["EPResult", "EPSettings", "assumed_density_filtering", "expectation_propagation", "relative_change"]


@dataclass(frozen=True)
class EPSettings:
    """EP's settings and their bounds, declared once here.

    ``max_sweeps`` (>= 1; the paper's 4, §5.5; ADF is 1), ``tolerance`` (>= 0: Epic's relative change, 1e-4),
    ``step`` (in (0, 1]: 1 is undamped EP, Epic and the paper), ``floor`` (the projection's drop threshold on
    ``log mu_bot``, ``None`` to keep every parent with mass)."""

    max_sweeps: int = 4
    tolerance: float = 1e-4
    step: float = 1.0
    floor: float | None = PROJECTION_FLOOR

    def __post_init__(self) -> None:
        if self.max_sweeps < 1:
            raise ValueError(f"max_sweeps must be >= 1, got {self.max_sweeps}")
        if not self.tolerance >= 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")
        if not 0 < self.step <= 1:
            raise ValueError(f"step must be in (0, 1], got {self.step}")


@dataclass
class EPResult:
    """``q`` and the approximate factors, each factor's last augmented pass (``log Z_m``, counts, marginals),
    ``log_z`` = log Z_EP, ``log_z_q`` = log Z(q), sweeps run, whether the items stopped moving, failed factor
    passes, whether EP fell back to the ADF state, and the largest relative change of the last sweep."""

    q: AnchoredScores
    approximations: list[AnchoredScores]
    marginals: list[FactorMarginals]
    log_z: float = 0.0
    log_z_q: float = 0.0
    sweeps: int = 0
    converged: bool = False
    failures: int = 0
    fell_back: bool = False
    change: float = field(default=np.inf)


def relative_change(before: AnchoredScores, after: AnchoredScores) -> float:
    """The largest ``|a - b| / max(|a|, |b|, 1e-4)`` over items finite in both; ``inf`` if an item changed
    between finite and ``-inf``."""
    a, b = before.concatenated(), after.concatenated()
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    if (finite_a != finite_b).any():
        return float("inf")
    a, b = a[finite_a], b[finite_a]
    if not a.size:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-4)))


def _damped(old: AnchoredScores, new: AnchoredScores, step: float) -> AnchoredScores:
    """``(1 - step) old + step new`` in log space, ``-inf`` where either is ``-inf``."""
    parts = []
    for x, y in zip(old.parts(), new.parts(), strict=True):
        live = np.isfinite(x) & np.isfinite(y)
        parts.append(np.where(live, (1 - step) * np.where(live, x, 0) + step * np.where(live, y, 0), -np.inf))
    return AnchoredScores(*parts)


def _update(items: AnchoredItems, factor: Factor, q: AnchoredScores, approx: AnchoredScores,
            settings: EPSettings, keep: BoolArray | None) -> tuple[FactorMarginals, AnchoredScores, AnchoredScores]:
    """One EP step for one factor: ``(its marginals, new approximation, new q)``; raises ``FloatingPointError``
    when the augmented distribution has no finite partition."""
    cavity = q - approx
    marginals = inside_outside(items, factor, cavity)
    if not (np.isfinite(marginals.mu_b).all() and np.isfinite(marginals.mu_u).all()):
        raise FloatingPointError("the augmented distribution's marginals are not finite")
    q_new = project(items, marginals, settings.floor, keep)
    if settings.step == 1.0:
        return marginals, q_new - cavity, q_new
    approx = _damped(approx, q_new - cavity, settings.step)
    return marginals, approx, cavity + approx


def expectation_propagation(items: AnchoredItems, factors: list[Factor], settings: EPSettings | None = None,
                            keep: BoolArray | None = None) -> EPResult:
    """EP over the product of ``factors`` restricted to ``items`` (brief §1.3). ``keep`` marks bot parents exempt
    from the projection floor. Raises ``FloatingPointError`` if a factor has no live tree in the first sweep."""
    settings = settings or EPSettings()
    zero = AnchoredScores.zeros(items)
    result = EPResult(zero, [zero] * len(factors), [])
    passes: list[FactorMarginals | None] = [None] * len(factors)
    adf: tuple[AnchoredScores, list[AnchoredScores], list[FactorMarginals | None]] | None = None
    for sweep in range(1, settings.max_sweeps + 1):
        before = result.q
        for m, factor in enumerate(factors):
            try:
                passes[m], result.approximations[m], result.q = _update(
                    items, factor, result.q, result.approximations[m], settings, keep)
            except FloatingPointError:
                result.failures += 1
                if adf is None:
                    continue
                result.q, result.approximations, passes = adf[0], list(adf[1]), list(adf[2])
                result.fell_back = True
                break
        result.sweeps = sweep
        if result.fell_back:
            break
        if sweep == 1:
            adf = (result.q, list(result.approximations), list(passes))
            continue
        result.change = relative_change(before, result.q)
        if result.change <= settings.tolerance:
            result.converged = True
            break
    missing = [m for m, p in enumerate(passes) if p is None]
    if missing:
        raise FloatingPointError(f"factors {missing} have no live tree under the approximation")
    result.marginals = [p for p in passes if p is not None]
    result.log_z_q = log_partition(items, unit_like(factors[0]), result.q)
    result.log_z = sum(p.log_z for p in result.marginals) - (len(factors) - 1) * result.log_z_q
    return result


def assumed_density_filtering(items: AnchoredItems, factors: list[Factor], settings: EPSettings | None = None,
                              keep: BoolArray | None = None) -> EPResult:
    """ADF: EP's first sweep alone (paper §5.2)."""
    settings = settings or EPSettings()
    one = EPSettings(1, settings.tolerance, settings.step, settings.floor)
    return expectation_propagation(items, factors, one, keep)
