"""Speed of k-best and sampling: the 10 best trees and 100 samples of a 40-word sentence.

    python bench/kbest_sample.py

Scores come from the shipped first-order model on the first 40-word sentence of EWT dev (what the
parser really produces), and from N(0, 1) noise. Each figure is the median of 20 runs, in
milliseconds, for both root modes and both projectivity modes. Prints one JSON object.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _timing import median_ms

from engine.data.conllu_io import read_conllu
from engine.kernels.kbest_nonprojective import kbest_arborescences
from engine.kernels.kbest_projective import kbest_projective
from engine.kernels.sample import sample_trees
from engine.parser import FirstOrderParser
from engine.scoring.potentials import arc_scores

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"



def main() -> None:
    parser = FirstOrderParser.load(ROOT / "models" / "en_ewt-o1")
    sentence = next(s for s in read_conllu(DEV) if s.n == 40)
    model_scores = arc_scores(parser.weights, parser.extractor.extract([sentence]))[0]
    noise = np.random.default_rng(0).normal(size=(41, 41))
    out: dict[str, dict[str, float]] = {}
    for name, scores in (("model", model_scores), ("normal", noise)):
        for projective in (False, True):
            for single_root in (True, False):
                key = f"{name}/{'projective' if projective else 'nonprojective'}/{'single' if single_root else 'multi'}"
                kbest = kbest_projective if projective else kbest_arborescences
                out[key] = {
                    "kbest10_ms": median_ms(lambda s=scores, f=kbest, r=single_root: f(s, 10, single_root=r)),
                    "samples100_ms": median_ms(lambda s=scores, p=projective, r=single_root: sample_trees(
                        s, 100, single_root=r, projective=p, rng=0)),
                }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
