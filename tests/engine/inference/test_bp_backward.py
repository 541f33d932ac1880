"""Reverse mode through BP: tree Hessian-vector products against enumeration, factor adjoints and whole
unrolled BP against central finite differences, and the taped forward pass against run_bp."""

from __future__ import annotations

from collections.abc import Callable

import mpmath
import numpy as np
import pytest

from engine.graph.family import FactorFamily, all_arcs
from engine.graph.hard import Exactly1, Link
from engine.graph.pairwise import PairFamily, grand_arcs, hard_pairs, not2_arcs, sib_arcs, sigmoid_difference
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig, run_bp
from engine.inference.bp_backward import bp_backward, bp_forward
from engine.kernels.brute_force import brute_force
from engine.kernels.eisner import eisner_marginals
from engine.kernels.matrix_tree import matrix_tree_marginals
from engine.kernels.tree_hessian import eisner_hvp, matrix_tree_hvp

EPS = 1e-5


def _scores(n: int, rng: np.random.Generator, scale: float = 2.0) -> np.ndarray:
    s = rng.normal(scale=scale, size=(n + 1, n + 1))
    s[:, 0] = -np.inf
    np.fill_diagonal(s, -np.inf)
    return s


def _hvp(scores: np.ndarray, v: np.ndarray, projective: bool, single_root: bool) -> np.ndarray:
    if projective:
        return eisner_hvp(scores, v, single_root=single_root)
    return matrix_tree_hvp(scores, v, single_root=single_root)[1]


def _marginals(scores: np.ndarray, projective: bool, single_root: bool) -> np.ndarray:
    if projective:
        return eisner_marginals(scores, single_root=single_root)[1]
    return np.asarray(matrix_tree_marginals(scores, single_root=single_root)[1])


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


# -- Hessian-vector products of log Z -------------------------------------------------------------

