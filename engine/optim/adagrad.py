"""Diagonal AdaGrad (Duchi, Hazan & Singer 2011, "Adaptive subgradient methods for online learning and
stochastic optimization", JMLR 12:2121-2159), the one optimiser of every trainer in the engine.

Each weight ``i`` has its own step size, the learning rate over the root of its summed squared gradients:

    G_i <- G_i + g_i^2,        w_i <- w_i - eta g_i / (delta + sqrt(G_i))

(the diagonal update, with ``H_t = delta I + diag(G_t)^(1/2)``). Three forms, as the trainers need:

- ``step``: a dense update of a whole array (the parsers' weight vectors, the tagger's transitions);
- ``step_rows``: a sparse (scatter) update of the rows a mini-batch touched, the others keeping both their
  weights and their sums (the hashed-feature matrices of the tagger, the labeller and the tokenizer);
- ``step_composite``: Duchi et al.'s composite mirror descent update with the squared L2 regulariser, as
  Gormley, Dredze & Eisner (2015, §3) train with it; its closed form per weight is
  ``w <- (H w - eta g) / (H + eta l2)`` (approximation-aware training, ``engine.training.erma``).

L2 as the trainers do it: ``step`` and ``step_rows`` add a batch's share of the penalty ``(l2 / 2) |w|^2`` to the
gradient, ``l2 * w`` (for ``step_rows`` only on the touched rows: a lazy penalty), when ``l2`` is given; the
labeller puts its penalty in its loss instead, and the tokenizer has none. ``step_composite`` applies it
in closed form.

Arithmetic is kept exactly as each trainer had it, so that results did not change when the six copies became
this one (``bench/train_identity.py``): ``delta`` may be 0 with the sums starting at ``initial`` instead (the
tokenizer's form, ``w - eta g / sqrt(initial + G)``); the sums may be stored in float32 (``dtype``); and with
``round_steps`` the squared gradient and the step are rounded to the storage dtypes before they are added
(the labeller's float32 arithmetic) instead of being computed in float64 and rounded once when stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit


class AdaGrad:
    """The state of diagonal AdaGrad for one weight array of shape ``shape``: the summed squared gradients."""

    def __init__(self, shape: int | tuple[int, ...], learning_rate: float, *, delta: float = 1e-8,
                 initial: float = 0.0, dtype: Any = np.float64, round_steps: bool = False) -> None:
        if not learning_rate > 0 or delta < 0 or initial < 0:
            raise ValueError("AdaGrad needs learning_rate > 0, delta >= 0 and initial >= 0")
        if delta == 0 and initial == 0:  # a weight whose gradients are all 0 so far would step by 0 / 0
            raise ValueError("AdaGrad needs delta > 0 or initial > 0")
        # Python floats, not numpy scalars: with float32 arrays they then stay float32 (NEP 50)
        self.learning_rate, self.delta = float(learning_rate), float(delta)
        self.g2 = np.full(shape, initial, dtype=dtype)
        self.round_steps = round_steps

    @classmethod
    def like(cls, weights: np.ndarray, learning_rate: float, **settings: Any) -> AdaGrad:
        """AdaGrad for ``weights``, its sums stored in the weights' dtype."""
        return cls(weights.shape, learning_rate, dtype=weights.dtype, **settings)

    def step(self, w: np.ndarray, grad: np.ndarray, l2: float | None = None, *, clear: bool = False,
             accumulate: np.ndarray | None = None) -> None:
        """Update all of ``w`` in place from the loss gradient ``grad`` (modified: ``l2 * w`` is added first
        when ``l2``, the batch's share of the L2 penalty, is given; with ``clear`` it is left all zeros instead,
        ready for the next batch's scatter-add: ``engine.scoring.potentials.scatter_gradient``'s ``out``).
        ``accumulate``: a running sum of the iterates (``EpochLoop.sum_of``) that the new ``w`` is added to, in
        the same pass (``accumulate += w`` bit for bit, one pass over the weights fewer per step)."""
        if _fusable(w, grad, self.g2) and (accumulate is None or _fusable(w, accumulate)):
            _dense_step(w.reshape(-1), grad.reshape(-1), self.g2.reshape(-1), self.learning_rate, self.delta,
                        0.0 if l2 is None else float(l2), l2 is not None, clear,
                        _NO_SUM if accumulate is None else accumulate.reshape(-1), accumulate is not None)
            return
        self.numpy_step(w, grad, l2)
        if clear:
            grad[...] = 0.0
        if accumulate is not None:
            accumulate += w

    def numpy_step(self, w: np.ndarray, grad: np.ndarray, l2: float | None = None) -> None:
        """``step`` in numpy arrays: for any dtype and layout, and the reference of the compiled pass."""
        if l2 is not None:
            grad += float(l2) * w
        self.g2 += grad * grad
        w -= self.learning_rate * grad / (np.sqrt(self.g2) + self.delta)

    def step_rows(self, w: np.ndarray, rows: np.ndarray, grad: np.ndarray, l2: float | None = None) -> None:
        """Update the rows ``rows`` (distinct indices along axis 0) of ``w`` in place; ``grad[i]`` is the loss
        gradient of row ``rows[i]`` (modified: ``l2 * w[rows]`` is added first when ``l2`` is given)."""
        if l2 is not None:
            grad += float(l2) * w[rows]
        if self.round_steps:
            sq = self.g2[rows] + (grad * grad).astype(self.g2.dtype)
            self.g2[rows] = sq
            w[rows] -= (self.learning_rate * grad / (np.sqrt(sq) + self.delta)).astype(w.dtype)
        else:
            sq = self.g2[rows] + grad * grad
            self.g2[rows] = sq
            w[rows] = w[rows] - self.learning_rate * grad / (np.sqrt(sq) + self.delta)

    def step_composite(self, w: np.ndarray, grad: np.ndarray, l2: float) -> None:
        """Composite mirror descent with ``(l2 / 2) |w|^2``: ``w <- (H w - eta g) / (H + eta l2)`` in place,
        ``H = delta + sqrt(G)`` after adding ``grad``'s squares (the proximal step's exact minimiser)."""
        self.g2 += grad * grad
        h = self.delta + np.sqrt(self.g2)
        w *= h
        w -= self.learning_rate * grad
        w /= h + self.learning_rate * l2


