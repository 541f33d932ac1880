"""Every factor's outgoing messages against brute-force sums over its neighbours' assignments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.graph.childseq import ChildSeq
from engine.graph.family import ArcFamily, FactorFamily, exclusive_logsumexp
from engine.graph.family import all_arcs as _valid
from engine.graph.hard import AtMost1, Exactly1, Link
from engine.graph.nocross import NoCross
from engine.graph.oracle import arc_family_messages
from engine.graph.pairwise import PairFamily, grand_arcs, hard_pairs, no2cycle_arcs, not2_arcs, sib_arcs
from engine.graph.tree import Tree


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("single_root", [False, True])
def test_tree_factor_messages(n: int, projective: bool, single_root: bool) -> None:
    rng = np.random.default_rng(n)
    valid = _valid(n)
    family = Tree(n, valid, projective=projective, single_root=single_root)
    r = rng.normal(scale=2.0, size=valid.shape)
    (out,) = family.propagate((r,))
    np.testing.assert_allclose(out[valid], arc_family_messages(family, r)[valid], atol=1e-9)


def test_tree_factor_with_pruned_arcs() -> None:
    n, rng = 3, np.random.default_rng(9)
    valid = _valid(n)
    valid[2, 1] = valid[0, 3] = False
    family = Tree(n, valid, projective=False, single_root=True)
    r = rng.normal(size=valid.shape)
    (out,) = family.propagate((r,))
    np.testing.assert_allclose(out[valid], arc_family_messages(family, r)[valid], atol=1e-9)
    assert (out[~valid] == 0).all()


@pytest.mark.parametrize("cls", [Exactly1, AtMost1])
def test_one_head_constraints(cls: type) -> None:
    n, rng = 3, np.random.default_rng(1)
    valid = _valid(n)
    family = cls(n, valid)
    r = rng.normal(scale=2.0, size=valid.shape)
    (out,) = family.propagate((r,))
    np.testing.assert_allclose(out[valid], arc_family_messages(family, r)[valid], atol=1e-9)


def test_link_messages_are_its_scores() -> None:
    n, valid = 3, _valid(3)
    theta = np.arange(16.0).reshape(4, 4)
    family = Link(n, valid, theta)
    (out,) = family.propagate((np.ones((4, 4)),))
    np.testing.assert_array_equal(out, np.where(valid, theta, 0.0))
    np.testing.assert_allclose(out[valid], arc_family_messages(family, np.zeros((4, 4)))[valid], atol=1e-9)


def _pair_brute_force(ra: float, rb: float, theta: float) -> tuple[float, float]:
    def psi(a: int, b: int) -> float:
        return np.exp(theta) if (a and b) else 1.0

    qa, qb = np.exp(ra), np.exp(rb)
    to_a = np.log((psi(1, 0) + qb * psi(1, 1)) / (psi(0, 0) + qb * psi(0, 1)))
    to_b = np.log((psi(0, 1) + qa * psi(1, 1)) / (psi(0, 0) + qa * psi(1, 0)))
    return to_a, to_b


@pytest.mark.parametrize("make", [grand_arcs, sib_arcs, not2_arcs, no2cycle_arcs])
def test_pairwise_families(make) -> None:  # type: ignore[no-untyped-def]
    n, rng = 4, np.random.default_rng(2)
    valid = _valid(n)
    arcs = make(n, valid)
    assert arcs.shape[0] == 4 and arcs.shape[1] > 0
    assert valid[arcs[0], arcs[1]].all() and valid[arcs[2], arcs[3]].all()
    hard = make in (not2_arcs, no2cycle_arcs)
    theta = np.full(arcs.shape[1], -np.inf) if hard else rng.normal(size=arcs.shape[1])
    family = PairFamily(n, valid, arcs, theta, make.__name__)
    ra, rb = rng.normal(scale=2.0, size=(2, arcs.shape[1]))
    to_a, to_b = family.propagate((ra, rb))
    for f in range(arcs.shape[1]):
        ea, eb = _pair_brute_force(ra[f], rb[f], theta[f])
        assert to_a[f] == pytest.approx(ea, abs=1e-12) and to_b[f] == pytest.approx(eb, abs=1e-12)
    # factor beliefs: p(both true) under the factor times its incoming messages
    both = family.both_true((ra, rb))
    f = 0
    w = np.array([1.0, np.exp(ra[f]), np.exp(rb[f]), np.exp(ra[f] + rb[f] + theta[f])])
    assert both[f] == pytest.approx(w[3] / w.sum())
    # scatter sums each factor's message onto its arc
    total = family.scatter((np.ones(arcs.shape[1]), np.zeros(arcs.shape[1])))
    counts = np.zeros((n + 1, n + 1))
    np.add.at(counts, (arcs[0], arcs[1]), 1.0)
    np.testing.assert_array_equal(total, counts)


def test_pairwise_message_kernel_to_full_relative_precision() -> None:
    """The log1p form of the pairwise message (``PairFamily.propagate_flat``) against 400-digit references
    of ``log((e^(r + theta) + 1) / (e^r + 1)) = log1p(sigma(r) expm1(theta))``, over log-odds up to +-1e4
    (the clip) and weights up to +-699, including messages far below 1e-16 that the plain softplus
    difference rounds to 0; weights of 700 and more, and -inf, take the softplus form."""
    import mpmath

    with mpmath.workdps(400):  # 1 + sigma(r) expm1(theta) can be as small as e^-699
        rng = np.random.default_rng(5)
        r = np.concatenate([rng.normal(scale=3.0, size=300), rng.uniform(-1e4, 1e4, 100), [0.0, 40.0, -40.0]])
        theta = np.concatenate([rng.normal(scale=2.0, size=300), rng.uniform(-699.0, 699.0, 100), [1e-12, -1e-12, 5.0]])
        for t in (theta, np.concatenate([theta[:-1], [800.0]]), np.concatenate([theta[:-1], [-np.inf]])):
            n, valid = 2, _valid(2)
            family = PairFamily(n, valid, np.zeros((4, len(t)), dtype=int), t, "grand")
            assert (family._kernel() is None) == bool(np.abs(t).max() >= 700.0)
            to_a = family.propagate_flat(np.stack([rng.normal(size=len(t)), r]))[0]
            for got, rb, th in zip(to_a, r, t, strict=True):
                if np.isinf(th):
                    want = float(-mpmath.log1p(mpmath.exp(mpmath.mpf(float(rb)))))
                else:
                    q = mpmath.exp(mpmath.mpf(float(rb)))
                    want = float(mpmath.log1p(mpmath.expm1(mpmath.mpf(float(th))) * q / (q + 1)))
                assert got == pytest.approx(want, rel=1e-12, abs=0.0 if family._kernel() is not None else 1e-12)
    with pytest.raises(ValueError):  # the weights are read-only: assign a new array instead
        family.theta[0] = 1.0


def test_pair_family_counts() -> None:
    n, valid = 4, _valid(4)
    assert grand_arcs(n, valid).shape[1] == sum(
        1 for h in range(n + 1) for m in range(1, n + 1) for c in range(1, n + 1) if len({h, m, c}) == 3)
    assert not2_arcs(n, valid).shape[1] == n * (n * (n - 1) // 2)  # n heads choose 2, per dependent
    assert no2cycle_arcs(n, valid).shape[1] == n * (n - 1) // 2
    assert hard_pairs(n, valid, no2cycle_arcs(n, valid), "no2cycle").size == n * (n - 1) // 2


def test_exclusive_logsumexp() -> None:
    x = np.log(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    np.testing.assert_allclose(np.exp(exclusive_logsumexp(x, axis=0)), [[8.0, 10.0], [6.0, 8.0], [4.0, 6.0]])
    big = np.array([1e3, -1e3, 0.0])
    assert np.isfinite(exclusive_logsumexp(big, axis=0)).all()


def _every_family(n: int, valid: np.ndarray, rng: np.random.Generator) -> list[FactorFamily]:
    shape = (n + 1, n + 1, n + 1)
    return [Tree(n, valid, projective=False, single_root=True), Tree(n, valid, projective=True, single_root=False),
            Link(n, valid, rng.normal(size=valid.shape)), Exactly1(n, valid), AtMost1(n, valid),
            ChildSeq(n, valid, rng.normal(size=shape), rng.normal(size=shape)),
            NoCross(n, valid, rng.normal(size=valid.shape)),
            PairFamily(n, valid, grand_arcs(n, valid), rng.normal(size=grand_arcs(n, valid).shape[1]), "grand"),
            hard_pairs(n, valid, not2_arcs(n, valid), "not2")]


def test_packed_messages_follow_the_slot_arrays() -> None:
    """BP's inner loop works on packed messages (engine.graph.family): for every family, gather, scatter
    and propagate on packed arrays give the per-slot results, and an arc family's messages are 0 on the
    arcs that are not variables (its scatter of packed messages is then the identity)."""
    n, rng = 4, np.random.default_rng(3)
    valid = _valid(n)
    valid[2, 1] = valid[0, 3] = False
    beliefs = rng.normal(size=valid.shape)
    for family in _every_family(n, valid, rng):
        slots = family.gather(beliefs)
        packed = family.gather_flat(beliefs.reshape(-1))
        for got, want in zip(family.unpack(packed), slots, strict=True):
            np.testing.assert_array_equal(got, want)
        incoming = tuple(rng.normal(size=g.shape) for g in slots)
        out = family.propagate(incoming)
        for got, want in zip(family.unpack(family.propagate_flat(family.pack(incoming))), out, strict=True):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(family.scatter_flat(family.pack(out)), family.scatter(out).reshape(-1),
                                   rtol=1e-15, atol=1e-15)
        if isinstance(family, ArcFamily):
            assert (out[0][~valid] == 0).all(), family.name


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_grand_and_sib_arcs_enumerate_every_kept_triple_in_order(n: int, density: float, seed: int) -> None:
    """GRAND and SIB factors built from the kept arcs are exactly the triples a sweep over all (n+1)^3 finds
    with both arcs kept, in lexicographic order."""
    rng = np.random.default_rng(seed)
    valid = rng.random((n + 1, n + 1)) < density
    valid[:, 0] = False
    np.fill_diagonal(valid, False)
    grand = [(h, m, m, c) for h in range(n + 1) for m in range(1, n + 1) for c in range(n + 1)
             if c != h and valid[h, m] and valid[m, c]]
    sib = [(h, m, h, s) for h in range(n + 1) for m in range(n + 1) for s in range(m + 1, n + 1)
           if valid[h, m] and valid[h, s]]
    assert [tuple(x) for x in grand_arcs(n, valid).T] == grand
    assert [tuple(x) for x in sib_arcs(n, valid).T] == sib
