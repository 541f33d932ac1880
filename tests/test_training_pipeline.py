"""The training pipeline behind ``python -m engine train``: option checks, overall progress across stages,
per-batch callbacks, and a callback's exception stopping training without a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    ({"order": 3}, "order must be 1 or 2"),
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
])
def test_options_are_checked(bad: dict, message: str) -> None:
    with pytest.raises(TrainOptionsError, match=message):
        TrainOptions(**bad)


def test_options_defaults_match_the_cli() -> None:
    options = TrainOptions(factors=["sib"])  # type: ignore[arg-type]
    assert options.factors == ("sib",) and options.effective_learning_rate == 0.2
    assert TrainOptions(order=2).effective_learning_rate == 0.05
    assert TrainOptions(order=1, factors=("cousin",)).factors == ("cousin",)  # ignored by first-order training


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
    from engine.data.conllu_io import read_conllu
    from engine.features.extract import FeatureExtractor
    from engine.features.templates import default_first_order
    from engine.inference.exact import TreeConstraint
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
