"""Before/after speed of whole commands: the same ``python -m engine`` command run by two (or more)
checkouts of the engine, interleaved, on the same file and core.

    OPENBLAS_NUM_THREADS=1 python bench/engine_versions.py --engine /work/wt-base --engine . \\
        --repeat 3 -- evaluate --model models/en_ewt --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu \\
        --tags predicted --json

Each run is a fresh process started in the checkout's directory (so ``models/...`` are its own models) with
that checkout first on ``PYTHONPATH``, pinned to one core when ``taskset`` exists (not with ``--no-pin``), with
one BLAS/numba thread, after each checkout's ``engine`` and ``service`` are byte-compiled as an install would have them
(``_timing.byte_compile``). Runs are interleaved (A, B, A, B, ...) so that changes in the machine's load hit
every version alike. For each version: the median wall-clock seconds of the whole command, the median CPU seconds
(user + system of the child: what the command cost, less sensitive to other jobs on a shared machine),
words/s of both (words read from ``--words-from``, default the ``--data`` argument), and the ratio of
each to the first version. Prints a Markdown table, or one JSON line with ``--json``.
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
from pathlib import Path

from _timing import byte_compile  # (bench/ is on sys.path when this script runs)


def count_words(path: Path) -> int:
    """Words (integer IDs) of a CoNLL-U file."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.split("\t", 1)[0].isdigit())


def run_once(engine: Path, command: list[str], pin_core: bool = True) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``python -m engine COMMAND`` in ``engine``'s checkout."""
    env = {**os.environ, "PYTHONPATH": str(engine), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    pin = ["taskset", "-c", "0"] if pin_core and shutil.which("taskset") else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*pin, sys.executable, "-m", "engine", *command], cwd=engine, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{engine}: python -m engine {' '.join(command)} exited {done.returncode}:\n"
                         f"{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", action="append", required=True, help="a checkout's root (repeat; first = reference)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--words-from", help="the CoNLL-U file whose words are counted (default: --data's file)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-pin", action="store_true",
                    help="leave the command every core (a command that starts worker processes: --cluster local:N)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="after --: the engine command")
    ns = ap.parse_args(argv)
    command = [c for c in ns.command if c != "--"]
    data = ns.words_from or next((command[i + 1] for i, c in enumerate(command[:-1]) if c in ("--data", "--input")),
                                 None)
    if data is None:
        ap.error("give --words-from FILE when the command has no --data or --input")
    words = count_words(Path(data))
    command = [str(Path(c).resolve()) if Path(c).is_file() and not c.startswith("models/") else c
               for c in command]
    engines = [Path(e).resolve() for e in ns.engine]
    for e in engines:  # as installed: no command compiles the engine from source (_timing.byte_compile)
        byte_compile(e)
    times: dict[Path, list[tuple[float, float]]] = {e: [] for e in engines}
    for _ in range(ns.repeat):
        for e in engines:
            times[e].append(run_once(e, command, not ns.no_pin))
    rows = []
    for e in engines:
        wall = statistics.median(t[0] for t in times[e])
        cpu = statistics.median(t[1] for t in times[e])
        rows.append({"engine": str(e), "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
                     "words_per_second": round(words / wall), "words_per_cpu_second": round(words / cpu)})
    for row in rows:
        row["speedup_wall"] = round(rows[0]["wall_seconds"] / row["wall_seconds"], 2)
        row["speedup_cpu"] = round(rows[0]["cpu_seconds"] / row["cpu_seconds"], 2)
    result = {"command": "python -m engine " + " ".join(ns.command[1:] if ns.command[:1] == ["--"] else ns.command),
              "words": words, "repeat": ns.repeat, "load_average": os.getloadavg(), "runs": rows}
    if ns.json:
        print(json.dumps(result))
        return 0
    print(f"{result['command']}\n{words} words, median of {ns.repeat}, load average "
          f"{', '.join(f'{x:.1f}' for x in result['load_average'])}\n")
    print("| engine | wall s | words/s | CPU s | words/CPU s | speed-up (wall, CPU) |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['wall_seconds']} | {r['words_per_second']:,} | {r['cpu_seconds']} | "
              f"{r['words_per_cpu_second']:,} | {r['speedup_wall']}x, {r['speedup_cpu']}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
