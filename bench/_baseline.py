"""Shared part of the baseline benchmarks (``bench/baseline_udpipe.py``, ``bench/baseline_spacy.py``).

Each baseline tool is installed from PyPI into its own virtual environment under the work directory
(default ``$TMPDIR/bp-baselines``, outside the repository), so the project's environment is untouched. A
small driver script runs inside that environment: it trains the tool on EWT train (EWT dev for the tool's
own early stopping or model selection), then annotates the evaluation split twice, exactly as our own
evaluation does:

- ``gold``: the gold words of every gold sentence (so gold tokenization and sentence segmentation), which
  the tool tags and parses;
- ``raw``: the raw text of the split, joined from the ``# text`` lines by
  ``engine.text.treebank_text.raw_text`` (sentences of a paragraph by a space, paragraphs and documents by
  an empty line), which the tool tokenizes, splits into sentences, tags and parses.

Both are scored here, in the project's environment, by ``engine.evaluation.ud_align.evaluate_ud`` (the
CoNLL 2018 aligned evaluation): F1 of tokens, sentences, words, UPOS, XPOS, UAS, LAS. Models, predicted
CoNLL-U and logs stay in the work directory; a second run with the same settings reuses the trained model
(``--retrain`` to train again), so the test split can be scored without training twice.

Time: the driver runs single-threaded (BLAS/OpenMP threads set to 1) and the training budget is CPU time of
that one process (``time.process_time``), so that it means nearly the same on an idle and on a shared
machine (not quite: with the other core busy a CPU second does less work, e.g. spaCy got through 3,600
instead of 3,800 steps in 20 CPU minutes); wall-clock seconds are reported next to it. Parsing speed is
words per wall-clock second and per CPU second, model loading excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.data.conllu_io import Sentence, read_conllu  # noqa: E402, F401 (read_conllu: for the scripts)
from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu  # noqa: E402
from engine.text.treebank_text import raw_text  # noqa: E402

DEFAULT_DATA = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data")) / "ud" / "en_ewt"
DEFAULT_WORK = Path(tempfile.gettempdir()) / "bp-baselines"
# the drivers run single-threaded, so that a budget of CPU seconds is a budget of one core's time
SINGLE_THREAD = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")}
METRICS = ("tokens", "sentences", "words", "upos", "xpos", "uas", "las")
# scored too when the tool predicts LEMMA and FEATS (the scripts' --lemmas-feats), or FEATS only
MORPHOLOGY_METRICS = ("lemmas", "ufeats", "alltags", "clas", "mlas", "blex")
FEATS_METRICS = ("ufeats", "alltags", "clas", "mlas")


def arguments(description: str, default_budget: float = 20.0) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="folder with en_ewt-ud-{train,dev,test}.conllu (default: %(default)s)")
    ap.add_argument("--split", choices=("dev", "test"), default="dev", help="evaluation split (default: dev)")
    ap.add_argument("--budget-minutes", type=float, default=default_budget,
                    help="training budget in CPU minutes of one core: the tool runs single-threaded, so the budget "
                         "holds on a busy machine too (default: %(default)s)")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK,
                    help="virtualenvs, models, predictions and logs go here (default: %(default)s)")
    ap.add_argument("--retrain", action="store_true", help="train even if the work directory has a model")
    ap.add_argument("--python", default=sys.executable, help="interpreter that creates the virtualenv")
    ap.add_argument("--lemmas-feats", action="store_true",
                    help="train the tool to predict LEMMA and FEATS too (its own folder under --work) and report "
                         "Lemmas, UFeats, AllTags, CLAS, MLAS and BLEX as well")
    return ap


def treebank(data: Path, split: str) -> tuple[Path, Path, Path]:
    """(train, dev, evaluation split) paths; the dev file is always the tool's held-out set."""
    paths = tuple(data / f"en_ewt-ud-{name}.conllu" for name in ("train", "dev", split))
    for p in paths:
        if not p.exists():
            sys.exit(f"error: {p} not found (set --data or BP_PARSER_DATA)")
    return paths  # type: ignore[return-value]


