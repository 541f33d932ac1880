"""The epoch loop of every trainer: shuffled mini-batches, iterate averaging, the best epoch on dev, Ctrl-C.

A trainer gives the loop the arrays it trains in place and, per stage, three functions: ``batches()`` the
batches of one epoch in the order to visit them (the trainer draws the shuffle from its own generator),
``step(batch)`` one optimiser step returning the batch's summed loss (or its terms, which the loop adds one
by one to the epoch's total, as a trainer that sums per sentence did), and ``evaluate(current, entry)`` the
epoch's score (higher is better; ``None``: the epoch is not scored), which may add fields to the epoch's
history ``entry``. Per epoch the loop then

- averages the iterates of that epoch only when ``average`` is set (Polyak-Ruppert averaging without the poor
  early iterates; Collins 2002 averages a perceptron's the same way) and scores that mean, else the arrays as
  they are;
- records ``{"epoch", <loss_key>: summed loss / per, "seconds", ...}`` in the history, logs it and, with
  ``progress``, shows a tqdm bar over the batches and a line per epoch;
- keeps a copy of the best-scored epoch's arrays (early stopping on dev). Without any scored epoch the result
  is the arrays as the last epoch left them.

``on_batch(done, total)`` is called after every batch with the batches done so far and ``total_batches``; an
exception it raises propagates. With ``interruptible``, Ctrl-C stops after the current batch or evaluation
instead (in the main thread a first Ctrl-C is noted and acted on there, a second stops at once; elsewhere a
``KeyboardInterrupt`` stops where it lands): the result is the best epoch so far (or, before any epoch ended, the
arrays as they were at the start, best epoch 0), ``interrupted`` is set, and ``partial`` holds the unfinished
epoch's (averaged) arrays for a trainer that prefers them to its starting point.

Several ``run`` calls continue one another (the same epoch count, history, best epoch and batch count), which
is how approximation-aware training runs its layer-wise stages (``engine.training.erma``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

log = logging.getLogger(__name__)

Arrays = Sequence[np.ndarray]
Step = Callable[[Any], float | Sequence[float]]
Evaluate = Callable[[Arrays, dict[str, Any]], float | None]


@dataclass
class LoopResult:
    params: list[np.ndarray]  # the chosen epoch's arrays (copies), or the live arrays when no epoch was scored
    best_epoch: int  # 0: interrupted before any epoch was scored
    history: list[dict[str, Any]]
    interrupted: bool
    partial: list[np.ndarray] | None  # at an interruption: the unfinished epoch's (averaged) arrays


class EpochLoop:
    """Epochs over ``params`` (arrays updated in place by the trainer's ``step``); see the module docstring."""

    def __init__(self, params: Arrays, *, total_batches: int, total_epochs: int, average: bool = False,
                 progress: bool = False, on_batch: Callable[[int, int], None] | None = None, name: str = "",
                 interruptible: bool = False) -> None:
        self.params = list(params)
        self.sums = [np.zeros_like(p) for p in self.params] if average else None
        self.initial = [p.copy() for p in self.params] if interruptible else None
        self.total_batches, self.total_epochs = total_batches, total_epochs
        self.progress, self.on_batch, self.name, self.interruptible = progress, on_batch, name, interruptible
        self.epoch = self.done = self.steps = 0
        self.history: list[dict[str, Any]] = []
        self.best: list[np.ndarray] | None = None
        self.best_score, self.best_epoch = -np.inf, 0
        self.interrupted = False
        self.partial: list[np.ndarray] | None = None
        self.summed_by_step: set[int] = set()
        self._stop = [False]  # a Ctrl-C noted during a step or an evaluation (``_deferred_ctrl_c``)

    def run(self, epochs: int, batches: Callable[[], Iterable[Any]], step: Step,
            evaluate: Evaluate | None, *, loss_key: str = "loss", per: float = 1.0,
            fields: dict[str, Any] | None = None, note: str = "") -> bool:
        """``epochs`` more epochs; ``fields`` open each history entry, ``note`` follows the epoch number in
        the progress output. False if Ctrl-C stopped the loop."""
        try:
            with _deferred_ctrl_c(self.interruptible) as self._stop:
                for _ in range(epochs):
                    self._epoch(batches, step, evaluate, loss_key, per, fields or {}, f" ({note})" if note else "")
                    self._stop_if_asked()
        except KeyboardInterrupt:
            if not self.interruptible:
                raise
            self.interrupted = True
            self.partial = self._current(copy=True)
            log.warning("interrupted: keeping the best model so far (epoch %d)", self.best_epoch)
            return False
        return True

    def _stop_if_asked(self) -> None:
        if self._stop[0]:
            raise KeyboardInterrupt

    def sum_of(self, index: int) -> np.ndarray | None:
        """The running sum of the iterates of ``params[index]`` (None without averaging), for a trainer whose
        step adds each new iterate itself (``AdaGrad.step(..., accumulate=...)``, in the pass that makes it);
        the loop then no longer adds that array after each step."""
        if self.sums is None:
            return None
        self.summed_by_step.add(index)
        return self.sums[index]

    def result(self) -> LoopResult:
        """The best epoch's arrays (see the module docstring for the other cases)."""
        if self.best is not None:
            params, best_epoch = self.best, self.best_epoch
        elif self.interrupted:
            assert self.initial is not None
            params, best_epoch = self.initial, 0
        else:
            params, best_epoch = self.params, self.epoch
        return LoopResult(params, best_epoch, self.history, self.interrupted, self.partial)

    def _current(self, copy: bool = False) -> list[np.ndarray]:
        """This epoch's mean iterate (when averaging and a step was made), else the arrays themselves."""
        if self.sums is not None and (self.steps or not copy):
            return [s / self.steps for s in self.sums]
        return [p.copy() for p in self.params] if copy else self.params

    def _epoch(self, batches: Callable[[], Iterable[Any]], step: Step, evaluate: Evaluate | None,
               loss_key: str, per: float, fields: dict[str, Any], note: str) -> None:
        self.epoch += 1
        t0, total, self.steps = time.perf_counter(), 0.0, 0
        for s in self.sums or ():
            s[:] = 0.0
        bar = tqdm(batches(), desc=f"{self.name}epoch {self.epoch}/{self.total_epochs}{note}", unit="batch",
                   disable=not self.progress, leave=False)
        for batch in bar:
            loss = step(batch)
            if isinstance(loss, int | float):  # numpy floats too
                total += loss
            else:
                for term in loss:
                    total += term
            for k, (s, p) in enumerate(zip(self.sums or (), self.params, strict=False)):
                if k not in self.summed_by_step:
                    s += p
            self.steps += 1
            self.done += 1
            if self.on_batch is not None:
                self.on_batch(self.done, self.total_batches)
            self._stop_if_asked()  # here, where the sums and the count of iterates agree
        current = self._current()
        entry: dict[str, Any] = {"epoch": self.epoch, **fields, loss_key: total / per,
                                 "seconds": time.perf_counter() - t0}
        score = evaluate(current, entry) if evaluate is not None else None
        self.history.append(entry)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in entry.items() if k != "epoch" and isinstance(v, float))
        log.info("%sepoch %d%s: %s", self.name, self.epoch, note, shown)
        if self.progress:
            tqdm.write(f"{self.name}epoch {self.epoch}{note}: {shown}", file=sys.stderr)  # stdout: the summary
        if score is not None and score > self.best_score:
            self.best = [c.copy() for c in current]
            self.best_score, self.best_epoch = score, self.epoch


