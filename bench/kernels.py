"""Time the exact first-order kernels on one sentence of 40 and of 150 words.

    python bench/kernels.py

Scores are normal(0, 1) for 40 words and uniform in [-1e3, 1e3] for 150 words; each figure is the
median of repeated calls, in milliseconds. Prints one JSON object.
"""

from __future__ import annotations

import json

import numpy as np
from _timing import median_ms

from engine.kernels.eisner import eisner_marginals, eisner_viterbi
from engine.kernels.matrix_tree import matrix_tree_marginals
from engine.kernels.mst import max_spanning_arborescence
from engine.kernels.tree_elimination import eliminate_marginals


def main() -> None:
    rng = np.random.default_rng(0)
    s40 = rng.normal(size=(41, 41))
    s150 = rng.uniform(-1e3, 1e3, size=(151, 151))
    batch = rng.normal(size=(500, 21, 21))
    out: dict[str, dict[str, float]] = {}
    for name, scores in (("40", s40), ("150", s150)):
        out[name] = {
            "matrix_tree_marginals_single_root": median_ms(lambda s=scores: matrix_tree_marginals(s, single_root=True)),
            "eisner_inside_outside_single_root": median_ms(lambda s=scores: eisner_marginals(s, single_root=True)),
            "eisner_viterbi_single_root": median_ms(lambda s=scores: eisner_viterbi(s, single_root=True)),
            "mst_single_root": median_ms(lambda s=scores: max_spanning_arborescence(s, single_root=True)),
            "elimination_marginals_single_root": median_ms(lambda s=scores: eliminate_marginals(s, single_root=True),
                                                           repeat=5),
        }
    out["batch_500x20"] = {
        "matrix_tree_marginals_per_sentence": median_ms(lambda: matrix_tree_marginals(batch, single_root=True),
                                                        repeat=5) / 500,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
