"""Conformal head and label sets (engine.decode.conformal): scores, sets and thresholds against brute force, the
stored grid answers any level conservatively, and coverage holds on data a model samples from itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decode.calibration import calibrated, calibrated_marginals
from engine.decode.conformal import (
    ALPHA_MIN,
    LEGACY_SCORE,
    alpha_grid,
    aps_scores,
    check_alpha,
    conformal_threshold,
    fit_thresholds,
    head_columns,
    head_sets,
    prediction_sets,
    stored_conformal,
    threshold_for,
)
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.results import ParsedSentence


def _brute_score(p: np.ndarray, y: int) -> float:
    """Probability of the candidates ranked before y: more probable, or as probable with a smaller index."""
    return float(sum(p[k] for k in range(len(p)) if p[k] > p[y] or (p[k] == p[y] and k < y)))


def _brute_threshold(scores: list[float], alpha: float) -> float:
    """The smallest score q with #{s_i <= q} >= (1 - alpha)(n + 1); +inf when no score is large enough."""
    n = len(scores)
    ok = [q for q in scores if sum(s <= q for s in scores) >= (1 - alpha) * (n + 1)]
    return min(ok) if ok else math.inf


# probabilities on a coarse grid so that ties are common
_rows = st.integers(2, 6).flatmap(lambda k: st.lists(st.lists(st.integers(0, 4), min_size=k, max_size=k).filter(
    lambda r: sum(r) > 0), min_size=1, max_size=6))


@settings(max_examples=80, deadline=None)
@given(_rows, st.floats(0, 1))
def test_scores_and_sets_equal_brute_force(rows: list[list[int]], q: float) -> None:
    probs = np.array(rows, dtype=np.float64)
    probs /= probs.sum(axis=1, keepdims=True)
    k = probs.shape[1]
    for y in range(k):
        got = aps_scores(probs, np.full(len(probs), y))
        np.testing.assert_allclose(got, [_brute_score(p, y) for p in probs], atol=1e-12)
    for p, s in zip(probs, prediction_sets(probs, q), strict=True):
        # the same candidates as {y : s(p, y) <= q} (up to rounding of the cumulative sums), most probable first
        brute = {y for y in range(k) if _brute_score(p, y) <= q - 1e-9}
        assert brute <= set(s.tolist()) <= {y for y in range(k) if _brute_score(p, y) <= q + 1e-9}
        assert len(s) >= 1 and s[0] == int(np.argmax(p))  # never empty: the most probable candidate scores 0
        assert list(p[s]) == sorted(p[s], reverse=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 8).map(lambda i: i / 8), min_size=1, max_size=30), st.floats(0.001, 0.999))
def test_threshold_equals_a_direct_computation(scores: list[float], alpha: float) -> None:
    assert conformal_threshold(np.array(scores), alpha) == _brute_threshold(scores, alpha)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=300), st.floats(ALPHA_MIN, 0.999))
def test_any_level_is_answered_conservatively(scores: list[float], alpha: float) -> None:
    """The stored grid's answer for alpha is the exact threshold of the largest grid level a <= alpha, and at
    least alpha's own threshold (so the set is a superset of alpha's, with coverage >= 1 - a >= 1 - alpha)."""
    stored = fit_thresholds(np.array(scores))
    got = threshold_for(stored, alpha)
    grid = alpha_grid()
    a = float(grid[grid <= alpha + 1e-12].max())
    assert a <= alpha + 1e-12
    assert got == _brute_threshold(scores, a) >= _brute_threshold(scores, alpha)
    for g in grid:  # exact on the grid
        assert threshold_for(stored, float(g)) == _brute_threshold(scores, float(g))


def test_sets_grow_as_alpha_shrinks_and_hold_the_top_head() -> None:
    rng = np.random.default_rng(3)
    scores = rng.uniform(0, 1, 500) ** 3
    stored = fit_thresholds(scores)
    n = 7
    marginals = _tree_marginals(rng, 1, n)[0]
    heads = np.concatenate([[-1], marginals[:, 1:].argmax(axis=0)])
    parsed = ParsedSentence(heads, marginals[heads[1:], np.arange(1, n + 1)], marginals, None, ["dep"] * n,
                            np.ones(n))
    previous: list[set[int]] | None = None
    for alpha in sorted(alpha_grid(), reverse=True):  # 0.5 down to 0.01
        sets = head_sets(parsed, threshold_for(stored, float(alpha)))
        current = [set(s) for s in sets]
        for m, s in enumerate(sets, start=1):
            assert m not in s and s[0] == heads[m]  # the most probable head first (here the chosen one)
        if previous is not None:
            assert all(p <= c for p, c in zip(previous, current, strict=True))
        previous = current


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, 0.005, True, "0.1", None, float("nan")])
def test_bad_levels_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="alpha"):
        check_alpha(bad)


