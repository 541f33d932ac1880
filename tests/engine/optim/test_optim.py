"""The shared optimiser and epoch loop (engine.optim): AdaGrad's dense, row and float32 steps against their
formulas; the loop's averaging, best epoch, unscored epochs, Ctrl-C and callbacks."""

from __future__ import annotations

import signal
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.optim import AdaGrad, EpochLoop, OptimSettings
from engine.optim.adagrad import _fusable


def test_dense_step_with_l2_is_adagrad_on_the_regularised_gradient() -> None:
    rng = np.random.default_rng(0)
    w0, g1, g2 = rng.normal(size=(3, 6))
    opt, w = AdaGrad(6, 0.5), w0.copy()
    opt.step(w, g1.copy(), 0.1)
    d1 = g1 + 0.1 * w0
    np.testing.assert_allclose(w, w0 - 0.5 * d1 / (np.sqrt(d1 * d1) + 1e-8))
    w1 = w.copy()
    opt.step(w, g2.copy())  # no L2
    np.testing.assert_allclose(w, w1 - 0.5 * g2 / (np.sqrt(d1 * d1 + g2 * g2) + 1e-8))


def test_row_step_touches_only_its_rows() -> None:
    w = np.ones((5, 2))
    opt = AdaGrad.like(w, 1.0, delta=0.0, initial=1.0)  # w -= g / sqrt(1 + G)
    opt.step_rows(w, np.array([1, 3]), np.array([[3.0, 0.0], [0.0, -1.0]]))
    expected = np.ones((5, 2))
    expected[1] = [1 - 3 / np.sqrt(10), 1.0]
    expected[3] = [1.0, 1 + 1 / np.sqrt(2)]
    np.testing.assert_allclose(w, expected)
    np.testing.assert_array_equal(opt.g2[[0, 2, 4]], 1.0)


def test_float32_rounding_modes() -> None:
    """Sums kept in float32 either way; ``round_steps`` rounds the squares and the step to float32 first."""
    w = np.full((1, 3), 0.1, dtype=np.float32)
    grad = np.array([[1e-3, 0.7, 2.5]])
    a, b = w.copy(), w.copy()
    AdaGrad.like(a, 0.3).step_rows(a, np.array([0]), grad.copy())
    AdaGrad.like(b, 0.3, round_steps=True).step_rows(b, np.array([0]), grad.copy())
    assert a.dtype == b.dtype == np.float32
    sq = (grad * grad).astype(np.float32)
    np.testing.assert_array_equal(b, w - (0.3 * grad / (np.sqrt(sq) + np.float32(1e-8))).astype(np.float32))
    np.testing.assert_array_equal(a, (w - 0.3 * grad / (np.sqrt(grad * grad) + 1e-8)).astype(np.float32))


def _counting_loop(average: bool, scores: list[float | None], **kw: Any) -> tuple[EpochLoop, list[np.ndarray]]:
    """Each step adds 1 to the weight; epoch e scores ``scores[e - 1]``."""
    w = np.zeros(1)
    seen: list[np.ndarray] = []

    def step(_: int) -> float:
        w[0] += 1.0
        return 2.0

    def evaluate(current: Any, entry: dict[str, Any]) -> float | None:
        seen.append(current[0].copy())
        return scores[entry["epoch"] - 1]

    loop = EpochLoop([w], total_batches=3 * len(scores), total_epochs=len(scores), average=average, **kw)
    loop.run(len(scores), lambda: range(3), step, evaluate, per=4.0)
    return loop, seen


def test_loop_averages_each_epoch_and_keeps_the_best() -> None:
    loop, seen = _counting_loop(True, [1.0, 3.0, 2.0])
    assert [s[0] for s in seen] == [2.0, 5.0, 8.0]  # means of (1, 2, 3), (4, 5, 6), (7, 8, 9)
    result = loop.result()
    assert result.best_epoch == 2 and result.params[0][0] == 5.0 and not result.interrupted
    assert [e["loss"] for e in result.history] == [1.5] * 3  # 3 batches x 2.0 / per


