"""What batching can buy: words per CPU-second of the service's batch runner at several batch sizes.

    python bench/batch_efficiency.py [--model en_ewt] [--sentences 64] [--sizes 1 4 16 64] [--tag-samples 16 0]

Draws ``--sentences`` EWT dev sentences (fixed seed), makes each a one-sentence untagged ``/parse`` request
(``service.parse_batch.ParseWork``, as the HTTP service does), and runs them through
``service.parse_batch.run_batch`` in batches of each size, in this process and one thread. CPU time (not
wall time) is measured, so other work on a shared machine matters less. The ratio of a size's figure to
size 1's is the most the micro-batcher can gain per CPU-second with this engine. Prints one JSON object.
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
from service.registry import ModelRegistry  # noqa: E402
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
    args = ap.parse_args()

    settings = Settings(models_dir=ROOT / "models")
    registry = ModelRegistry(settings.models_dir, Path(os.devnull), args.model)
    registry.load_shipped()
    entry = registry.get(args.model)
    dev = [s for s in read_conllu(args.data) if s.n]
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


if __name__ == "__main__":
    main()
