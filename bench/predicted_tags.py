"""Parsers on predicted tags (EWT): the experiments behind docs/results/pipeline.md's "Tried and dropped" table.

    python bench/predicted_tags.py files --out DIR
    python bench/predicted_tags.py cold --files DIR --pruner O1 --iterations 2 --epochs 6 --out MODEL
    python bench/predicted_tags.py score --files DIR MODEL[:T] [MODEL[:T] ...] [--soup] [--subsets]
        [--tag-samples K --tagger PIPELINE] [--oracle]
    python bench/predicted_tags.py labels --model PIPELINE [--samples 4 8 16 32]
    python bench/predicted_tags.py errors --model PIPELINE [--tag-samples K]

``files`` writes ``train-jk.conllu`` (EWT train with tags jackknifed over 5 folds, as the pipeline
trains its parser) and ``dev-pred.conllu`` (EWT dev tagged by a tagger trained on all of train); the
parser is then trained on them with ``python -m engine train --train DIR/train-jk.conllu --dev
DIR/dev-pred.conllu --components parser ...``. ``cold`` trains a second-order model from zero weights
(``bench/erma.py --cold-start``) on those files. ``score`` parses the predicted-tag dev set with each
model (T BP iterations, 5 by default) and prints one JSON object of dev UAS: each model; ``--soup`` the
model whose weights are the models' mean; the beliefs averaged over all models (``--subsets``: over
every subset of two or more); ``--tag-samples K`` the beliefs of the weight average also averaged over
K tag sequences sampled from the posterior of ``--tagger``'s CRF (Viterbi tags from that tagger too);
``--oracle`` the first model given gold UPOS (XPOS predicted) and given both gold tags. ``labels``
averages a pipeline's label distributions over its tagger's best tags and K sequences sampled from the
tagger's posterior, and prints label accuracy on the gold trees and LAS on the pipeline's own trees for
each K (0 = the best tags only). ``errors`` parses dev as ``evaluate --tags predicted --tag-samples K``
does and prints, for words whose head is right, the share of wrong labels among words with a right and a
wrong UPOS, the most frequent label confusions, and how many distinct tag sequences the K draws hold
(the parses ``engine.decode.tag_marginal`` needs per sentence).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import format_sentence, read_conllu, write_conllu  # noqa: E402
from engine.decode.tag_marginal import retagged  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402
from engine.kernels.exact import TreeConstraint  # noqa: E402
from engine.kernels.mbr import mbr_decode  # noqa: E402
from engine.parser import FirstOrderParser  # noqa: E402
from engine.text.jackknife import jackknife_tags  # noqa: E402
from engine.text.tagger import Tagger  # noqa: E402

EWT = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data")) / "ud" / "en_ewt"


def files(args: argparse.Namespace) -> None:
    train = read_conllu(EWT / "en_ewt-ud-train.conllu")
    dev = read_conllu(EWT / "en_ewt-ud-dev.conllu")
    args.out.mkdir(parents=True, exist_ok=True)
    jk = jackknife_tags(train, folds=5, seed=0, progress=False)
    write_conllu([format_sentence(s, upos=s.upos, xpos=s.xpos) for s in jk], args.out / "train-jk.conllu")
    tagger = Tagger.train(train, dev=dev, seed=0)
    for s, tagged in zip(dev, tagger.tag(dev), strict=True):
        s.upos, s.xpos = list(tagged.upos), list(tagged.xpos)
    write_conllu([format_sentence(s, upos=s.upos, xpos=s.xpos) for s in dev], args.out / "dev-pred.conllu")


def cold(args: argparse.Namespace) -> None:
    from erma import second_order

    settings = argparse.Namespace(cold_start=True, second_dim=args.second_dim, lr_cll=0.05, lr_l2=0.05, l2=10.0,
                                  epochs=args.epochs, anneal=(1.0, 0.1))
    model, info = second_order(FirstOrderParser.load(args.pruner), read_conllu(args.files / "train-jk.conllu"),
                               read_conllu(args.files / "dev-pred.conllu"), args.objective, args.iterations, settings)
    model.save(args.out)
    print(json.dumps(info))


def _uas(heads: list[np.ndarray], gold: list) -> float:
    correct = sum(int((h[1:] == g.heads[1:]).sum()) for h, g in zip(heads, gold, strict=True))
    return round(100 * correct / sum(len(g.heads) - 1 for g in gold), 2)


def _mbr(beliefs: list[np.ndarray]) -> list[np.ndarray]:
    constraint = TreeConstraint("nonprojective", "single")
    out = []
    for marg in beliefs:
        valid = np.ones_like(marg, dtype=bool)
        valid[:, 0] = False
        np.fill_diagonal(valid, False)
        out.append(mbr_decode(np.where(valid, marg, -np.inf), constraint))
    return out


def _with_tags(sentences: list, tags: list[tuple[list[str], list[str]]]) -> list:
    return [retagged(s, t) for s, t in zip(sentences, tags, strict=True)]


def score(args: argparse.Namespace) -> None:
    gold = read_conllu(EWT / "en_ewt-ud-dev.conllu")
    pred = read_conllu(args.files / "dev-pred.conllu")
    specs = [(path, int(t)) for path, _, t in (m.partition(":") for m in args.models) for t in [t or 5]]
    models = [BPParser.load(path) for path, _ in specs]
    configs = [BPConfig(max_iterations=t, schedule="serial") for _, t in specs]
    report: dict[str, object] = {}
    beliefs = []
    for (path, t), model, config in zip(specs, models, configs, strict=True):
        parsed = model.parse(pred, config)
        beliefs.append([p.marginals for p in parsed])
        report[f"{path}:{t}"] = _uas([p.heads for p in parsed], gold)
    if len(models) > 1:
        sizes = range(2, len(models) + 1) if args.subsets else [len(models)]
        report["belief average"] = {"+".join(str(k) for k in combo): _uas(
            _mbr([sum(beliefs[k][j] for k in combo) / len(combo) for j in range(len(gold))]), gold)
            for r in sizes for combo in itertools.combinations(range(len(models)), r)}
    soup = copy.copy(models[0])
    soup.weights = np.mean([m.weights for m in models], axis=0)
    if args.soup:
        report["weight average"] = _uas([p.heads for p in soup.parse(pred, configs[0])], gold)
    if args.tag_samples:
        from engine.pipeline import Pipeline

        tagged = Pipeline.load(args.tagger).tagger.tag(gold, samples=args.tag_samples)
        viterbi = _with_tags(gold, [(t.upos, t.xpos) for t in tagged])
        total = [p.marginals.copy() for p in soup.parse(viterbi, configs[0])]
        for k in range(args.tag_samples):
            sampled = _with_tags(gold, [t.samples[k] for t in tagged])
            for acc, p in zip(total, soup.parse(sampled, configs[0]), strict=True):
                acc += p.marginals
        report[f"weight average, {args.tag_samples} tag samples"] = _uas(_mbr(total), gold)
    if args.oracle:
        upos = copy.deepcopy(pred)
        for s, g in zip(upos, gold, strict=True):
            s.upos = list(g.upos)
        report["gold UPOS"] = _uas([p.heads for p in models[0].parse(upos, configs[0])], gold)
        report["gold UPOS and XPOS"] = _uas([p.heads for p in models[0].parse(gold, configs[0])], gold)
    print(json.dumps(report))


def labels(args: argparse.Namespace) -> None:
    """Labels averaged over the tagger's uncertainty: the pipeline's labeller applied under its tagger's best
    tags and under each of K tag sequences sampled from the tagger's posterior, its label distributions
    averaged; label accuracy on the gold trees and LAS on the pipeline's own trees (parsed on the best tags)."""
    from engine.evaluation.metrics import attachment_scores
    from engine.pipeline import Pipeline

    gold = read_conllu(EWT / "en_ewt-ud-dev.conllu")
    pipeline = Pipeline.load(args.model)
    tagged = pipeline.tagger.tag(gold, samples=max(args.samples))
    variants = [_with_tags(gold, [(t.upos, t.xpos) for t in tagged])]
    variants += [_with_tags(gold, [t.samples[k] for t in tagged]) for k in range(max(args.samples))]
    parsed = pipeline.parser.parse(variants[0], BPConfig(max_iterations=5, schedule="serial"))
    trees = {"gold trees": [s.heads for s in gold], "parsed": [p.heads for p in parsed]}
    report: dict[str, dict[str, float]] = {}
    for name, heads in trees.items():
        dists = [pipeline.labeler.distributions(v, heads) for v in variants]
        for k in sorted({0, *args.samples}):
            mean = [sum(d[j] for d in dists[: k + 1]) / (k + 1) for j in range(len(gold))]
            chosen = [[pipeline.labeler.labels[i] for i in p.argmax(axis=1)] for p in mean]
            scores = attachment_scores(gold, heads, chosen, [np.ones(len(s.forms)) for s in gold])
            key = "label accuracy" if name == "gold trees" else "LAS"
            report.setdefault(f"{key}, {name}", {})[str(k)] = round(scores["las"], 2)
    print(json.dumps(report))


