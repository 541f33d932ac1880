"""UDPipe 1 baseline: install ``ufal.udpipe`` from PyPI into its own virtualenv, train tokenizer, tagger and
parser on EWT train within a time budget, and score it on EWT dev or test with our CoNLL 2018 evaluation.

    nice -n 10 python bench/baseline_udpipe.py [--split dev|test] [--budget-minutes 20] [--work DIR]

Training is UDPipe's ``morphodita_parsito`` method in three stages (so each is timed): the GRU tokenizer
and multiword splitter; one MorphoDiTa tagger model for UPOS and XPOS (no lemmas or features: they are not
scored, and leaving them out makes tagger iterations cheaper); the Parsito transition parser (projective,
dynamic oracle) trained on the tags of that tagger (``use_gold_tags=0``). EWT dev is the held-out set for
every stage's early stopping. UDPipe's full default training (100 tokenizer epochs, 20 tagger and 10
parser iterations with the search-based oracle) takes hours here; the iteration counts below, with
``structured_interval=0`` (no search-based oracle: each parser iteration 2-3 times cheaper), were chosen
to fit the default 20 CPU minutes on this project's machine (one core of an AMD EPYC: 19.3 minutes,
three quarters of it the parser; CPU time stretches on a loaded machine: a tagger iteration took about
1.5 times as long with both cores busy) and scale linearly with ``--budget-minutes`` (at least 1 each).
UDPipe cannot stop on a clock, so the JSON reports the CPU seconds each stage took.
``--tokenizer/--tagger/--parser`` replace the options. ``--lemmas-feats`` trains UDPipe's two-model tagger
instead (model 1: UPOS, XPOS and FEATS; model 2: the lemmatizer, as UDPipe's released UD models are built),
in its own folder (``udpipe-lemmas-feats``), and reports Lemmas, UFeats, AllTags, CLAS, MLAS and BLEX too.

Evaluation (see ``bench/_baseline.py``): gold words tagged and parsed by the model; raw text tokenized,
segmented, tagged and parsed by the model. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _baseline as bl  # noqa: E402

PACKAGE = "ufal.udpipe"
VERSION = "1.4.0.1"
BASE_MINUTES = 20.0
# (training options of a stage, its epochs/iterations at BASE_MINUTES)
TOKENIZER = ("epochs={n}", 10)
TAGGER = ("models=1;use_lemma=0;provide_lemma=0;use_feats=0;provide_feats=0;iterations={n}", 2)
PARSER = ("iterations={n};structured_interval=0;use_gold_tags=0", 4)
# --lemmas-feats: UDPipe's two-model tagger as its released UD models are trained (options as in UDPipe 1's
# published training settings): model 1 tags UPOS, XPOS and FEATS, model 2 is the lemmatizer; the same
# iterations as TAGGER for each, so the stage costs about twice as much
TAGGER_LEMMAS_FEATS = (
    "models=2;templates_1=tagger;use_lemma_1=0;provide_lemma_1=0;use_xpostag_1=1;provide_xpostag_1=1;"
    "use_feats_1=1;provide_feats_1=1;templates_2=lemmatizer;use_lemma_2=1;provide_lemma_2=1;use_xpostag_2=0;"
    "provide_xpostag_2=0;use_feats_2=0;provide_feats_2=0;iterations={n}", 2)

DRIVER = r'''
import json, sys, time
import ufal.udpipe as u

job = json.load(open(sys.argv[1]))
METHOD = "morphodita_parsito"


def load(path):
    fmt = u.InputFormat.newConlluInputFormat()
    with open(path, encoding="utf-8") as fh:
        fmt.setText(fh.read())
    out, s, err = u.Sentences(), u.Sentence(), u.ProcessingError()
    while fmt.nextSentence(s, err):
        out.append(s)
        s = u.Sentence()
    if err.occurred():
        raise SystemExit(f"{path}: {err.message}")
    return out


def train(train_set, dev_set, tokenizer, tagger, parser, dest):
    err = u.ProcessingError()
    wall, cpu = time.perf_counter(), time.process_time()
    data = u.Trainer.train(METHOD, train_set, dev_set, tokenizer, tagger, parser, err)
    if err.occurred():
        raise SystemExit(f"training failed: {err.message}")
    with open(dest, "wb") as fh:
        fh.write(data)
    return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}


result = {"stage_seconds": {}}  # stage -> {"cpu", "wall"}
model_path = job["model"]
if job["train"]:
    train_set, dev_set = load(job["train"]), load(job["dev"])
    print(f"{len(train_set)} training and {len(dev_set)} held-out sentences", flush=True)
    stages = result["stage_seconds"]
    print("== tokenizer:", job["tokenizer"], flush=True)
    stages["tokenizer"] = train(train_set, dev_set, job["tokenizer"], "none", "none", model_path + ".tokenizer")
    print("== tagger:", job["tagger"], flush=True)
    stages["tagger"] = train(train_set, dev_set, "none", job["tagger"], "none", model_path + ".tagger")
    print("== parser:", job["parser"], flush=True)
    stages["parser"] = train(train_set, dev_set, "from_model=file:" + model_path + ".tokenizer",
                             "from_model=file:" + model_path + ".tagger", job["parser"], model_path)
    print("training seconds:", stages, flush=True)

model = u.Model.load(model_path)
if model is None:
    raise SystemExit(f"cannot load {model_path}")

# gold tokenization: the gold words of each gold sentence, tagged and parsed
wall, cpu = time.perf_counter(), time.process_time()
rows = []
for words in job["gold_words"]:
    s = u.Sentence()
    for w in words:
        s.addWord(w)
    if not (model.tag(s, u.Model.DEFAULT) and model.parse(s, u.Model.DEFAULT)):
        raise SystemExit("the model cannot tag and parse")
    rows.append([[w.upostag, w.xpostag, w.head, w.deprel] + ([w.lemma, w.feats] if job["lemmas_feats"] else [])
                 for w in list(s.words)[1:]])
result["gold"] = {"rows": rows, "seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}

# raw text: the model's tokenizer and sentence splitter, then tagger and parser
err = u.ProcessingError()
pipeline = u.Pipeline(model, "tokenize", u.Pipeline.DEFAULT, u.Pipeline.DEFAULT, "conllu")
wall, cpu = time.perf_counter(), time.process_time()
conllu = pipeline.process(job["raw_text"], err)
if err.occurred():
    raise SystemExit(f"raw-text pipeline failed: {err.message}")
result["raw"] = {"conllu": conllu, "seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}
json.dump(result, open(sys.argv[2], "w"))
'''


def scaled(option: tuple[str, int], budget: float) -> str:
    template, base = option
    return template.format(n=max(1, round(base * budget / BASE_MINUTES)))


def main() -> None:
    ap = bl.arguments(__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", help="UDPipe tokenizer training options (default: scaled from the budget)")
    ap.add_argument("--tagger", help="UDPipe tagger training options (default: scaled from the budget)")
    ap.add_argument("--parser", help="UDPipe parser training options (default: scaled from the budget)")
    args = ap.parse_args()
    train, dev, split = bl.treebank(args.data, args.split)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    venv_python = bl.ensure_venv(args.python, work / "venv-udpipe", [f"{PACKAGE}=={VERSION}"])
    options = {
        "tokenizer": args.tokenizer or scaled(TOKENIZER, args.budget_minutes),
        "tagger": args.tagger or scaled(TAGGER_LEMMAS_FEATS if args.lemmas_feats else TAGGER, args.budget_minutes),
        "parser": args.parser or scaled(PARSER, args.budget_minutes),
    }
    folder = work / ("udpipe-lemmas-feats" if args.lemmas_feats else "udpipe")
    model = folder / "en_ewt.udpipe"
    model.parent.mkdir(exist_ok=True)
    settings = folder / "settings.json"
    wanted = {**options, "train": str(train), "dev": str(dev), "budget_minutes": args.budget_minutes}
    retrain = args.retrain or not model.exists() or not settings.exists() or json.loads(settings.read_text()) != wanted
    if retrain:
        settings.unlink(missing_ok=True)
    gold = bl.read_conllu(split)
    job = {"train": str(train) if retrain else None, "dev": str(dev), "model": str(model), **options,
           "lemmas_feats": args.lemmas_feats, **bl.gold_job(gold)}
    result = bl.run_driver(venv_python, DRIVER, job, folder, "udpipe")
    if retrain:
        settings.write_text(json.dumps(wanted))
        (folder / "train_seconds.json").write_text(json.dumps(result["stage_seconds"]))
    stage_seconds = json.loads((folder / "train_seconds.json").read_text())
    scores = bl.evaluate(gold, result, folder, f"{args.split}", bl.MORPHOLOGY_METRICS if args.lemmas_feats else ())
    bl.report({
        "tool": "UDPipe 1", "versions": bl.package_versions(venv_python, [PACKAGE]),
        "split": args.split, "evaluated_on": str(split), "train": str(train), "heldout": str(dev),
        "budget_minutes": args.budget_minutes, "options": options, "lemmas_feats": args.lemmas_feats,
        "train_cpu_seconds": round(sum(v["cpu"] for v in stage_seconds.values()), 1),
        "train_wall_seconds": round(sum(v["wall"] for v in stage_seconds.values()), 1),
        "train_stage_cpu_seconds": {k: round(v["cpu"], 1) for k, v in stage_seconds.items()},
        "trained_now": retrain,
        **scores,
        "model_megabytes": round(model.stat().st_size / 1e6, 1), "work": str(work),
    })


if __name__ == "__main__":
    main()
