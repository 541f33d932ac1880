"""What batching can buy: words per CPU-second of the service's batch runner at several batch sizes.

    python bench/batch_efficiency.py [--model en_ewt] [--sentences 64] [--sizes 1 4 16 64] [--tag-samples 16 0]
    python bench/batch_efficiency.py --length-mix 10 [--rounds 5]

Draws ``--sentences`` EWT dev sentences (fixed seed), makes each a one-sentence untagged ``/parse`` request
(``service.parse_batch.ParseWork``, as the HTTP service does), and runs them through
``service.parse_batch.run_batch`` in batches of each size, in this process and one thread. CPU time (not
wall time) is measured, so other work on a shared machine matters less. The ratio of a size's figure to
size 1's is the most the micro-batcher can gain per CPU-second with this engine. Prints one JSON object.

``--length-mix K``: what a batch of K sentences costs when they have K different lengths (as the micro-batcher
gets them) against K sentences of one length: ``--rounds`` batches of each kind, the "same" batches K sentences
of length L + K // 2 and the "mixed" ones one sentence of each length L..L+K-1 (L = 10), each kind timed
``--repeat`` times, alternating. The engine stacks sentences by length, so the ratio is what the per-length work
costs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from engine.data.conllu_io import read_conllu  # noqa: E402
from service import parsing  # noqa: E402
from service.parse_batch import ParseWork, run_batch  # noqa: E402
from service.registry import ModelEntry, ModelRegistry  # noqa: E402
from service.schemas import InferenceOptions, ParseRequest  # noqa: E402
from service.settings import Settings  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="en_ewt")
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--tag-samples", type=int, nargs="+", default=[16, 0])
    ap.add_argument("--data", type=Path, default=DEV)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--length-mix", type=int, default=0, metavar="K",
                    help="compare batches of K sentences of one length with batches of K lengths (see above)")
    ap.add_argument("--rounds", type=int, default=5, help="batches of each kind for --length-mix")
    ap.add_argument("--repeat", type=int, default=2, help="alternating passes over both kinds for --length-mix")
    args = ap.parse_args()

    settings = Settings(models_dir=ROOT / "models")
    registry = ModelRegistry(settings.models_dir, Path(os.devnull), args.model)
    registry.load_shipped()
    entry = registry.get(args.model)
    if not isinstance(entry, ModelEntry):
        raise SystemExit(f"{args.model} is not a dependency model")
    dev = [s for s in read_conllu(args.data) if s.n]
    if args.length_mix:
        print(json.dumps(length_mix(dev, entry, settings, args.length_mix, args.rounds, args.repeat), indent=1))
        return
    rng = random.Random(args.seed)
    picked = [dev[rng.randrange(len(dev))] for _ in range(args.sentences)]
    words = sum(s.n for s in picked)
    results: dict[str, dict[str, float]] = {}
    for samples in args.tag_samples:
        works = [ParseWork(ParseRequest(tokens=[s.forms], inference=InferenceOptions(tag_samples=samples)), entry,
                           parsing.parse_json, settings) for s in picked]
        run_batch(works[:2])  # warm-up
        row = results[f"tag_samples={samples}"] = {}
        for size in args.sizes:
            start = time.process_time()
            for i in range(0, len(works), size):
                run_batch(works[i:i + size])
            row[f"batch_{size}"] = round(words / (time.process_time() - start), 1)
    print(json.dumps({"words_per_cpu_s": results, "sentences": args.sentences, "words": words,
                      "model": args.model, "load_average_1min": round(os.getloadavg()[0], 2),
                      "command": shlex.join(["python", *sys.argv])}, indent=1))


def length_mix(dev: list, entry: ModelEntry, settings: Settings, k: int, rounds: int, repeat: int = 2,
               low: int = 10) -> dict:
    """Words per CPU second of ``rounds`` batches of ``k`` sentences of one length against ``k`` lengths."""
    by_length: dict[int, list] = {}
    for s in dev:
        by_length.setdefault(s.n, []).append(s)
    mid = low + k // 2
    if len(by_length.get(mid, [])) < k * rounds or any(len(by_length.get(n, [])) < rounds for n in range(low, low + k)):
        raise SystemExit(f"--length-mix {k} --rounds {rounds}: not enough sentences of lengths {low}..{low + k - 1}")

    def works(sentences: list) -> list[ParseWork]:
        return [ParseWork(ParseRequest(tokens=[s.forms]), entry, parsing.parse_json, settings) for s in sentences]

    kinds = {"same_length": [works(by_length[mid][r * k:(r + 1) * k]) for r in range(rounds)],
             "mixed_lengths": [works([by_length[n][r] for n in range(low, low + k)]) for r in range(rounds)]}
    run_batch(kinds["same_length"][0][:2])  # warm-up
    seconds = {name: 0.0 for name in kinds}
    for _ in range(repeat):
        for name, batches in kinds.items():
            start = time.process_time()
            for batch in batches:
                run_batch(batch)
            seconds[name] += time.process_time() - start
    words = {"same_length": repeat * rounds * k * mid, "mixed_lengths": repeat * rounds * sum(range(low, low + k))}
    rate = {name: round(words[name] / seconds[name], 1) for name in kinds}
    return {"words_per_cpu_s": rate, "same_over_mixed": round(rate["same_length"] / rate["mixed_lengths"], 3),
            "batch": k, "rounds": rounds, "repeat": repeat, "lengths": [low, low + k - 1],
            "load_average_1min": round(os.getloadavg()[0], 2),
            "command": shlex.join(["python", *sys.argv])}


if __name__ == "__main__":
    main()
