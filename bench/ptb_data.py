"""Figures of the constituency data preparation on the Penn Treebank sample (issue 26, ``docs/constituency.md``).

    python bench/ptb_data.py [--data ../shared/data/ptb_sample] [--out FILE.json]

Prints one JSON object: sentences per split (all and <= 40 words), the grammar of the binarised train trees
(labels, tags, ``@`` labels, binary rules, unary rules, identities, longest chain), what cleaning removed
(``-NONE-`` leaves, X -> X unaries), the tag dictionary (vocabulary, closed words, open tags), dev and test
out-of-vocabulary rates, the dev and test trees with a rule the train grammar lacks, a check that every tree
survives clean -> binarise -> anchored -> debinarise unchanged and scores EVALB F1 100 against itself, and the
seconds each step took (wall clock, on whatever else the machine is doing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from nltk import Tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.constituency.binarize import binarize, from_anchored, to_anchored  # noqa: E402
from engine.constituency.evalb import evalb, without_traces  # noqa: E402
from engine.constituency.lexicon import TagDictionary  # noqa: E402
from engine.constituency.rules import grammar_from_trees, rule_counts  # noqa: E402
from engine.constituency.treebank import (  # noqa: E402
    NONE,
    SPLITS,
    clean_label,
    file_number,
    mrg_files,
    parse_text,
    split_by_file,
)


def removed_by_cleaning(folder: Path) -> dict[str, int]:
    """``-NONE-`` leaves of the raw trees, and X -> X unaries once traces are gone and function tags stripped
    (what the cleaning's X -> X step removes), per split."""
    out = {f"{name}_{what}": 0 for name in SPLITS for what in ("none_leaves", "x_x_unaries")}
    for path in mrg_files([folder]):
        name = next((s for s, (lo, hi) in SPLITS.items() if lo <= file_number(path) <= hi), None)
        if name is None:
            continue
        for _, raw in parse_text(path.read_text(encoding="utf-8"), str(path)):
            out[f"{name}_none_leaves"] += sum(1 for _, tag in raw.pos() if tag == NONE)
            bare = without_traces(raw)
            out[f"{name}_x_x_unaries"] += 0 if bare is None else sum(
                1 for node in bare.subtrees() if len(node) == 1 and isinstance(node[0], Tree) and node.label()
                and clean_label(node.label()) == clean_label(node[0].label()))
    return out


def raw_gold_against_cleaned(folder: Path, split: dict[str, list[Tree]]) -> dict[str, float]:
    """EVALB of the cleaned test trees against the raw ones (traces, function tags, X -> X kept): the recall a
    parser that reproduced the cleaned trees exactly would get from EVALB run on the raw gold file."""
    raw = [tree for path in mrg_files([folder]) if SPLITS["test"][0] <= file_number(path) <= SPLITS["test"][1]
           for _, tree in parse_text(path.read_text(encoding="utf-8"), str(path))]
    result = evalb(raw, split["test"])
    return {"recall": result.short.recall, "precision": result.short.precision, "f1": result.short.f1,
            "recall_all": result.all.recall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data"
                        / "ptb_sample")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    split = split_by_file(args.data)
    seconds["read_and_clean"] = time.perf_counter() - start
    out: dict[str, object] = {"sentences": {k: len(v) for k, v in split.items()},
                              "sentences_le40": {k: sum(len(t.leaves()) <= 40 for t in v) for k, v in split.items()}}
    out["removed_by_cleaning"] = removed_by_cleaning(args.data)
    out["test_cleaned_against_raw_gold"] = raw_gold_against_cleaned(args.data, split)
    start = time.perf_counter()
    binarized = {k: [binarize(t) for t in v] for k, v in split.items()}
    g = grammar_from_trees(binarized["train"])
    anchored = [to_anchored(b, g) for b in binarized["train"]]
    seconds["binarize_grammar_anchor_train"] = time.perf_counter() - start
    out["grammar"] = {
        "labels": g.n_labels, "tags": int(g.is_tag.sum()), "at_labels": sum(x.startswith("@") for x in g.labels),
        "binary_rules": len(g.binary), "unary_rules": len(g.unary),
        "identities": sum(1 for u, (a, b) in enumerate(g.unary) if a == b and not g.chains[u]),
        "longest_chain": max(len(c) for c in g.chains) + 2}
    tags = TagDictionary.from_counts(rule_counts(anchored, g))
    out["tag_dictionary"] = {"words": len(tags.words), "closed_words": int((tags.counts >= 10).sum()),
                             "open_tags": [g.labels[t] for t in tags.open_tags]}
    for name in ("dev", "test"):
        words = [w for t in split[name] for w in t.leaves()]
        out[f"{name}_oov_percent"] = 100.0 * sum(tags.word_index(w) is None for w in words) / len(words)
        unseen = 0
        for b in binarized[name]:
            try:
                to_anchored(b, g)
            except ValueError:
                unseen += 1
        out[f"{name}_trees_with_rules_unseen_in_train"] = unseen
    start = time.perf_counter()
    everything = [b for v in binarized.values() for b in v]
    g_all = grammar_from_trees(everything)
    rebuilt = [from_anchored(to_anchored(b, g_all), g_all) for b in everything]
    gold = [t for v in split.values() for t in v]
    out["round_trip_identical"] = sum(r == t for r, t in zip(rebuilt, gold, strict=True))
    out["round_trip_evalb_f1_all"] = evalb(gold, rebuilt).all.f1
    seconds["round_trip_and_evalb_all"] = time.perf_counter() - start
    out["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