def test_a_step_that_sums_its_iterates_itself_gives_the_loops_averages() -> None:
    """``sum_of``: the trainer's step adds each iterate to the loop's running sum (``AdaGrad.step(...,
    accumulate=...)``) and the loop no longer does: the same epoch means, the same best epoch."""
    plain, _ = _counting_loop(True, [1.0, 3.0, 2.0])
    w = np.zeros(1)
    loop = EpochLoop([w], total_batches=9, total_epochs=3, average=True)
    total = loop.sum_of(0)
    assert total is not None and EpochLoop([w], total_batches=1, total_epochs=1).sum_of(0) is None

    def step(_: int) -> float:
        w[0] += 1.0
        total[0] += w[0]
        return 2.0

    scores = iter([1.0, 3.0, 2.0])
    loop.run(3, lambda: range(3), step, lambda current, entry: next(scores), per=4.0)
    assert loop.result().best_epoch == plain.result().best_epoch == 2
    assert loop.result().params[0][0] == plain.result().params[0][0] == 5.0


def test_unscored_loop_returns_the_last_arrays() -> None:
    loop, seen = _counting_loop(False, [None, None])
    result = loop.result()
    assert result.best_epoch == 2 and result.params[0] is loop.params[0] and result.params[0][0] == 6.0


def test_ctrl_c_keeps_the_best_or_the_start_and_is_raised_when_not_interruptible() -> None:
    calls: list[tuple[int, int]] = []

    def on_batch(done: int, total: int) -> None:
        calls.append((done, total))
        if done == 5:
            raise KeyboardInterrupt

    loop, _ = _counting_loop(True, [1.0, 2.0], interruptible=True, on_batch=on_batch)
    result = loop.result()
    assert result.interrupted and result.best_epoch == 1 and result.params[0][0] == 2.0
    assert result.partial is not None and result.partial[0][0] == 4.5  # mean of 4 and 5
    assert calls == [(i, 6) for i in range(1, 6)]

    def early(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    result = _counting_loop(True, [1.0], interruptible=True, on_batch=early)[0].result()
    assert result.interrupted and result.best_epoch == 0 and result.params[0][0] == 0.0  # the start
    with pytest.raises(KeyboardInterrupt):
        _counting_loop(True, [1.0], on_batch=early)


def _summing_loop(signals_at: dict[int, int]) -> EpochLoop:
    """An interruptible averaging loop over 3 epochs of 3 batches whose step adds its iterate (1, 2, 3, ...) to
    the loop's sum itself (``sum_of``) and then sends itself ``signals_at[k]`` SIGINTs at its k-th step."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the test runner replaced Python's SIGINT handler (the loop then leaves Ctrl-C alone)")
    w = np.zeros(1)
    loop = EpochLoop([w], total_batches=9, total_epochs=3, average=True, interruptible=True)
    total = loop.sum_of(0)
    assert total is not None
    count = [0]

    def step(_: int) -> float:
        count[0] += 1
        w[0] += 1.0
        total[0] += w[0]
        for _ in range(signals_at.get(count[0], 0)):
            signal.raise_signal(signal.SIGINT)
        return 0.0

    loop.run(3, lambda: range(3), step, lambda current, entry: None)
    return loop


def test_ctrl_c_in_a_step_stops_after_its_bookkeeping_so_the_partial_mean_counts_its_iterate() -> None:
    """Ctrl-C lands after the step added its iterate to the sum and before the loop counted it: the partial
    epoch's mean is still the mean of the iterates it holds (4 and 5, not 9 over one), and no later batch ran."""
    loop = _summing_loop({5: 1})
    result = loop.result()
    assert result.interrupted and result.partial is not None
    assert loop.done == 5 and loop.steps == 2 and result.partial[0][0] == 4.5
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's handler is back


def test_a_second_ctrl_c_stops_at_once() -> None:
    loop = _summing_loop({2: 2})
    assert loop.result().interrupted and loop.done == 1  # the step's bookkeeping never ran
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_settings_are_checked() -> None:
    for bad in ({"epochs": 0}, {"batch_size": 0}, {"learning_rate": 0.0}, {"l2": -1.0}):
        with pytest.raises(ValueError):
            OptimSettings(**bad)
    with pytest.raises(ValueError):
        AdaGrad(3, 0.0)
    with pytest.raises(ValueError, match="delta > 0 or initial > 0"):  # 0 / 0 for a weight not yet moved
        AdaGrad(3, 0.1, delta=0.0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), l2=st.sampled_from([None, 0.0, 1e-4, 0.37]),
       rate=st.sampled_from([0.01, 0.1, 1.0]), delta=st.sampled_from([0.0, 1e-8, 1e-3]), steps=st.integers(1, 4))