@contextlib.contextmanager
def _deferred_ctrl_c(active: bool) -> Iterator[list[bool]]:
    """While an interruptible loop runs: a first Ctrl-C only sets the flag it yields, which the loop turns into
    ``KeyboardInterrupt`` after the current batch's bookkeeping or the current evaluation, so that the unfinished
    epoch's sums and its count of iterates agree (a step may add its iterate to the sum itself: ``sum_of``); a
    second Ctrl-C interrupts at once. Only where Python's own handler is installed, in the main thread (signals
    are delivered there); elsewhere Ctrl-C raises where it lands, as before."""
    flag = [False]
    if (not active or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield flag
        return

    def note(signum: int, frame: Any) -> None:
        if flag[0]:
            raise KeyboardInterrupt
        flag[0] = True
        log.warning("Ctrl-C: stopping after this batch or evaluation (Ctrl-C again to stop now)")

    signal.signal(signal.SIGINT, note)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def dev_or_loss(dev_score: Callable[[np.ndarray], float] | None,
                loss_key: str = "loss") -> Callable[[Arrays, dict[str, Any]], float]:
    """The parser trainers' ``evaluate``: ``dev_score`` of the epoch's (only) weight array, or without a dev
    set the negated training loss, recorded as the entry's ``dev`` and returned as the epoch's score."""

    def evaluate(current: Arrays, entry: dict[str, Any]) -> float:
        entry["dev"] = dev_score(current[0]) if dev_score is not None else -entry[loss_key]
        return entry["dev"]

    return evaluate
