"""What pruning costs the joint model (issue 23): oracle figures of the candidate tags and of the kept arcs.

For each candidate setting (at most ``k`` states per word, each other than the 1-best with a tagger marginal of
at least ``min_marginal``), the share of words whose gold (UPOS, XPOS) state, and whose gold UPOS, is among
their candidates (the best tags the joint model could choose), the mean number of candidates per word and the
share of words with more than one; and the share of gold arcs the parser's pruner keeps (the best UAS BP could
reach), on the model's own 1-best tags::

    python bench/tag_oracle.py --model models/en_ewt --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.pipeline import Pipeline  # noqa: E402
from engine.text.tag_candidates import CandidateSettings  # noqa: E402

SETTINGS = [(1, 1.0), (3, 0.45), (3, 0.3), (3, 0.2), (3, 0.1), (3, 0.01), (3, 0.001), (5, 0.001)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/en_ewt")
    ap.add_argument("--data", required=True)
    ns = ap.parse_args()
    pipeline = Pipeline.load(ns.model)
    gold = read_conllu(ns.data)
    words = sum(len(s.forms) for s in gold)
    print("| k | min marginal | gold state among the candidates | gold UPOS among them | candidates per word |"
          " words with several |")
    print("|---|---|---:|---:|---:|---:|")
    for k, floor in SETTINGS:
        results = pipeline.tagger.tag(gold, candidates=CandidateSettings(k, floor))
        state = upos = count = several = 0
        for s, r in zip(gold, results, strict=True):
            c = r.candidates
            for i, (u, x) in enumerate(zip(s.upos, s.xpos, strict=True)):
                state += (u, x) in set(zip(c.upos[i], c.xpos[i], strict=True))
                upos += u in c.upos[i]
            per = c.allowed.sum(axis=1)
            count += int(per.sum())
            several += int((per > 1).sum())
        print(f"| {k} | {floor} | {100 * state / words:.2f} | {100 * upos / words:.2f} | {count / words:.3f} |"
              f" {100 * several / words:.2f} |")
    tagged = [s.copy() for s in gold]
    pipeline.tag(tagged, retag=True)
    parser = pipeline.parser
    kept = 0
    for batch in parser.graph_batches(tagged):
        for i, graph, _ in batch:
            heads = gold[i].heads
            kept += int(graph.valid[heads[1:], np.arange(1, len(heads))].sum())
    print(f"\ngold arcs kept by the pruner (1-best tags): {100 * kept / words:.2f}% of {words} words")


if __name__ == "__main__":
    main()
