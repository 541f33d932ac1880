"""Coverage and size of conformal head and label sets (``engine.decode.conformal``) on a gold treebank.

    python -m engine parse --model models/en_ewt --input TEST --retag --head-sets 0.1 --output /tmp/sets.conllu
    python bench/head_set_coverage.py --gold TEST --pred /tmp/sets.conllu [--json]

Reads MISC ``HeadSet=3,5`` and ``DeprelSet=nsubj,obj`` of every word of ``--pred`` and reports the fraction of
words whose gold head (label) is in the set, the mean set size, the fraction of singleton sets, and how often
the written MBR head is in its head set. The files must have the same sentences and words.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.data.conllu_io import read_conllu  # noqa: E402


def _misc(misc: str, key: str) -> list[str]:
    for item in misc.split("|"):
        if item.startswith(key + "="):
            return item.split("=", 1)[1].split(",")
    raise SystemExit(f"a word has no MISC {key}: run `engine parse --head-sets ALPHA`")


def coverage(gold_path: str, pred_path: str) -> dict[str, float | int]:
    gold, pred = read_conllu(gold_path), read_conllu(pred_path)
    if len(gold) != len(pred) or any(g.forms != p.forms for g, p in zip(gold, pred, strict=True)):
        raise SystemExit(f"{pred_path} does not have the sentences and words of {gold_path}")
    words = heads_in = head_size = singletons = mbr_in = labels_in = label_size = 0
    for g, p in zip(gold, pred, strict=True):
        assert g.heads is not None and g.deprels is not None and p.heads is not None
        for j in range(g.n):
            head_set = [int(h) for h in _misc(p.misc[j], "HeadSet")]
            label_set = _misc(p.misc[j], "DeprelSet")
            words += 1
            heads_in += int(g.heads[j + 1]) in head_set
            mbr_in += int(p.heads[j + 1]) in head_set
            head_size += len(head_set)
            singletons += len(head_set) == 1
            labels_in += g.deprels[j] in label_set
            label_size += len(label_set)
    return {"words": words, "head_coverage": heads_in / words, "head_mean_size": head_size / words,
            "head_singletons": singletons / words, "mbr_head_in_set": mbr_in / words,
            "deprel_coverage": labels_in / words, "deprel_mean_size": label_size / words}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gold", required=True)
    ap.add_argument("--pred", required=True)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = coverage(args.gold, args.pred)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>18}: {v:.4f}" if isinstance(v, float)
                                                          else f"{k:>18}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
