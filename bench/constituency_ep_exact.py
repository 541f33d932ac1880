"""EP and ADF against the exact product of two one-bit factors (issue 26, brief §3.5), on random grammars.

    python bench/constituency_ep_exact.py [--sentences 5] [--words 12] [--keep 0.16] [--scale 0.5 2.0]

Grammar and mask as in ``bench/constituency_inside.py`` (90 labels, ~1.5K binary rules; each labelled layer kept
with probability ``keep``, plus one random tree), two random K=2 factors with log weights normal(0, ``scale``),
no anchored prior. For each sentence: exact inference by inside-outside of the Kronecker product (K=4), ADF (one
sweep), EP capped at 4 sweeps (the paper's) and at 50 (tolerance 1e-9), all without the projection floor.
Reports per method the mean and largest |log Z_EP - log Z_exact|, the mean and largest total variation per cell
of the labelled bot-span distribution (labels plus "no constituent"), EP's sweeps and converged fraction. The
treebank's dev sentences (the brief's setting) replace the random grammar once the data side and training exist.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from constituency_inside import factor, realistic

from engine.constituency.anchored import AnchoredScores
from engine.constituency.ep import EPResult, EPSettings, expectation_propagation
from engine.constituency.factor import FactorMarginals, kronecker_product, unit_like
from engine.constituency.inside_outside import inside_outside


def cell_tv(a: FactorMarginals, b: FactorMarginals, n: int) -> np.ndarray:
    """Total variation per cell between the distributions over its bot label or no constituent."""
    cells = [(i, j) for i in range(n) for j in range(i + 1, n + 1)]
    tv = []
    for i, j in cells:
        d = a.mu_bot[i, j] - b.mu_bot[i, j]
        tv.append(0.5 * (np.abs(d).sum() + abs(d.sum())))
    return np.array(tv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=5)
    parser.add_argument("--words", type=int, default=12)
    parser.add_argument("--keep", type=float, default=0.16)
    parser.add_argument("--scale", type=float, nargs="+", default=[0.5, 2.0])
    args = parser.parse_args()
    methods = {"adf": EPSettings(max_sweeps=1, floor=None), "ep4": EPSettings(max_sweeps=4, floor=None),
               "ep50": EPSettings(max_sweeps=50, tolerance=1e-9, floor=None)}
    report: dict[str, dict] = {}
    for scale in args.scale:
        rng = np.random.default_rng(1)
        rows: dict[str, list[tuple[float, float, float, int, bool]]] = {name: [] for name in methods}
        for _ in range(args.sentences):
            grammar, items = realistic(rng, args.words, args.keep)
            f1, f2 = (factor(grammar, args.words, 2, rng) for _ in range(2))
            f1 = type(f1)(scale / 0.5 * f1.log_w, scale / 0.5 * f1.log_u, scale / 0.5 * f1.log_e)
            f2 = type(f2)(scale / 0.5 * f2.log_w, scale / 0.5 * f2.log_u, scale / 0.5 * f2.log_e)
            exact = inside_outside(items, kronecker_product(f1, f2), AnchoredScores.zeros(items))
            for name, settings in methods.items():
                result: EPResult = expectation_propagation(items, [f1, f2], settings)
                q = inside_outside(items, unit_like(f1), result.q)
                tv = cell_tv(q, exact, args.words)
                rows[name].append((abs(result.log_z - exact.log_z), tv.mean(), tv.max(), result.sweeps,
                                   result.converged))
        report[f"scale={scale}"] = {
            name: {"log_z_gap_mean": float(np.mean([r[0] for r in v])), "log_z_gap_max": float(max(r[0] for r in v)),
                   "tv_mean": float(np.mean([r[1] for r in v])), "tv_max": float(max(r[2] for r in v)),
                   "sweeps_mean": float(np.mean([r[3] for r in v])),
                   "converged_fraction": float(np.mean([r[4] for r in v]))}
            for name, v in rows.items()}
    print(json.dumps({"sentences": args.sentences, "words": args.words, "keep": args.keep, **report}, indent=1))


if __name__ == "__main__":
    main()
