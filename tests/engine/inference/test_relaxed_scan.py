"""The relaxed controller's compiled passes (``engine.inference.relaxed_scan``) against the numpy path they
replace (``relaxed_gain.pair_feature_expectations``, ``gain_exceeds``, ``eta_bound``) on random families:
the same factors selected, and eta equal to rounding."""

from __future__ import annotations

import numpy as np
import pytest

from engine.graph.family import all_arcs
from engine.graph.pairwise import PairFamily, grand_arcs, sib_arcs
from engine.inference.relaxed_gain import eq3_exceeds, eta_bound, gain_exceeds, pair_feature_expectations
from engine.inference.relaxed_scan import left_out_eta, screen


def _family(rng: np.random.Generator, n: int, name: str, scale: float) -> PairFamily:
    valid = all_arcs(n)
    arcs = grand_arcs(n, valid) if name == "grand" else sib_arcs(n, valid)
    theta = rng.normal(scale=scale, size=arcs.shape[1])
    theta[rng.random(len(theta)) < 0.02] = 0.0
    return PairFamily(n, valid, arcs, theta, name)


def _beliefs(rng: np.random.Generator, size: int) -> np.ndarray:
    """Mostly small beliefs, as after a first-order solve, with exact zeros and ones among them."""
    b = rng.random(size) ** rng.choice([1, 4, 12], size=size)
    b[rng.random(size) < 0.05] = 0.0
    b[rng.random(size) < 0.05] = 1.0
    return b


def _stack(rng: np.random.Generator) -> PairFamily:
    """One family, or a stack of 2-4 sentences of one length (one of them maybe without factors)."""
    n = int(rng.integers(1, 9))
    name = str(rng.choice(["grand", "sib"]))
    scale = float(rng.choice([0.3, 1.0, 3.0]))
    parts = [_family(rng, n, name, scale) for _ in range(int(rng.integers(1, 5)))]
    return PairFamily.stack(parts)  # type: ignore[return-value]


def test_relaxed_scan_selects_what_the_numpy_path_selects() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
        fam = _stack(rng)
        beliefs = _beliefs(rng, fam.valid.size)
        active = rng.random(fam.size) < rng.choice([0.0, 0.1, 0.7])
        for eps in (1e-15, 1e-6, 1e-4, 1e-2, 0.3, 5.0):
            out = np.flatnonzero(~active)
            want = out[gain_exceeds(pair_feature_expectations(fam, beliefs, out), fam.theta[out], eps)]
            for mask in (active, None) if not active.any() else (active,):
                rest, mu = screen(fam, beliefs, mask, eps)
                np.testing.assert_array_equal(mu, pair_feature_expectations(fam, beliefs, rest))
                np.testing.assert_array_equal(eq3_exceeds(rest, mu, fam.theta[rest], eps), want)
            checked += len(want)
    assert checked > 1000


def test_relaxed_scan_screen_handles_extreme_weights() -> None:
    """Weights near and beyond exp's overflow, tiny weights and beliefs at 0 and 1: the same selection."""
    rng = np.random.default_rng(1)
    fam = _family(rng, 6, "sib", 1.0)
    theta = fam.theta.copy()
    theta[:8] = [800.0, -800.0, 700.0, 720.0, 1e-9, -1e-9, 0.0, 709.5]
    fam.theta = theta
    beliefs = _beliefs(rng, fam.valid.size)
    for eps in (1e-12, 1e-4, 0.5):
        rest, mu = screen(fam, beliefs, None, eps)
        want = gain_exceeds(pair_feature_expectations(fam, beliefs), fam.theta, eps)
        np.testing.assert_array_equal(eq3_exceeds(rest, mu, fam.theta[rest], eps), want)


def test_relaxed_scan_eta_equals_eta_bound_per_sentence() -> None:
    rng = np.random.default_rng(2)
    for _ in range(200):
        fam = _stack(rng)
        beliefs = _beliefs(rng, fam.valid.size)
        active = rng.random(fam.size) < rng.choice([0.0, 0.2, 0.9])
        bounds = fam.bounds if fam.bounds is not None else np.array([0, fam.size])
        which = None if rng.random() < 0.5 else rng.random(len(bounds) - 1) < 0.5
        got = np.full(len(bounds) - 1, 0.25)  # the pass adds to what is there
        left_out_eta(fam, beliefs, active, bounds, got, which)
        mu = pair_feature_expectations(fam, beliefs)
        for j in range(len(bounds) - 1):
            part = np.arange(bounds[j], bounds[j + 1])
            part = part[~active[part]]
            want = 0.25 + (eta_bound(mu[part], fam.theta[part]) if which is None or which[j] else 0.0)
            assert got[j] == pytest.approx(want, rel=1e-12, abs=1e-12)
