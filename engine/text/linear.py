"""Multinomial logistic regression over hashed feature keys, trained by mini-batch AdaGrad.

Every example has the same number ``F`` of features (one key per template), so a data set is a
``(N, F)`` uint64 key matrix. Keys seen fewer than ``min_count`` times in training share one
"rare" row; the others get their own row of ``K`` class weights (a sorted key table, looked up by
binary search), so there are no hash collisions. Training minimises the mean cross-entropy with
AdaGrad (Duchi, Hazan & Singer 2011; ``engine.optim``) on shuffled mini-batches; the gradient of a batch touches only
the rows of its keys (``np.unique`` + ``np.bincount``), and the returned weights are the average of
the iterates over the last epoch (Polyak-Ruppert averaging, applied lazily per row).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.model.widen import HALF_VALUES, finite_half, kernel_table, weight_value
from engine.optim import AdaGrad, EpochLoop

log = logging.getLogger(__name__)


def row_sums(weights: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """``out[i] += weights[rows[i, 0]] + weights[rows[i, 1]] + ...`` in float64, one feature after another.
    float16 weights (a loaded model's, as stored) are read through ``HALF_VALUES``: the same sums as widening
    them first, bit for bit, without the widened copy."""
    _row_sums(kernel_table(weights), HALF_VALUES, rows, out)


@njit(cache=True, nogil=True)
def _row_sums(weights: np.ndarray, decode: np.ndarray, rows: np.ndarray,
              out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(rows.shape[0]):
        for f in range(rows.shape[1]):
            r = rows[i, f]
            for k in range(weights.shape[1]):
                out[i, k] += weight_value(weights[r, k], decode)


@dataclass
class HashedLogLinear:
    """``keys`` sorted uint64 (D,), ``weights`` float32 (D + 1, K; a loaded model's float16 as stored); row D is
    the rare/unseen feature."""

    keys: np.ndarray
    weights: np.ndarray
    _table: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def n_classes(self) -> int:
        return int(self.weights.shape[1])

    def rows(self, feats: np.ndarray) -> np.ndarray:
        """Row index of every key (unseen keys -> the rare row), via an open-addressing table built on
        first use (linear probing, load <= 1/2), which is several times faster than binary search."""
        d = len(self.keys)
        if d == 0:
            return np.zeros(feats.shape, dtype=np.int64)
        if self._table is None:
            self._table = _build_table(self.keys)
        table_keys, table_rows = self._table
        mask = np.uint64(len(table_rows) - 1)
        flat = feats.ravel()
        out = np.full(len(flat), d, dtype=np.int64)
        active = np.arange(len(flat))
        slot = flat & mask
        while active.size:
            row = table_rows[slot]
            hit = (row >= 0) & (table_keys[slot] == flat[active])
            out[active[hit]] = row[hit]
            more = (row >= 0) & ~hit
            active, slot = active[more], (slot[more] + np.uint64(1)) & mask
        return out.reshape(feats.shape)

    def scores(self, feats: np.ndarray, block: int = 1 << 16) -> np.ndarray:
        """Class scores (N, K) float64 of a key matrix (N, F), in blocks of rows to bound memory: each row's
        weights added in float64 in feature order (``row_sums``: what ``weights[rows].sum(axis=1,
        dtype=np.float64)`` computes, without its (N, F, K) temporary)."""
        out = np.zeros((feats.shape[0], self.n_classes), dtype=np.float64)
        weights = np.ascontiguousarray(self.weights if self.weights.dtype in (np.float16, np.float32, np.float64)
                                       else self.weights.astype(np.float64))
        for a in range(0, feats.shape[0], block):
            row_sums(weights, self.rows(feats[a:a + block]), out[a:a + block])
        return out

    def probabilities(self, feats: np.ndarray) -> np.ndarray:
        return softmax(self.scores(feats))

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}_keys": self.keys, f"{prefix}_weights": self.weights}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str, n_classes: int) -> HashedLogLinear:
        try:
            keys, weights = arrays[f"{prefix}_keys"], arrays[f"{prefix}_weights"]
        except KeyError as e:
            raise ValueError(f"missing array {e.args[0]!r}") from None
        if keys.dtype != np.uint64 or keys.ndim != 1 or np.any(keys[1:] <= keys[:-1]):
            raise ValueError(f"{prefix}_keys must be a strictly increasing uint64 vector")
        finite = finite_half(weights) if weights.dtype == np.float16 else np.all(np.isfinite(weights))
        if weights.ndim != 2 or weights.shape != (len(keys) + 1, n_classes) or not finite:
            raise ValueError(f"{prefix}_weights must be finite with shape ({len(keys) + 1}, {n_classes}), "
                             f"got {weights.shape}")
        # float16 (stored) weights are kept as they are: ``row_sums`` reads them exactly
        return cls(keys, weights if weights.dtype == np.float16 else weights.astype(np.float32, copy=False))

    @classmethod
    def train(
        cls, feats: np.ndarray, labels: np.ndarray, n_classes: int, *, epochs: int = 5, learning_rate: float = 0.2,
        min_count: int = 2, batch_size: int = 2048, seed: int = 0, progress: bool = False, desc: str = "train",
        on_epoch: Callable[[int, HashedLogLinear], None] | None = None,
    ) -> HashedLogLinear:
        """Fit on a key matrix (N, F) and integer labels (N,) in ``range(n_classes)``."""
        n, f = feats.shape
        labels = np.asarray(labels, dtype=np.int64)
        uniq, inverse, counts = np.unique(feats.ravel(), return_inverse=True, return_counts=True)
        kept = counts >= min_count
        keys = uniq[kept]
        d = len(keys)
        row_of = np.where(kept, np.cumsum(kept) - 1, d)
        x = row_of[inverse.reshape(n, f)].astype(np.int32)
        del inverse
        log.info("%s: %d examples, %d templates, %d features kept of %d", desc, n, f, d, len(uniq))
        w = np.zeros((d + 1, n_classes), dtype=np.float64)
        opt = AdaGrad(w.shape, learning_rate, delta=0.0, initial=1e-8)  # w -= eta g / sqrt(1e-8 + G)
        avg = np.zeros_like(w)  # sum of iterates over the last epoch, updated lazily
        stamp = np.zeros(d + 1, dtype=np.int64)  # step at which avg[row] was last brought up to date
        rng = np.random.default_rng(seed)
        models: list[HashedLogLinear] = []

        def step(idx: np.ndarray, averaging: bool) -> float:
            rows = x[idx]
            p = softmax(w[rows].sum(axis=1))
            loss = float(-np.log(np.maximum(p[np.arange(len(idx)), labels[idx]], 1e-300)).sum())
            p[np.arange(len(idx)), labels[idx]] -= 1.0
            p /= len(idx)
            touched, where = np.unique(rows.ravel(), return_inverse=True)
            grad = np.stack([np.bincount(where, weights=np.repeat(p[:, k], f), minlength=len(touched))
                             for k in range(n_classes)], axis=1)
            if averaging:  # rows untouched since their stamp kept their value for (step - stamp) steps
                avg[touched] += w[touched] * (loop.steps - stamp[touched])[:, None]
                stamp[touched] = loop.steps
            opt.step_rows(w, touched, grad)
            return loss

        def evaluate(averaging: bool) -> None:
            w_out = w
            if averaging:
                avg[:] += w * (loop.steps - stamp)[:, None]
                w_out = avg / max(loop.steps, 1)
            models.append(cls(keys, w_out.astype(np.float32)))
            if on_epoch is not None:
                on_epoch(loop.epoch, models[-1])

        def shuffled() -> list[np.ndarray]:
            order = rng.permutation(n)
            return [order[a:a + batch_size] for a in range(0, n, batch_size)]

        # the iterates of the last epoch are averaged (lazily per row, hence not by the loop's dense averaging)
        loop = EpochLoop([w], total_batches=epochs * -(-n // batch_size), total_epochs=epochs, progress=progress,
                         name=f"{desc} ")
        loop.run(max(epochs - 1, 0), shuffled, lambda idx: step(idx, False), lambda _, __: evaluate(False), per=n)
        if epochs > 0:
            loop.run(1, shuffled, lambda idx: step(idx, True), lambda _, __: evaluate(True), per=n)
        return models[-1] if models else cls(keys, w.astype(np.float32))


def _build_table(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Open-addressing table of distinct uint64 ``keys``: (slot keys, slot rows with -1 = empty)."""
    size = 1 << max(4, int(2 * len(keys) - 1).bit_length())
    mask = np.uint64(size - 1)
    table_keys = np.zeros(size, dtype=np.uint64)
    table_rows = np.full(size, -1, dtype=np.int32)
    pending = np.arange(len(keys))
    slot = keys & mask
    while pending.size:
        free = table_rows[slot] < 0
        _, first = np.unique(np.where(free, slot, np.uint64(size)), return_index=True)
        first = first[free[first]]  # one key per free slot
        table_rows[slot[first]] = pending[first]
        table_keys[slot[first]] = keys[pending[first]]
        left = np.ones(len(pending), dtype=bool)
        left[first] = False
        pending, slot = pending[left], (slot[left] + np.uint64(1)) & mask
    return table_keys, table_rows


def softmax(scores: np.ndarray) -> np.ndarray:
    z = scores - scores.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z