@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("single_root", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_tree_hvp_equals_the_covariance_by_enumeration(n: int, projective: bool, single_root: bool) -> None:
    """H v = E[y (v.y)] - mu (mu.v) over every tree (brute force), with v also on forbidden arcs."""
    rng = np.random.default_rng(10 * n + 2 * projective + single_root)
    scores = _scores(n, rng, scale=1.0)
    v = rng.normal(size=(n + 1, n + 1))
    oracle = brute_force(scores, single_root=single_root, projective=projective)
    ys = np.zeros((len(oracle.trees), n + 1, n + 1))
    ys[np.arange(len(oracle.trees))[:, None], oracle.trees[:, 1:], np.arange(1, n + 1)] = 1.0
    p = np.exp(oracle.log_probs)
    vy = (ys * np.where(np.isfinite(scores), v, 0.0)).sum(axis=(1, 2))
    want = np.tensordot(p * vy, ys, axes=1) - oracle.marginals * (p @ vy)
    got = _hvp(scores, v, projective, single_root)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert n == 1 or np.abs(want).max() > 1e-2  # the check is not vacuous (one word: a single tree, H = 0)


@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("single_root", [False, True])
def test_tree_hvp_matches_finite_differences_of_the_marginals(projective: bool, single_root: bool) -> None:
    rng = np.random.default_rng(7)
    n = 6  # beyond brute force's comfort, to check the kernels on their own
    scores = _scores(n, rng)
    v = np.where(np.isfinite(scores), rng.normal(size=scores.shape), 0.0)
    up = _marginals(scores + EPS * v, projective, single_root)
    down = _marginals(scores - EPS * v, projective, single_root)
    fd = (up - down) / (2 * EPS)
    assert _rel_err(_hvp(scores, v, projective, single_root), fd) < 1e-7


@pytest.mark.parametrize("projective", [False, True])
def test_tree_hvp_on_long_sentences_with_large_scores(projective: bool) -> None:
    """60 words, scores of magnitude up to ~150: finite, symmetric (u.Hv = v.Hu), and every column of
    H v sums to 0 (each word has exactly one head whatever the scores)."""
    rng = np.random.default_rng(3)
    n = 60
    scores = _scores(n, rng, scale=50.0)
    u, v = rng.normal(size=(2, n + 1, n + 1))
    hv, hu = _hvp(scores, v, projective, True), _hvp(scores, u, projective, True)
    assert np.isfinite(hv).all()
    valid = np.isfinite(scores)
    assert float((u * valid * hv).sum()) == pytest.approx(float((v * valid * hu).sum()), abs=1e-9)
    np.testing.assert_allclose(hv[:, 1:].sum(axis=0), 0.0, atol=1e-9)


def test_matrix_tree_hvp_is_batched() -> None:
    rng = np.random.default_rng(0)
    scores = np.stack([_scores(5, rng) for _ in range(4)])
    v = rng.normal(size=scores.shape)
    mu, hv = matrix_tree_hvp(scores, v, single_root=True)
    for b in range(4):
        mu_b, hv_b = matrix_tree_hvp(scores[b], v[b], single_root=True)
        np.testing.assert_allclose(hv[b], hv_b, atol=1e-14)
        np.testing.assert_allclose(mu[b], matrix_tree_marginals(scores[b], single_root=True)[1], atol=1e-12)


# -- adjoints of single factor families -----------------------------------------------------------

def test_sigmoid_difference_keeps_relative_precision() -> None:
    def exact(x: float, t: float) -> float:
        with mpmath.workdps(800):  # the difference of two sigmoids near 1 needs ~ |x| / 2.3 digits
            return float(1 / (1 + mpmath.exp(-(mpmath.mpf(x) + t))) - 1 / (1 + mpmath.exp(-mpmath.mpf(x))))

    for x in (-800.0, -40.0, -3.0, 0.0, 0.5, 30.0, 45.0, 700.0):
        for t in (-50.0, -1.0, -1e-9, 0.0, 1e-9, 2.0, 60.0):
            want = exact(x, t)
            got = float(sigmoid_difference(np.array(x), np.array(t)))
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (x, t)
    assert float(sigmoid_difference(np.array(2.0), np.array(-np.inf))) == pytest.approx(-1 / (1 + np.exp(-2.0)))


def _check_vjp(family: FactorFamily, incoming: tuple[np.ndarray, ...], rng: np.random.Generator) -> None:
    """vjp(incoming, g) against central differences of g . propagate(incoming), slot by slot."""
    g = tuple(rng.normal(size=m.shape) for m in incoming)

    def value(inc: tuple[np.ndarray, ...]) -> float:
        return float(sum((gi * np.where(np.isfinite(o), o, 0.0)).sum() for gi, o in zip(g, family.propagate(inc),
                                                                                         strict=True)))

    got, _ = family.vjp(incoming, g)
    for k, m in enumerate(incoming):
        fd = np.zeros_like(m)
        for idx in zip(*np.nonzero(family.valid), strict=True) if m.ndim == 2 else ((i,) for i in range(m.size)):
            up = [x.copy() for x in incoming]
            down = [x.copy() for x in incoming]
            up[k][idx] += EPS
            down[k][idx] -= EPS
            fd[idx] = (value(tuple(up)) - value(tuple(down))) / (2 * EPS)
        assert _rel_err(np.where(family.valid, got[k], 0.0) if m.ndim == 2 else got[k], fd) < 1e-7


@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("single_root", [False, True])
def test_tree_factor_vjp_matches_finite_differences(projective: bool, single_root: bool) -> None:
    rng = np.random.default_rng(5)
    n = 4
    valid = all_arcs(n)
    valid[2, 4] = False  # a pruned arc: its message is constant
    tree = Tree(n, valid, projective=projective, single_root=single_root)
    _check_vjp(tree, (rng.normal(scale=2.0, size=(n + 1, n + 1)),), rng)
    got, theta = tree.vjp((np.zeros((n + 1, n + 1)),), (np.ones((n + 1, n + 1)),))
    assert theta is None and (got[0][~valid] == 0).all()


@pytest.mark.parametrize("hard", [False, True])
def test_pair_factor_vjp_matches_finite_differences(hard: bool) -> None:
    rng = np.random.default_rng(2)
    n = 4
    valid = all_arcs(n)
    if hard:
        family = hard_pairs(n, valid, not2_arcs(n, valid), "not2")
    else:
        arcs = grand_arcs(n, valid)
        family = PairFamily(n, valid, arcs, rng.normal(scale=2.0, size=arcs.shape[1]), "grand")
    incoming = tuple(rng.normal(scale=3.0, size=family.size) for _ in range(2))
    _check_vjp(family, incoming, rng)
    if not hard:  # and the adjoint of theta
        g = tuple(rng.normal(size=family.size) for _ in range(2))
        _, got = family.vjp(incoming, g)
        theta = family.theta.copy()
        fd = np.zeros_like(theta)
        for i in range(len(theta)):
            vals = []
            for step in (EPS, -EPS):
                shifted = theta.copy()
                shifted[i] += step
                family.theta = shifted
                vals.append(sum(float((gi * o).sum()) for gi, o in zip(g, family.propagate(incoming), strict=True)))
            fd[i] = (vals[0] - vals[1]) / (2 * EPS)
        family.theta = theta
        assert got is not None and _rel_err(got, fd) < 1e-7


# -- the whole unrolled BP ------------------------------------------------------------------------

def _graph(n: int, seed: int, projective: bool, single_root: bool = True) -> tuple[list[FactorFamily], np.ndarray]:
    rng = np.random.default_rng(seed)
    valid = all_arcs(n)
    g_arcs, s_arcs = grand_arcs(n, valid), sib_arcs(n, valid)
    return [
        Tree(n, valid, projective=projective, single_root=single_root),
        Link(n, valid, rng.normal(size=(n + 1, n + 1))),
        PairFamily(n, valid, g_arcs, rng.normal(size=g_arcs.shape[1]), "grand"),
        PairFamily(n, valid, s_arcs, rng.normal(size=s_arcs.shape[1]), "sib"),
    ], valid


def _parameters(families: list[FactorFamily], valid: np.ndarray) -> list[tuple[FactorFamily, np.ndarray]]:
    """(family, mask of the free entries of its ``theta``) for every parameter array: LINK on valid arcs,
    pair thetas."""
    out: list[tuple[FactorFamily, np.ndarray]] = []
    for f in families:
        if isinstance(f, Link):
            out.append((f, valid))
        elif isinstance(f, PairFamily):
            out.append((f, np.ones(f.theta.shape, dtype=bool)))
    return out


def _finite_differences(objective: Callable[[], float],
                        params: list[tuple[FactorFamily, np.ndarray]]) -> list[np.ndarray]:
    """Central differences of ``objective`` in each free entry of each family's ``theta`` (a new array is
    assigned for every step: a pair family's weights are read-only)."""
    grads = []
    for family, free in params:
        base = np.array(family.theta)  # type: ignore[attr-defined]
        fd = np.zeros(base.shape)
        for idx in zip(*np.nonzero(free), strict=True):
            values = []
            for step in (EPS, -EPS):
                shifted = base.copy()
                shifted[idx] += step
                family.theta = shifted  # type: ignore[attr-defined]
                values.append(objective())
            fd[idx] = (values[0] - values[1]) / (2 * EPS)
        family.theta = base  # type: ignore[attr-defined]
        grads.append(fd)
    return grads


@pytest.mark.parametrize("schedule, damping", [("serial", 0.0), ("flooding", 0.0), ("serial", 0.3)])
@pytest.mark.parametrize("projective", [False, True])
def test_bp_forward_reproduces_run_bp(projective: bool, schedule: str, damping: float) -> None:
    families, valid = _graph(5, 0, projective)
    for config in (BPConfig(max_iterations=3, schedule=schedule, damping=damping),
                   BPConfig(max_iterations=100, tolerance=1e-8, schedule=schedule, damping=damping)):
        want = run_bp(families, valid, config)
        got, tape = bp_forward(families, valid, config)
        np.testing.assert_array_equal(got.beliefs, want.beliefs)
        assert (got.iterations, got.converged, got.residual) == (want.iterations, want.converged, want.residual)
        for a, b in zip(got.incoming, want.incoming, strict=True):
            np.testing.assert_array_equal(a[0], b[0])
        # every visit of the schedule is on the tape, less the exact repeats both skip without damping
        # (engine.inference.bp.Repeats): LINK, whose messages start at its update (twice per serial
        # iteration), and from the second serial iteration on the tree factor's opening visit
        visits = 2 * len(families) - 1 if schedule == "serial" else len(families)
        if damping:
            expected = got.iterations * visits
        elif schedule == "serial":
            expected = (visits - 2) + (got.iterations - 1) * (visits - 3)
        else:
            expected = got.iterations * (visits - 1)
        assert sum(len(s) for s in tape.stages) == expected


@pytest.mark.parametrize("iterations", [1, 2, 3])
@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("schedule, damping", [("serial", 0.0), ("flooding", 0.2)])
def test_bp_gradient_matches_finite_differences(iterations: int, projective: bool, schedule: str,
                                                damping: float) -> None:
    """d/d theta of a functional of the final beliefs and of the tree factor's final incoming messages,
    through TREE/PTREE + LINK + GRAND + SIB, every parameter perturbed one at a time."""
    n = 3
    families, valid = _graph(n, iterations, projective)
    config = BPConfig(max_iterations=iterations, schedule=schedule, damping=damping, tolerance=0.0)
    rng = np.random.default_rng(42)
    gb, gi = rng.normal(size=(2, n + 1, n + 1))

    def objective() -> float:
        result = run_bp(families, valid, config)
        return float((gb * result.beliefs).sum() + (gi * np.where(valid, result.incoming[0][0], 0.0)).sum())

    _, tape = bp_forward(families, valid, config)
    grads = bp_backward(families, valid, tape, config, gb, {0: (np.where(valid, gi, 0.0),)})
    params = _parameters(families, valid)
    want = _finite_differences(objective, params)
    got = [g for g in grads if g is not None]
    assert len(got) == len(want) == 3
    for g, fd, (_, free) in zip(got, want, params, strict=True):
        assert _rel_err(np.where(free, g, 0.0), fd) < 1e-5


def test_clipped_messages_pass_no_gradient() -> None:
    """With a tight clip some messages saturate; the gradient is that of the piecewise function."""
    n = 3
    families, valid = _graph(n, 4, False)
    families[1].theta *= 4.0
    config = BPConfig(max_iterations=2, schedule="serial", clip=1.0, tolerance=0.0)
    result, tape = bp_forward(families, valid, config)
    clipped = sum(int((~u).sum()) for stage in tape.stages for visit in stage for u in visit.unclipped)
    assert clipped > 0
    g = np.random.default_rng(1).normal(size=(n + 1, n + 1))
    grads = bp_backward(families, valid, tape, config, g)
    want = _finite_differences(lambda: float((g * run_bp(families, valid, config).beliefs).sum()),
                               _parameters(families, valid))
    for got, fd in zip([x for x in grads if x is not None], want, strict=True):
        assert _rel_err(np.where(valid, got, 0.0) if got.ndim == 2 else got, fd) < 1e-5


def test_a_family_without_an_adjoint_says_so() -> None:
    n = 3
    valid = all_arcs(n)
    families = [Exactly1(n, valid), Link(n, valid, np.ones((n + 1, n + 1)))]
    config = BPConfig(max_iterations=1)
    _, tape = bp_forward(families, valid, config)
    with pytest.raises(NotImplementedError, match="exactly1"):
        bp_backward(families, valid, tape, config, np.ones((n + 1, n + 1)))
