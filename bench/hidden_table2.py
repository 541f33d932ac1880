"""Smith & Smith (2007) Table 2 replica: first-order CLL with and without latent edge clusters (§5.1).

Each run trains a first-order parser with the CLI's training path (``engine.training.pipeline.train_model``, as
``python -m engine train --components parser --hidden-clusters K`` does; gold tags, count-based labels, best
epoch chosen on dev as the CLI chooses it) and scores dev with the paper's three decoders:

- ``map``: the most probable tree under the marginalised edge scores (Chu-Liu-Edmonds / Eisner);
- ``mbr``: the parser's own decoding, the tree maximising the expected number of correct heads (§4);
- ``max-z``: each edge scored with its single most likely cluster, ``max_z theta . f(h, m, z)``, then the most
  probable tree (the paper's footnote 3 decoder; equal to ``map`` without clusters).

UAS counts punctuation (as every figure of this repository); LAS is the count-based labeller's. One JSON row per
run goes to ``--results`` (the model to ``/tmp``, deleted afterwards unless ``--keep``), so that a table survives
an interrupted series; ``--table`` prints the markdown table of the rows there.

    python bench/hidden_table2.py run --treebank en_ewt --clusters 1 --seed 0 --max-sentences 4000 --epochs 5
    python bench/hidden_table2.py table --results /tmp/hidden-table2
    python bench/hidden_table2.py compare --treebank en_ewt --a MODEL_A --b MODEL_B   # models kept by --keep
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.bp_parser import load_any  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.evaluation.metrics import attachment_scores  # noqa: E402
from engine.kernels.mbr import best_tree  # noqa: E402
from engine.parser import FirstOrderParser  # noqa: E402
from engine.scoring.hidden import cluster_scores, marginalise_clusters  # noqa: E402
from engine.training.pipeline import TrainOptions, train_model  # noqa: E402

UD = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud"
SPLITS = {"en_ewt": ("en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu"),
          "hu_szeged": ("hu_szeged-ud-train.conllu", "hu_szeged-ud-dev.conllu")}


def decode(parser: FirstOrderParser, dev: list[Any]) -> dict[str, list[np.ndarray]]:
    """Heads of every dev sentence under map, mbr and max-z decoding."""
    out: dict[str, list[Any]] = {"map": [None] * len(dev), "max-z": [None] * len(dev)}
    out["mbr"] = [p.heads for p in parser.parse(dev, labels=False)]
    for idx, scores in parser.batches(dev):
        if parser.clusters is None:
            best_z = scores
        else:
            best_z = cluster_scores(parser.weights, parser.extractor.extract([dev[i] for i in idx])).max(axis=0)
        for j, i in enumerate(idx):
            out["map"][i] = best_tree(scores[j], parser.constraint)
            out["max-z"][i] = best_tree(best_z[j], parser.constraint)
    assert all(h is not None for h in out["map"])
    return out


def cluster_use(parser: FirstOrderParser, dev: list[Any]) -> dict[str, float]:
    """How far the clusters split the gold dev edges: the mean entropy of p(z | gold edge) over log K (1: the
    clusters are interchangeable, 0: each edge has one cluster) and the mean largest posterior."""
    entropy, top = [], []
    for idx, _ in parser.batches(dev):
        chosen = [dev[i] for i in idx]
        _, post = marginalise_clusters(cluster_scores(parser.weights, parser.extractor.extract(chosen)))
        for j, s in enumerate(chosen):
            p = post[:, j, np.asarray(s.heads)[1:], np.arange(1, len(s.heads))]  # (K, n): the gold edges
            entropy.extend(-(p * np.log(np.maximum(p, 1e-300))).sum(axis=0) / np.log(len(p)))
            top.extend(p.max(axis=0))
    return {"gold_edge_entropy": float(np.mean(entropy)), "gold_edge_top_posterior": float(np.mean(top))}


def run(args: argparse.Namespace) -> None:
    train_file, dev_file = (UD / args.treebank / name for name in SPLITS[args.treebank])
    options = TrainOptions(hidden_clusters=args.clusters, epochs=args.epochs, seed=args.seed, dim=args.dim,
                           max_sentences=args.max_sentences, components=("parser",))
    out = Path(args.models) / f"{args.treebank}-k{args.clusters}-s{args.seed}"
    t0, c0 = time.perf_counter(), time.process_time()
    summary = train_model(train_file, dev_file, out, options, progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    manifest = json.loads((out / "manifest.json").read_text())
    history = manifest["training"]["history"]
    parser = load_any(out)
    assert isinstance(parser, FirstOrderParser)
    dev = read_conllu(dev_file)
    heads = decode(parser, dev)
    labelled = parser.parse(dev)
    row = {"treebank": args.treebank, "clusters": args.clusters, "seed": args.seed, "epochs": args.epochs,
           "max_sentences": args.max_sentences, "train_sentences": manifest["training"]["train_sentences"],
           "dim": args.dim, "best_epoch": summary["best_epoch"],
           "epoch_seconds": [round(h["seconds"], 1) for h in history],
           "dev_by_epoch": [round(h["dev"], 2) for h in history],
           "train_seconds": summary["seconds"], "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
           "las_mbr": attachment_scores(dev, [p.heads for p in labelled], [p.deprels for p in labelled],
                                        [p.head_probs for p in labelled])["las"]}
    if parser.clusters is not None:
        row.update(cluster_use(parser, dev))
    for name, predicted in heads.items():
        ok = np.concatenate([np.asarray(h[1:]) == np.asarray(s.heads)[1:] for h, s in zip(predicted, dev, strict=True)])
        row[f"uas_{name}"] = 100.0 * float(ok.mean())
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{out.name}.json").write_text(json.dumps(row, indent=1) + "\n")
    print(json.dumps(row))
    if not args.keep:
        shutil.rmtree(out)


def table(args: argparse.Namespace) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(Path(args.results).glob("*.json"))]
    print("| treebank | clusters | seed | map | mbr | max-z | LAS (mbr) | best epoch | s/epoch | train s "
          "| train CPU s | H(z given gold edge) / log K |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["treebank"], r["clusters"], r["seed"])):
        print(f"| {r['treebank']} ({r['train_sentences']} train) | {r['clusters'] if r['clusters'] > 1 else 'none'} "
              f"| {r['seed']} | {r['uas_map']:.2f} | {r['uas_mbr']:.2f} | {r['uas_max-z']:.2f} | {r['las_mbr']:.2f} "
              f"| {r['best_epoch']} | {np.mean(r['epoch_seconds']):.1f} | {r['train_seconds']:.0f} "
              f"| {r['cpu_seconds']:.0f} | {_entropy(r)} |")
    summary(rows)


def summary(rows: list[dict[str, Any]]) -> None:
    """Means over the seeds of each (treebank, clusters) arm, and each arm's difference from the no-cluster arm
    with the same seeds (paired by seed: the same batch order)."""
    print("\n| treebank | clusters | seeds | map | mbr | max-z | LAS (mbr) | mbr - none, per seed | train CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    arms: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault((r["treebank"], r["clusters"]), []).append(r)
    for (treebank, k), runs in sorted(arms.items()):
        base = {r["seed"]: r for r in arms.get((treebank, 1), [])}
        diffs = [f"{r['uas_mbr'] - base[r['seed']]['uas_mbr']:+.2f}" for r in sorted(runs, key=lambda r: r["seed"])
                 if r["seed"] in base] if k > 1 else []
        mean = {key: np.mean([r[key] for r in runs]) for key in ("uas_map", "uas_mbr", "uas_max-z", "las_mbr",
                                                                  "cpu_seconds")}
        print(f"| {treebank} | {k if k > 1 else 'none'} | {','.join(str(r['seed']) for r in runs)} "
              f"| {mean['uas_map']:.2f} | {mean['uas_mbr']:.2f} | {mean['uas_max-z']:.2f} | {mean['las_mbr']:.2f} "
              f"| {' '.join(diffs) or '-'} | {mean['cpu_seconds']:.0f} |")


def _entropy(row: dict[str, Any]) -> str:
    """The normalised cluster entropy of a row, or a dash (no clusters, or not measured in that run)."""
    return f"{row['gold_edge_entropy']:.3f}" if "gold_edge_entropy" in row else "-"


def compare(args: argparse.Namespace) -> None:
    """McNemar's exact test on the words whose mbr head only one of two kept models gets right (paired by word)."""
    from scipy.stats import binomtest

    dev = read_conllu(UD / args.treebank / SPLITS[args.treebank][1])
    right = []
    for directory in (args.a, args.b):
        parser = load_any(directory)
        assert isinstance(parser, FirstOrderParser)
        right.append(np.concatenate([p.heads[1:] == np.asarray(s.heads)[1:]
                                     for p, s in zip(parser.parse(dev, labels=False), dev, strict=True)]))
    only_a, only_b = int((right[0] & ~right[1]).sum()), int((right[1] & ~right[0]).sum())
    p_value = binomtest(min(only_a, only_b), only_a + only_b).pvalue if only_a + only_b else 1.0
    print(json.dumps({"a": args.a, "b": args.b, "words": len(right[0]), "uas_a": 100 * float(right[0].mean()),
                      "uas_b": 100 * float(right[1].mean()), "only_a_right": only_a, "only_b_right": only_b,
                      "mcnemar_exact_p": p_value}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train and score one arm with one seed")
    p.add_argument("--treebank", choices=sorted(SPLITS), required=True)
    p.add_argument("--clusters", type=int, default=1, help="K latent clusters per edge (1: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--dim", type=int, default=1 << 22)
    p.add_argument("--max-sentences", type=int, default=None)
    p.add_argument("--models", default="/tmp/hidden-table2-models")
    p.add_argument("--results", default="/tmp/hidden-table2")
    p.add_argument("--keep", action="store_true", help="keep the trained model under --models")
    p = sub.add_parser("table", help="the markdown table of the rows in --results")
    p.add_argument("--results", default="/tmp/hidden-table2")
    p = sub.add_parser("compare", help="McNemar's test between two models kept by run --keep")
    p.add_argument("--treebank", choices=sorted(SPLITS), required=True)
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    args = ap.parse_args()
    {"run": run, "table": table, "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
