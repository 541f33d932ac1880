"""Byte-identity check of `python -m engine parse` outputs: parse a treebank with each shipped model and
compare the sha256 of every output with a reference written earlier (e.g. from the code before a refactor).

    python bench/parse_identity.py --write bench/parse_identity.json            # reference, full EWT dev
    python bench/parse_identity.py --check bench/parse_identity.json            # same cases, same hashes?
    python bench/parse_identity.py --write /tmp/q.json --models en_ewt-o1 --limit 50   # a quick pair

Each case is one `engine parse` command: every model as shipped (gold tags, its default inference), the
default model (joint tags) and the pipeline model (its manifest's tag samples) re-tagging every word, and the
second-order model under relaxed inference. ``--check`` takes the data, ``--limit`` and cases recorded in the
reference (``--models`` still selects among them) and exits 1 when any hash differs. Parsing runs one command
at a time (the machine is shared); the full reference takes several minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV = "/work/shared/data/ud/en_ewt/en_ewt-ud-dev.conllu"
# name -> (model directory under models/, extra `engine parse` arguments)
CASES: dict[str, tuple[str, list[str]]] = {
    "en_ewt": ("en_ewt", []),
    "en_ewt --retag": ("en_ewt", ["--retag"]),
    "en_ewt-pipeline": ("en_ewt-pipeline", []),
    "en_ewt-pipeline --retag": ("en_ewt-pipeline", ["--retag"]),
    "en_ewt-o1": ("en_ewt-o1", []),
    "en_ewt-o2": ("en_ewt-o2", []),
    "en_ewt-o2 --inference relaxed": ("en_ewt-o2", ["--inference", "relaxed"]),
}


def first_sentences(src: Path, dst: Path, limit: int) -> None:
    """Copy the first ``limit`` sentence blocks of the CoNLL-U file ``src`` to ``dst``."""
    blocks, current = [], []
    with open(src, encoding="utf-8") as f:
        for line in f:
            current.append(line)
            if not line.strip():
                blocks.append("".join(current))
                current = []
                if len(blocks) == limit:
                    break
    if current and len(blocks) < limit:
        blocks.append("".join(current))
    dst.write_text("".join(blocks), encoding="utf-8")


def run_case(model: str, extra: list[str], data: Path) -> tuple[str, float]:
    """sha256 of the CoNLL-U that `engine parse` writes for ``data``, and the command's wall-clock seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.conllu"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engine", "parse", "--model", str(ROOT / "models" / model),
                        "--input", str(data), "--output", str(out), *extra], check=True, cwd=ROOT)
        seconds = time.perf_counter() - start
        return hashlib.sha256(out.read_bytes()).hexdigest(), seconds


def run(cases: list[str], data: Path, limit: int | None) -> dict[str, dict]:
    """Hash every case's output (over the first ``limit`` sentences of ``data`` when given)."""
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = data
        if limit is not None:
            source = Path(tmp) / "input.conllu"
            first_sentences(data, source, limit)
        for name in cases:
            model, extra = CASES[name]
            digest, seconds = run_case(model, extra, source)
            results[name] = {"sha256": digest, "seconds": round(seconds, 1)}
            print(f"{name}: {digest[:16]} ({seconds:.1f} s)", file=sys.stderr, flush=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="REF.json", help="write the hashes to this reference file")
    mode.add_argument("--check", metavar="REF.json", help="compare with this reference file")
    ap.add_argument("--models", nargs="+", help="only the cases of these models (default: all)")
    ap.add_argument("--limit", type=int, metavar="N", help="--write: only the first N sentences")
    ap.add_argument("--data", default=DEV, help="--write: treebank to parse (default: EWT dev)")
    args = ap.parse_args()
    if args.check:
        ref = json.loads(Path(args.check).read_text())
        data, limit, known = Path(ref["data"]), ref["limit"], list(ref["cases"])
    else:
        data, limit, known = Path(args.data), args.limit, list(CASES)
    cases = [c for c in known if args.models is None or CASES[c][0] in args.models]
    if not cases:
        ap.error(f"no case for --models {' '.join(args.models)}")
    results = run(cases, data, limit)
    if args.write:
        Path(args.write).write_text(json.dumps({"data": str(data), "limit": limit, "cases": results}, indent=2)
                                    + "\n")
        return 0
    changed = [c for c in cases if results[c]["sha256"] != ref["cases"][c]["sha256"]]
    print(json.dumps({"checked": cases, "changed": changed, "identical": not changed}))
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
