"""Projection onto anchored PCFGs and EP/ADF against exact inference (issue 26, brief §3.3-3.5).

Exact inference in the product of two factors is inside-outside of their Kronecker product (K=4). With one factor
EP is exact after one sweep; with two it is an approximation whose fixed point is tested for what EP guarantees
(convergence, each augmented distribution agreeing with ``q`` on the anchored marginals, independence of the
factor order). The size of the approximation (log Z gap, total variation of span marginals) is measured by
``bench/constituency_ep_exact.py``, not asserted.
"""

from __future__ import annotations

import numpy as np
import pytest
from pcfg_helpers import random_factor, random_scores, sentence, tiny_grammar

from engine.constituency import ep as ep_module
from engine.constituency.anchored import AnchoredScores, build_items, full_mask
from engine.constituency.ep import EPSettings, assumed_density_filtering, expectation_propagation
from engine.constituency.factor import kronecker_product, unit_like
from engine.constituency.inside_outside import inside_outside, log_partition
from engine.constituency.projection import project

COARSE = ("mu_b", "mu_u", "mu_tag", "mu_bot", "mu_top")


def finite_difference(a: AnchoredScores, b: AnchoredScores) -> float:
    """The largest difference of two anchored grammars over their finite items; they must be dead alike."""
    x, y = a.concatenated(), b.concatenated()
    np.testing.assert_array_equal(np.isfinite(x), np.isfinite(y))
    live = np.isfinite(x)
    return float(np.abs(x[live] - y[live]).max())


def two_factors(seed: int, n: int = 6):
    rng = np.random.default_rng(seed)
    grammar = tiny_grammar(rng)
    items = build_items(grammar, full_mask(grammar, n))
    return items, random_factor(grammar, n, 2, rng), random_factor(grammar, n, 2, rng)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_projection_is_normalised_and_reproduces_the_marginals(seed: int) -> None:
    rng = np.random.default_rng(seed)
    _, items, f = sentence(rng, 6, 2, pruned=bool(seed))
    marginals = inside_outside(items, f, random_scores(items, rng))
    q = project(items, marginals, floor=None)
    again = inside_outside(items, unit_like(f), q)
    assert again.log_z == pytest.approx(0.0, abs=1e-12)
    for name in COARSE:
        np.testing.assert_allclose(getattr(again, name), getattr(marginals, name), rtol=0, atol=1e-12, err_msg=name)
    per_parent = np.zeros_like(marginals.mu_bot)
    np.add.at(per_parent, (items.bin_i, items.bin_j, items.bin_a), np.exp(q.binary))
    live = marginals.mu_bot > 0
    live[np.arange(6), np.arange(1, 7)] = False
    np.testing.assert_allclose(per_parent[live], 1.0, atol=1e-12)


def test_projection_floor_drops_parents_except_kept_ones() -> None:
    rng = np.random.default_rng(7)
    _, items, f = sentence(rng, 6, 2)
    marginals = inside_outside(items, f, random_scores(items, rng, scale=4.0))
    parent = marginals.mu_bot[items.bin_i, items.bin_j, items.bin_a]
    low = parent < np.exp(-15.0)
    assert low.any() and not low.all()
    q = project(items, marginals)
    assert np.isneginf(q.binary[low]).all() and np.isfinite(q.binary[~low & (marginals.mu_b > 0)]).all()
    keep = np.zeros_like(marginals.mu_bot, dtype=bool)
    keep[items.bin_i[low][0], items.bin_j[low][0], items.bin_a[low][0]] = True
    kept = project(items, marginals, keep=keep)
    assert np.isfinite(kept.binary[np.flatnonzero(low)[0]])
    assert log_partition(items, unit_like(f), q) == pytest.approx(0.0, abs=1e-5)


def test_division_keeps_dead_items_dead() -> None:
    a = AnchoredScores(np.array([1.0, -np.inf, 2.0, -np.inf]), np.zeros(0), np.zeros(0))
    b = AnchoredScores(np.array([0.5, 0.5, -np.inf, -np.inf]), np.zeros(0), np.zeros(0))
    np.testing.assert_array_equal((a - b).binary, [0.5, -np.inf, -np.inf, -np.inf])


