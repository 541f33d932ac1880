"""The settings every trainer's optimiser and epoch loop take, declared and validated once.

``OptimSettings`` is the base of the parser trainers' configurations (``engine.training.cll.TrainConfig``,
``engine.training.erma.ErmaConfig``) and of the tagger's (``engine.text.tagger.TaggerConfig``), which
restate only the defaults that differ and add their own fields. Its fields are keyword-only, so that a
subclass may open with a positional field of its own (``ErmaConfig("l2+ar", epochs=4)``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class OptimSettings:
    """Epochs over the training set, the mini-batch size, AdaGrad's learning rate, the L2 weight of
    ``(l2 / 2) |w|^2`` (shared by the batches of an epoch in proportion to their sizes), the seed of the
    batch order, and whether each epoch's iterates are averaged (``engine.optim.loop``)."""

    epochs: int = 8
    batch_size: int = 32
    learning_rate: float = 0.2
    l2: float = 10.0
    seed: int = 0
    average: bool = True

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be at least 1")
        if self.learning_rate <= 0 or self.l2 < 0:
            raise ValueError("learning_rate must be > 0 and l2 >= 0")
