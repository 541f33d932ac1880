"""Which higher-order factors relaxed inference (Riedel & Smith 2010) keeps, and why: the first separation
round's gains on a treebank, with the model's weights and first-order marginals behind them.

    nice -n 5 python bench/relaxed_gains.py --no-prune [--step 1] [--exact-mu 6] [--out /tmp/relaxed-gains.json]

For every sentence (every ``--step``-th): the exact TREE + LINK marginals (one Matrix-Tree solve, the first
graph of Algorithm 1), then for every GRAND and SIB factor of the full graph mu = b(L_a) b(L_b) and the gain of
eq. 3 (``factor_gain``; Rel(1, eps, B) keeps exactly the factors with gain > eps). Reports:

- the weights: quantiles of |theta|, the share with |theta| >= 0.01 ... 2 (the paper's Pruned(0.1) and
  Pruned(0.5) rows give its own shares at 0.1 and 0.5), the share of positive weights;
- the share of factors whose gain exceeds 1e-6 ... 0.1, pooled (factors over factors) and as the mean of
  per-sentence shares over the sentences that have factors, by sentence length, by family; the same share
  under §4.1's order of the KL divergence, D(p_F'+i || p_F') (closed form from mu: the tilted probability
  mu e^theta / (1 - mu + mu e^theta)); a histogram of log10 gain and of log10 mu;
- the first-order marginals' spread: the effective number of heads per word, exp(entropy);
- with ``--exact-mu K``: on every K-th sentence of 4-25 words, mu as the exact p(L_a and L_b) of the first-order
  model (the Matrix-Tree marginals conditioned on each arc) against the product, and the factors each selects.

One BLAS thread. Features and graphs as ``bench/relaxed.py`` builds them.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.graph.pairwise import PairFamily  # noqa: E402
from engine.inference.bp import BPConfig, run_bp  # noqa: E402
from engine.inference.relaxed_gain import factor_gain, pair_feature_expectations  # noqa: E402
from engine.kernels.matrix_tree import matrix_tree_marginals  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"
THRESHOLDS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
BUCKETS = (1, 10, 20, 30, 40, 50)


def reverse_gain(mu: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """D(p_F'+i || p_F'), §4.1's order: with q = mu e^theta / z, z = 1 - mu + mu e^theta, it is q theta - log z."""
    with np.errstate(over="ignore", invalid="ignore"):
        z = 1.0 - mu + mu * np.exp(theta)
        return np.maximum(mu * np.exp(theta) / z * theta - np.log(z), 0.0)


class Tally:
    """Sums over sentences (pooled and per sentence), by length bucket and family."""

    def __init__(self) -> None:
        self.pooled = {b: np.zeros(len(THRESHOLDS) + 1) for b in BUCKETS}  # counts over thresholds, then total
        self.means: dict[int, list[np.ndarray]] = {b: [] for b in BUCKETS}
        self.family: dict[str, np.ndarray] = {}
        self.reverse = np.zeros(len(THRESHOLDS))
        self.gain_hist, self.mu_hist = np.zeros(20), np.zeros(12)
        self.theta: list[np.ndarray] = []
        self.heads: list[float] = []

    def sentence(self, n: int, first: np.ndarray, families: list[PairFamily]) -> None:
        cols = first[:, 1:]
        ent = -np.where(cols > 0, cols * np.log(np.maximum(cols, 1e-300)), 0.0).sum(axis=0)
        self.heads.extend(np.exp(ent).tolist())
        counts, total = np.zeros(len(THRESHOLDS)), 0
        for fam in families:
            mu = pair_feature_expectations(fam, first)
            gain = factor_gain(mu, fam.theta)
            here = np.array([(gain > e).sum() for e in THRESHOLDS])
            counts += here
            total += fam.size
            self.family.setdefault(fam.name, np.zeros(len(THRESHOLDS) + 1))[:] += [*here, fam.size]
            self.reverse += [(reverse_gain(mu, fam.theta) > e).sum() for e in THRESHOLDS]
            self.gain_hist += np.histogram(np.log10(np.maximum(gain, 1e-300)), bins=np.arange(-12.0, 9.0))[0]
            self.mu_hist += np.histogram(np.log10(np.maximum(mu, 1e-300)), bins=np.arange(-11.0, 2.0))[0]
            self.theta.append(fam.theta[::7].copy())
        if not total:  # one word: no higher-order factor
            return
        bucket = max(b for b in BUCKETS if n >= b)
        self.pooled[bucket] += [*counts, total]
        self.means[bucket].append(counts / total)

    def report(self) -> dict[str, object]:
        theta = np.concatenate(self.theta)
        size = np.abs(theta)
        every = sum(self.pooled.values())
        shares = [s for b in BUCKETS for s in self.means[b]]
        r = [round(float(x), 5) for x in self.reverse / every[-1]]
        heads = np.round(np.quantile(self.heads, [.25, .5, .75, .9]), 2).tolist()
        length = {f"{b}+": {"sentences": len(self.means[b]),
                            "pooled": [round(float(x), 5) for x in self.pooled[b][:-1] / self.pooled[b][-1]],
                            "mean": [round(float(x), 5) for x in np.mean(self.means[b], axis=0)]}
                  for b in BUCKETS if self.means[b]}
        return {"thresholds": THRESHOLDS,
                "theta_abs_quantiles_10_25_50_75_90_99": np.round(np.quantile(size, [.1, .25, .5, .75, .9, .99]),
                                                                   3).tolist(),
                "theta_abs_share_ge_0.01_0.1_0.5_1_2": [round(float((size >= x).mean()), 4)
                                                         for x in (0.01, 0.1, 0.5, 1, 2)],
                "theta_positive_share": round(float((theta > 0).mean()), 4),
                "factors": int(every[-1]), "sentences_with_factors": len(shares),
                "pooled_share_gain_gt": [round(float(x), 5) for x in every[:-1] / every[-1]],
                "mean_share_gain_gt": [round(float(x), 5) for x in np.mean(shares, axis=0)],
                "pooled_share_reverse_kl_gt": r,
                "by_length": length,
                "by_family_pooled": {k: [round(float(x), 5) for x in v[:-1] / v[-1]] for k, v in self.family.items()},
                "log10_gain_histogram_from_-12": self.gain_hist.astype(int).tolist(),
                "log10_mu_histogram_from_-11": self.mu_hist.astype(int).tolist(),
                "effective_heads_per_word_25_50_75_90": heads}


