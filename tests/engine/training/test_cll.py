"""CLL objective: gradient against finite differences, in every tree/root mode; a tiny training run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.features.extract import FeatureExtractor
from engine.features.templates import ArcTemplate, default_first_order
from engine.kernels.exact import TreeConstraint
from engine.training.cll import TrainConfig, TrainingBatch, cll_objective, train_cll, usable_trees

TEMPLATES = (
    ArcTemplate(("upos",), ("upos",), "dist"),
    ArcTemplate(("form",), ("upos",), "dir"),
    ArcTemplate(("upos",), ("upos",), "dir", between=True),
)


def _sent(text: str, tags: str, heads: list[int]) -> SimpleNamespace:
    return SimpleNamespace(forms=text.split(), upos=tags.split(), xpos=tags.split(), heads=np.array([-1, *heads]),
                           deprels=["dep"] * len(heads))


SENTS = [
    _sent("the dog barks", "DET NOUN VERB", [2, 3, 0]),
    _sent("a cat sleeps", "DET NOUN VERB", [2, 3, 0]),
]


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
@pytest.mark.parametrize("root", ["single", "multi"])
def test_cll_gradient_matches_finite_differences(tree: str, root: str) -> None:
    fx = FeatureExtractor(TEMPLATES, 64)
    constraint = TreeConstraint(tree, root)
    batch = TrainingBatch(fx.extract(SENTS), np.stack([s.heads for s in SENTS]))
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.5, size=fx.dim)
    w[0] = 0.0
    value, grad = cll_objective(w, batch, constraint)
    assert value > 0
    eps = 1e-6
    used = np.unique(batch.features)
    used = used[used > 0]
    assert len(used) > 10
    for i in used:
        up, down = w.copy(), w.copy()
        up[i] += eps
        down[i] -= eps
        fd = (cll_objective(up, batch, constraint)[0] - cll_objective(down, batch, constraint)[0]) / (2 * eps)
        assert grad[i] == pytest.approx(fd, abs=1e-6)
    assert grad[0] == 0.0


def test_usable_trees_reports_skips() -> None:
    crossing = _sent("a b c d", "X X X X", [3, 4, 0, 3])  # 1<-3 and 2<-4 cross
    two_roots = _sent("a b", "X X", [0, 0])
    no_heads = SimpleNamespace(forms=["a"], upos=["X"], xpos=["X"], heads=None)
    keep, skipped = usable_trees([crossing, two_roots, no_heads, SENTS[0]], TreeConstraint("projective", "single"))
    assert keep == [3]
    assert skipped == {"no_heads": 1, "nonprojective": 1, "root_count": 1, "not_a_tree": 0}
    cyclic = _sent("a b c", "X X X", [2, 1, 0])
    keep, skipped = usable_trees([cyclic, two_roots], TreeConstraint("nonprojective", "multi"))
    assert keep == [1] and skipped["not_a_tree"] == 1


def test_training_learns_a_toy_grammar() -> None:
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 16)
    result = train_cll(fx, TreeConstraint(), SENTS * 4, TrainConfig(epochs=3, l2=0.1), progress=False)
    assert result.best_epoch >= 1 and len(result.history) == 3
    assert result.history[-1]["nll"] < result.history[0]["nll"]
    test = _sent("the cat sleeps", "DET NOUN VERB", [2, 3, 0])
    value, _ = cll_objective(result.weights, TrainingBatch(fx.extract([test]), test.heads[None]), TreeConstraint())
    assert value < np.log(9.0) / 2  # p(gold) well above uniform over the 9 single-root trees


def test_ctrl_c_keeps_the_best_model_so_far() -> None:
    fx = FeatureExtractor(TEMPLATES, 256)
    calls = []

    def dev_score(weights: np.ndarray) -> float:
        calls.append(weights.copy())
        if len(calls) == 2:
            raise KeyboardInterrupt  # the user presses Ctrl-C during the second epoch's evaluation
        return 1.0

    result = train_cll(fx, TreeConstraint(), SENTS, TrainConfig(epochs=5), dev_score, progress=False)
    assert result.interrupted and result.best_epoch == 1
    np.testing.assert_array_equal(result.weights, calls[0])


def test_runs_sharing_a_key_extract_the_features_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``train_cll(..., shared=KEY)`` (the seeds of ``--seeds N`` in one process): the first run extracts the
    batches' features and the next reuses them, and every run's weights are those it trains alone; a new key
    replaces the kept features, and ``forget_shared`` frees them."""
    from engine.training import cll

    extracted: list[int] = []
    prepare = cll.prepare_batches

    def counting(*args: object, **kwargs: object) -> object:
        extracted.append(1)
        return prepare(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cll, "prepare_batches", counting)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 16)
    train = SENTS * 4

    def run(seed: int, shared: str | None) -> np.ndarray:
        return train_cll(fx, TreeConstraint(), train, TrainConfig(epochs=2, batch_size=1, seed=seed), progress=False,
                         shared=shared).weights

    together = [run(seed, "seeds") for seed in (0, 1)]
    assert len(extracted) == 1 and list(cll._SHARED) == ["seeds"]
    alone = [run(seed, None) for seed in (0, 1)]
    assert len(extracted) == 3
    assert all(np.array_equal(a, b) for a, b in zip(together, alone, strict=True))
    assert not np.array_equal(together[0], together[1])  # the seeds do train differently
    run(0, "other")
    assert len(extracted) == 4 and list(cll._SHARED) == ["other"]
    cll.forget_shared("other")
    assert not cll._SHARED
