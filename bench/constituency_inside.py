"""Time one factor pass of the constituency inference (issue 26) on a random grammar of realistic size.

    python bench/constituency_inside.py [--words 25] [--repeat 5]

The grammar has the size the design brief measured on the PTB sample's training split (§0): 90 labels (TOP, 45
tags, 44 phrase labels), 1,500 random binary rules, the 89 identity unaries and 120 random unary rules, plus the
rules of one random tree (so that a tree is live). The mask keeps each label of each layer of each cell with
probability ``keep`` (0.16 gives about 16K live binary items on 25 words, the brief's pruned figure) and the
random tree's labels. Factors have random normal log weights (standard deviation 0.5), the anchored grammar
random normal scores. Prints one JSON object: item counts and the median milliseconds of ``inside_outside`` for
K = 1 (the anchored grammar alone), 2 and 4, of ``log_partition`` (inside only), of ``project``, and of one EP
sweep over two K=2 factors.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from _timing import median_ms

from engine.constituency.anchored import AnchoredItems, AnchoredScores, SpanMask, build_items, full_mask
from engine.constituency.ep import EPSettings, expectation_propagation
from engine.constituency.factor import Factor, make_factor, substates, unit_like
from engine.constituency.grammar import Grammar
from engine.constituency.inside_outside import inside_outside, log_partition
from engine.constituency.projection import project

TAGS, PHRASES = 45, 44


def random_tree(rng: np.random.Generator, n: int) -> tuple[list, list, list]:
    """Rules ``(A, B, C)``, unaries ``(top, bot)`` and labelled layers ``(i, j, top, bot)`` of a random tree
    (labels: 0 TOP, 1..45 tags, 46..89 phrases)."""
    binary, unary, cells = [], [], []

    def grow(i: int, j: int, top: int) -> None:
        bot = int(rng.integers(1, 1 + TAGS)) if j == i + 1 else int(rng.integers(1 + TAGS, 1 + TAGS + PHRASES))
        unary.append((top, bot))
        cells.append((i, j, top, bot))
        if j > i + 1:
            k = int(rng.integers(i + 1, j))
            left, right = (int(rng.integers(1, 1 + TAGS + PHRASES)) for _ in range(2))
            binary.append((bot, left, right))
            grow(i, k, left)
            grow(k, j, right)

    grow(0, n, 0)
    return binary, unary, cells


def realistic(rng: np.random.Generator, n: int, keep: float) -> tuple[Grammar, AnchoredItems]:
    size = 1 + TAGS + PHRASES
    tree_binary, tree_unary, cells = random_tree(rng, n)
    rules = {(int(a), int(b), int(c)) for a, b, c in zip(rng.integers(1 + TAGS, size, 3000),
                                                         rng.integers(1, size, 3000), rng.integers(1, size, 3000),
                                                         strict=True)}
    binary = sorted(set(sorted(rules)[:1500]) | set(tree_binary))
    extra = {(int(a), int(b)) for a, b in zip(rng.integers(1 + TAGS, size, 120), rng.integers(1, size, 120),
                                              strict=True) if a != b}
    unary = sorted({(a, a) for a in range(1, size)} | extra | set(tree_unary) | {(0, b) for b in range(46, 56)})
    is_tag = np.zeros(size, dtype=bool)
    is_tag[1:1 + TAGS] = True
    grammar = Grammar(tuple(f"L{a}" for a in range(size)), np.array(binary), np.array(unary), ((),) * len(unary),
                      is_tag, top=0)
    full = full_mask(grammar, n)
    bot, top = full.bot & (rng.random(full.bot.shape) < keep), full.top & (rng.random(full.top.shape) < keep)
    top[0, n] = full.top[0, n]
    for i, j, a, b in cells:
        top[i, j, a] = bot[i, j, b] = True
    return grammar, build_items(grammar, SpanMask(bot, top))


def factor(grammar: Grammar, n: int, k: int, rng: np.random.Generator) -> Factor:
    r, u, size = len(grammar.binary), len(grammar.unary), grammar.n_labels
    return make_factor(grammar, 0.5 * rng.standard_normal((r, k, k, k)), 0.5 * rng.standard_normal((u, k, k)),
                       0.5 * rng.standard_normal((n, size, k)), substates(grammar, k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=25)
    parser.add_argument("--keep", type=float, default=0.16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.words
    grammar, items = realistic(rng, n, args.keep)
    scores = AnchoredScores(rng.standard_normal(items.n_binary), rng.standard_normal(items.n_unary),
                            np.zeros(items.n_tags))
    f2, f4 = factor(grammar, n, 2, rng), factor(grammar, n, 4, rng)
    marginals = inside_outside(items, f2, scores)
    one_sweep = EPSettings(max_sweeps=1)
    out = {
        "words": n, "labels": grammar.n_labels, "binary_rules": len(grammar.binary), "unary_rules": len(grammar.unary),
        "binary_items": items.n_binary, "unary_items": items.n_unary, "tag_items": items.n_tags,
        "log_z_k2": round(marginals.log_z, 6),
        "ms_inside_outside_k1": median_ms(lambda: inside_outside(items, unit_like(f2), scores), args.repeat),
        "ms_inside_outside_k2": median_ms(lambda: inside_outside(items, f2, scores), args.repeat),
        "ms_inside_outside_k4": median_ms(lambda: inside_outside(items, f4, scores), args.repeat),
        "ms_inside_only_k2": median_ms(lambda: log_partition(items, f2, scores), args.repeat),
        "ms_inside_only_k4": median_ms(lambda: log_partition(items, f4, scores), args.repeat),
        "ms_project": median_ms(lambda: project(items, marginals), args.repeat),
        "ms_ep_sweep_2x_k2": median_ms(lambda: expectation_propagation(items, [f2, factor(grammar, n, 2, rng)],
                                                                       one_sweep), args.repeat),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