def exact_pairs(scores: np.ndarray, single_root: bool, first: np.ndarray) -> np.ndarray:
    """p(L_a and L_b) of the first-order model for every pair of flat arcs: p(a) p(b | a), the conditional
    from the Matrix-Tree marginals with word m_a's other heads removed. O(n^5)."""
    n1 = len(scores)
    pairs = np.zeros((n1 * n1, n1 * n1))
    for h in range(n1):
        for m in range(1, n1):
            if first[h, m] <= 0.0:
                continue
            s = scores.copy()
            s[np.arange(n1) != h, m] = -np.inf
            pairs[h * n1 + m] = first[h, m] * matrix_tree_marginals(s, single_root=single_root)[1].reshape(-1)
    return pairs


def exact_check(graphs: list, epsilon: float) -> dict[str, object]:
    """Factors selected at ``epsilon`` with mu exact (``exact_pairs``) and with mu the product, over ``graphs``."""
    total = product = exact = both = 0
    ratio: list[np.ndarray] = []
    for g in graphs:
        tree, link = g.families[0], g.families[1]
        scores = np.where(g.valid, link.theta, -np.inf)
        first = matrix_tree_marginals(scores, single_root=tree.single_root)[1]
        pairs = exact_pairs(scores, tree.single_root, first)
        for fam in g.families[2:]:
            prod = pair_feature_expectations(fam, first)
            true = pairs[fam._a, fam._b]
            by_prod, by_true = factor_gain(prod, fam.theta) > epsilon, factor_gain(true, fam.theta) > epsilon
            total, product, exact = total + fam.size, product + by_prod.sum(), exact + by_true.sum()
            both += (by_prod & by_true).sum()
            ratio.append(true[prod > 1e-6] / prod[prod > 1e-6])
    q = np.quantile(np.concatenate(ratio), [.05, .25, .5, .75, .95])
    return {"sentences": len(graphs), "factors": total, "epsilon": epsilon, "share_product": round(product / total, 5),
            "share_exact": round(exact / total, 5), "selected_by_both": int(both), "selected_product": int(product),
            "selected_exact": int(exact), "exact_over_product_5_25_50_75_95": np.round(q, 3).tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt-o2"))
    ap.add_argument("--data", default=str(DEV))
    ap.add_argument("--no-prune", action="store_true", help="factor graph over all arcs (the paper's setting)")
    ap.add_argument("--step", type=int, default=1, help="every STEP-th sentence only")
    ap.add_argument("--exact-mu", type=int, default=0, metavar="K", help="also compare exact and product mu on "
                    "every K-th sentence of 4-25 words (O(n^5) each)")
    ap.add_argument("--epsilon", type=float, default=1e-4, help="threshold of the --exact-mu comparison")
    ap.add_argument("--out", help="JSON file with the report")
    args = ap.parse_args()
    parser = BPParser.load(args.model)
    if args.no_prune:
        parser.pruner = None
    gold = read_conllu(args.data)[:: args.step]
    tally = Tally()
    for batch in parser.graph_batches(gold):
        for _, g, _ in batch:
            first = run_bp(g.families[:2], g.valid, BPConfig(max_iterations=1, schedule="flooding")).beliefs
            tally.sentence(g.n, first, [f for f in g.families if isinstance(f, PairFamily)])
    out: dict[str, object] = {"model": args.model, "data": args.data, "arcs": "all" if args.no_prune else "pruned",
                              "step": args.step, **tally.report()}
    if args.exact_mu:
        short = [s for s in gold if 4 <= len(s.forms) <= 25][:: args.exact_mu]
        out["exact_mu"] = exact_check([g for b in parser.graph_batches(short) for _, g, _ in b], args.epsilon)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1), encoding="utf-8")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
