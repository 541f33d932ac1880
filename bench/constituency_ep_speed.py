"""Speed of the factored inference on real pruned sentences of the Penn Treebank sample (issue 26).

    python bench/constituency_ep_speed.py [--data ../shared/data/ptb_sample] [--split dev] [--max-words 40]
                                          [--limit N] [--seed 0] [--implementation numba|numpy]

Trains the X-bar PCFG on wsj_0001-0159, and for every sentence of at most ``--max-words`` words of ``--split``
runs what a factored model's ``evaluate`` runs: the dense X-bar pass (``dense``), its pruning mask at ``e^-9``
(``pruning``), the mask's items (``anchored.build_items``), then, with two factors of K=2 per sentence (half the
X-bar weights plus normal noise of standard deviation 0.5 on every refined weight: random, not trained, so that
the items and the pruning are real and the weights of the same scale as a trained model's), EP (at most 4 sweeps,
the paper's setting), ADF (one sweep) and the exact product (one K=4 pass over the Kronecker product), and
Max-Recall decoding (of the exact marginals; the same cost for any). Prints one JSON object: per stage the total
wall-clock and CPU seconds over the sentences (the machine is shared: CPU seconds move less with the load);
``one_pass_k2_cpu_ms_median``: the median CPU milliseconds of one K=2 inside-outside of each implementation on
the same sentences in the same process; ``ep_sweeps_mean``; ``whole_*``: dense + mask + items + inference +
decoding, sentences per wall-clock and per CPU second, the issue's measure for ``evaluate`` (reading, training
and featurising excluded). ``--implementation numpy`` runs every pass (EP's too) with the numpy pass
(``inside_outside.inside_outside_numpy``) instead of the numba kernel. One BLAS thread (the issue's target is
for one core).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "ptb_sample"))
    ap.add_argument("--split", choices=["dev", "test"], default="dev")
    ap.add_argument("--max-words", type=int, default=40)
    ap.add_argument("--limit", type=int, help="only the first N sentences")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--implementation", choices=["numba", "numpy"], default="numba")
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # before numpy is imported

    import json

    import numpy as np

    from engine.constituency import ep, inside_outside
    from engine.constituency.anchored import AnchoredScores, build_items
    from engine.constituency.baseline import XbarParser
    from engine.constituency.decode import max_recall
    from engine.constituency.factor import Factor, kronecker_product, make_factor, substates
    from engine.constituency.treebank import split_by_file
    from engine.constituency.xbar import train_xbar

    if args.implementation == "numpy":  # every pass of this process, EP's included
        ep.inside_outside = inside_outside.inside_outside_numpy
        ep.log_partition = inside_outside.log_partition_numpy
    passes = {"numba": inside_outside.inside_outside, "numpy": inside_outside.inside_outside_numpy}
    one_pass = passes[args.implementation]

    splits = split_by_file(args.data)
    model = train_xbar(splits["train"])
    parser = XbarParser(model)
    grammar = model.grammar
    gold = [t for t in splits[args.split] if len(t.leaves()) <= args.max_words][: args.limit]
    rng = np.random.default_rng(args.seed)
    counts = substates(grammar, 2)

    def random_factor(base: Factor) -> Factor:
        def noisy(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
            return np.broadcast_to(x / 2, shape) + 0.5 * rng.standard_normal(shape)

        r, u, (n, size) = len(base.log_w), len(base.log_u), base.log_e.shape[:2]
        return make_factor(grammar, noisy(base.log_w, (r, 2, 2, 2)), noisy(base.log_u, (u, 2, 2)),
                           noisy(base.log_e, (n, size, 2)), counts)

    wall = dict.fromkeys(("dense", "mask_items", "ep", "adf", "exact", "decode"), 0.0)
    cpu = dict.fromkeys(wall, 0.0)
    sweeps, converged, items_total, skipped = [], 0, 0, 0
    pass_cpu_ms: dict[str, list[float]] = {"numba": [], "numpy": []}
    ep_settings, adf_settings = ep.EPSettings(max_sweeps=4), ep.EPSettings(max_sweeps=1)
    first = gold[0].leaves()  # compile the kernels (or load them from numba's cache) outside the timings
    first_items = build_items(grammar, parser.mask(parser.marginals(first)))
    one_pass(first_items, random_factor(model.factor(first)), AnchoredScores.zeros(first_items))
    clock = [time.perf_counter(), time.process_time()]

    def lap(stage: str) -> None:
        now = [time.perf_counter(), time.process_time()]
        wall[stage] += now[0] - clock[0]
        cpu[stage] += now[1] - clock[1]
        clock[:] = now

    for tree in gold:
        words = tree.leaves()
        base = model.factor(words)
        factors = [random_factor(base), random_factor(base)]
        clock[:] = [time.perf_counter(), time.process_time()]
        dense = parser.marginals(words)
        lap("dense")
        items = build_items(grammar, parser.mask(dense))
        lap("mask_items")
        items_total += items.n_binary
        try:
            result = ep.expectation_propagation(items, factors, ep_settings)
            lap("ep")
            ep.assumed_density_filtering(items, factors, adf_settings)
            lap("adf")
            exact = one_pass(items, kronecker_product(*factors), AnchoredScores.zeros(items))
            lap("exact")
        except FloatingPointError:
            skipped += 1
            continue
        max_recall(grammar, exact.mu_bot, exact.mu_top, words, parser.chains)
        lap("decode")
        sweeps.append(result.sweeps)
        converged += result.converged
        for name, run in passes.items():  # one K=2 pass of each implementation, CPU time: the same-process ratio
            start = time.process_time()
            run(items, factors[0], AnchoredScores.zeros(items))
            pass_cpu_ms[name].append(1000 * (time.process_time() - start))
    done = len(sweeps)

    def whole(inference: str, clocks: dict[str, float]) -> float:
        return round(done / (clocks["dense"] + clocks["mask_items"] + clocks["decode"] + clocks[inference]), 1)

    out = {
        "implementation": args.implementation, "split": args.split, "max_words": args.max_words,
        "sentences": done, "skipped_no_tree": skipped, "binary_items_mean": round(items_total / len(gold)),
        "wall_seconds": {key: round(value, 2) for key, value in wall.items()},
        "cpu_seconds": {key: round(value, 2) for key, value in cpu.items()},
        "one_pass_k2_cpu_ms_median": {key: round(float(np.median(v)), 2) for key, v in pass_cpu_ms.items()},
        "ep_sweeps_mean": round(float(np.mean(sweeps)), 2), "ep_converged_fraction": round(converged / done, 3),
        "whole_sentences_per_second_wall": {key: whole(key, wall) for key in ("ep", "adf", "exact")},
        "whole_sentences_per_cpu_second": {key: whole(key, cpu) for key in ("ep", "adf", "exact")},
        "load_average": os.getloadavg(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
