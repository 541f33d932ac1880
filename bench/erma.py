"""Approximation-aware training against CLL (Gormley, Dredze & Eisner 2015 Fig. 3 and Table 2).

    python bench/erma.py --quick                 # < 10 min on 2 cores: one JSON object
    python bench/erma.py --iterations 1,2,4,8 --objectives cll,l2,l2+ar --first-order --test   # EWT tables
    python bench/erma.py --treebank hu_szeged --iterations 1,2,4 --objectives cll,l2 --first-order --test

Each run trains a first-order pruner by exact CLL (Matrix-Tree, single-root, non-projective), then, for
every BP iteration count T and objective, a second-order model (TREE + LINK + GRAND + SIB, arcs pruned
by and weights warm-started from the pruner; ``--cold-start``: from zero) with T serial BP iterations
in training, the epoch chosen by dev UAS at T iterations. Every objective uses the same optimiser
(AdaGrad composite mirror descent with L2, ``engine.training.erma``): ``cll`` is surrogate CLL from BP
beliefs (Smith & Eisner 2008 §7), ``l2`` the L2 distance of beliefs to the gold tree (eq. 12),
``l2+ar`` L2 then annealed risk (eq. 10-11). ``--first-order`` adds first-order models trained from
zero by exact CLL and by L2 on exact marginals (§4). ``--test`` scores each kept model once on the test split.

Data: EWT train/dev/test; Danish and Dutch have no training split here, so they train on the first
90% of their dev set and choose epochs on the last 10% (as Gormley et al. hold out 10% of training
data); Hungarian uses train/dev. ``--quick``: the first 2,000 EWT training sentences, the first 1,000
dev sentences, T in {1, 2}, CLL vs L2, 3 epochs, smaller hashed weight vectors (2^20 + 2^19).
Prints progress on stderr and one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.labeler import CountLabeler  # noqa: E402
from engine.features.extract import FeatureExtractor  # noqa: E402
from engine.features.second_order import default_second_order  # noqa: E402
from engine.features.templates import default_first_order  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402
from engine.kernels.exact import TreeConstraint  # noqa: E402
from engine.parser import FirstOrderParser  # noqa: E402
from engine.training.cll import TrainConfig, train_cll  # noqa: E402
from engine.training.erma import ErmaConfig, train_erma, train_erma_exact  # noqa: E402
from engine.training.objectives import AnnealSchedule  # noqa: E402
from engine.training.pipeline import attachment  # noqa: E402

UD = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data")) / "ud"
HELD_OUT_FROM_DEV = ("da_ddt", "nl_alpino")  # no training split: train on 90% of dev, choose on 10%


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def splits(treebank: str, train_limit: int | None, dev_limit: int | None) -> tuple[list, list, list]:
    base = UD / treebank
    if treebank in HELD_OUT_FROM_DEV:
        pool = read_conllu(base / f"{treebank}-ud-dev.conllu")
        cut = int(0.9 * len(pool))
        train, dev = pool[:cut], pool[cut:]
    else:
        train, dev = read_conllu(base / f"{treebank}-ud-train.conllu"), read_conllu(base / f"{treebank}-ud-dev.conllu")
    test = read_conllu(base / f"{treebank}-ud-test.conllu")
    return train[:train_limit], dev[:dev_limit], test


def uas(model: Any, data: list, bp: BPConfig | None = None) -> float:
    parsed = model.parse(data) if bp is None else model.parse(data, bp)
    return round(attachment(data, parsed)["uas"], 2)


def first_order(train: list, dev: list, objective: str, args: argparse.Namespace, epochs: int,
                learning_rate: float) -> tuple[FirstOrderParser, dict[str, Any]]:
    extractor = FeatureExtractor(tuple(default_first_order()), args.dim)
    parser = FirstOrderParser(extractor, np.zeros(args.dim), TreeConstraint(), CountLabeler.fit(train), {})

    def dev_uas(weights: np.ndarray) -> float:
        parser.weights = weights
        return uas(parser, dev)

    if objective == "cll":
        result = train_cll(extractor, TreeConstraint(), train, TrainConfig(epochs=epochs, batch_size=32,
                                                                       learning_rate=learning_rate, l2=args.l2),
                           dev_uas, progress=False)
    else:
        config = ErmaConfig(objective, epochs=epochs, batch_size=32, learning_rate=learning_rate, l2=args.l2,
                            anneal=AnnealSchedule(*args.anneal))
        result = train_erma_exact(extractor, TreeConstraint(), train, config, dev_uas, progress=False)
    parser.weights = result.weights
    return parser, {"dev_uas": max(h["dev"] for h in result.history), "best_epoch": result.best_epoch,
                    "seconds": round(result.seconds, 1), "history": [round(h["dev"], 2) for h in result.history]}


def second_order(pruner: FirstOrderParser, train: list, dev: list, objective: str, iterations: int,
                 args: argparse.Namespace) -> tuple[BPParser, dict[str, Any]]:
    templates = {f: tuple(default_second_order([f])) for f in ("grand", "sib")}
    model = BPParser.from_first_order(pruner, templates, args.second_dim, prune=True)
    if args.cold_start:  # pruned by the first-order model, but every weight learned from zero
        model.weights = np.zeros_like(model.weights)
    bp = BPConfig(max_iterations=iterations, schedule="serial")
    lr = args.lr_cll if objective == "cll" else args.lr_l2

    def dev_uas(weights: np.ndarray) -> float:
        saved, model.weights = model.weights, weights
        try:
            return uas(model, dev, bp)
        finally:
            model.weights = saved

    config = ErmaConfig(objective, epochs=args.epochs, batch_size=32, learning_rate=lr, l2=args.l2,
                        anneal=AnnealSchedule(*args.anneal))
    result = train_erma(model, train, config, bp, dev_uas, progress=False)
    return model, {"dev_uas": max(h["dev"] for h in result.history), "best_epoch": result.best_epoch,
                   "seconds": round(result.seconds, 1), "history": [round(h["dev"], 2) for h in result.history]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the <10-minute check: 2,000 EWT sentences, T 1 and 2, CLL/L2")
    ap.add_argument("--treebank", default="en_ewt")
    ap.add_argument("--train-sentences", type=int, help="use the first N training sentences")
    ap.add_argument("--dev-sentences", type=int, help="use the first N dev sentences")
    ap.add_argument("--iterations", default="1,2,4,8")
    ap.add_argument("--objectives", default="cll,l2,l2+ar")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--pruner-epochs", type=int, default=5, help="epochs of the first-order CLL pruner")
    ap.add_argument("--first-order-epochs", type=int, default=8, help="epochs of the first-order L2 model")
    ap.add_argument("--pruner", help="a trained first-order model to prune with and warm-start from (e.g. "
                    "models/en_ewt-o1, trained on all of EWT train) instead of training one")
    ap.add_argument("--first-order", action="store_true", help="also first-order exact CLL vs L2 (trained from zero)")
    ap.add_argument("--cold-start", action="store_true", help="second-order models start from zero weights instead "
                    "of the pruner's first-order weights (still pruned by it)")
    ap.add_argument("--test", action="store_true", help="score every kept model once on the test split")
    ap.add_argument("--dim", type=int, default=1 << 22)
    ap.add_argument("--second-dim", type=int, default=1 << 21)
    ap.add_argument("--l2", type=float, default=10.0)
    ap.add_argument("--lr-cll", type=float, default=0.05, help="AdaGrad step for CLL (second-order)")
    ap.add_argument("--lr-l2", type=float, default=0.05, help="AdaGrad step for L2 and the annealed risk")
    ap.add_argument("--lr-first-order", type=float, default=0.2)
    ap.add_argument("--anneal", type=float, nargs=2, default=(1.0, 0.1), metavar=("T0", "T1"))
    args = ap.parse_args()
    if args.quick:
        args.train_sentences, args.dev_sentences = 2000, 1000
        args.iterations, args.objectives, args.epochs, args.pruner_epochs = "1,2", "cll,l2", 3, 4
        args.dim, args.second_dim, args.first_order, args.test = 1 << 20, 1 << 19, False, False
    start = time.perf_counter()
    train, dev, test = splits(args.treebank, args.train_sentences, args.dev_sentences)
    note(f"{args.treebank}: {len(train)} train, {len(dev)} dev, {len(test)} test sentences")
    out: dict[str, Any] = {"treebank": args.treebank, "train_sentences": len(train), "dev_sentences": len(dev),
                           "uas": {}, "runs": {}}
    if args.pruner:
        pruner = FirstOrderParser.load(args.pruner)
        args.dim = pruner.extractor.dim
        info = {"model": args.pruner, "dev_uas": uas(pruner, dev)}
    else:
        pruner, info = first_order(train, dev, "cll", args, args.pruner_epochs, args.lr_first_order)
    out["runs"]["pruner"] = info
    note(json.dumps({"pruner": info}))
    if args.first_order:
        out["first_order"] = {}
        for objective in ("cll", "l2"):
            model, info = (pruner, out["runs"]["pruner"]) if objective == "cll" else first_order(
                train, dev, objective, args, args.first_order_epochs, args.lr_first_order)
            if args.test:
                info = {**info, "test_uas": uas(model, test)}
            out["first_order"][objective] = info
            note(json.dumps({"first_order": objective, **info}))
    for t in (int(x) for x in args.iterations.split(",")):
        for objective in args.objectives.split(","):
            model, info = second_order(pruner, train, dev, objective, t, args)
            if args.test:
                info = {**info, "test_uas": uas(model, test, BPConfig(max_iterations=t, schedule="serial"))}
            out["uas"].setdefault(objective, {})[str(t)] = info["dev_uas"]
            out["runs"][f"{objective}@{t}"] = info
            note(json.dumps({"objective": objective, "iterations": t, **info,
                             "elapsed": round(time.perf_counter() - start)}))
    out["seconds"] = round(time.perf_counter() - start, 1)
    out["settings"] = {k: v for k, v in vars(args).items() if k != "quick"} | {"quick": args.quick}
    if args.quick:  # the shape first: uas, train_sentences, seconds
        out = {"uas": out["uas"], "train_sentences": out["train_sentences"], "seconds": out["seconds"], **out}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
