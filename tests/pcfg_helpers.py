"""Tiny random grammars and brute-force enumeration for the tests of ``engine/constituency`` (issue 26).

:func:`tiny_grammar` builds a backbone of 5 labels (TOP, two phrase labels S and X, two tags a and b) with a
random subset of the binary rules, identity unaries and a few (collapsed) unary chains. :func:`enumerate_trees`
lists every refined tree of a sentence over the live items, one by one, with its log weight and its events;
:func:`brute_force` turns the list into ``log Z`` and every marginal by plain sums. Nothing here shares code with
the dynamic programs under test but the item list.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engine.constituency.anchored import AnchoredItems, AnchoredScores, SpanMask, build_items, full_mask
from engine.constituency.factor import Factor, make_factor, substates
from engine.constituency.grammar import AnchoredTree, Grammar
from engine.constituency.reference import inside_outside_log

LABELS = ("TOP", "S", "X", "a", "b")


def tiny_grammar(rng: np.random.Generator, n_binary: int = 10) -> Grammar:
    """TOP, S, X and tags a, b: ``n_binary`` random rules ``P -> B C`` (P in S, X; B, C any but TOP) always
    including ``S -> X X`` and ``X -> a b`` (so trees exist), the identities of S, X, a, b, the unaries TOP -> S,
    TOP -> X, S -> X, X -> a and the collapsed chains ``S -> X -> b`` (S over b) and ``TOP -> S -> X -> a``."""
    every = [(p, b, c) for p in (1, 2) for b in (1, 2, 3, 4) for c in (1, 2, 3, 4)]
    fixed = [(1, 2, 2), (2, 3, 4)]
    rest = [rule for rule in every if rule not in fixed]
    chosen = [rest[i] for i in rng.choice(len(rest), size=n_binary - len(fixed), replace=False)]
    binary = np.array(fixed + chosen, dtype=np.int64)
    unary = np.array([(1, 1), (2, 2), (3, 3), (4, 4), (0, 1), (0, 2), (1, 2), (2, 3), (1, 4), (0, 3)], dtype=np.int64)
    chains = ((),) * 8 + (("X",), ("S", "X"))
    is_tag = np.array([False, False, False, True, True])
    return Grammar(LABELS, binary, unary, chains, is_tag, top=0)


def random_factor(grammar: Grammar, n: int, k: int, rng: np.random.Generator, scale: float = 1.0,
                  unsplit: tuple[str, ...] = ()) -> Factor:
    """Random log weights (normal, standard deviation ``scale``) with ``k`` substates per label (1 for TOP and
    the labels in ``unsplit``)."""
    r, u, size = len(grammar.binary), len(grammar.unary), grammar.n_labels
    return make_factor(grammar, scale * rng.standard_normal((r, k, k, k)), scale * rng.standard_normal((u, k, k)),
                       scale * rng.standard_normal((n, size, k)), substates(grammar, k, unsplit))


def random_scores(items: AnchoredItems, rng: np.random.Generator, scale: float = 1.0,
                  dead: float = 0.0) -> AnchoredScores:
    """A random anchored grammar: normal log scores, a fraction ``dead`` of the binary and unary items ``-inf``."""
    parts = []
    for size in (items.n_binary, items.n_unary, items.n_tags):
        part = scale * rng.standard_normal(size)
        if dead and size:
            part[rng.random(size) < dead] = -np.inf
        parts.append(part)
    parts[2][:] = np.where(np.isfinite(parts[2]), parts[2], 0.0)
    return AnchoredScores(*parts)


def pruned_mask(grammar: Grammar, n: int, rng: np.random.Generator, keep: float = 0.7) -> SpanMask:
    """The full mask with each non-root label of each layer kept with probability ``keep``."""
    mask = full_mask(grammar, n)
    bot = mask.bot & (rng.random(mask.bot.shape) < keep)
    top = mask.top & (rng.random(mask.top.shape) < keep)
    top[0, n] = mask.top[0, n]
    return SpanMask(bot, top)


@dataclass(frozen=True)
class Enumerated:
    """``log Z`` and every marginal computed by summing over an explicit list of refined trees."""

    log_z: float
    count: int
    w_counts: np.ndarray
    u_counts: np.ndarray
    e_counts: np.ndarray
    mu_b: np.ndarray
    mu_u: np.ndarray
    mu_tag: np.ndarray
    mu_bot: np.ndarray
    mu_top: np.ndarray


def enumerate_trees(items: AnchoredItems, f: Factor, q: AnchoredScores) -> Iterator[tuple[float, list[tuple]]]:
    """Every refined tree over the live items as ``(log weight, events)``: ``("b", item, x, y, z)``,
    ``("u", item, x, y)``, ``("t", item, x)``, item being an index into the item arrays. Substates a label
    does not have carry weight ``-inf`` and are skipped."""
    k = f.k
    unaries: dict[tuple, list[int]] = {}
    binaries: dict[tuple, list[int]] = {}
    tags = {(int(i), int(t)): v for v, (i, t) in enumerate(zip(items.tag_i, items.tag_t, strict=True))}
    for v in range(items.n_unary):
        unaries.setdefault((items.un_i[v], items.un_j[v], items.un_a[v]), []).append(v)
    for b in range(items.n_binary):
        binaries.setdefault((items.bin_i[b], items.bin_j[b], items.bin_a[b]), []).append(b)

    def top(i: int, j: int, a: int, x: int) -> Iterator[tuple[float, list[tuple]]]:
        for v in unaries.get((i, j, a), []):
            for y in range(k):
                w = f.log_u[items.un_u[v], x, y] + q.unary[v]
                if w == -np.inf:
                    continue
                for rest, events in bot(i, j, int(items.un_b[v]), y):
                    yield w + rest, [("u", v, x, y), *events]

    def bot(i: int, j: int, a: int, x: int) -> Iterator[tuple[float, list[tuple]]]:
        if j == i + 1:
            t = tags.get((i, a))
            if t is not None and f.log_e[i, a, x] + q.tag[t] > -np.inf:
                yield f.log_e[i, a, x] + q.tag[t], [("t", t, x)]
            return
        for b in binaries.get((i, j, a), []):
            kk, r = int(items.bin_k[b]), int(items.bin_r[b])
            for y, z in itertools.product(range(k), range(k)):
                w = f.log_w[r, x, y, z] + q.binary[b]
                if w == -np.inf:
                    continue
                for (lw, le), (rw, re) in itertools.product(top(i, kk, int(items.bin_b[b]), y),
                                                             top(kk, j, int(items.bin_c[b]), z)):
                    yield w + lw + rw, [("b", b, x, y, z), *le, *re]

    yield from top(0, items.n, items.root, 0)


def brute_force(items: AnchoredItems, f: Factor, q: AnchoredScores) -> Enumerated:
    """Sum over :func:`enumerate_trees`: ``Z``, refined counts, coarse item and cell marginals."""
    trees = list(enumerate_trees(items, f, q))
    weights = np.array([w for w, _ in trees])
    log_z = float(np.log(np.exp(weights - weights.max()).sum()) + weights.max())
    n, size, k = items.n, items.n_labels, f.k
    out = Enumerated(log_z, len(trees), np.zeros_like(f.log_w), np.zeros_like(f.log_u),
                     np.zeros((n, size, k)), np.zeros(items.n_binary), np.zeros(items.n_unary),
                     np.zeros(items.n_tags), np.zeros((n + 1, n + 1, size)), np.zeros((n + 1, n + 1, size)))
    for w, events in trees:
        p = np.exp(w - log_z)
        for event in events:
            if event[0] == "b":
                _, b, x, y, z = event
                out.w_counts[items.bin_r[b], x, y, z] += p
                out.mu_b[b] += p
                out.mu_bot[items.bin_i[b], items.bin_j[b], items.bin_a[b]] += p
            elif event[0] == "u":
                _, v, x, y = event
                out.u_counts[items.un_u[v], x, y] += p
                out.mu_u[v] += p
                out.mu_top[items.un_i[v], items.un_j[v], items.un_a[v]] += p
            else:
                _, t, x = event
                out.e_counts[items.tag_i[t], items.tag_t[t], x] += p
                out.mu_tag[t] += p
                out.mu_bot[items.tag_i[t], items.tag_i[t] + 1, items.tag_t[t]] += p
    return out


def _has_tree(items: AnchoredItems, f: Factor, q: AnchoredScores) -> bool:
    """Whether some tree is live: a one-substate log-space inside pass (enumerating would take minutes for K=2
    and n=6, ``itertools.product`` lists its inputs)."""
    unit = Factor(np.where(np.isfinite(f.log_w[:, :1, :1, :1]), 0.0, -np.inf), np.zeros((len(f.log_u), 1, 1)),
                  np.zeros((*f.log_e.shape[:2], 1)))
    try:
        inside_outside_log(items, unit, q)
    except FloatingPointError:
        return False
    return True


def sentence(rng: np.random.Generator, n: int, k: int, pruned: bool = False, n_binary: int = 10,
             unsplit: tuple[str, ...] = ()) -> tuple[Grammar, AnchoredItems, Factor]:
    """A tiny grammar, the items of ``n`` words (all, or a random pruning that keeps a tree) and a factor."""
    grammar = tiny_grammar(rng, n_binary)
    for _ in range(100):
        mask = pruned_mask(grammar, n, rng) if pruned else full_mask(grammar, n)
        items = build_items(grammar, mask)
        f = random_factor(grammar, n, k, rng, unsplit=unsplit)
        if _has_tree(items, f, AnchoredScores.zeros(items)):
            return grammar, items, f
    raise AssertionError("no pruning kept a tree")


def live_scores(items: AnchoredItems, f: Factor, rng: np.random.Generator, dead: float = 0.1) -> AnchoredScores:
    """:func:`random_scores` with some dead items, drawn again until a tree survives."""
    for _ in range(100):
        q = random_scores(items, rng, dead=dead)
        if _has_tree(items, f, q):
            return q
    raise AssertionError("no anchored grammar kept a tree")


def tree_from_events(items: AnchoredItems, events: list[tuple]) -> AnchoredTree:
    """The coarse tree of one enumerated refined tree, as an :class:`AnchoredTree`."""
    tags = np.zeros(items.n, dtype=np.int64)
    unary, binary = [], []
    for event in events:
        kind, x = event[:2]
        if kind == "t":
            tags[items.tag_i[x]] = items.tag_t[x]
        elif kind == "u":
            unary.append((items.un_i[x], items.un_j[x], items.un_u[x]))
        else:
            binary.append((items.bin_i[x], items.bin_k[x], items.bin_j[x], items.bin_r[x]))
    return AnchoredTree(tags, np.array(unary, dtype=np.int64).reshape(-1, 3),
                        np.array(binary, dtype=np.int64).reshape(-1, 4))
