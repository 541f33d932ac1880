"""The optimiser and the epoch loop that every trainer shares (AdaGrad, ``adagrad``; epochs, averaging, best
epoch on dev, Ctrl-C, ``loop``), and their settings (``settings``).

Layering: this package sits at the bottom of the engine, beside ``engine.data``: it imports only numpy and
tqdm, never another engine package, so that the trainers at every level can use it without an import that
points up the data flow: the tokenizer's logistic regressions and the CRF tagger (``engine.text``), the
log-linear labeller (``engine.decode``) and the parser trainers (``engine.training``, which re-exports it as
``engine.training.optim`` and ``engine.training.loop``).
"""

from engine.optim.adagrad import AdaGrad
from engine.optim.loop import EpochLoop, LoopResult, dev_or_loss
from engine.optim.settings import OptimSettings

__all__ = ["AdaGrad", "EpochLoop", "LoopResult", "dev_or_loss", "OptimSettings"]
