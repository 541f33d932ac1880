"""Where the default model's time goes: seconds per stage of one ``python -m engine evaluate`` run.

Runs the CLI command in this process with a stopwatch around each stage's function (exclusive times: a
stage nested in another is subtracted from it), and prints one table row per stage plus the whole
command. Parses of the best tags and parses of the copies under the tag samples are counted apart, so the cost of the 16
samples shows on its own::

    OPENBLAS_NUM_THREADS=1 python bench/profile_stages.py --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu
    OPENBLAS_NUM_THREADS=1 python bench/profile_stages.py --data DEV --from-text      # with tokenising
    OPENBLAS_NUM_THREADS=1 python bench/profile_stages.py --data DEV --json           # one JSON line

Extra arguments after ``--`` go to ``evaluate`` (e.g. ``-- --tag-samples 0``). The stopwatch costs about
a microsecond per call; the ``other`` row is the whole command minus every stage.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# (stage, module, attribute): each patched where the caller looks the name up
STAGES: tuple[tuple[str, str, str], ...] = (
    ("reading", "engine.cli", "read_conllu"),
    ("model loading", "engine.pipeline.Pipeline", "load"),
    ("tokenising", "engine.pipeline.Pipeline", "tokenize"),
    ("tagging", "engine.pipeline.Pipeline", "tag_and_sample"),
    ("features", "engine.features.extract.FeatureExtractor", "extract"),
    ("features+potentials", "engine.bp_parser.BPParser", "link_and_prune_scores"),
    ("features+potentials", "engine.scoring.fused.ArcScorer", "__call__"),
    ("copies' link potentials (tag-averaged)", "engine.bp_parser.BPParser", "mixed_link_scores"),
    ("potentials", "engine.bp_parser", "arc_scores"),
    ("potentials", "engine.parser", "arc_scores"),
    ("pruning", "engine.bp_parser", "exact_marginals"),
    ("pruning", "engine.bp_parser", "prune_arcs"),
    ("pruning", "engine.bp_parser", "mbr_decode"),
    ("graph+2nd-order features", "engine.bp_parser", "build_graph"),
    ("first-order inference", "engine.parser", "exact_marginals"),
    ("BP", "engine.bp_parser", "infer_many"),
    ("joint: TAGLINK potentials, CHAIN", "engine.bp_parser.BPParser", "joint_graph"),
    ("joint BP (links and tags)", "engine.joint_parsing", "run_joint_bp_many"),
    ("labelling", "engine.bp_parser", "label_many"),
    ("decoding", "engine.bp_parser.BPParser", "decode"),
    ("decoding", "engine.decode.tag_marginal", "mbr_decode"),
    ("decoding", "engine.parser", "mbr_decode"),
    ("labelling", "engine.bp_parser", "label_arcs"),
    ("labelling", "engine.parser", "label_arcs"),
    ("labelling", "engine.decode.tag_marginal", "label_distributions"),
    ("labelling", "engine.decode.tag_marginal", "label_arcs"),
    ("LEMMA/FEATS", "engine.pipeline.Pipeline", "analyse"),
    ("scoring+writing", "engine.cli", "attachment_scores"),
    ("scoring+writing", "engine.cli", "confidence_scores"),
    ("scoring+writing", "engine.cli", "evaluate_ud"),
    ("scoring+writing", "engine.cli", "_system_conllu"),
)


class Stopwatch:
    """Exclusive seconds per stage: a stage's clock pauses while a nested stage runs."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[Any]] = []  # [stage, start, nested seconds]
        self.sample_round = False  # inside a parse of tag samples (not the best tags)

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            name = f"{stage} (tag samples)" if self.sample_round and stage not in ("tagging", "reading") else stage
            self._stack.append([name, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, start, nested = self._stack.pop()
                total = time.perf_counter() - start
                self.seconds[name] += total - nested
                self.calls[name] += 1
                if self._stack:
                    self._stack[-1][2] += total
        return timed


def _resolve(path: str) -> Any:
    """The module or class ``path`` names; None when this version of the engine has no such thing (the
    script also profiles older checkouts: ``--engine DIR``)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


@contextlib.contextmanager
def patched(watch: Stopwatch) -> Iterator[None]:
    """Install the stopwatch around every stage (and count the tag-sample parses apart)."""
    undo: list[tuple[Any, str, Any]] = []
    for stage, owner_path, attr in STAGES:
        owner = _resolve(owner_path)
        if owner is None or not hasattr(owner, attr):
            continue
        original = getattr(owner, attr)
        undo.append((owner, attr, original))
        setattr(owner, attr, watch.wrap(stage, original))
    tag_marginal = importlib.import_module("engine.decode.tag_marginal")
    original_over = tag_marginal.parse_over_tag_samples

    def over(sentences: Any, samples: Any, parse: Callable[..., Any], constraint: Any, labeler: Any,
             parse_unlabelled: Callable[..., Any] | None = None) -> Any:
        calls = [0]

        def counted(parser: Callable[..., Any]) -> Callable[..., Any]:
            def run(batch: list[Any]) -> Any:  # every call after the first parses copies under tag samples
                watch.sample_round = calls[0] > 0
                calls[0] += 1
                try:
                    return parser(batch)
                finally:
                    watch.sample_round = False
            return run
        if parse_unlabelled is None:  # an engine before the unlabelled copies (``--engine``)
            return original_over(sentences, samples, counted(parse), constraint, labeler)
        return original_over(sentences, samples, counted(parse), constraint, labeler, counted(parse_unlabelled))

    undo.append((tag_marginal, "parse_over_tag_samples", original_over))
    tag_marginal.parse_over_tag_samples = over
    try:
        yield
    finally:
        for owner, attr, original in reversed(undo):
            setattr(owner, attr, original)


def profile(argv: list[str]) -> dict[str, Any]:
    """Run ``python -m engine evaluate ARGV --json`` under the stopwatch: its scores and the stage table."""
    from engine.cli import main

    watch = Stopwatch()
    out = io.StringIO()
    with patched(watch), contextlib.redirect_stdout(out):
        start = time.perf_counter()
        code = main(["evaluate", *argv, "--json"])
        whole = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"evaluate exited with {code}")
    scores = json.loads(out.getvalue().strip().splitlines()[-1])
    stages = dict(sorted(watch.seconds.items(), key=lambda kv: -kv[1]))
    stages["other"] = whole - sum(watch.seconds.values())
    words = scores.get("tokens") or scores.get("gold_words")
    return {"command": "python -m engine evaluate " + " ".join(argv) + " --json", "seconds": round(whole, 3),
            "words": words, "words_per_second": round(words / whole, 1), "uas": scores.get("uas"),
            "las": scores.get("las"), "stages": {k: round(v, 3) for k, v in stages.items()},
            "calls": dict(watch.calls)}


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a CoNLL-U file (EWT dev for the docs' tables)")
    ap.add_argument("--model", default="models/en_ewt")
    ap.add_argument("--from-text", action="store_true", help="parse the raw text (tokenising included)")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    ap.add_argument("--engine", help="profile the engine of another checkout (its root directory), e.g. a "
                    "`git worktree` of an older commit, for before/after tables")
    ap.add_argument("rest", nargs="*", help="after --: more evaluate arguments")
    ns = ap.parse_args(args)
    if ns.engine:
        sys.path.insert(0, str(Path(ns.engine).resolve()))
        os.chdir(ns.engine)
    argv = ["--model", ns.model, "--data", ns.data, *(["--from-text"] if ns.from_text else ["--tags", "predicted"]),
            *ns.rest]
    result = profile(argv)
    if ns.json:
        print(json.dumps(result))
        return 0
    print(f"{result['command']}\n{result['words']} words in {result['seconds']:.2f} s = "
          f"{result['words_per_second']:.0f} words/s; UAS {result['uas']:.2f} LAS {result['las']:.2f}\n")
    print(f"| {'stage':<36} | {'seconds':>8} | {'share':>6} | {'calls':>7} |")
    print(f"|{'-' * 38}|{'-' * 10}:|{'-' * 7}:|{'-' * 8}:|")
    for stage, seconds in result["stages"].items():
        print(f"| {stage:<36} | {seconds:>8.2f} | {100 * seconds / result['seconds']:>5.1f}% | "
              f"{result['calls'].get(stage, ''):>7} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