def ensure_venv(python: str, folder: Path, requirements: list[str]) -> Path:
    """The interpreter of a virtualenv at ``folder`` with ``requirements`` installed (pip, from PyPI); an
    existing one is reused when it was made for the same requirements."""
    marker = folder / "bp-requirements.json"
    venv_python = folder / "bin" / "python"
    if venv_python.exists() and marker.exists() and json.loads(marker.read_text()) == requirements:
        return venv_python
    print(f"creating {folder} with {' '.join(requirements)}", file=sys.stderr)
    subprocess.run([python, "-m", "venv", "--clear", str(folder)], check=True)
    subprocess.run([str(venv_python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([str(venv_python), "-m", "pip", "install", "--quiet", *requirements], check=True)
    marker.write_text(json.dumps(requirements))
    return venv_python


def package_versions(venv_python: Path, packages: list[str]) -> dict[str, str]:
    code = ("import json, sys, importlib.metadata as m; "
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))")
    out = subprocess.run([str(venv_python), "-c", code, *packages], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def run_driver(venv_python: Path, driver: str, job: dict[str, Any], work: Path, name: str) -> dict[str, Any]:
    """Write ``driver`` and ``job`` to ``work``, run the driver in the virtualenv (``driver JOB RESULT``,
    its stdout and stderr teed to ``work/NAME.log``) and return the JSON it wrote."""
    script, job_file, result_file, log_file = (work / f"{name}{ext}" for ext in
                                               ("_driver.py", "_job.json", "_result.json", ".log"))
    script.write_text(driver)
    job_file.write_text(json.dumps(job))
    result_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **SINGLE_THREAD}
    with open(log_file, "w") as log:
        proc = subprocess.Popen([str(venv_python), str(script), str(job_file), str(result_file)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            sys.stderr.write(line)
        if proc.wait():
            sys.exit(f"error: the {name} driver failed (exit status {proc.returncode}); see {log_file}")
    return json.loads(result_file.read_text())


def words_and_spaces(sent: Sentence) -> tuple[list[str], list[bool]]:
    """The gold words of a sentence and whether each is followed by a space in the text (words inside a
    multiword token are not; the last one takes the token's SpaceAfter)."""
    spaces = ["SpaceAfter=No" not in m.split("|") for m in sent.misc]
    for line in sent.lines:
        cols = line.split("\t")
        if not line.startswith("#") and len(cols) == 10 and "-" in cols[0]:
            first, last = (int(x) for x in cols[0].split("-"))
            spaces[first - 1:last - 1] = [False] * (last - first)
            spaces[last - 1] = "SpaceAfter=No" not in cols[9].split("|")
    return list(sent.forms), spaces


def gold_job(sentences: list[Sentence]) -> dict[str, Any]:
    """What the driver needs to annotate: the gold words (and spaces) per sentence, and the raw text."""
    pairs = [words_and_spaces(s) for s in sentences]
    return {"gold_words": [w for w, _ in pairs], "gold_spaces": [s for _, s in pairs], "raw_text": raw_text(sentences)}


def with_predictions(sent: Sentence, rows: list[list[Any]]) -> str:
    """The gold sentence as CoNLL-U with the tool's UPOS, XPOS, HEAD, DEPREL (and LEMMA, FEATS when a row
    has six values: ``[upos, xpos, head, deprel, lemma, feats]``) in place of the gold ones (LEMMA and FEATS
    blanked for four-value rows, DEPS always; every other line and MISC kept)."""
    if len(rows) != sent.n:
        raise ValueError(f"sentence at line {sent.start_line}: {len(rows)} predictions for {sent.n} words")
    lines = list(sent.lines)
    for li, row in zip(sent.word_line_index, rows, strict=True):
        upos, xpos, head, deprel = row[:4]
        lemma, feats = (row[4] or "_", row[5] or "_") if len(row) == 6 else ("_", "_")
        cols = lines[li].split("\t")
        head = int(head)
        deprel = "root" if head == 0 else (deprel or "dep")
        cols[2:9] = [lemma, upos or "_", xpos or "_", feats, str(head), deprel, "_"]
        lines[li] = "\t".join(cols)
    return "\n".join(lines) + "\n\n"


def score(gold: list[Sentence], system: list[Sentence], extra: tuple[str, ...] = ()) -> dict[str, float]:
    scores = evaluate_ud(gold, system)
    return {m: round(scores[m], 2) for m in METRICS + extra}


def evaluate(gold: list[Sentence], result: dict[str, Any], work: Path, name: str,
             extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Score the driver's two outputs, with the ``extra`` metrics too (``MORPHOLOGY_METRICS`` when the tool
    predicted LEMMA and FEATS, ``FEATS_METRICS`` for FEATS only); the system CoNLL-U of both conditions is
    written to ``work``."""
    words = sum(s.n for s in gold)
    gold_text = "".join(with_predictions(s, rows) for s, rows in zip(gold, result["gold"]["rows"], strict=True))
    (work / f"{name}_gold_tokenization.conllu").write_text(gold_text)
    raw_conllu = result["raw"]["conllu"]
    (work / f"{name}_raw_text.conllu").write_text(raw_conllu)
    out: dict[str, Any] = {}
    for cond, text in (("gold_tokenization", gold_text), ("raw_text", raw_conllu)):
        system = sentences_from_conllu(text)
        timing = result["gold" if cond == "gold_tokenization" else "raw"]
        scores = score(gold, system, extra)
        if cond == "gold_tokenization":
            scores = {m: v for m, v in scores.items() if m not in ("tokens", "sentences", "words")}
        out[cond] = {**scores, "system_sentences": len(system), "gold_words": words,
                     "seconds": round(timing["seconds"], 2), "cpu_seconds": round(timing["cpu_seconds"], 2),
                     "words_per_second": round(words / timing["seconds"]),
                     "words_per_cpu_second": round(words / timing["cpu_seconds"])}
    return out


def machine() -> str:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{platform.machine()}{', ' + cpu if cpu else ''}, {os.cpu_count()} cores, {platform.system()}, "
            f"Python {platform.python_version()}")


def report(result: dict[str, Any]) -> None:
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), *sys.argv])
    niceness = os.nice(0)
    if niceness:
        command = f"nice -n {niceness} {command}"
    print(json.dumps({**result, "machine": machine(), "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                      "command": command}))
