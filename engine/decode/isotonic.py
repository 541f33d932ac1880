"""A monotone map of the chosen head's probability, fitted on dev after the power map
(``engine.decode.calibration``): the second stage of the head calibration. ``calibrate`` fits two candidates,
isotonic regression (below) and Platt scaling (``fit_platt_knots``), and keeps the one with the lower expected
calibration error on held-out halves of dev (``engine.evaluation.calibration_fit.choose_stage``); either is
stored in the same form, knots of a non-decreasing piecewise-linear map (``inference.head_isotonic``, the key
kept from when the stage was always isotonic), and applied the same way.

The power map ``p^a`` has one degree of freedom; on the shipped pipeline's dev parses it leaves the middle
underconfident and the top overconfident at once (a reliability curve no single power straightens). Isotonic
regression (Zadrozny & Elkan 2002; the pool-adjacent-violators algorithm, ``scipy.optimize.
isotonic_regression``) fits the non-decreasing function of the calibrated probability closest in squared error
(the Brier score) to "head right" on dev. It is stored as knots (each block's first and last probability with
the block's accuracy; linear between blocks) in the manifest (``inference.head_isotonic``: ``{"x": [...],
"y": [...]}``) and applied to each word's chosen (MBR) head only: the chosen head's probability q becomes
``g(q)`` and the word's other heads are scaled by ``(1 - g(q)) / (1 - q)``, so the word's head distribution
still sums to 1 and the order of the other heads is kept; the tree is decoded before and does not move. A word
whose chosen head has all the mass (q = 1, no alternative) keeps it.

Alternatives measured on EWT dev out of sample (``bench/head_calibration_context.py``, docs/results/
confidence.md) did no better: centred isotonic regression (Oron & Flournoy 2017), one map per arc-length
bucket or a Platt stage on arc length, sentence length and entropy before this one, and an isotonic map of
every arc's probability renormalised per word (clearly worse: the renormalisation undoes the chosen head's map).
"""

from __future__ import annotations

from typing import Any

import numpy as np

KEY = "head_isotonic"  # the manifest's inference key


def fit_knots(probs: np.ndarray, right: np.ndarray) -> dict[str, list[float]]:
    """Knots of the isotonic regression of ``right`` on ``probs`` (module docstring), rounded to 5 decimals."""
    # imported here: scipy.optimize takes 0.15 s to import, which every command applying a calibration would
    # pay for the fit only `calibrate` makes
    from scipy.optimize import isotonic_regression

    q = np.asarray(probs, dtype=np.float64)
    order = np.argsort(q, kind="stable")
    xs, fit = q[order], isotonic_regression(np.asarray(right, dtype=np.float64)[order]).x
    starts = np.flatnonzero(np.r_[True, np.diff(fit) != 0])
    ends = np.r_[starts[1:] - 1, len(fit) - 1]
    x = np.ravel(np.column_stack([xs[starts], xs[ends]]))
    y = np.ravel(np.column_stack([fit[starts], fit[ends]]))
    x, keep = np.unique(np.round(x, 5), return_index=True)
    return {"x": x.tolist(), "y": np.round(y[keep], 5).tolist()}


PLATT_KNOTS = 257  # points of a Platt curve stored as knots, evenly spaced in log-odds from -12 to 12


def fit_platt_knots(probs: np.ndarray, right: np.ndarray) -> dict[str, list[float]]:
    """Platt scaling of the chosen head's probability (Platt 1999: ``sigmoid(a * logit(q) + b)``, ``a`` and ``b``
    fitted by the Brier score against ``right``) stored in the knots' form: the curve at ``PLATT_KNOTS`` points
    evenly spaced in log-odds, with (0, 0) and (1, 1), rounded to 6 decimals. A fit that would not increase
    (``a <= 0``) is no calibration map: the identity is returned."""
    from scipy.optimize import minimize  # as in fit_knots: only `calibrate` pays for the import
    from scipy.special import expit  # the logistic function without overflow

    q = np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    z, y = np.log(q) - np.log1p(-q), np.asarray(right, dtype=np.float64)

    def loss(ab: np.ndarray) -> float:
        return float(((expit(ab[0] * z + ab[1]) - y) ** 2).mean())

    a, b = minimize(loss, np.array([1.0, 0.0]), method="Nelder-Mead").x if len(y) else (1.0, 0.0)
    if not a > 0:
        return {"x": [0.0, 1.0], "y": [0.0, 1.0]}
    t = np.linspace(-12.0, 12.0, PLATT_KNOTS)
    xs = np.asarray(np.round(np.r_[0.0, expit(t), 1.0], 6))
    ys = np.asarray(np.round(np.r_[0.0, expit(a * t + b), 1.0], 6))
    unique, keep = np.unique(xs, return_index=True)
    return {"x": [float(v) for v in unique], "y": [float(v) for v in np.maximum.accumulate(ys[keep])]}


def check_knots(value: object) -> tuple[np.ndarray, np.ndarray] | None:
    """Stored knots as (x, y) arrays if valid (x increasing in [0, 1], y non-decreasing in [0, 1], same length
    >= 1), None if absent, else ValueError."""
    if value is None:
        return None
    ok = isinstance(value, dict) and isinstance(value.get("x"), list) and isinstance(value.get("y"), list)
    x = np.asarray(value["x"] if ok else [], dtype=np.float64)  # type: ignore[index]
    y = np.asarray(value["y"] if ok else [], dtype=np.float64)  # type: ignore[index]
    if not ok or len(x) == 0 or len(x) != len(y) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)) \
            or np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0) or x.min() < 0 or x.max() > 1 \
            or y.min() < 0 or y.max() > 1:
        raise ValueError(f"{KEY} must be {{'x': [...], 'y': [...]}} with x increasing and y non-decreasing in "
                         "[0, 1], of the same length")
    return x, y


def remap_chosen(marginals: np.ndarray, heads: np.ndarray, knots: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(n+1, n+1) marginals with each word's chosen head ``heads[m]`` mapped through the knots and the word's
    other heads rescaled to keep the column's sum (module docstring)."""
    out = np.array(marginals, dtype=np.float64, copy=True)
    m = np.arange(1, len(heads))
    q = out[heads[1:], m]
    g = np.interp(q, *knots)
    rest = 1.0 - q
    movable = rest > 1e-12
    g = np.where(movable, g, q)
    scale = np.where(movable, (1.0 - g) / np.where(movable, rest, 1.0), 1.0)
    out[:, 1:] *= scale[None, :]
    out[heads[1:], m] = g
    return out


def knots_of(inference: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The checked knots of a manifest's ``inference`` block, None when it has none."""
    return check_knots((inference or {}).get(KEY))