_NO_SUM = np.zeros(1)  # ``_dense_step``'s total when there is none (one compiled signature)


def _fusable(*arrays: np.ndarray) -> bool:
    """float64, C-contiguous, one shape: where the compiled step computes exactly what numpy does."""
    return all(a.dtype == np.float64 and a.flags.c_contiguous and a.shape == arrays[0].shape for a in arrays)


# error_model="numpy": a division by zero gives IEEE inf/nan (as numpy's step does) instead of a Python check and
# exception per weight, which kept LLVM from vectorising the loop: 25-27 -> 8.5 ms a step of 2^22 weights
# (docs/results/cluster.md), each weight still the same IEEE operations (vector sqrt and division are correctly
# rounded, and no fastmath)
@njit(cache=True, nogil=True, error_model="numpy")
def _dense_step(w: np.ndarray, grad: np.ndarray, g2: np.ndarray, learning_rate: float, delta: float, l2: float,
                with_l2: bool, clear: bool, total: np.ndarray, with_total: bool) -> None:  # pragma: no cover - compiled
    """``step`` in one pass over the weights: numpy's ``grad += l2 * w; g2 += grad * grad; w -= lr * grad /
    (sqrt(g2) + delta)`` makes about ten passes over arrays of 2^22 doubles and allocates a temporary for each,
    which is memory traffic (and page faults) that two trainings on two cores contend for. Each weight sees the
    same IEEE operations in the same order (no fused multiply-add: numba does not contract without fastmath), so
    the result is numpy's bit for bit (``tests/engine/optim/test_optim.py``). ``clear`` zeros ``grad`` on the way
    (for a trainer that keeps one gradient buffer) instead of leaving ``l2 * w`` added to it; ``with_total`` adds
    the new weight to ``total`` (the loop's sum of iterates, which numpy would add in a pass of its own)."""
    for i in range(w.size):
        g = grad[i]
        if with_l2:
            g = g + l2 * w[i]
        if clear:
            grad[i] = 0.0
        elif with_l2:
            grad[i] = g
        s = g2[i] + g * g
        g2[i] = s
        w[i] = w[i] - learning_rate * g / (np.sqrt(s) + delta)
        if with_total:
            total[i] = total[i] + w[i]
