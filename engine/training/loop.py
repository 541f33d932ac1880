"""The trainers' epoch loop (averaging, best epoch on dev, Ctrl-C, progress), defined in ``engine.optim.loop``.

It lives at the bottom of the engine so that the tagger (``engine.text``) and the labeller
(``engine.decode``) can use it too without importing upwards from ``engine.training``; the parser trainers
import it from here.
"""

from engine.optim.loop import EpochLoop, LoopResult, dev_or_loss

__all__ = ["EpochLoop", "LoopResult", "dev_or_loss"]