def test_the_compiled_dense_step_is_numpys_bit_for_bit(seed: int, n: int, l2: float | None, rate: float,
                                                        delta: float, steps: int) -> None:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=n) * rng.choice([1e-12, 1.0, 1e6], size=n)
    fast, slow = AdaGrad(n, rate, delta=delta, initial=1e-6), AdaGrad(n, rate, delta=delta, initial=1e-6)
    w_fast, w_slow = w.copy(), w.copy()
    for _ in range(steps):
        grad = rng.normal(size=n) * rng.choice([0.0, 1e-300, 1e-9, 1.0, 1e150], size=n)
        g_fast, g_slow = grad.copy(), grad.copy()
        assert _fusable(w_fast, g_fast, fast.g2)
        fast.step(w_fast, g_fast, l2)
        slow.numpy_step(w_slow, g_slow, l2)
        for a, b in ((w_fast, w_slow), (fast.g2, slow.g2), (g_fast, g_slow)):
            assert np.array_equal(a.view(np.int64), b.view(np.int64))  # the same bits, NaN and -0.0 included
    cleared, w_clear, g_clear = AdaGrad(n, rate, delta=delta, initial=1e-6), w.copy(), grad.copy()
    kept, w_kept = AdaGrad(n, rate, delta=delta, initial=1e-6), w.copy()
    cleared.step(w_clear, g_clear, l2, clear=True)  # the same update, and the gradient buffer left all zeros
    kept.step(w_kept, grad.copy(), l2)
    assert np.array_equal(w_clear.view(np.int64), w_kept.view(np.int64)) and not g_clear.view(np.int64).any()
    summing, w_sum, total = AdaGrad(n, rate, delta=delta, initial=1e-6), w.copy(), rng.normal(size=n)
    expected = total + w_kept  # the loop's ``s += p`` after the same update
    summing.step(w_sum, grad.copy(), l2, accumulate=total)  # adds the new iterate in the same pass
    assert np.array_equal(w_sum.view(np.int64), w_kept.view(np.int64))
    assert np.array_equal(total.view(np.int64), expected.view(np.int64))
    w_numpy, g_numpy = np.ones(n, dtype=np.float32), np.ones(n, dtype=np.float32)  # the numpy path clears too
    AdaGrad.like(w_numpy, rate).step(w_numpy, g_numpy, l2, clear=True)
    assert not g_numpy.any()


def test_arrays_the_compiled_step_cannot_take_go_through_numpy() -> None:
    w32, g = np.ones(4, dtype=np.float32), np.ones(4)
    assert not _fusable(w32, g, g) and not _fusable(np.ones(8)[::2], g, g) and not _fusable(np.ones(5), g, g)
    opt = AdaGrad.like(w32, 0.5)
    opt.step(w32, np.ones(4, dtype=np.float32), 0.1)  # float32 weights and sums: numpy's float32 arithmetic
    assert w32.dtype == np.float32 and np.allclose(w32, 1 - 0.5 * 1.1 / (1.1 + 1e-8), rtol=1e-6)
