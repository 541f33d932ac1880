"""Where relaxed inference (Riedel & Smith 2010) spends its time, against full BP, by sentence length.

    nice -n 5 python bench/relaxed_phases.py --no-prune [--step 2] [--out /tmp/relaxed-phases.json]

Builds every sentence's factor graph once (not timed), then runs full BP (10 iterations) and Rel(1,
1e-4, 50) on each batch of sentences of one length (``infer_many``, as ``bench/relaxed.py`` does) with
CPU-time counters (``time.process_time``) around the steps of the controller and of BP:

- *stack full graphs*: stacking the batch's full factor families (``relaxed._stacks``);
- *gain scan*: a separation round, eq. 3 over every candidate GRAND/SIB factor (``_Stack.separate``);
- *eta*: Prop. 2 over the factors left out, from the final beliefs (``_Stack.left_out_eta``);
- *results*: the per-sentence results, eta included (``_Stack.finish``);
- *BP*: every BP solve (``run_stack``), and within it the tree factor's updates (one Matrix-Tree solve per
  stack and update) and the pairwise families' updates (gather, message kernel, scatter).

The counters nest (BP contains the tree and pairwise updates; results contain eta). Also per length
bucket: BP iterations per sentence (relaxed: every solve, the exact first one counted as one),
full BP's iterations when allowed 50 (``--uncapped``), and the fraction of GRAND/SIB factors in the
final graph, as the mean of the per-sentence fractions and pooled (factors used over factors, summed
over the bucket's sentences). One BLAS thread.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine.inference.relaxed as relaxed  # noqa: E402
from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.graph import tree  # noqa: E402
from engine.graph.pairwise import PairFamily  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"
BUCKETS = (0, 10, 20, 30, 40, 50)
COUNTERS = [  # (owner, attribute, counter)
    (relaxed, "_stacks", "stack full graphs"), (relaxed._Stack, "separate", "gain scan"),
    (relaxed._Stack, "left_out_eta", "eta"), (relaxed._Stack, "finish", "results"),
    (relaxed, "run_stack", "BP"), (tree.Tree, "propagate_flat", "tree factor"),
    (tree._TreeStack, "propagate_flat", "tree factor"), (PairFamily, "gather_flat", "pairwise"),
    (PairFamily, "propagate_flat", "pairwise"), (PairFamily, "scatter_flat", "pairwise"),
]


@contextlib.contextmanager
def counted(seconds: dict[str, float]) -> Iterator[None]:
    """Add each counted call's CPU time to ``seconds[counter]`` while inside; restores the originals."""
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in COUNTERS]  # None: inherited

    def wrap(function: Callable[..., Any], key: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[key] += time.process_time() - start
        return timed

    for owner, name, key in COUNTERS:
        setattr(owner, name, wrap(getattr(owner, name), key))
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def bucket(n: int) -> str:
    low = max(b for b in BUCKETS if b <= n)
    return f"{low}+" if low == BUCKETS[-1] else f"{low}-{low + 9}"


def run(batches: list, config: Any, lengths: list[list[int]]) -> dict[str, dict[str, float]]:
    """Per length bucket: sentences, CPU ms per sentence in total and per counter, iterations, fractions."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for graphs, ns in zip(batches, lengths, strict=True):
        seconds: dict[str, float] = defaultdict(float)
        with counted(seconds):
            start = time.process_time()
            results = relaxed.infer_many(graphs, config)
            total = time.process_time() - start
        row = out[bucket(ns[0])]
        row["sentences"] += len(graphs)
        row["ms"] += 1000 * total
        for key, value in seconds.items():
            row[f"ms {key}"] += 1000 * value
        for (families, _), result in zip(graphs, results, strict=True):
            row["iterations"] += result.iterations
            row["converged"] += result.converged
            factors = sum(f.size for f in families if isinstance(f, PairFamily) and np.isfinite(f.theta).all())
            row["fraction"] += float(getattr(result, "factor_fraction", 1.0))
            row["used"] += int(getattr(result, "factors_used", factors))
            row["total"] += factors
    return {name: summary(row) for name, row in sorted(out.items(), key=lambda item: int(item[0].split("-")[0]
                                                                                            .rstrip("+")))}


def summary(row: dict[str, float]) -> dict[str, float]:
    count = row["sentences"]
    done = {"sentences": int(count), "iterations": round(row["iterations"] / count, 2),
            "converged": round(row["converged"] / count, 3), "fraction_mean": round(row["fraction"] / count, 4),
            "fraction_pooled": round(row["used"] / max(row["total"], 1), 4)}
    for key, value in row.items():
        if key.startswith("ms"):
            done[key] = round(value / count, 3)
    done["_used"], done["_total"] = row["used"], row["total"]
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt-o2"))
    ap.add_argument("--data", default=str(DEV))
    ap.add_argument("--no-prune", action="store_true", help="factor graph over all arcs (the paper's setting)")
    ap.add_argument("--step", type=int, default=1, help="every STEP-th sentence only (quick runs)")
    ap.add_argument("--uncapped", action="store_true", help="also full BP allowed 50 iterations")
    ap.add_argument("--out", help="JSON file with the rows")
    args = ap.parse_args()
    parser = BPParser.load(args.model)
    if args.no_prune:
        parser.pruner = None
    gold = read_conllu(args.data)[:: args.step]
    batches, lengths = [], []
    for batch in parser.graph_batches(gold):
        batches.append([(graph.families, graph.valid) for _, graph, _ in batch])
        lengths.append([graph.n for _, graph, _ in batch])
    configs: list[tuple[str, Any]] = [("BP (10 iterations)", BPConfig(max_iterations=10, schedule="serial")),
                                      ("Rel(1, 1e-4, 50)", relaxed.RelaxedConfig(epsilon=1e-4, rounds=1,
                                                                                  bp_iterations=50))]
    if args.uncapped:
        configs.append(("BP (50 iterations)", BPConfig(max_iterations=50, schedule="serial")))
    rows = {name: run(batches, config, lengths) for name, config in configs}
    for name, by_length in rows.items():
        used = sum(r.pop("_used") for r in by_length.values())
        total = sum(r.pop("_total") for r in by_length.values())
        print(f"## {name}: pooled fraction {used / max(total, 1):.4f}")
        keys = sorted({k for r in by_length.values() for k in r})
        print("| words | " + " | ".join(keys) + " |")
        print("|---" * (len(keys) + 1) + "|")
        for length, r in by_length.items():
            print(f"| {length} | " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "data": args.data, "step": args.step,
                                              "arcs": "all" if args.no_prune else "pruned", "rows": rows}, indent=1),
                                  encoding="utf-8")


if __name__ == "__main__":
    main()
