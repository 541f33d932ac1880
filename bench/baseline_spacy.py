"""spaCy baseline: install ``spacy`` from PyPI into its own virtualenv, train a tagger, morphologizer and
parser on EWT train within a time budget, and score it on EWT dev or test with our CoNLL 2018 evaluation.

    nice -n 10 python bench/baseline_spacy.py [--split dev|test] [--budget-minutes 20] [--work DIR]

The pipeline is spaCy's own English CPU "efficiency" configuration (``spacy init config -l en -p
tagger,morphologizer,parser -o efficiency``: a shared hash-embedding CNN tok2vec, no pretrained vectors):
the tagger predicts XPOS, the morphologizer UPOS (with FEATS), the parser the tree, its labels and the
sentence boundaries. Data are converted with ``spacy convert -c conllu -n 10`` (10 sentences per
document). Training is spaCy's training loop (``train_while_improving``: the config's batcher, optimizer,
dropout and evaluation on EWT dev every 200 steps, the best checkpoint kept), stopped when the budget of
CPU time (including pipeline initialisation, not the data conversion) is spent or by spaCy's patience
(1600 steps without a better dev score), whichever comes first.

Evaluation (see ``bench/_baseline.py``): gold tokenization is a ``Doc`` built from each gold sentence's
words and spaces with the sentence boundaries fixed (no split inside), tagged and parsed; raw text is
split at its empty lines (paragraphs) and each paragraph goes through spaCy's rule-based English
tokenizer and the trained pipeline, whose parser splits sentences. spaCy has no multiword tokens: its
tokens are the words (clitics such as ``n't`` and ``'s`` become tokens of their own). Whitespace tokens
are dropped from the output (a word attached to one takes its head). Prints one JSON object.

The morphologizer's FEATS are written and scored (UFeats, AllTags, CLAS, MLAS). ``--lemmas-feats`` adds
spaCy's trainable (edit-tree) lemmatizer, ``trainable_lemmatizer``, to the pipeline, writes each word's lemma,
and reports Lemmas and BLEX too; the model goes to its own folder (``spacy-lemmas-feats``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _baseline as bl  # noqa: E402

PACKAGE = "spacy"
VERSION = "3.8.18"
PIPELINE = "tagger,morphologizer,parser"
# --lemmas-feats: spaCy's trainable (edit-tree) lemmatizer too; FEATS come from the morphologizer either way
PIPELINE_LEMMAS_FEATS = "tagger,morphologizer,trainable_lemmatizer,parser"

DRIVER = r'''
import json, re, shutil, subprocess, sys, time
from pathlib import Path

job = json.load(open(sys.argv[1]))
work = Path(job["folder"])
best = work / "model-best"
result = {}

if job["train"]:
    import spacy
    from spacy.training.initialize import init_nlp
    from spacy.training.loop import create_evaluation_callback, create_train_batches, train_while_improving, update_meta
    from spacy.schemas import ConfigSchemaTraining
    from spacy.util import registry, resolve_dot_names

    start = time.perf_counter()
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    for name in ("train", "dev"):
        subprocess.run([sys.executable, "-m", "spacy", "convert", job[name], str(corpus), "-c", "conllu",
                        "-n", "10", "--file-type", "spacy"], check=True)
    result["convert_seconds"] = time.perf_counter() - start
    cfg_path = work / "config.cfg"
    subprocess.run([sys.executable, "-m", "spacy", "init", "config", str(cfg_path), "-l", "en", "-p",
                    job["pipeline"], "-o", "efficiency", "--force"], check=True)
    overrides = {
        "paths.train": str(corpus / (Path(job["train"]).stem + ".spacy")),
        "paths.dev": str(corpus / (Path(job["dev"]).stem + ".spacy")),
        "training.max_steps": 0, "training.max_epochs": 0,
    }
    config = spacy.util.load_config(cfg_path, overrides=overrides, interpolate=False)
    (work / "config.cfg").write_text(config.to_str())

    start, cpu = time.perf_counter(), time.process_time()
    deadline = cpu + job["budget_seconds"]  # CPU seconds of this (single-threaded) process
    nlp = init_nlp(config, use_gpu=-1)
    T = registry.resolve(nlp.config.interpolate()["training"], schema=ConfigSchemaTraining)
    train_corpus, dev_corpus = resolve_dot_names(nlp.config.interpolate(), [T["train_corpus"], T["dev_corpus"]])
    optimizer = T["optimizer"]
    steps = train_while_improving(
        nlp, optimizer, create_train_batches(nlp, train_corpus, T["batcher"], T["max_epochs"]),
        create_evaluation_callback(nlp, dev_corpus, T["score_weights"]),
        dropout=T["dropout"], accumulate_gradient=T["accumulate_gradient"], patience=T["patience"],
        max_steps=T["max_steps"], eval_frequency=T["eval_frequency"], exclude=T["frozen_components"],
        annotating_components=T["annotating_components"], before_update=T["before_update"])
    stopped = "patience"
    best_info = None
    info = {}
    for batch, info, is_best in steps:
        if is_best is not None:
            s = info["other_scores"]
            print(f"epoch {info['epoch']} step {info['step']} words {info['words']} "
                  f"{time.process_time() - cpu:.0f} cpu s: tag {s.get('tag_acc', 0):.4f} pos {s.get('pos_acc', 0):.4f} "
                  f"morph {s.get('morph_acc', 0):.4f} lemma {s.get('lemma_acc', 0):.4f} "
                  f"uas {s.get('dep_uas', 0):.4f} las {s.get('dep_las', 0):.4f} sents {s.get('sents_f', 0):.4f} "
                  f"score {info['score']:.4f}{' *' if is_best else ''}", flush=True)
        if is_best:
            update_meta(T, nlp, info)
            with nlp.use_params(optimizer.averages):
                if best.exists():
                    shutil.rmtree(best)
                nlp.to_disk(best)
            best_info = {k: info[k] for k in ("epoch", "step", "words", "score")}
            best_info["scores"] = {k: v for k, v in info["other_scores"].items() if isinstance(v, float)}
        if time.process_time() >= deadline:
            stopped = "budget"
            break
    result["train_seconds"] = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - start}
    result["stopped_by"] = stopped
    result["steps"] = info.get("step", 0) + 1
    result["epochs"] = info.get("epoch", 0)
    result["best_checkpoint"] = best_info
    print("training seconds:", result["train_seconds"], "stopped by", stopped, "best", best_info, flush=True)

import spacy
from spacy.tokens import Doc

nlp = spacy.load(best)

# gold tokenization: one Doc per gold sentence from its words and spaces, no sentence split inside it
docs = [Doc(nlp.vocab, words=w, spaces=sp, sent_starts=[True] + [False] * (len(w) - 1))
        for w, sp in zip(job["gold_words"], job["gold_spaces"])]
wall, cpu = time.perf_counter(), time.process_time()
rows = []
for doc in nlp.pipe(docs):
    rows.append([[t.pos_, t.tag_, 0 if t.head.i == t.i else t.head.i + 1, t.dep_,
                  t.lemma_ if job["lemmas_feats"] else "_", str(t.morph)] for t in doc])
result["gold"] = {"rows": rows, "seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}


def conllu(doc, out):
    for sent in doc.sents:
        words = [t for t in sent if not t.is_space]
        if not words:
            continue
        index = {t.i: k + 1 for k, t in enumerate(words)}
        out.append("# text = " + re.sub(r"\s+", " ", sent.text.strip()))
        for k, t in enumerate(words, 1):
            h = t.head
            while h.is_space and h.head.i != h.i:
                h = h.head
            head = 0 if h.i == t.i or h.i not in index else index[h.i]
            dep = "root" if head == 0 else t.dep_
            misc = "_" if t.whitespace_ else "SpaceAfter=No"
            lemma, feats = (t.lemma_ or "_") if job["lemmas_feats"] else "_", str(t.morph) or "_"
            out.append(f"{k}\t{t.text}\t{lemma}\t{t.pos_ or '_'}\t{t.tag_ or '_'}\t{feats}\t{head}\t{dep}\t_\t{misc}")
        out.append("")


# raw text: paragraphs (split at empty lines) through spaCy's tokenizer and the trained pipeline
paragraphs = [p for p in re.split(r"\n\s*\n", job["raw_text"]) if p.strip()]
wall, cpu = time.perf_counter(), time.process_time()
lines = []
for doc in nlp.pipe(paragraphs):
    conllu(doc, lines)
result["raw"] = {"conllu": "\n".join(lines) + "\n", "seconds": time.perf_counter() - wall,
              "cpu_seconds": time.process_time() - cpu}
json.dump(result, open(sys.argv[2], "w"))
'''


def main() -> None:
    ap = bl.arguments(__doc__.splitlines()[0])
    args = ap.parse_args()
    train, dev, split = bl.treebank(args.data, args.split)
    work = args.work.resolve()
    folder = work / ("spacy-lemmas-feats" if args.lemmas_feats else "spacy")
    folder.mkdir(parents=True, exist_ok=True)
    pipeline = PIPELINE_LEMMAS_FEATS if args.lemmas_feats else PIPELINE
    venv_python = bl.ensure_venv(args.python, work / "venv-spacy", [f"{PACKAGE}=={VERSION}"])
    settings = folder / "settings.json"
    wanted = {"train": str(train), "dev": str(dev), "budget_minutes": args.budget_minutes, "pipeline": pipeline}
    retrain = (args.retrain or not (folder / "model-best").exists() or not settings.exists()
               or json.loads(settings.read_text()) != wanted)
    if retrain:
        settings.unlink(missing_ok=True)
    gold = bl.read_conllu(split)
    job = {"train": str(train) if retrain else None, "dev": str(dev), "folder": str(folder), "pipeline": pipeline,
           "budget_seconds": 60 * args.budget_minutes, "lemmas_feats": args.lemmas_feats, **bl.gold_job(gold)}
    result = bl.run_driver(venv_python, DRIVER, job, folder, "spacy")
    training = folder / "training.json"
    if retrain:
        training.write_text(json.dumps({k: result[k] for k in ("train_seconds", "convert_seconds", "stopped_by",
                                                                "steps", "epochs", "best_checkpoint")}))
        settings.write_text(json.dumps(wanted))
    trained = json.loads(training.read_text())
    scores = bl.evaluate(gold, result, folder, args.split,
                         bl.MORPHOLOGY_METRICS if args.lemmas_feats else bl.FEATS_METRICS)
    bl.report({
        "tool": "spaCy", "versions": bl.package_versions(venv_python, [PACKAGE, "thinc"]),
        "split": args.split, "evaluated_on": str(split), "train": str(train), "heldout": str(dev),
        "budget_minutes": args.budget_minutes, "pipeline": pipeline, "config": "spacy init config -o efficiency",
        "train_cpu_seconds": round(trained["train_seconds"]["cpu"], 1),
        "train_wall_seconds": round(trained["train_seconds"]["wall"], 1),
        "convert_seconds": round(trained["convert_seconds"], 1),
        "stopped_by": trained["stopped_by"], "steps": trained["steps"], "epochs": trained["epochs"],
        "best_checkpoint": trained["best_checkpoint"], "trained_now": retrain,
        **scores, "work": str(work),
    })


if __name__ == "__main__":
    main()
