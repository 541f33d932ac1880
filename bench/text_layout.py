"""The whole pipeline from raw text laid out two ways: each paragraph on one line, and wrapped at 80 columns.

    python bench/text_layout.py --model models/en_ewt --data ../shared/data/ud/en_ewt/en_ewt-ud-test.conllu

The text is rendered from the treebank as the UD tools render it (``engine.text.treebank_text.raw_text``:
sentences of a paragraph joined by a space, paragraphs from ``# newpar`` / ``# newdoc`` separated by an
empty line); ``wrapped`` also breaks every paragraph into lines of at most 80 characters at spaces
(``textwrap``, as ``conllu_to_text.pl`` does). Each layout runs ``python -m engine evaluate --from-text
--json [--wrap 80]`` (tokenizer, tagger, parser, labeller; scored with the CoNLL 2018 alignment), and one
JSON object is printed: the commands, tokens / sentences / words / UPOS / UAS / LAS F1 of each layout, and
wrapped minus one-line.

    python bench/text_layout.py --tokenizer-only [--layouts one_line]

scores the model's tokenizer alone in this process (tokens / sentences / words F1) and times
``Tokenizer.tokenize`` on each layout's whole text (best and median of 5 calls, after a warm-up). With
``--layouts one_line`` it runs against an engine without ``raw_text(width=...)`` too, e.g. an older commit
exported with ``git archive COMMIT engine | tar -x -C DIR`` and put first with ``PYTHONPATH=DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("tokens", "sentences", "words", "upos", "uas", "las")


def evaluate(model: str, data: str, wrap: int | None, extra: list[str]) -> tuple[str, dict]:
    """The command line and the rounded F1 scores (and seconds) of one ``evaluate --from-text`` run."""
    cmd = [sys.executable, "-m", "engine", "evaluate", "--model", model, "--data", data, "--from-text", "--json",
           *(["--wrap", str(wrap)] if wrap else []), *extra]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    scores = json.loads(out)
    shown = shlex.join(["python", *cmd[1:]])
    return shown, {**{m: round(scores[m], 2) for m in METRICS}, "seconds": scores["seconds"]}


def tokenizer_only(model: str, data: str, layouts: list[str], width: int) -> dict:
    """Tokenizer scores and ``tokenize`` seconds per layout (the engine on ``sys.path`` first)."""
    sys.path.append(str(ROOT))  # after PYTHONPATH, so another engine given there is the one measured
    from engine.data.conllu_io import read_conllu
    from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu
    from engine.pipeline import Pipeline
    from engine.text.treebank_text import raw_text

    tok = Pipeline.load(ROOT / model).tokenizer
    gold = read_conllu(ROOT / data)
    out: dict = {"engine": str(Path(sys.modules["engine"].__file__ or "").parent)}
    for name in layouts:
        text = raw_text(gold) if name == "one_line" else raw_text(gold, width=width)
        tok.tokenize(text[:5000])
        times = []
        for _ in range(5):
            start = time.perf_counter()
            sentences = tok.tokenize(text)
            times.append(time.perf_counter() - start)
        scores = evaluate_ud(gold, sentences_from_conllu(tok.to_conllu(sentences)))
        out[name] = {**{m: round(scores[m], 2) for m in ("tokens", "sentences", "words")}, "characters": len(text),
                     "best_seconds": round(min(times), 3), "median_seconds": round(statistics.median(times), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/en_ewt", help="a pipeline model (with a tokenizer)")
    ap.add_argument("--data", default="../shared/data/ud/en_ewt/en_ewt-ud-test.conllu")
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("--tokenizer-only", action="store_true", help="the tokenizer alone: scores and seconds")
    ap.add_argument("--layouts", nargs="+", choices=["one_line", "wrapped"], default=["one_line", "wrapped"])
    ap.add_argument("extra", nargs="*", help="more evaluate options, after --")
    args = ap.parse_args()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    if args.tokenizer_only:
        result = tokenizer_only(args.model, args.data, args.layouts, args.width)
        print(json.dumps({"command": shlex.join(["python", *sys.argv]), **result, "machine": machine}))
        return
    commands, results = {}, {}
    for name, wrap in (("one_line", None), ("wrapped", args.width)):
        commands[name], results[name] = evaluate(args.model, args.data, wrap, args.extra)
    result = {
        "command": shlex.join(["python", *sys.argv]), "evaluate_commands": commands, **results,
        "wrapped_minus_one_line": {m: round(results["wrapped"][m] - results["one_line"][m], 2) for m in METRICS},
        "machine": machine,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
