"""Calibrated head probabilities: one power map on every word's head distribution, fitted on dev data.

BP's beliefs, and the marginals of a parse over tag-averaged potentials, are overconfident (EWT dev, the
shipped pipeline with ``--tag-average potentials``: expected calibration error of the chosen head's
probability 0.054). A word's head distribution ``p(h | m)`` is mapped to

    p_a(h | m) = p(h | m)^a / sum_h' p(h' | m)^a,

one exponent ``a`` per model (``a < 1`` softens, ``a = 1`` is the identity). Each word's head probabilities
still sum to 1, their order is unchanged, and the tree is decoded before the map, so the MBR tree and the
attachment scores do not move. ``a`` is fitted on a development set by the Brier score of the chosen heads'
probabilities against whether they are right (a proper scoring rule; the log loss is dominated by the few
confident errors and softens too far), and stored in the model's manifest as ``inference.head_power``
(``python -m engine calibrate``); every parse of the CLI and the service applies it unless told
``--calibration none``. Platt-style temperature scaling of a classifier's logits (Guo et al. 2017) is the
same map on log-probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engine.results import ParsedSentence

DEFAULT_POWER = 1.0
POWER_BOUNDS = (0.05, 20.0)


def check_power(value: object) -> float:
    """``value`` as a head power if it is a number within ``POWER_BOUNDS``, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            POWER_BOUNDS[0] <= float(value) <= POWER_BOUNDS[1]:
        raise ValueError(f"head_power must be a number from {POWER_BOUNDS[0]} to {POWER_BOUNDS[1]}, got {value!r}")
    return float(value)


def calibrated_marginals(marginals: np.ndarray, power: float) -> np.ndarray:
    """(n+1, n+1) arc marginals with column ``m`` (a word's head distribution) mapped to ``p^power``
    renormalised; computed in log space, zeros stay zero (column 0, the root's, is left as it is)."""
    if power == 1.0:
        return marginals
    out = np.array(marginals, dtype=np.float64, copy=True)
    cols = out[:, 1:]
    with np.errstate(divide="ignore"):
        logs = np.where(cols > 0, np.log(np.where(cols > 0, cols, 1.0)) * power, -np.inf)
    top = logs.max(axis=0, initial=-np.inf)
    safe = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(logs - safe)
    total = weights.sum(axis=0)
    out[:, 1:] = np.where(total > 0, weights / np.where(total > 0, total, 1.0), cols)
    return out


def calibrated(parsed: ParsedSentence, power: float) -> ParsedSentence:
    """``parsed`` with calibrated marginals and head probabilities (its tree and labels as they are)."""
    if power == 1.0 or parsed.marginals is None:
        return parsed
    marginals = calibrated_marginals(parsed.marginals, power)
    m = np.arange(1, len(parsed.heads))
    diagnostics = {**(parsed.diagnostics or {}), "head_power": power}
    return replace(parsed, marginals=marginals, head_probs=marginals[parsed.heads[1:], m], diagnostics=diagnostics)


def chosen_head_brier(parses: Sequence[ParsedSentence], gold_heads: Sequence[np.ndarray], power: float) -> float:
    """Mean squared difference between each word's calibrated chosen-head probability and 1 if that head is
    right, else 0."""
    total, count = 0.0, 0
    for p, gold in zip(parses, gold_heads, strict=True):
        probs = calibrated(p, power).head_probs
        right = np.asarray(p.heads[1:]) == np.asarray(gold[1:])
        total += float(((probs - right) ** 2).sum())
        count += len(right)
    return total / max(count, 1)


def fit_power(parses: Sequence[ParsedSentence], gold_heads: Sequence[np.ndarray]) -> float:
    """The head power minimising ``chosen_head_brier`` on these parses: a grid over ``POWER_BOUNDS`` in log
    space, then golden-section search around its best point (the loss is smooth and, in practice, unimodal)."""
    lo, hi = np.log(POWER_BOUNDS[0]), np.log(POWER_BOUNDS[1])
    grid = np.linspace(lo, hi, 25)
    losses = [chosen_head_brier(parses, gold_heads, float(np.exp(x))) for x in grid]
    best = int(np.argmin(losses))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = (chosen_head_brier(parses, gold_heads, float(np.exp(x))) for x in (c, d))
    for _ in range(30):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = chosen_head_brier(parses, gold_heads, float(np.exp(c)))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = chosen_head_brier(parses, gold_heads, float(np.exp(d)))
    return float(round(np.exp((a + b) / 2.0), 4))
