"""A monotone map of the chosen head's probability, fitted by isotonic regression on dev after the power map
(``engine.decode.calibration``): the second stage of the head calibration.

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
