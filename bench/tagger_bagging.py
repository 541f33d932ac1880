"""Bagged taggers: would an ensemble of CRF taggers give the parser better tags?

Trains K taggers, each on EWT train without one contiguous K-th of it (so each has its own tag
dictionaries and weights: the jackknife's fold taggers), and averages their UPOS/XPOS marginals. Prints
each tagger's and the bag's dev accuracy, then, for a pipeline model, the dev UAS/LAS/ECE when its tagger
is replaced by the bag: best tags = the argmax of the averaged UPOS marginals, with the most probable XPOS
that some member pairs with it; with T tag samples, each draw comes from a member chosen uniformly (an
exact draw from the mixture of the members' posteriors), and the parser's marginals are averaged as
``engine.decode.tag_marginal`` does.

    python bench/tagger_bagging.py --model models/en_ewt --tag-samples 0 8 16 [--as-jackknife]

By default member k is trained with seed k and keeps its best epoch on dev; ``--as-jackknife`` trains the
members exactly as the pipeline's jackknife does (``engine.text.jackknife``: seed 0, the last epoch, dev
unseen), i.e. the taggers a trained pipeline already has in hand. The taggers are cached in ``--cache``
(default /tmp/tagger_bagging) and reused by later runs.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.tag_marginal import parse_over_tag_samples  # noqa: E402
from engine.evaluation.metrics import attachment_scores, tag_accuracy  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402
from engine.model.store import load_model, save_model  # noqa: E402
from engine.pipeline import Pipeline  # noqa: E402
from engine.text.jackknife import fold_bounds  # noqa: E402
from engine.text.tagger import Tagger  # noqa: E402

EWT = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt"


def fold_taggers(train: list, dev: list, folds: int, cache: Path, as_jackknife: bool = False) -> list[Tagger]:
    """The fold taggers: each trained without one contiguous fold, with seed k and its epoch chosen on dev;
    ``as_jackknife``: exactly as ``engine.text.jackknife`` trains them (seed 0, the last epoch, no dev)."""
    if as_jackknife:
        bounds = fold_bounds(len(train), folds)
    taggers = []
    for k in range(folds):
        path = cache / (f"jackknife-fold{k}-of-{folds}" if as_jackknife else f"fold{k}-of-{folds}")
        if (path / "manifest.json").is_file():
            stored = load_model(path)
            taggers.append(Tagger.from_state(stored.manifest["tagger"], stored.arrays))
            continue
        start = time.perf_counter()
        if as_jackknife:
            lo, hi = bounds[k]
            tagger = Tagger.train([*train[:lo], *train[hi:]], seed=0)
        else:
            part = [s for i, s in enumerate(train) if i * folds // len(train) != k]
            tagger = Tagger.train(part, dev=dev, seed=k)
        meta, arrays = tagger.to_state()
        save_model(path, {"tagger": meta}, arrays)
        print(f"fold {k}: trained in {time.perf_counter() - start:.0f} s", flush=True)
        taggers.append(tagger)
    return taggers


def bag_tags(taggers: list[Tagger], sentences: list, upos: list[str], xpos: list[str], samples: int) -> tuple:
    """(sentences with the bag's best tags, per sentence ``samples`` draws from the mixture)."""
    allowed = np.zeros((len(upos), len(xpos)), dtype=bool)
    for t in taggers:
        for u, x in t.crf.states:
            allowed[upos.index(t.upos_labels[u]), xpos.index(t.xpos_labels[x])] = True
    results = [t.tag(sentences, samples=samples) for t in taggers]
    out, draws = copy.deepcopy(sentences), []
    for i, s in enumerate(out):
        mu, mx = np.zeros((s.n, len(upos))), np.zeros((s.n, len(xpos)))
        for t, r in zip(taggers, results, strict=True):
            mu[:, [upos.index(label) for label in t.upos_labels]] += r[i].upos_marginals
            mx[:, [xpos.index(label) for label in t.xpos_labels]] += r[i].xpos_marginals
        best_u = mu.argmax(axis=1)
        best_x = np.where(allowed[best_u], mx, -1.0).argmax(axis=1)
        s.upos, s.xpos = [upos[j] for j in best_u], [xpos[j] for j in best_x]
        rng = np.random.default_rng(zlib.crc32(" ".join(s.forms).encode()))
        draws.append([results[m][i].samples[j] for j, m in enumerate(rng.integers(len(taggers), size=samples))])
    return out, draws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default=str(EWT / "en_ewt-ud-train.conllu"))
    ap.add_argument("--dev", default=str(EWT / "en_ewt-ud-dev.conllu"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--model", help="pipeline model whose parser and labeller parse with the bag's tags")
    ap.add_argument("--tag-samples", type=int, nargs="*", default=[0])
    ap.add_argument("--cache", default="/tmp/tagger_bagging")
    ap.add_argument("--as-jackknife", action="store_true",
                    help="members trained as the pipeline's jackknife trains them (seed 0, last epoch, no dev)")
    args = ap.parse_args()
    train, dev = read_conllu(args.train), read_conllu(args.dev)
    taggers = fold_taggers(train, dev, args.folds, Path(args.cache), args.as_jackknife)
    upos = sorted({label for t in taggers for label in t.upos_labels})
    xpos = sorted({label for t in taggers for label in t.xpos_labels})
    for k, t in enumerate(taggers):
        acc = t.accuracy(dev)
        print(f"fold tagger {k}: UPOS {acc['upos']:.2f} XPOS {acc['xpos']:.2f}")
    tagged, _ = bag_tags(taggers, dev, upos, xpos, 0)
    print(f"bag of {len(taggers)}: UPOS {tag_accuracy(dev, tagged):.2f} XPOS {tag_accuracy(dev, tagged, 'xpos'):.2f}",
          flush=True)
    if not args.model:
        return
    pipeline = Pipeline.load(args.model)
    parser = pipeline.parser
    config = BPConfig(max_iterations=5, schedule="serial")

    def parse(sentences: list) -> list:
        return parser.parse(sentences, config) if isinstance(parser, BPParser) else parser.parse(sentences)

    for k in args.tag_samples:
        start = time.perf_counter()
        tagged, draws = bag_tags(taggers, dev, upos, xpos, k)
        parsed = parse_over_tag_samples(tagged, draws, parse, parser.constraint, parser.labeler) if k else parse(tagged)
        scores = attachment_scores(dev, [p.heads for p in parsed], [p.deprels for p in parsed],
                                   [p.head_probs for p in parsed])
        print(f"{args.model} with the bag's tags, {k} tag samples: UAS {scores['uas']:.2f} LAS {scores['las']:.2f} "
              f"ECE {scores['ece']:.3f} ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
