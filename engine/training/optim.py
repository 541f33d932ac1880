"""The trainers' optimiser, AdaGrad (Duchi, Hazan & Singer 2011), defined in ``engine.optim.adagrad``, and
its settings (``engine.optim.settings``).

It lives at the bottom of the engine so that the tagger (``engine.text``) and the labeller
(``engine.decode``) can use it too without importing upwards from ``engine.training``; the parser trainers
import it from here.
"""

from engine.optim.adagrad import AdaGrad
from engine.optim.settings import OptimSettings

__all__ = ["AdaGrad", "OptimSettings"]
