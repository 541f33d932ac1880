"""Do the trainers still learn exactly the same weights? Train tiny models with fixed seeds and compare.

Every trainer that runs an optimiser is exercised through ``engine.training.pipeline.train_model`` on the
first sentences of EWT train (best epoch chosen on a few dev sentences, so the dev-selection path runs too):

- ``o1-all``: first-order CLL parser (``training.cll``), the tokenizer's two logistic regressions
  (``text.linear``), the CRF tagger and its jackknife fold taggers (``text.tagger``), the stacked log-linear
  labeller with its fold labellers and tag-sample copies (``decode.loglinear_labeler``);
- ``o1-ar``: approximation-aware training under exact inference (``training.erma``, annealed risk);
- ``o2-cll``: a first-order pruner (CLL) then surrogate CLL under BP (``training.surrogate``);
- ``o2-l2ar``: layer-wise L2 then annealed risk through BP (``training.erma``);
- ``o1-seeds``: two seeds averaged, no dev set (the last epoch, and the loss as the epoch score).

Saved models hold large arrays as float16 and the labeller rounds its trained weights to float16, which
would hide a difference of an ulp in the float32/float64 training arithmetic. So during the runs the model
store halves no array (``engine.model.store.HALF_MIN_SIZE`` raised) and ``engine.decode.loglinear_labeler``
sees a numpy whose ``float16`` is ``float32`` (its module-global ``np``, a proxy): arrays are compared as
trained. The parsers' weights are saved as float32, so their float64 training results are also taken as
they come out of ``engine.training.seeds.train_seeds`` (``parser-run<k>.float64.npy``).

``--write DIR`` saves every array of every model directory (``*.npy``) and each training history (losses and
dev scores, times left out) under ``DIR``; ``--check DIR`` trains again and compares: arrays bitwise (dtype,
shape and bytes), histories exactly. Exit status 1 on any difference. DIR should be outside the repository
(e.g. ``/tmp/ref_train``); nothing is pickled.

    python bench/train_identity.py --write /tmp/ref_train   # before a change
    python bench/train_identity.py --check /tmp/ref_train   # after it
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's engine, not an installed one

from engine.training.pipeline import TrainOptions, train_model  # noqa: E402

UD = Path("/work/shared/data/ud/en_ewt")
SMALL = {"dim": 1 << 14, "second_dim": 1 << 14, "epochs": 3, "batch_size": 8, "folds": 2}
RUNS: dict[str, dict[str, Any]] = {
    "o1-all": {"components": ("tokenizer", "tagger", "parser", "labeler")},
    "o1-ar": {"components": ("parser",), "objective": "ar"},
    "o2-cll": {"components": ("parser",), "order": 2, "epochs": 2},
    "o2-l2ar": {"components": ("parser",), "order": 2, "epochs": 2, "objective": "l2+ar", "bp_iterations": 2},
    "o1-seeds": {"components": ("parser",), "seeds": 2, "seed": 3, "no_dev": True},
}


def _sample(source: Path, target: Path, count: int) -> Path:
    """The first ``count`` sentences of a CoNLL-U file, written to ``target``."""
    blocks = source.read_text(encoding="utf-8").split("\n\n")[:count]
    target.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return target


def _history(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The training histories of a manifest (parser and components), without the times."""
    found: list[dict[str, Any]] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "history" and isinstance(value, list):
                    found.extend({k: v for k, v in e.items() if "seconds" not in k} for e in value)
                else:
                    visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(manifest)
    return found


@contextmanager
def _full_precision() -> Iterator[None]:
    """Saved arrays as trained: no float16 in the model store nor in the labeller (see the module docstring)."""
    from engine.decode import loglinear_labeler as labeller
    from engine.model import store

    proxy = types.ModuleType("numpy_without_float16")
    proxy.__dict__.update(np.__dict__)
    proxy.float16 = np.float32  # type: ignore[attr-defined]
    saved = labeller.np, store.HALF_MIN_SIZE
    labeller.np, store.HALF_MIN_SIZE = proxy, 1 << 62  # type: ignore[attr-defined]
    try:
        yield
    finally:
        labeller.np, store.HALF_MIN_SIZE = saved  # type: ignore[attr-defined]


@contextmanager
def _parser_weights(into: list[np.ndarray]) -> Iterator[None]:
    """Collect the float64 weights of every ``train_seeds`` result (the pipeline imports it when it runs)."""
    from engine.training import seeds

    original = seeds.train_seeds

    def recording(*args: Any, **kwargs: Any) -> Any:
        result, runs = original(*args, **kwargs)
        into.append(np.array(result.weights, copy=True))
        return result, runs

    seeds.train_seeds = recording  # type: ignore[assignment]
    try:
        yield
    finally:
        seeds.train_seeds = original  # type: ignore[assignment]


def train_all(work: Path) -> dict[str, tuple[dict[str, np.ndarray], list[dict[str, Any]]]]:
    """Train every run of ``RUNS``; its arrays by file name and its histories."""
    train = _sample(UD / "en_ewt-ud-train.conllu", work / "train.conllu", 40)
    dev = _sample(UD / "en_ewt-ud-dev.conllu", work / "dev.conllu", 12)
    out = {}
    for name, settings in RUNS.items():
        settings = dict(settings)
        no_dev = settings.pop("no_dev", False)
        target = work / name
        weights: list[np.ndarray] = []
        with _parser_weights(weights):
            train_model(train, None if no_dev else dev, target, TrainOptions(**{**SMALL, **settings}), progress=False)
        arrays = {p.name: np.load(p, allow_pickle=False) for p in sorted(target.glob("*.npy"))}
        arrays.update({f"parser-run{k}.float64.npy": w for k, w in enumerate(weights)})
        manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
        out[name] = (arrays, _history(manifest))
        print(f"{name}: {len(arrays)} arrays, {len(out[name][1])} history entries", flush=True)
    import engine

    print(f"engine from {Path(engine.__file__).parent}")
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, help="save the reference arrays and histories here")
    mode.add_argument("--check", type=Path, help="compare with the reference saved here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, _full_precision():
        results = train_all(Path(tmp))
    if args.write:
        for name, (arrays, history) in results.items():
            (args.write / name).mkdir(parents=True, exist_ok=True)
            for file, arr in arrays.items():
                np.save(args.write / name / file, arr, allow_pickle=False)
            (args.write / name / "history.json").write_text(json.dumps(history, indent=1), encoding="utf-8")
        print(f"reference written to {args.write}")
        return 0
    bad = 0
    for name, (arrays, history) in results.items():
        before = bad
        ref_dir = args.check / name
        ref = {p.name: np.load(p, allow_pickle=False) for p in sorted(ref_dir.glob("*.npy"))}
        if set(ref) != set(arrays):
            print(f"{name}: arrays differ in name: {sorted(set(ref) ^ set(arrays))}")
            bad += 1
        for file in sorted(set(ref) & set(arrays)):
            if not _same(ref[file], arrays[file]):
                a, b = ref[file], arrays[file]
                diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.shape == b.shape \
                    else float("nan")
                print(f"{name}/{file}: DIFFERENT (max abs difference {diff:.3g})")
                bad += 1
        ref_history = json.loads((ref_dir / "history.json").read_text(encoding="utf-8"))
        if ref_history != json.loads(json.dumps(history)):
            print(f"{name}: training histories differ")
            bad += 1
        print(f"{name}: {len(arrays)} arrays {'bitwise identical' if bad == before else 'checked'}", flush=True)
    print("all identical" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