def test_ep_with_one_factor_is_exact_after_one_sweep() -> None:
    items, f, _ = two_factors(1)
    exact = inside_outside(items, f, AnchoredScores.zeros(items))
    adf = assumed_density_filtering(items, [f], EPSettings(floor=None))
    assert adf.sweeps == 1 and adf.log_z == pytest.approx(exact.log_z, abs=1e-12)
    q = inside_outside(items, unit_like(f), adf.q)
    for name in COARSE:
        np.testing.assert_allclose(getattr(q, name), getattr(exact, name), rtol=0, atol=1e-12, err_msg=name)
    ep = expectation_propagation(items, [f], EPSettings(floor=None))
    assert ep.converged and ep.sweeps == 2 and ep.change < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ep_with_two_factors_reaches_a_fixed_point(seed: int) -> None:
    """At convergence every augmented distribution q^m has q's anchored marginals (to 1e-8, brief asks 1e-4),
    log Z(q) = 0, log Z_EP = sum of the log Z_m, and the fixed point does not depend on the factor order."""
    items, f1, f2 = two_factors(seed)
    settings = EPSettings(max_sweeps=50, tolerance=1e-9, floor=None)
    result = expectation_propagation(items, [f1, f2], settings)
    assert result.converged and result.sweeps < 50 and not result.failures
    q = inside_outside(items, unit_like(f1), result.q)
    for marginals in result.marginals:
        for name in COARSE:
            np.testing.assert_allclose(getattr(marginals, name), getattr(q, name), rtol=0, atol=1e-8, err_msg=name)
    assert result.log_z_q == pytest.approx(0.0, abs=1e-12)
    assert result.log_z == pytest.approx(sum(m.log_z for m in result.marginals), abs=1e-12)
    swapped = expectation_propagation(items, [f2, f1], settings)
    assert finite_difference(swapped.q, result.q) < 1e-7
    assert swapped.log_z == pytest.approx(result.log_z, abs=1e-8)
    adf, adf_swapped = (assumed_density_filtering(items, fs, settings) for fs in ([f1, f2], [f2, f1]))
    assert finite_difference(adf.q, adf_swapped.q) > 1e-3  # ADF depends on the order


def test_damped_ep_reaches_the_undamped_fixed_point() -> None:
    items, f1, f2 = two_factors(0)
    plain = expectation_propagation(items, [f1, f2], EPSettings(max_sweeps=50, tolerance=1e-9, floor=None))
    damped = expectation_propagation(items, [f1, f2],
                                     EPSettings(max_sweeps=200, tolerance=1e-9, step=0.5, floor=None))
    assert damped.converged and damped.sweeps > plain.sweeps
    assert finite_difference(damped.q, plain.q) < 1e-6
    assert damped.log_z == pytest.approx(plain.log_z, abs=1e-8)


def test_ep_differs_from_the_exact_product_but_keeps_its_totals() -> None:
    """EP's answer differs from the exact product (it is an approximation) but the K=4 reference and EP share
    their items: the gap is finite and the span marginals are probability distributions."""
    items, f1, f2 = two_factors(3)
    exact = inside_outside(items, kronecker_product(f1, f2), AnchoredScores.zeros(items))
    result = expectation_propagation(items, [f1, f2], EPSettings(max_sweeps=50, tolerance=1e-9, floor=None))
    q = inside_outside(items, unit_like(f1), result.q)
    gap = abs(result.log_z - exact.log_z)
    assert 1e-6 < gap and np.isfinite(gap)
    assert np.abs(q.mu_bot - exact.mu_bot).max() > 1e-6
    assert q.mu_bot.sum() == pytest.approx(exact.mu_bot.sum(), abs=1e-10)  # both 2n - 1 bot spans


def test_failures_are_counted_and_fall_back_to_adf(monkeypatch: pytest.MonkeyPatch) -> None:
    items, f1, f2 = two_factors(0)
    calls = {"n": 0}
    real = ep_module.inside_outside

    def failing_on_the_third_pass(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise FloatingPointError("simulated")
        return real(*args, **kwargs)

    adf = assumed_density_filtering(items, [f1, f2], EPSettings(floor=None))
    monkeypatch.setattr(ep_module, "inside_outside", failing_on_the_third_pass)
    result = expectation_propagation(items, [f1, f2], EPSettings(floor=None))
    assert result.failures == 1 and result.fell_back and not result.converged and result.sweeps == 2
    assert finite_difference(result.q, adf.q) == 0.0
    assert result.log_z == adf.log_z


def test_a_factor_without_live_tree_raises() -> None:
    items, f1, f2 = two_factors(0)
    dead = type(f2)(f2.log_w, f2.log_u, np.full_like(f2.log_e, -np.inf))
    with pytest.raises(FloatingPointError):
        expectation_propagation(items, [f1, dead])


def test_settings_bounds() -> None:
    for bad in ({"max_sweeps": 0}, {"tolerance": -1.0}, {"step": 0.0}, {"step": 1.5}):
        with pytest.raises(ValueError):
            EPSettings(**bad)


def test_ep_with_the_default_floor_loses_at_most_the_dropped_parents_mass() -> None:
    """With Epic's floor (-15) a projection drops bot parents of marginal < e^-15, so q is normalised up to the
    mass of the dropped parents: at most (cells x labels) e^-15, here 21 x 5 x 3.1e-7 = 3.2e-5
    (both bounds up to rounding: the compiled pass gives log Z(q) = 4e-16 here)."""
    items, f1, f2 = two_factors(4)
    sharp = type(f1)(4 * f1.log_w, 4 * f1.log_u, 4 * f1.log_e)  # peaked weights, so some parents fall below
    result = expectation_propagation(items, [sharp, f2])
    unfloored = expectation_propagation(items, [sharp, f2], EPSettings(floor=None))
    assert not result.failures
    assert np.isneginf(result.q.binary).sum() > np.isneginf(unfloored.q.binary).sum()
    assert 1e-12 >= result.log_z_q > np.log1p(-21 * 5 * np.exp(-15.0)) - 1e-12
