"""Where the Lemmas F1 of the CoNLL 2018 evaluation is lost: a breakdown of a system's lemma errors against gold.

    python -m engine parse --model models/en_ewt --input-format text --input DEV.txt --output /tmp/sys.conllu
    python bench/lemma_errors.py --gold ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu --system /tmp/sys.conllu

(``DEV.txt``: the treebank's raw text, ``engine.text.treebank_text.raw_text``, as ``evaluate --from-text``
reads it; ``--write-text DEV.txt`` writes it from ``--gold`` and exits.) Words are aligned as
``engine/evaluation/ud_align.py`` aligns them. Reported: gold, system and aligned words; Lemmas F1 and what it
would be with every aligned lemma right (the tokenizer's share of the loss); the errors on aligned words by
whether the UPOS was right, whether only the case differs, whether the word starts its system sentence,
and whether the model's lemmatizer dictionary knew the (form, tags) (``--model``: else the classifier
chose); and the most frequent errors of each kind. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.evaluation import ud_align  # noqa: E402
from engine.pipeline import Pipeline  # noqa: E402
from engine.text.treebank_text import raw_text  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gold", required=True)
    ap.add_argument("--system", help="the system's CoNLL-U (parse output)")
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt"), help="pipeline whose lemmatizer made it")
    ap.add_argument("--write-text", help="write the gold treebank's raw text here and exit")
    ap.add_argument("--examples", type=int, default=10)
    args = ap.parse_args()
    gold = read_conllu(args.gold)
    if args.write_text:
        Path(args.write_text).write_text(raw_text(gold), encoding="utf-8")
        return
    if not args.system:
        ap.error("--system is needed")
    system = ud_align.sentences_from_conllu(Path(args.system).read_text(encoding="utf-8"))
    print(json.dumps(breakdown(gold, system, Pipeline.load(args.model).lemmatizer, args.examples)))


def breakdown(gold: list, system: list, lemmatizer: object, examples: int) -> dict:
    """The report of the module docstring for ``system`` against ``gold``."""
    g, s = ud_align._corpus(gold, "gold"), ud_align._corpus(system, "system")
    pairs = ud_align._align(g.words, s.words)
    starts = {sum(x.n for x in system[:k]) for k in range(len(system))}
    known = None
    if lemmatizer is not None:
        known, _ = lemmatizer.classifier.lookup([w.form for w in s.words], [w.upos for w in s.words],  # type: ignore
                                                [w.xpos for w in s.words])
    kinds: Counter[str] = Counter()
    shown: dict[str, Counter[str]] = {}
    right = 0
    for gi, si in pairs:
        gw, sw = g.words[gi], s.words[si]
        if gw.lemma == "_" or gw.lemma == sw.lemma:
            right += 1
            continue
        kind = ("upos right" if gw.upos == sw.upos else "upos wrong") + \
            (", case only" if gw.lemma.lower() == sw.lemma.lower() else "") + \
            (", sentence start" if si in starts else "") + \
            ("" if known is None else ", dictionary" if known[si] >= 0 else ", classifier")
        kinds[kind] += 1
        shown.setdefault(kind, Counter())[f"{sw.form} {gw.upos}>{sw.upos} {gw.lemma}>{sw.lemma}"] += 1
    ng, ns, na = len(g.words), len(s.words), len(pairs)
    return {"gold_words": ng, "system_words": ns, "aligned_words": na,
            "lemmas_f1": round(200.0 * right / (ng + ns), 2),
            "lemmas_f1_if_every_aligned_lemma_right": round(200.0 * na / (ng + ns), 2),
            "aligned_lemma_errors": na - right,
            "errors": {k: {"count": n, "examples": dict(shown[k].most_common(examples))}
                       for k, n in kinds.most_common()}}


if __name__ == "__main__":
    main()
