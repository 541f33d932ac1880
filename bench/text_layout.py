"""The whole pipeline from raw text laid out two ways: each paragraph on one line, and wrapped at 80 columns.

    python bench/text_layout.py --model models/en_ewt --data ../shared/data/ud/en_ewt/en_ewt-ud-test.conllu

The text is rendered from the treebank as the UD tools render it (``engine.text.treebank_text.raw_text``:
sentences of a paragraph joined by a space, paragraphs from ``# newpar`` / ``# newdoc`` separated by an
empty line); ``wrapped`` also breaks every paragraph into lines of at most 80 characters at spaces
(``textwrap``, as ``conllu_to_text.pl`` does). Each layout runs ``python -m engine evaluate --from-text
--json [--wrap 80]`` (tokenizer, tagger, parser, labeller; scored with the CoNLL 2018 alignment), and one
JSON object is printed: the commands, tokens / sentences / words / UPOS / UAS / LAS F1 of each layout, and
wrapped minus one-line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/en_ewt", help="a pipeline model (with a tokenizer)")
    ap.add_argument("--data", default="../shared/data/ud/en_ewt/en_ewt-ud-test.conllu")
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("extra", nargs="*", help="more evaluate options, after --")
    args = ap.parse_args()
    commands, results = {}, {}
    for name, wrap in (("one_line", None), ("wrapped", args.width)):
        commands[name], results[name] = evaluate(args.model, args.data, wrap, args.extra)
    result = {
        "command": shlex.join(["python", *sys.argv]), "evaluate_commands": commands, **results,
        "wrapped_minus_one_line": {m: round(results["wrapped"][m] - results["one_line"][m], 2) for m in METRICS},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
