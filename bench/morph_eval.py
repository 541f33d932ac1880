"""Train the lemmatizer or the FEATS component alone with given settings and print its dev accuracy, with the
gold tags and with the tags of a pipeline model's tagger (the dev sentences keep their gold DEPREL).

    python bench/morph_eval.py lemmatizer '{"min_class_count": 5, "min_count": 3}'
    python bench/morph_eval.py morph '{"min_class_count": 5, "min_count": 5, "dict_share": 0.9, "epochs": 2}'

The settings are keyword arguments of ``WordClassifier.train`` (``engine.text.word_classifier``) and, for the
lemmatizer, its ``lexicon_*`` settings (``engine.text.lemmatizer``); the shipped ones are in
``engine/training/morphology.py``. ``--lexicon-bonus 0,3,5`` scores the one trained lemmatizer under each
bonus (the lexicon is built at training; the bonus only steers the choice). Prints one JSON object.

    python bench/morph_eval.py lemmatizer '{"min_class_count": 8, "min_count": 10, "lexicon_candidates": 5,
        "lexicon_min_length": 3}' --lexicon-bonus 0,2,3,4,5,6,8
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.pipeline import Pipeline, component_class  # noqa: E402

EWT = ROOT.parent / "shared" / "data" / "ud" / "en_ewt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("component", choices=["lemmatizer", "morph"])
    ap.add_argument("settings", nargs="?", default="{}", help="JSON object of training settings")
    ap.add_argument("--train", default=str(EWT / "en_ewt-ud-train.conllu"))
    ap.add_argument("--dev", default=str(EWT / "en_ewt-ud-dev.conllu"))
    ap.add_argument("--tagger-model", default=str(ROOT / "models" / "en_ewt"), help="pipeline whose tagger tags dev")
    ap.add_argument("--lexicon-bonus", help="lemmatizer: comma-separated lexicon bonuses to score it under")
    args = ap.parse_args()
    settings = json.loads(args.settings)
    train, dev = read_conllu(args.train), read_conllu(args.dev)
    tagged = copy.deepcopy(dev)
    tagger = Pipeline.load(args.tagger_model).tagger
    for s, result in zip(tagged, tagger.tag(tagged), strict=True):
        s.upos, s.xpos = list(result.upos), list(result.xpos)
    start = time.perf_counter()
    part = component_class(args.component).train(train, **settings)
    out: dict = {"component": args.component, "settings": settings,
                 "train_seconds": round(time.perf_counter() - start, 1),
                 "weights_shape": list(part.classifier.model.weights.shape)}
    if args.lexicon_bonus and args.component == "lemmatizer":
        lemmatizer = type(part)
        out["by_lexicon_bonus"] = {
            b: accuracy(lemmatizer(part.classifier, {**part.info, "lexicon_bonus": float(b)}, part.lexicon), dev,
                        tagged, args.component) for b in args.lexicon_bonus.split(",")}
    else:
        out.update(accuracy(part, dev, tagged, args.component))
    print(json.dumps(out))


def accuracy(part: object, dev: list, tagged: list, component: str) -> dict[str, float]:
    """Word accuracy (percent) of ``part`` on dev with the gold tags and with the tagger's."""
    gold_values = [s.lemmas if component == "lemmatizer" else s.feats for s in dev]
    words = sum(s.n for s in dev)
    out = {}
    for name, sentences in (("gold_tags", dev), ("predicted_tags", tagged)):
        if component == "lemmatizer":
            predicted = part.lemmatize(sentences)  # type: ignore[attr-defined]
        else:
            predicted = [bundles for bundles, _ in part.analyse(sentences)]  # type: ignore[attr-defined]
        right = sum(a == b for g, p in zip(gold_values, predicted, strict=True) for a, b in zip(g, p, strict=True))
        out[name] = round(100.0 * right / words, 2)
    return out


if __name__ == "__main__":
    main()
