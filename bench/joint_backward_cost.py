"""Cost of reverse mode through joint BP (links and tags) against joint BP alone, on real joint graphs.

    python bench/joint_backward_cost.py [--model models/en_ewt] [--sentences 300] [--iterations 1,3,5]

Tags the first EWT dev sentences with the model's tagger and candidate settings (as `parse` does), builds each
one's pruned joint graph (TREE, TAGLINK, CHAIN, GRAND, SIB) and times, per iteration count T (serial schedule,
one sentence at a time as training runs it): ``run_joint_bp``; ``joint_forward`` (the same run with a tape);
``joint_backward`` (the reverse pass of the L2 objective of links and tags, ``joint_l2``). Best of 3 passes over
all sentences, one process, seconds; one JSON line per T.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _timing import best_of  # noqa: E402  (bench/ is on sys.path when this script runs)

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402
from engine.inference.joint_bp import run_joint_bp  # noqa: E402
from engine.inference.joint_bp_backward import joint_backward, joint_forward, joint_l2  # noqa: E402
from engine.pipeline import Pipeline  # noqa: E402
from engine.text.tag_candidates import CandidateSettings  # noqa: E402
from engine.training.joint import gold_slots  # noqa: E402
from engine.training.objectives import gold_indicators  # noqa: E402

DEV = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data")) / "ud/en_ewt/en_ewt-ud-dev.conllu"


def joint_graphs(model: str, count: int) -> list[tuple[Any, Any, Any]]:
    """(joint graph, gold heads, gold slots) of the first ``count`` dev sentences that the tagger gave candidates."""
    pipeline = Pipeline.load(model)
    parser = pipeline.parser
    gold = read_conllu(DEV)[:count]
    sentences = [s.copy() for s in gold]
    found: dict[int, Any] = {}
    pipeline.tag_and_sample(sentences, retag=True, candidates=(CandidateSettings.resolve(parser.manifest), found))
    out = []
    for batch in parser.graph_batches(sentences, gold=True, link_features=False):
        for i, graph, _ in batch:
            if found.get(i) is not None:
                out.append((parser.joint_graph(sentences[i], graph, found[i]), gold[i].heads,
                            gold_slots(found[i], gold[i].upos, gold[i].xpos)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt"))
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--iterations", default="1,3,5")
    args = ap.parse_args()
    graphs = joint_graphs(args.model, args.sentences)
    words = sum(g[1].shape[0] - 1 for g, _, _ in graphs)
    for t in (int(x) for x in args.iterations.split(",")):
        config = BPConfig(max_iterations=t, schedule="serial", tolerance=0.0)
        tapes = [(joint_forward(*g, config), g, heads, slots) for g, heads, slots in graphs]

        def backward(tapes: list = tapes) -> None:
            for (result, tape), g, heads, slots in tapes:
                _, g_b, g_t = joint_l2(result, gold_indicators(heads), slots, g[1], g[2].allowed)
                joint_backward(g[0], g[2], g[3], tape, g_b, g_t)

        plain = best_of(lambda c=config: [run_joint_bp(*g, c) for g, _, _ in graphs])
        forward = best_of(lambda c=config: [joint_forward(*g, c) for g, _, _ in graphs])
        reverse = best_of(backward)
        print(json.dumps({"iterations": t, "sentences": len(graphs), "words": words,
                          "run_joint_bp_s": round(plain, 3), "joint_forward_s": round(forward, 3),
                          "joint_backward_s": round(reverse, 3), "backward_over_run": round(reverse / plain, 2),
                          "forward_plus_backward_over_run": round((forward + reverse) / plain, 2)}), flush=True)


if __name__ == "__main__":
    main()