def test_a_model_without_thresholds_names_calibrate() -> None:
    with pytest.raises(ValueError, match="calibrate"):
        stored_conformal({"inference": {"head_power": 0.7}})


def test_scored_columns_are_the_power_map_s_before_the_isotonic_stage() -> None:
    """``head_columns`` undoes the isotonic stage of a calibrated parse (``remap_chosen``, from the recorded
    ``power_head_probs``): the power-mapped columns to rounding, for knots that push chosen heads up and down;
    the legacy score, and a parse without the map, read the reported columns; a stored score the engine does not
    know is refused, naming ``calibrate``."""
    rng = np.random.default_rng(5)
    knots = (np.array([0.0, 0.3, 0.6, 1.0]), np.array([0.0, 0.45, 0.45, 0.97]))  # a flat step, as fitted maps have
    for n in (1, 4, 9):
        marginals = _tree_marginals(rng, 1, n)[0]
        heads = np.concatenate([[-1], marginals[:, 1:].argmax(axis=0)])
        parsed = ParsedSentence(heads, marginals[heads[1:], np.arange(1, n + 1)], marginals, None, ["dep"] * n,
                                np.ones(n))
        out = calibrated(parsed, 0.8, head_knots=knots)
        np.testing.assert_allclose(head_columns(out), calibrated_marginals(marginals, 0.8)[:, 1:].T, atol=1e-13)
        np.testing.assert_array_equal(head_columns(out, LEGACY_SCORE), out.marginals[:, 1:].T)
        np.testing.assert_array_equal(head_columns(parsed), marginals[:, 1:].T)
    with pytest.raises(ValueError, match="calibrate"):
        stored_conformal({"inference": {"conformal": {"heads": [], "score": "aps-randomised"}}})
    assert stored_conformal({"inference": {"conformal": {"heads": []}}}) == {"heads": []}  # stored before scores


def _tree_marginals(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
    """Exact head marginals of ``count`` random first-order models over n-word sentences (non-projective)."""
    scores = rng.normal(0, 2.0, size=(count, n + 1, n + 1))
    scores[:, :, 0] = -np.inf
    scores[:, np.arange(n + 1), np.arange(n + 1)] = -np.inf
    return exact_marginals(scores, TreeConstraint())[1]


def _trial(rng: np.random.Generator, alpha: float, calibration: int, tests: int, n: int = 6,
           shift: float = 0.0) -> float:
    """One split-conformal trial on a model sampling its own heads: each data point is one random word of a
    fresh random sentence, its head drawn from the model's exact marginal (the head of that word in a tree the
    model samples), so the points are i.i.d. Returns the exact coverage given the calibration set: the mean
    over ``tests`` fresh words of their set's probability, P(head in set | word) (``shift`` raises alpha)."""
    marg = _tree_marginals(rng, calibration + tests, n)
    words = rng.integers(1, n + 1, size=calibration + tests)
    columns = marg[np.arange(calibration + tests), :, words]  # each point's head distribution over 0..n
    truth = np.array([rng.choice(n + 1, p=c / c.sum()) for c in columns[:calibration]])
    q = conformal_threshold(aps_scores(columns[:calibration], truth), alpha + shift)
    sets = prediction_sets(columns[calibration:], q)
    return float(np.mean([c[s].sum() for c, s in zip(columns[calibration:], sets, strict=True)]))


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.2])
def test_coverage_on_data_the_model_samples_itself(alpha: float) -> None:
    """Split conformal: E[coverage] >= 1 - alpha over the calibration draws (Romano et al. 2020, Thm 1). 400
    trials of 50 calibration words each (small, so the (n + 1) correction matters), coverage per trial exact
    given the calibration set (200 fresh words). One-sided test at false-alarm rate 0.001 (z = 3.09, normal
    approximation of the mean of 400 i.i.d. trial coverages): the mean is not significantly below 1 - alpha.
    The same test rejects a threshold fitted at alpha + 0.04 (its power: the check can fail)."""
    rng = np.random.default_rng(20261125)
    z = 3.09
    for shift, should_hold in ((0.0, True), (0.04, False)):
        covered = np.array([_trial(rng, alpha, 50, 200, shift=shift) for _ in range(400)])
        low = covered.mean() + z * covered.std(ddof=1) / np.sqrt(len(covered))
        assert (low >= 1 - alpha) == should_hold, (shift, covered.mean(), low)
