"""Relaxed marginal inference (Riedel & Smith 2010) against full BP, in the form of their Tables 1 and 2.

    nice -n 5 python bench/relaxed.py --model models/en_ewt-o2 \\
        --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu --out /tmp/relaxed-ewt.json [--no-prune]
    python bench/relaxed.py --bounds [--cases 500]

Table mode: every sentence's factor graph is built once (features are not timed), then each
configuration runs on the graphs of each batch of sentences of one length, stacked as the parser runs
them (``infer_many``; ``--one-at-a-time`` runs each sentence alone): full BP (10 iterations; every BP
run stops early once no belief changes by more than ``--tolerance`` in an iteration), Rel(R, epsilon,
B) = (rounds, gain threshold, BP iterations per round) and Pruned(t). For each: UAS (every word, MBR
tree under the beliefs); inference time per sentence (``engine.inference.relaxed.infer_many`` alone: a
batch's CPU time divided by its sentences, the least of ``--repeat`` runs; no feature extraction, no
decoding; with one BLAS thread this is the time on an idle core, not counting the time other jobs on
a shared machine take the core away); the fraction of the higher-order factors in the final graph
(mean over sentences, and pooled: all sentences' factors used over all their factors; the JSON also has the
mean over the sentences that have higher-order factors, ``factor_fraction_with_factors``: a one-word sentence
has none, and its fraction counts as 1 in the mean); the mean
absolute error of the beliefs against full BP's (over the sentence's
link variables, then over sentences); mean eta and BP iterations. ``--no-prune`` builds the graph over
all arcs (the paper's setting) instead of those the model's first-order pruner keeps. One BLAS
thread. Writes per-sentence times for ``relaxed_figure.py``.

Bounds mode: random TREE + LINK + GRAND + SIB models of 2-5 words; relaxed inference picks the
sub-graph, then every tree is enumerated. Reports how often the full model's exact arc marginals lie
inside the Prop. 2 interval computed (a) from the sub-graph's exact marginals (a theorem: always),
(b) from BP's beliefs with the product approximation (what the parser reports), and (c) with the
paper's printed lower end from exact marginals; and how often D(p_F' || p_F) <= eta.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy.special import logsumexp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.graph.family import all_arcs  # noqa: E402
from engine.graph.hard import Link  # noqa: E402
from engine.graph.oracle import tree_log_weights  # noqa: E402
from engine.graph.pairwise import PairFamily, grand_arcs, sib_arcs  # noqa: E402
from engine.graph.tree import Tree  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402
from engine.inference.relaxed import (  # noqa: E402
    InferenceConfig,
    PrunedConfig,
    RelaxedConfig,
    eta_bound,
    infer,
    infer_many,
    marginal_interval,
    relaxed_bp,
)

DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"


def configs(tolerance: float, caps: list[int] | None = None,
            epsilons: list[float] | None = None) -> list[tuple[str, InferenceConfig]]:
    """The rows of Riedel & Smith Tables 1-2, then Rel(1, 1e-4, B) for each B of ``caps`` and Rel(1, eps, 50) for
    each eps of ``epsilons``; every BP run stops early at the same ``tolerance``."""
    extra: list[tuple[str, InferenceConfig]] = [
        (f"Rel(1, 1e-4, {b})", RelaxedConfig(epsilon=1e-4, rounds=1, bp_iterations=b, tolerance=tolerance))
        for b in caps or []]
    extra += [(f"Rel(1, {e:g}, 50)", RelaxedConfig(epsilon=e, rounds=1, bp_iterations=50, tolerance=tolerance))
              for e in epsilons or []]
    rows: list[tuple[str, InferenceConfig]] = [
        ("BP (10 iterations)", BPConfig(max_iterations=10, schedule="serial", tolerance=tolerance)),
        ("Rel(inf, 1e-4, 5)", RelaxedConfig(epsilon=1e-4, rounds=None, bp_iterations=5, tolerance=tolerance)),
        ("Rel(inf, 1e-4, 50)", RelaxedConfig(epsilon=1e-4, rounds=None, bp_iterations=50, tolerance=tolerance)),
        ("Rel(1, 1e-4, 50)", RelaxedConfig(epsilon=1e-4, rounds=1, bp_iterations=50, tolerance=tolerance)),
        ("Rel(inf, 0.1, 50)", RelaxedConfig(epsilon=0.1, rounds=None, bp_iterations=50, tolerance=tolerance)),
        ("Pruned(0.1)", PrunedConfig(threshold=0.1, bp_iterations=10, tolerance=tolerance)),
        ("Pruned(0.5)", PrunedConfig(threshold=0.5, bp_iterations=10, tolerance=tolerance)),
    ]
    return rows + extra


def table(args: argparse.Namespace) -> None:
    parser = BPParser.load(args.model)
    if args.no_prune:
        parser.pruner = None
    gold = read_conllu(args.data)
    if args.max_sentences:
        gold = gold[: args.max_sentences]
    rows_config = configs(args.tolerance, args.caps, args.epsilons)
    if args.configs:  # full BP (the reference of every speed-up and error) and the named rows
        rows_config = rows_config[:1] + [(name, c) for name, c in rows_config[1:] if name in args.configs]
    names = [name for name, _ in rows_config]
    sums = {name: {"correct": 0, "seconds": 0.0, "fraction": 0.0, "error": 0.0, "eta": 0.0, "iterations": 0,
                   "used": 0, "total": 0, "with": 0.0, "sentences_with": 0} for name in names}
    per_sentence: list[dict[str, object]] = []
    words = 0
    started = time.perf_counter()
    for batch in parser.graph_batches(gold):
        graphs = [(graph.families, graph.valid) for _, graph, _ in batch]
        records: list[dict[str, object]] = [{"n": graph.n, "seconds": {}} for _, graph, _ in batch]
        words += sum(graph.n for _, graph, _ in batch)
        reference = None
        for name, config in rows_config:
            seconds = np.inf
            for _ in range(args.repeat):  # the least CPU time of --repeat runs: the machine is shared
                start = time.process_time()
                results = [infer(f, v, config) for f, v in graphs] if args.one_at_a_time else infer_many(graphs, config)
                seconds = min(seconds, (time.process_time() - start) / len(batch))
            if reference is None:
                reference = [r.beliefs for r in results]
            s = sums[name]
            for (i, graph, _), result, ref, record in zip(batch, results, reference, records, strict=True):
                parsed = parser.decode(gold[i], graph, result)
                s["correct"] += int((parsed.heads[1:] == gold[i].heads[1:]).sum())
                s["seconds"] += seconds
                s["fraction"] += float(getattr(result, "factor_fraction", 1.0))
                total = sum(f.size for f in graph.families if isinstance(f, PairFamily) and np.isfinite(f.theta).all())
                s["used"] += int(getattr(result, "factors_used", total))
                s["total"] += total
                if total:  # a one-word sentence has no higher-order factor (its fraction counts as 1 above)
                    s["with"] += float(getattr(result, "factor_fraction", 1.0))
                    s["sentences_with"] += 1
                s["error"] += float(np.abs(result.beliefs - ref)[graph.valid].mean())
                s["eta"] += float(getattr(result, "eta", 0.0))
                s["iterations"] += result.iterations
                record["seconds"][name] = seconds  # type: ignore[index]
        if len(per_sentence) // 200 != (len(per_sentence) + len(batch)) // 200:
            print(f"{len(per_sentence) + len(batch)} sentences, {time.perf_counter() - started:.0f} s", file=sys.stderr)
        per_sentence.extend(records)
    count = len(per_sentence)
    rows = {name: {"uas": round(100 * s["correct"] / words, 2),
                   "ms_per_sentence": round(1000 * s["seconds"] / count, 3),
                   "factor_fraction": round(s["fraction"] / count, 4),
                   "factor_fraction_pooled": round(s["used"] / max(s["total"], 1), 4),
                   "factor_fraction_with_factors": round(s["with"] / max(s["sentences_with"], 1), 4),
                   "mae_vs_bp": round(s["error"] / count, 5),
                   "eta_mean": round(s["eta"] / count, 2), "bp_iterations": round(s["iterations"] / count, 2)}
            for name, s in sums.items()}
    base = rows[names[0]]["ms_per_sentence"]
    for row in rows.values():
        row["speedup"] = round(base / row["ms_per_sentence"], 2)
    out = {"model": args.model, "data": args.data, "arcs": "all" if args.no_prune else "pruned",
           "tolerance": args.tolerance, "clock": "process CPU time (time.process_time)",
           "stacked": not args.one_at_a_time, "repeat": args.repeat,
           "sentences": count, "words": words, "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
           f"Python {platform.python_version()}, numpy {np.__version__}", "rows": rows, "per_sentence": per_sentence}
    if args.out:
        Path(args.out).write_text(json.dumps(out), encoding="utf-8")
    print(json.dumps({k: v for k, v in out.items() if k != "per_sentence"}, indent=1))
    print("| configuration | UAS | ms / sentence | speed-up | factors used (mean, pooled) | MAE vs BP | mean eta | "
          "BP iterations |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['uas']:.2f} | {r['ms_per_sentence']:.2f} | {r['speedup']:.1f}x | "
              f"{100 * r['factor_fraction']:.1f}%, {100 * r['factor_fraction_pooled']:.1f}% | {r['mae_vs_bp']:.4f} | "
              f"{r['eta_mean']:.1f} | {r['bp_iterations']:.1f} |")


# -- bounds mode --------------------------------------------------------------------------------------
def _random_model(rng: np.random.Generator) -> tuple[int, list, np.ndarray]:
    n = int(rng.integers(2, 6))
    valid = all_arcs(n)
    scale = float(rng.choice([0.3, 1.0, 2.0]))
    families: list = [Tree(n, valid, projective=False, single_root=True),
                      Link(n, valid, rng.normal(scale=2.0, size=(n + 1, n + 1)))]
    for name, arcs in (("grand", grand_arcs(n, valid)), ("sib", sib_arcs(n, valid))):
        families.append(PairFamily(n, valid, arcs, rng.normal(scale=scale, size=arcs.shape[1]), name))
    return n, families, valid


def _exact(families: list, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ys, log_w = tree_log_weights(families, n, single_root=True, projective=False)
    log_p = log_w - logsumexp(log_w)
    return ys, log_p, np.tensordot(np.exp(log_p), ys.astype(float), axes=1)


def bounds(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    inside = {"exact": 0, "bp": 0, "paper_exact": 0}
    kl_ok = arcs = cases = 0
    etas = []
    for _ in range(args.cases):
        n, families, valid = _random_model(rng)
        result = relaxed_bp(families, valid, RelaxedConfig(epsilon=args.epsilon, rounds=None, bp_iterations=50))
        sub = families[:2] + [f.select(result.selected[f.name]) for f in families[2:]]
        left = [f.select(~result.selected[f.name]) for f in families[2:]]
        ys, log_q, mu_sub = _exact(sub, n)
        _, log_p, mu_full = _exact(families, n)
        flat, q = ys.reshape(len(ys), -1), np.exp(log_q)
        eta = sum(eta_bound(q @ (flat[:, f._a] & flat[:, f._b]), f.theta) for f in left)
        kl_ok += int(float(np.dot(q, log_q - log_p)) <= eta + 1e-12)
        etas.append(eta)
        m = valid
        for key, (lo, hi) in (("exact", marginal_interval(mu_sub, eta)),
                              ("bp", marginal_interval(result.beliefs, result.eta)),
                              ("paper_exact", (np.clip(mu_sub - np.expm1(eta) * mu_sub, 0, 1),
                                               np.clip(mu_sub + np.expm1(eta) * mu_sub, 0, 1)))):
            inside[key] += int(((lo[m] <= mu_full[m] + 1e-12) & (mu_full[m] <= hi[m] + 1e-12)).sum())
        arcs += int(m.sum())
        cases += 1
    print(json.dumps({"cases": cases, "arcs": arcs, "epsilon": args.epsilon, "seed": args.seed,
                      "kl_le_eta": kl_ok / cases, "eta_median": float(np.median(etas)),
                      "covered_exact_submodel": inside["exact"] / arcs, "covered_bp_beliefs": inside["bp"] / arcs,
                      "covered_paper_lower_end_exact": inside["paper_exact"] / arcs}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt-o2"))
    ap.add_argument("--data", default=str(DEV))
    ap.add_argument("--no-prune", action="store_true", help="factor graph over all arcs (no first-order pruning)")
    ap.add_argument("--max-sentences", type=int, help="the first N sentences only (quick runs)")
    ap.add_argument("--caps", nargs="+", type=int, metavar="B", help="add a row Rel(1, 1e-4, B) for each B (the "
                    "paper's rows cap each relaxed solve at 5 or 50 iterations, full BP at 10)")
    ap.add_argument("--epsilons", nargs="+", type=float, metavar="EPS", help="add a row Rel(1, EPS, 50) for each "
                    "EPS (the paper's rows use 1e-4 and 0.1)")
    ap.add_argument("--configs", nargs="+", metavar="NAME", help="run only these rows (as printed, e.g. "
                    "'Rel(1, 1e-4, 50)') besides full BP, the reference")
    ap.add_argument("--one-at-a-time", action="store_true", help="run each sentence alone (default: the sentences "
                    "of one length stacked, as the parser runs them; times are then a stack's time per sentence)")
    ap.add_argument("--repeat", type=int, default=3, help="run each configuration this many times on each batch and "
                    "keep the least CPU time")
    ap.add_argument("--tolerance", type=float, default=BPConfig.tolerance, help="BP stops once no belief changes "
                    "by more in an iteration (default: BPConfig's); the same for every configuration")
    ap.add_argument("--out", help="JSON file with the table and per-sentence times (for relaxed_figure.py)")
    ap.add_argument("--bounds", action="store_true", help="check Prop. 2 on random small models instead")
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--epsilon", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    bounds(args) if args.bounds else table(args)


if __name__ == "__main__":
    main()
