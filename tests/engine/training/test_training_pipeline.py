"""The training pipeline behind ``python -m engine train``: option checks, overall progress across stages,
per-batch callbacks, and a callback's exception stopping training without a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.data.conllu_io import read_conllu
from engine.training.pipeline import TrainOptions, TrainOptionsError, train_model

TOY = """# sent_id = 1
1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = 2
1\tcats\tcat\tNOUN\tNNS\t_\t2\tnsubj\t_\t_
2\tsleep\tsleep\tVERB\tVBP\t_\t0\troot\t_\t_

"""


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.conllu"
    path.write_text(TOY * 6, encoding="utf-8")
    return path


@pytest.mark.parametrize("bad, message", [
    ({"order": 3}, "order must be one of 1, 2"),
    ({"tree": "planar"}, "tree must be one of"),
    ({"root": "none"}, "root must be one of"),
    ({"epochs": 0}, "epochs must be an integer of at least 1"),
    ({"batch_size": -1}, "batch_size"),
    ({"learning_rate": 0.0}, "learning_rate must be > 0"),
    ({"l2": -1.0}, "l2 must be >= 0"),
    ({"max_sentences": 0}, "max_sentences"),
    ({"order": 2, "factors": ("grand", "cousin")}, "unknown factor families: cousin"),
    ({"tag_samples": -1}, "tag_samples must be an integer from 0 to 100"),
    ({"tag_samples": 2, "components": ("parser", "labeler")}, "tag_samples needs the tagger"),
    ({"seeds": 0}, "seeds must be an integer of at least 1"),
    ({"labeler_tag_samples": -1}, "labeler_tag_samples must be an integer from 0 to 16"),
    ({"labeler_tag_samples": 1, "components": ("parser", "labeler")}, "needs the tagger and labeler"),
    ({"labeler_tag_samples": 1, "components": ("parser", "tagger")}, "needs the tagger and labeler"),
])
def test_options_are_checked(bad: dict, message: str) -> None:
    with pytest.raises(TrainOptionsError, match=message):
        TrainOptions(**bad)


def test_options_defaults_match_the_cli() -> None:
    options = TrainOptions(factors=["sib"])  # type: ignore[arg-type]
    assert options.factors == ("sib",) and options.effective_learning_rate == 0.2
    assert TrainOptions(order=2).effective_learning_rate == 0.05
    assert TrainOptions(order=1, factors=("cousin",)).factors == ("cousin",)  # ignored by first-order training
    # the labeller's tag-sample copies: on by default for the whole pipeline, off without a tagger or labeller
    assert TrainOptions().effective_labeler_tag_samples == 1
    assert TrainOptions(components=("parser", "labeler")).effective_labeler_tag_samples == 0
    assert TrainOptions(labeler_tag_samples=0).effective_labeler_tag_samples == 0


@pytest.mark.parametrize("order", [1, 2])
def test_progress_rises_to_one_across_stages(tmp_path: Path, toy: Path, order: int) -> None:
    calls: list[tuple[float, str]] = []
    out = tmp_path / "model"
    summary = train_model(toy, toy, out, TrainOptions(order=order, epochs=2, dim=2048, second_dim=1024, batch_size=4),
                          progress=False, on_progress=lambda f, s: calls.append((f, s)),
                          extra_manifest=lambda: {"version": 7})
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    stages = list(dict.fromkeys(s for _, s in calls))
    parser = ["training"] if order == 1 else ["training pruner", "training"]
    expected = ["loading", "training tokenizer", "training tagger", *parser, "training labeler", "evaluating",
                "saving", "done"]  # the default components: the whole pipeline
    assert stages == expected
    assert sum(s == "training" for _, s in calls) > 4  # one call per batch
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 7 and manifest["name"] == "model" and manifest["order"] == order
    # the labeller trained on each sentence and one copy under tags drawn by its fold tagger (the default)
    labeler = manifest["components"]["labeler"]["info"]
    assert labeler["tag_samples"] == 1 and labeler["train_arcs"] == 2 * sum(s.n for s in read_conllu(toy))
    assert summary["order"] == order and summary["dev"]["uas"] > 50 and summary["model"] == str(out)


def test_a_callback_error_stops_training_without_a_model(tmp_path: Path, toy: Path) -> None:
    seen: list[float] = []

    def stop(fraction: float, stage: str) -> None:
        seen.append(fraction)
        if stage == "training" and fraction > 0.5:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        train_model(toy, None, tmp_path / "model", TrainOptions(epochs=3, dim=1024, batch_size=2),
                    progress=False, on_progress=stop)
    assert not (tmp_path / "model").exists() and max(seen) < 0.95


def test_on_batch_counts_batches_over_all_epochs(toy: Path) -> None:
    from engine.features.extract import FeatureExtractor
    from engine.features.templates import default_first_order
    from engine.kernels.exact import TreeConstraint
    from engine.training.cll import TrainConfig, train_cll

    calls: list[tuple[int, int]] = []
    train = read_conllu(toy)
    fx = FeatureExtractor(tuple(default_first_order()), 1024)
    train_cll(fx, TreeConstraint(), train, TrainConfig(epochs=3, batch_size=4), progress=False,
              on_batch=lambda done, total: calls.append((done, total)))
    total = calls[0][1]
    assert total % 3 == 0 and calls == [(i, total) for i in range(1, total + 1)]

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C is still the one exception that keeps the model so far

    assert train_cll(fx, TreeConstraint(), train, TrainConfig(epochs=2), progress=False, on_batch=interrupt).interrupted


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.slow
def test_seeds_average_the_weights_of_runs_with_consecutive_seeds(tmp_path: Path, ewt_dir: Path, order: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``seeds=2`` gives the mean of the weights of the runs with seeds 3 and 4 (for order 2 on one pruner,
    every run starting from it), records each run, and reports progress across both runs."""
    import numpy as np

    from engine.pipeline import Pipeline

    blocks = (ewt_dir / "en_ewt-ud-train.conllu").read_text(encoding="utf-8").split("\n\n")[:40]
    toy = tmp_path / "sample.conllu"
    toy.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")

    base = {"order": order, "epochs": 2, "dim": 2048, "second_dim": 1024, "batch_size": 4, "components": ("parser",)}
    pruner = None
    if order == 2:
        pruner = tmp_path / "pruner"
        train_model(toy, toy, pruner, TrainOptions(**{**base, "order": 1}), progress=False)
    weights = []
    for seed in (3, 4):
        train_model(toy, toy, tmp_path / f"s{seed}", TrainOptions(**base, seed=seed), pruner_path=pruner,
                    progress=False)
        weights.append(Pipeline.load(tmp_path / f"s{seed}").parser.weights)
    assert not np.array_equal(weights[0], weights[1])  # the seeds do train differently
    calls: list[tuple[float, str]] = []
    from engine.training import cll

    extracted: list[int] = []
    prepare = cll.prepare_batches
    monkeypatch.setattr(cll, "prepare_batches", lambda *a, **k: extracted.append(1) or prepare(*a, **k))
    summary = train_model(toy, toy, tmp_path / "both", TrainOptions(**base, seed=3, seeds=2), pruner_path=pruner,
                          progress=False, on_progress=lambda f, s: calls.append((f, s)))
    # first order: the two runs share one extraction of the features, freed after them (order 2's runs build
    # their graphs per batch; the pruner was given)
    assert extracted == ([1] if order == 1 else []) and not cll._SHARED
    assert [r["seed"] for r in summary["runs"]] == [3, 4] and all(0 < r["dev"] <= 100 for r in summary["runs"])
    both = Pipeline.load(tmp_path / "both").parser.weights
    np.testing.assert_allclose(both, (weights[0] + weights[1]) / 2, rtol=1e-6, atol=1e-7)  # stored as float32
    training = json.loads((tmp_path / "both" / "manifest.json").read_text())["training"]
    assert [r["seed"] for r in training["runs"]] == [3, 4] and all(r["averaged"] for r in training["runs"])
    assert training["seed"] == 3 and "mean of the weights" in training["method"]
    fractions = [f for f, stage in calls if stage == "training"]
    assert fractions == sorted(fractions) and len(fractions) > 8  # the batches of both runs, in one span
    single = json.loads((tmp_path / "s3" / "manifest.json").read_text())["training"]
    assert "runs" not in single and "method" not in single
    no_dev = train_model(toy, None, tmp_path / "no-dev", TrainOptions(**base, seeds=2), pruner_path=pruner,
                         progress=False)
    assert [sorted(r) for r in no_dev["runs"]] == [["averaged", "best_epoch", "interrupted", "seconds", "seed"]] * 2