def errors(args: argparse.Namespace) -> None:
    """Label errors by tag correctness on the pipeline's own dev parses, and the distinct tag samples."""
    from collections import Counter

    from engine.decode.tag_marginal import parse_over_tag_samples
    from engine.pipeline import Pipeline

    gold = read_conllu(EWT / "en_ewt-ud-dev.conllu")
    pipeline = Pipeline.load(args.model)
    inputs = copy.deepcopy(gold)
    _, draws = pipeline.tag_and_sample(inputs, retag=True, samples=args.tag_samples)
    parser = pipeline.parser
    parsed = parse_over_tag_samples(inputs, draws, lambda b: parser.parse(b, BPConfig(max_iterations=5,
                                    schedule="serial")), parser.constraint, parser.labeler)
    right_head = Counter()
    wrong_label = Counter()
    confusions: Counter = Counter()
    for g, s, p in zip(gold, inputs, parsed, strict=True):
        for j in range(g.n):
            if p.heads[j + 1] != g.heads[j + 1]:
                continue
            tag_ok = g.upos[j] == s.upos[j]
            right_head[tag_ok] += 1
            gl, pl = g.deprels[j].split(":")[0], p.deprels[j].split(":")[0]
            if gl != pl:
                wrong_label[tag_ok] += 1
                confusions[f"{gl} -> {pl}"] += 1
    distinct = [len({(tuple(u), tuple(x)) for u, x in d} - {(tuple(s.upos), tuple(s.xpos))})
                for s, d in zip(inputs, draws, strict=True)]
    words = sum(s.n for s in inputs)
    print(json.dumps({
        "wrong labels among right heads, % (right UPOS / wrong UPOS)": [
            round(100 * wrong_label[ok] / max(right_head[ok], 1), 2) for ok in (True, False)],
        "right heads (right UPOS / wrong UPOS)": [right_head[True], right_head[False]],
        "top label confusions (gold -> predicted)": dict(confusions.most_common(10)),
        "distinct sampled sequences besides the best, per sentence": round(float(np.mean(distinct)), 2),
        "parses per sentence, weighted by length": round(1 + sum(s.n * d for s, d in zip(inputs, distinct,
                                                                                          strict=True)) / words, 2),
    }, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("files", help="jackknifed train tags and predicted dev tags")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("cold", help="a second-order model from zero weights on the predicted-tag files")
    p.add_argument("--files", type=Path, required=True)
    p.add_argument("--pruner", required=True, help="first-order model trained on DIR/train-jk.conllu")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--objective", default="l2", choices=["cll", "l2"])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--second-dim", type=int, default=1 << 22)
    p.add_argument("--out", required=True)
    p = sub.add_parser("score", help="dev UAS of models on the predicted dev tags, alone and combined")
    p.add_argument("--files", type=Path, required=True)
    p.add_argument("models", nargs="+", help="model directories, each optionally :T (BP iterations, default 5)")
    p.add_argument("--soup", action="store_true")
    p.add_argument("--subsets", action="store_true")
    p.add_argument("--tag-samples", type=int, default=0)
    p.add_argument("--tagger", default=str(ROOT / "models" / "en_ewt"), help="pipeline whose tagger samples tags")
    p.add_argument("--oracle", action="store_true")
    p = sub.add_parser("labels", help="labels averaged over tag sequences sampled from the tagger's posterior")
    p.add_argument("--model", required=True, help="a pipeline (tagger, parser, labeller)")
    p.add_argument("--samples", type=int, nargs="+", default=[8, 16, 32])
    p = sub.add_parser("errors", help="label errors by tag correctness; distinct tag samples")
    p.add_argument("--model", required=True, help="a pipeline (tagger, parser, labeller)")
    p.add_argument("--tag-samples", type=int, default=8)
    args = ap.parse_args()
    {"files": files, "cold": cold, "score": score, "labels": labels, "errors": errors}[args.command](args)


if __name__ == "__main__":
    main()
