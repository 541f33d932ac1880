"""Weights kept as stored until read (``engine.model.widen``): what a loaded model parses with, and what it
reads as."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

from engine.bp_parser import BPParser
from engine.data.conllu_io import read_conllu
from engine.model.widen import HALF_VALUES, HALF_VALUES32, Stored, Widened, finite_half, is_widened, kernel_array
from engine.parser import FirstOrderParser
from engine.pipeline import Pipeline

MODELS = Path(__file__).resolve().parents[3] / "models"


@dataclasses.dataclass
class _Holder:
    weights: Widened = Widened()
    pruner: Widened = Widened(None)


def test_a_stored_array_reads_as_read_only_float64_once_and_kernels_keep_the_stored_one() -> None:
    raw = np.array([0.5, -1.25, 3.0], dtype=np.float16)
    h = _Holder(Stored(raw))
    assert h.pruner is None and not is_widened(h, "weights")
    assert kernel_array(h, "weights") is raw and not raw.flags.writeable
    wide = h.weights
    assert wide.dtype == np.float64 and not wide.flags.writeable and np.array_equal(wide, raw.astype(np.float64))
    assert h.weights is wide and is_widened(h, "weights")  # widened once
    assert kernel_array(h, "weights") is raw  # the kernels still read the stored array
    again = pickle.loads(pickle.dumps(h))  # (Dask ships models so) the stored array stays read-only for the kernels
    assert not kernel_array(again, "weights").flags.writeable and np.array_equal(kernel_array(again, "weights"), raw)
    fresh = pickle.loads(pickle.dumps(_Holder(Stored(raw))))
    assert not kernel_array(fresh, "weights").flags.writeable and np.array_equal(fresh.weights, wide)
    new = np.zeros(3)
    h.weights = new  # a trainer's array replaces the loaded one: the kernels read it
    assert h.weights is new and kernel_array(h, "weights") is new
    with pytest.raises(TypeError):
        _Holder()  # type: ignore[call-arg]  # no default: the field is required


def _eager(parser: FirstOrderParser | BPParser) -> FirstOrderParser | BPParser:
    """The parser as loading built it before: float64 read-only weights, laid out by the scorer itself."""
    fields = {f.name: getattr(parser, f.name) for f in dataclasses.fields(parser) if not f.name.startswith("_")}
    return type(parser)(**fields)  # reading the fields widens them; the copy holds the float64 arrays


@pytest.mark.parametrize("name", ["en_ewt-o1", "en_ewt-o2", "en_ewt"])
def test_a_loaded_model_parses_without_widening_and_as_the_widened_weights_do(name: str, ewt_dir: Path) -> None:
    if not (MODELS / name / "manifest.json").exists():
        pytest.skip("the shipped model is not here")
    parser = Pipeline.load(MODELS / name).parser
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:60]
    lazy = parser.parse(dev)
    assert not is_widened(parser, "weights")
    if isinstance(parser, BPParser) and kernel_array(parser, "pruner") is not None:
        assert not is_widened(parser, "pruner")
    eager = _eager(parser)
    assert kernel_array(eager, "weights").dtype == np.float64
    for a, b in zip(lazy, eager.parse(dev), strict=True):
        assert np.array_equal(a.heads, b.heads) and a.deprels == b.deprels
        assert np.array_equal(a.marginals, b.marginals) and np.array_equal(a.label_probs, b.label_probs)
        assert a.log_partition == b.log_partition


def test_half_values_and_finiteness_of_every_float16_bit_pattern() -> None:
    """The decoding tables hold each float16 pattern's value (NaNs as NaN), and ``finite_half`` is
    ``np.isfinite`` on every pattern alone and on arrays with one non-finite entry anywhere."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.isfinite(every)
    np.testing.assert_array_equal(HALF_VALUES[finite], every[finite].astype(np.float64))
    np.testing.assert_array_equal(HALF_VALUES32[finite], every[finite].astype(np.float32))
    assert np.isnan(HALF_VALUES[~finite & np.isnan(every)]).all() and np.isinf(HALF_VALUES[np.isinf(every)]).all()
    assert [finite_half(every[i:i + 1]) for i in range(len(every))] == finite.tolist()
    assert finite_half(every[finite].reshape(-1, 4)[:, ::2])  # strided: read through a contiguous copy
    grid = np.zeros((40, 7), dtype=np.float16)
    for bad in (np.inf, -np.inf, np.nan):
        for at in ((0, 0), (17, 3), (39, 6)):
            g = grid.copy()
            g[at] = bad
            assert not finite_half(g)
    assert finite_half(grid) and finite_half(np.zeros(0, dtype=np.float16))
