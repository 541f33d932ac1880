"""Side-by-side speed: our parser against spaCy's efficiency pipeline, on the same file and core, in one run.

    python bench/peer_speed.py [--data FILE] [--work DIR] [--repeat 3] [--quick N] [--json]

Every system is timed as a whole command in a subprocess (interpreter start, imports, model loading,
reading, parsing, writing CoNLL-U), pinned to one core (``taskset -c CORE`` when available) with one
BLAS/OpenMP/Numba thread, on the same input: the ``--data`` file (EWT dev by default) with HEAD, DEPREL
and DEPS blanked, i.e. gold tokenisation and sentence boundaries. The systems:

- ``default``: ``python -m engine parse --model models/en_ewt --retag`` (the shipped model tags every word
  itself, as it does a user's untagged input; since 2026-11-27 ``en_ewt-joint``, its tags inside BP);
- ``pipeline`` (not timed unless asked for with ``--systems``): ``models/en_ewt-pipeline --retag``, the default
  until 2026-11-27 (16 tag samples, tag-averaged potentials);
- ``o1``: ``models/en_ewt-o1`` (first order, exact decoding) on the gold tags;
- ``o2``: ``models/en_ewt-o2`` (second order, BP) on the gold tags;
- ``relaxed``: ``models/en_ewt-o2 --inference relaxed`` on the gold tags;
- ``spacy``: a driver in spaCy's own virtualenv that loads the trained pipeline, builds one ``Doc`` per
  gold sentence from its words (sentence boundaries fixed), runs ``nlp.pipe`` over them (spaCy's default
  batch size) and writes CoNLL-U; spaCy tags with its own tagger and morphologizer.

spaCy (``bench/baseline_spacy.py``'s version and pipeline) lives in a virtualenv under ``--work``, never
in our environment. If the work directory has no trained pipeline, ``bench/baseline_spacy.py`` is run
(under ``nice -n 10``) to install it and train one within ``--budget-minutes`` CPU minutes of one core; an
existing pipeline is reused whatever budget trained it, and its budget is reported.

Each system runs ``--repeat`` times, interleaved with spaCy (spaCy, ours, spaCy, ours, ..., spaCy), so
that a change of the shared machine's load hits both alike. Reported are the median wall-clock seconds of
the whole command and words per wall-clock second (spaCy's: the median of all its runs in this run); the
ratio to spaCy, the median over the runs of (mean seconds of the two spaCy runs around it) / (its seconds),
i.e. its words/s over spaCy's at nearly the same moment; and the median CPU seconds (user + system) of the
command with the ratio of spaCy's median CPU seconds to it (CPU time is less disturbed by the other
processes on the core). ``--json`` also gives words per CPU second. Before the timed rounds the engine is
byte-compiled, as pip compiled spaCy's packages when it installed them (``_timing.byte_compile``), and every
command runs once untimed on the first few sentences, to warm the page cache. The last output of every
system is scored against the gold file (UPOS, UAS, LAS of the CoNLL 2018 evaluation), a check that each
system parsed every word. Prints a table, with ``--markdown`` a Markdown table, or with ``--json`` one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _baseline as bl  # noqa: E402
from _timing import byte_compile  # noqa: E402
from baseline_spacy import PACKAGE, VERSION  # noqa: E402

ROOT = bl.ROOT
MODELS = ROOT / "models"
THREADS = {**bl.SINGLE_THREAD, "NUMBA_NUM_THREADS": "1"}
WARMUP_SENTENCES = 20

SPACY_DRIVER = r'''
"""Parse a CoNLL-U file's gold words with a trained spaCy pipeline: driver MODEL INPUT OUTPUT."""
import sys

import spacy
from spacy.tokens import Doc


def sentences(path):
    """(words, spaces) of each sentence: integer-ID lines; a multiword token's SpaceAfter goes to its last word."""
    words, spaces, last, token_space = [], [], 0, True
    for line in open(path, encoding="utf-8"):
        cols = line.rstrip("\n").split("\t")
        if len(cols) != 10:
            if not line.strip() and words:
                yield words, spaces
                words, spaces, last = [], [], 0
            continue
        space = "SpaceAfter=No" not in cols[9].split("|")
        if "-" in cols[0]:  # a multiword token: no space inside it, its own SpaceAfter after its last word
            last, token_space = int(cols[0].split("-")[1]), space
        elif cols[0].isdigit():
            i = int(cols[0])
            words.append(cols[1])
            spaces.append(False if i < last else token_space if i == last else space)
    if words:
        yield words, spaces