def test_seeds_interrupted_keep_the_runs_done() -> None:
    """Ctrl-C in the second run: the mean of the first run and the second's best epoch so far; a run stopped
    before any epoch is left out of the mean; no further run starts."""
    import numpy as np

    from engine.training.cll import TrainResult
    from engine.training.seeds import train_seeds

    def make(results: dict[int, TrainResult]):
        started: list[int] = []

        def run(seed: int, on_batch):
            started.append(seed)
            on_batch(1, 2)
            return results[seed]
        return run, started

    done = TrainResult(np.full(3, 1.0), 2, [{"dev": 80.0}], seconds=1.0)
    partial = TrainResult(np.full(3, 3.0), 1, [{"dev": 81.0}], interrupted=True, seconds=0.5)
    nothing = TrainResult(np.full(3, 9.0), 0, [], interrupted=True)
    run, started = make({0: done, 1: partial, 2: done})
    result, runs = train_seeds(run, [0, 1, 2])
    assert started == [0, 1] and result.interrupted and np.allclose(result.weights, 2.0)
    assert [r["dev"] for r in runs] == [80.0, 81.0] and result.seconds == 1.5
    run, started = make({0: done, 1: nothing})
    result, runs = train_seeds(run, [0, 1, 2])
    assert np.allclose(result.weights, 1.0) and [r["averaged"] for r in runs] == [True, False]
    run, _ = make({5: done})
    assert train_seeds(run, [5]) == (done, [])
    with pytest.raises(ValueError):
        train_seeds(run, [])


