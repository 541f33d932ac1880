"""Whole-command parse benchmark: blank HEAD/DEPREL of a gold file, time `python -m engine parse`
(process start, imports and model loading included), then score the output against the gold file.

    python bench/parse_speed.py --model models/en_ewt-o1 --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu

Prints one JSON object: the scores of `python -m engine score` plus wall-clock seconds and tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import byte_compile  # (bench/ is on sys.path when this script runs)


def blank_heads(src: Path, dst: Path) -> int:
    """Copy ``src`` with HEAD and DEPREL of every word line set to '_'; return the word count."""
    words = 0
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) == 10 and cols[0].isdigit():
                cols[6] = cols[7] = "_"
                words += 1
                line = "\t".join(cols) + "\n"
            g.write(line)
    return words


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the fastest is reported")
    ap.add_argument("extra", nargs="*", help="extra arguments for `engine parse` (after --)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        blank, pred = Path(tmp) / "blank.conllu", Path(tmp) / "pred.conllu"
        tokens = blank_heads(Path(args.data), blank)
        byte_compile(Path.cwd())  # the checkout `python -m engine` runs from
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "engine", "parse", "--model", args.model, "--input", str(blank),
                            "--output", str(pred), *args.extra], check=True)
            times.append(time.perf_counter() - start)
        out = subprocess.run([sys.executable, "-m", "engine", "score", "--gold", args.data, "--pred", str(pred),
                              "--json"], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    best = min(times)
    result.update(seconds=round(best, 3), tokens_per_second=round(tokens / best, 1),
                  machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