nlp = spacy.load(sys.argv[1])
docs = [Doc(nlp.vocab, words=w, spaces=sp, sent_starts=[True] + [False] * (len(w) - 1))
        for w, sp in sentences(sys.argv[2])]
with open(sys.argv[3], "w", encoding="utf-8") as out:
    for doc in nlp.pipe(docs):
        for t in doc:
            head = 0 if t.head.i == t.i else t.head.i + 1
            dep = "root" if head == 0 else (t.dep_ or "dep")
            out.write(f"{t.i + 1}\t{t.text}\t_\t{t.pos_ or '_'}\t{t.tag_ or '_'}\t_\t{head}\t{dep}\t_\t_\n")
        out.write("\n")
'''


@dataclass
class System:
    """One timed command: ``argv`` gets ``--input``/``--output`` style paths through ``command``."""

    name: str
    description: str
    argv: list[str]  # with the placeholders {input} and {output}
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)  # per run: mean wall seconds of spaCy's runs around it

    def command(self, input_path: Path, output_path: Path) -> list[str]:
        return [a.format(input=input_path, output=output_path) for a in self.argv]


def ours(name: str, description: str, model: str, *extra: str) -> System:
    return System(name, description, [sys.executable, "-m", "engine", "parse", "--model", str(MODELS / model),
                                      "--input", "{input}", "--output", "{output}", *extra])


def our_systems() -> list[System]:
    return [
        ours("default", "ours: models/en_ewt --retag (default model, tags itself)", "en_ewt", "--retag"),
        ours("pipeline", "ours: models/en_ewt-pipeline --retag (the default until 2026-11-27)", "en_ewt-pipeline",
             "--retag"),
        ours("o1", "ours: models/en_ewt-o1 (first order, gold tags)", "en_ewt-o1"),
        ours("o2", "ours: models/en_ewt-o2 (second-order BP, gold tags)", "en_ewt-o2"),
        ours("relaxed", "ours: models/en_ewt-o2 --inference relaxed (gold tags)", "en_ewt-o2",
             "--inference", "relaxed"),
    ]


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=bl.DEFAULT_DATA / "en_ewt-ud-dev.conllu",
                    help="CoNLL-U file to parse, gold tokenisation (default: %(default)s)")
    ap.add_argument("--treebank", type=Path, default=bl.DEFAULT_DATA,
                    help="folder with en_ewt-ud-{train,dev}.conllu, to train spaCy if needed (default: %(default)s)")
    ap.add_argument("--work", type=Path, default=bl.DEFAULT_WORK,
                    help="spaCy's virtualenv and trained pipeline (those of bench/baseline_spacy.py) and this "
                         "bench's inputs and outputs (default: %(default)s)")
    ap.add_argument("--budget-minutes", type=float, default=15.0,
                    help="CPU minutes of one core to train spaCy, only if --work has no trained pipeline "
                         "(default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each system; the median is reported")
    ap.add_argument("--quick", type=int, metavar="N", help="only the first N sentences of --data")
    ap.add_argument("--systems", default="default,o1,o2,relaxed",
                    help="comma-separated subset of ours to time next to spaCy (default: %(default)s)")
    ap.add_argument("--core", type=int, default=0, help="CPU core to pin every command to (default: 0)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of every command")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    out.add_argument("--markdown", action="store_true", help="print the table as Markdown (for the docs)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    known = {s.name for s in our_systems()}
    unknown = set(args.systems.split(",")) - known
    if unknown:
        ap.error(f"unknown --systems {sorted(unknown)}; choose from {sorted(known)}")
    return args


def ensure_spacy(args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
    """spaCy's interpreter, its trained pipeline and how that was trained; trains it (via
    ``bench/baseline_spacy.py``, niced) only when the work directory has none."""
    folder = args.work.resolve() / "spacy"
    venv_python = args.work.resolve() / "venv-spacy" / "bin" / "python"
    model = folder / "model-best"
    training, settings = folder / "training.json", folder / "settings.json"
    if not (venv_python.exists() and model.exists() and training.exists() and settings.exists()):
        print(f"no trained spaCy pipeline in {args.work}: training one ({args.budget_minutes:g} CPU minutes)",
              file=sys.stderr)
        cmd = ["nice", "-n", "10", sys.executable, str(Path(__file__).with_name("baseline_spacy.py")),
               "--data", str(args.treebank), "--work", str(args.work), "--budget-minutes", str(args.budget_minutes)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    # the virtualenv as baseline_spacy.py made it (reused, not reinstalled, when its requirements match)
    venv_python = bl.ensure_venv(sys.executable, args.work.resolve() / "venv-spacy", [f"{PACKAGE}=={VERSION}"])
    trained = json.loads(training.read_text())
    info = {"version": bl.package_versions(venv_python, [PACKAGE])[PACKAGE], "model": str(model),
            "budget_minutes": json.loads(settings.read_text())["budget_minutes"],
            "train_cpu_seconds": round(trained["train_seconds"]["cpu"], 1), "stopped_by": trained["stopped_by"],
            "steps": trained["steps"], "epochs": trained["epochs"]}
    return venv_python, model, info


def write_input(data: Path, dest: Path, limit: int | None) -> list[bl.Sentence]:
    """Write the first ``limit`` (all if None) sentences of ``data`` to ``dest`` with HEAD, DEPREL and DEPS
    of the words blanked; return those gold sentences."""
    gold = bl.read_conllu(data)[:limit]
    with open(dest, "w", encoding="utf-8") as out:
        for sent in gold:
            for line in sent.lines:
                cols = line.split("\t")
                if len(cols) == 10 and not line.startswith("#") and cols[0].isdigit():
                    cols[6:9] = ["_", "_", "_"]
                    line = "\t".join(cols)
                out.write(line + "\n")
            out.write("\n")
    return gold


def pinning(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") else []


def run_once(system: System, input_path: Path, output_path: Path, core: int) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one whole command, pinned to ``core``."""
    env = {**os.environ, **THREADS}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*pinning(core), *system.command(input_path, output_path)], env=env, cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"error: {system.name} failed (exit status {proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def predicted_rows(path: Path) -> list[list[list[str]]]:
    """UPOS, XPOS, HEAD, DEPREL of the integer-ID lines of a CoNLL-U file, per sentence."""
    sentences: list[list[list[str]]] = [[]]
    for line in open(path, encoding="utf-8"):
        cols = line.rstrip("\n").split("\t")
        if not line.strip():
            if sentences[-1]:
                sentences.append([])
        elif len(cols) == 10 and cols[0].isdigit():
            sentences[-1].append([cols[3], cols[4], cols[6], cols[7]])
    return [s for s in sentences if s]


def accuracy(gold: list[bl.Sentence], output: Path) -> dict[str, float]:
    """UPOS, UAS, LAS of an output against the gold sentences (one row per gold word, else an error)."""
    rows = predicted_rows(output)
    if len(rows) != len(gold):
        raise ValueError(f"{output}: {len(rows)} sentences for {len(gold)} gold ones")
    text = "".join(bl.with_predictions(s, r) for s, r in zip(gold, rows, strict=True))
    scores = bl.score(gold, bl.sentences_from_conllu(text))
    return {m: scores[m] for m in ("upos", "uas", "las")}


def time_all(systems: list[System], spacy: System, folder: Path, args: argparse.Namespace) -> None:
    """Warm up, then ``args.repeat`` rounds of spaCy, ours, spaCy, ours, ... and a last spaCy run; fills
    ``seconds``, ``cpu_seconds`` and, for ours, ``reference`` (the mean of the spaCy runs just before and
    just after each run)."""
    full, small = folder / "input.conllu", folder / "warmup.conllu"
    byte_compile(ROOT)  # as installed (spaCy's packages were byte-compiled by pip): see _timing.byte_compile
    if not args.no_warmup:
        for system in [spacy, *systems]:
            run_once(system, small, folder / f"warmup-{system.name}.conllu", args.core)
    order = [s for _ in range(args.repeat) for system in systems for s in (spacy, system)] + [spacy]
    walls = []
    for k, s in enumerate(order):
        wall, cpu = run_once(s, full, folder / f"{s.name}.conllu", args.core)
        walls.append(wall)
        s.seconds.append(wall)
        s.cpu_seconds.append(cpu)
        print(f"run {k + 1}/{len(order)}: {s.name} {wall:.2f} s (cpu {cpu:.2f} s)", file=sys.stderr)
    for k, s in enumerate(order):
        if s is not spacy:
            s.reference.append((walls[k - 1] + walls[k + 1]) / 2)


def engine_commit() -> str:
    """Short id of the last commit that changed engine/ or models/ in this checkout, with ``+dirty`` if
    either differs from HEAD (uncommitted changes)."""
    try:
        head = subprocess.run(["git", "log", "-1", "--format=%h", "--", "engine", "models"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine", "models"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def summary(systems: list[System], spacy: System, words: int, gold: list[bl.Sentence],
            folder: Path) -> list[dict[str, Any]]:
    spacy_cpu = statistics.median(spacy.cpu_seconds)
    rows = []
    for s in [*systems, spacy]:
        median, cpu = statistics.median(s.seconds), statistics.median(s.cpu_seconds)
        ratio = statistics.median([r / x for r, x in zip(s.reference, s.seconds, strict=True)]) if s.reference else 1
        rows.append({"system": s.name, "description": s.description, "words": words,
                     "median_seconds": round(median, 3), "seconds": [round(x, 3) for x in s.seconds],
                     "words_per_second": round(words / median, 1),
                     "ratio_to_spacy": round(ratio, 4), "cpu_ratio_to_spacy": round(spacy_cpu / cpu, 4),
                     "median_cpu_seconds": round(cpu, 3),
                     "words_per_cpu_second": round(words / statistics.median(s.cpu_seconds), 1),
                     **accuracy(gold, folder / f"{s.name}.conllu")})
    return rows


def print_table(result: dict[str, Any]) -> None:
    print(f"{result['data']}: {result['sentences']} sentences, {result['words']} words; engine {result['engine']}; "
          f"spaCy {result['spacy']['version']} ({result['spacy']['budget_minutes']:g} CPU min budget, "
          f"{result['spacy']['epochs']} epochs); pinned: {result['pinned'] or 'no'}; median of {result['repeat']}")
    print(f"{'system':<9} {'words':>7} {'median s':>9} {'words/s':>9} {'ratio':>7} {'cpu s':>8} {'cpu ratio':>9} "
          f"{'UPOS':>6} {'UAS':>6} {'LAS':>6}  description")
    for r in result["systems"]:
        print(f"{r['system']:<9} {r['words']:>7} {r['median_seconds']:>9.2f} {r['words_per_second']:>9,.0f} "
              f"{r['ratio_to_spacy']:>7.3f} {r['median_cpu_seconds']:>8.2f} {r['cpu_ratio_to_spacy']:>9.3f} "
              f"{r['upos']:>6.2f} {r['uas']:>6.2f} {r['las']:>6.2f}  {r['description']}")
    print(f"load average: start {result['load_average_start']}, end {result['load_average_end']}; "
          f"{result['machine']}")


def print_markdown(result: dict[str, Any]) -> None:
    print("| system | words | median s | words/s | ratio to spaCy | CPU s | CPU ratio | UPOS | UAS | LAS |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in result["systems"]:
        print(f"| {r['description']} | {r['words']:,} | {r['median_seconds']:.2f} | {r['words_per_second']:,.0f} | "
              f"{r['ratio_to_spacy']:.3f} | {r['median_cpu_seconds']:.2f} | {r['cpu_ratio_to_spacy']:.3f} | "
              f"{r['upos']:.2f} | {r['uas']:.2f} | {r['las']:.2f} |")


def main() -> None:
    args = arguments()
    if not args.data.exists():
        sys.exit(f"error: {args.data} not found (set --data or BP_PARSER_DATA)")
    venv_python, model, spacy_info = ensure_spacy(args)
    folder = args.work.resolve() / "peer_speed"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spacy_driver.py").write_text(SPACY_DRIVER)
    gold = write_input(args.data, folder / "input.conllu", args.quick)
    write_input(args.data, folder / "warmup.conllu", WARMUP_SENTENCES)
    words = sum(s.n for s in gold)
    chosen = args.systems.split(",")
    systems = [s for s in our_systems() if s.name in chosen]
    spacy = System("spacy", f"spaCy {spacy_info['version']} efficiency pipeline (own tagger), nlp.pipe",
                   [str(venv_python), str(folder / "spacy_driver.py"), str(model), "{input}", "{output}"])
    load_start = [round(x, 2) for x in os.getloadavg()]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    time_all(systems, spacy, folder, args)
    result = {"data": str(args.data), "sentences": len(gold), "words": words, "repeat": args.repeat,
              "engine": engine_commit(), "started": started, "pinned": " ".join(pinning(args.core)),
              "threads": THREADS, "spacy": spacy_info,
              "systems": summary(systems, spacy, words, gold, folder),
              "load_average_start": load_start, "load_average_end": [round(x, 2) for x in os.getloadavg()],
              "machine": bl.machine(), "command": " ".join(["python", *sys.argv])}
    if args.json:
        print(json.dumps(result))
    elif args.markdown:
        print_markdown(result)
    else:
        print_table(result)


if __name__ == "__main__":
    main()