def test_cli_flags_come_from_the_option_declarations() -> None:
    """One flag per option, with the option's default; comma lists, ``--no-average``, ``--max-sentences 0``."""
    import argparse
    from dataclasses import fields

    from engine.training import options as train_options

    parser = argparse.ArgumentParser()
    train_options.add_arguments(parser)
    flags = {a.dest: a.option_strings for a in parser._actions if a.dest != "help"}
    assert set(flags) == {f.name for f in fields(TrainOptions)} and flags["average"] == ["--no-average"]
    assert train_options.from_arguments(parser.parse_args([])) == TrainOptions()
    options = train_options.from_arguments(parser.parse_args(
        ["--no-average", "--max-sentences", "0", "--factors", "sib,grand", "--anneal", "2,0.5", "--order", "2",
         "--components", "parser,labeler", "--learning-rate", "0.1"]))
    assert options == TrainOptions(average=False, max_sentences=None, factors=("sib", "grand"), anneal=(2.0, 0.5),
                                   order=2, components=("parser", "labeler"), learning_rate=0.1)
    with pytest.raises(TrainOptionsError, match="--anneal must be T0,T1"):
        train_options.from_arguments(parser.parse_args(["--anneal", "hot,cold"]))
    with pytest.raises(TrainOptionsError, match="seed must be an integer of at least 0"):
        train_options.from_arguments(parser.parse_args(["--seed", "-1"]))
