"""Data-parallel first-order CLL training on a Dask ``LocalCluster`` of 2 worker processes
(``engine.training.cluster``): each batch's loss and gradient equal one process's up to the order of the sums,
training follows the same batches and steps, ``--cluster`` is validated, and the engine works without Dask."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cluster_helpers import SchedulerProcesses

from engine.data.conllu_io import read_conllu
from engine.features.extract import FeatureExtractor
from engine.features.templates import default_first_order
from engine.kernels.exact import TreeConstraint
from engine.training.cll import TrainConfig, cll_objective, prepare_batches, train_cll, usable_trees
from engine.training.options import TrainOptions, TrainOptionsError

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = "180s"  # a loaded 2-core machine: starting worker processes can take long


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cl, \
            distributed.Client(cl, timeout=TIMEOUT) as c:
        c.wait_for_workers(2, timeout=TIMEOUT)
        yield c


def _ewt(ewt_dir: Path, n: int) -> list[Any]:
    return read_conllu(ewt_dir / "en_ewt-ud-train.conllu")[:n]


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_each_batch_gradient_is_the_sum_of_the_workers_parts(client: Any, ewt_dir: Path, tree: str) -> None:
    from engine.training.cluster import ShardedCLL

    train = _ewt(ewt_dir, 80)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 20)
    constraint = TreeConstraint(tree, "single")
    keep, _ = usable_trees(train, constraint)
    kept = [train[i] for i in keep]
    batches = prepare_batches(fx, kept, 8, progress=False)
    sharded = ShardedCLL(client, fx, constraint, kept, 8)
    try:
        assert sharded.sizes == [len(b.gold) for b in batches]  # the same mini-batches
        assert len(sharded.workers) == 2 and any(size == 1 for size in sharded.sizes)  # a batch with one idle part
        w = np.random.default_rng(0).normal(scale=0.3, size=fx.dim)
        for b, batch in enumerate(batches):
            nll, grad = cll_objective(w, batch, constraint)
            nll_k, grad_k = sharded.objective(w, b)
            assert nll_k == pytest.approx(nll, rel=1e-12)
            assert np.array_equal(grad != 0, grad_k != 0)  # the same features touched
            assert np.abs(grad_k - grad).max() <= 1e-12 * np.abs(grad).max()
        assert sum(index[b].size for index in sharded.index for b in range(len(batches)) if index[b] is not None) > 0
    finally:
        sharded.close()


def test_a_piece_renumbers_its_features_into_its_own_index_space() -> None:
    """``Piece``: ``index`` is the distinct features and the null feature 0, ascending, and ``index[local]`` gives the
    features back, piece after piece on the same scratch arrays; a feature outside the hashed dimension is
    refused."""
    from engine.training.cluster import Piece

    rng = np.random.default_rng(3)
    dim = 5000
    marks, positions = np.zeros(dim, dtype=bool), np.zeros(dim, dtype=np.int32)
    for size in (1, 40, 3000):
        features = rng.integers(0, dim, size=(2, size, 3)).astype(np.int32)
        piece = Piece(features, np.zeros((2, 4)), marks, positions)
        assert np.array_equal(piece.index, np.union1d(features, [0]).astype(np.int32))
        assert piece.index.dtype == piece.local.dtype == np.int32 and piece.local.shape == features.shape
        assert np.array_equal(piece.index[piece.local], features)
        assert not marks.any()  # left clean for the next piece
    with pytest.raises(IndexError):
        Piece(np.array([[1, dim]], dtype=np.int32), np.zeros((1, 2)), marks, positions)
    assert not marks.any()


@pytest.mark.slow
def test_a_shard_lost_between_batches_is_rebuilt_and_gives_the_same_parts(ewt_dir: Path) -> None:
    """Each batch's loss and gradient are computed, a shard's worker is SIGKILLed, and every batch again: the lost
    shard is set up on another worker (``rebuilds`` counts it), and every batch's result is bit for bit what it
    was before the loss (the same sentences in the same parts, summed in the same order)."""
    import signal

    from engine.training.cluster import ShardedCLL

    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    train = _ewt(ewt_dir, 60)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 18)
    constraint = TreeConstraint("nonprojective", "single")
    keep, _ = usable_trees(train, constraint)
    kept = [train[i] for i in keep]
    w = np.random.default_rng(1).normal(scale=0.3, size=fx.dim)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cl, \
            distributed.Client(cl, timeout=TIMEOUT) as c:
        c.wait_for_workers(2, timeout=TIMEOUT)
        sharded = ShardedCLL(c, fx, constraint, kept, 8)
        try:
            before = [sharded.objective(w, b) for b in range(len(sharded.sizes))]
            lost = sharded.workers[0]
            os.kill(c.run(os.getpid, workers=[lost])[lost], signal.SIGKILL)
            after = [sharded.objective(w, b) for b in range(len(sharded.sizes))]
            assert sharded.rebuilds == 1 and lost not in sharded.workers
        finally:
            sharded.close()
    for (nll, grad), (nll_again, grad_again) in zip(before, after, strict=True):
        assert nll_again == nll and np.array_equal(grad_again, grad)


@pytest.mark.slow
def test_two_epochs_on_two_workers_follow_single_process_training(client: Any, ewt_dir: Path) -> None:
    """300 EWT sentences, 2 epochs: the same batches and steps. The gradients differ only by rounding (above), but
    AdaGrad with the L2 term amplifies it where a weight is ~0: a coordinate whose summed squared gradient is
    still ~1e-20 takes a normalised step of up to the learning rate from a gradient of ~1e-10, and the loss
    spreads that to the other weights (docs/results/cluster.md: max |difference| 0.0052 of weights up to 0.74,
    96 of 3.6M weights differing by more than 1e-3, the losses equal to 6e-6)."""
    train = _ewt(ewt_dir, 300)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 22)
    constraint = TreeConstraint("nonprojective", "single")
    config = TrainConfig(epochs=2)
    one = train_cll(fx, constraint, train, config, progress=False)
    two = train_cll(fx, constraint, train, config, progress=False, client=client)
    assert [h["nll"] for h in two.history] == pytest.approx([h["nll"] for h in one.history], rel=1e-4)
    diff = np.abs(two.weights - one.weights)
    touched = np.count_nonzero(one.weights)
    assert touched > 1_000_000
    assert np.count_nonzero(diff > 1e-3) < 1e-4 * touched
    assert diff.max() < 0.05


def test_batches_sent_ahead_give_the_weights_of_waiting_for_each(client: Any, ewt_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``train_cll`` sends each epoch's next batch to the workers as soon as a step is taken (the loop's averaging
    then runs while they compute): every batch but each epoch's first is collected from what was sent ahead, and
    the weights are bit for bit those of sending each batch only when it is needed. (Sending the weights from
    before the step, or another batch, changes them.)"""
    from engine.training.cluster import ShardedCLL

    train = _ewt(ewt_dir, 80)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 18)
    constraint = TreeConstraint("nonprojective", "single")
    config = TrainConfig(epochs=2)
    collect = ShardedCLL.collect
    ahead: list[bool] = []

    def counting(self: ShardedCLL, b: int, weights: np.ndarray, out: np.ndarray | None = None) -> Any:
        ahead.append(self._pending is not None and self._pending[0] == b)
        return collect(self, b, weights, out)

    monkeypatch.setattr(ShardedCLL, "collect", counting)
    sent_ahead = train_cll(fx, constraint, train, config, progress=False, client=client)
    assert len(ahead) > 10 and sum(ahead) == len(ahead) - config.epochs

    def waiting(self: ShardedCLL, b: int, weights: np.ndarray, out: np.ndarray | None = None) -> Any:
        self._pending = None  # what was sent ahead is dropped: the batch is sent now, from the weights as they are
        return collect(self, b, weights, out)

    monkeypatch.setattr(ShardedCLL, "collect", waiting)
    waited = train_cll(fx, constraint, train, config, progress=False, client=client)
    assert np.array_equal(sent_ahead.weights, waited.weights)
    assert [h["nll"] for h in sent_ahead.history] == [h["nll"] for h in waited.history]


@pytest.mark.slow
def test_train_model_with_a_local_cluster(tmp_path: Path, ewt_dir: Path) -> None:
    """``--cluster local:2`` end to end (its own LocalCluster): a first-order model that parses dev as well."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    from engine.training.pipeline import train_model

    path = tmp_path / "train.conllu"
    blocks = (ewt_dir / "en_ewt-ud-train.conllu").read_text(encoding="utf-8").split("\n\n")[:60]
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    options = dict(epochs=2, dim=1 << 18, components=("parser",), batch_size=8)
    one = train_model(path, path, tmp_path / "one", TrainOptions(**options), progress=False)
    two = train_model(path, path, tmp_path / "two", TrainOptions(**options, cluster="local:2"), progress=False)
    assert two["dev"]["uas"] == pytest.approx(one["dev"]["uas"], abs=0.5) and two["dev"]["uas"] > 60


@pytest.mark.parametrize("spec", ["local:0", "local:", "local:two", "tcp://host", "host:8786", "tcp://a b:1"])
def test_bad_cluster_specs_are_refused(spec: str) -> None:
    with pytest.raises(TrainOptionsError, match="cluster must be local:N or tcp://HOST:PORT"):
        TrainOptions(cluster=spec)


def test_good_cluster_specs_are_accepted() -> None:
    assert TrainOptions(cluster="local:2").cluster == "local:2"
    assert TrainOptions(cluster="tcp://10.0.0.5:8786").cluster == "tcp://10.0.0.5:8786"
    assert TrainOptions().cluster is None


def test_the_engine_imports_without_dask(tmp_path: Path) -> None:
    """Without dask installed the engine imports (training needs no cluster); only ``--cluster`` asks for the extra."""
    code = (
        "import sys\n"
        "sys.modules['dask'] = sys.modules['distributed'] = None  # as if not installed\n"
        "import engine.cli, engine.training.pipeline\n"
        "from engine.training.cluster import connect\n"
        "try:\n"
        "    with connect('local:2'):\n"
        "        pass\n"
        "except ImportError as e:\n"
        "    assert 'pip install' in str(e), e\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"


def _malloc_environ() -> dict[str, str | None]:
    import os

    return {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "OPENBLAS_NUM_THREADS")}


@pytest.mark.slow
def test_local_workers_start_without_a_malloc_trim_threshold() -> None:
    """``--cluster local:N`` workers keep glibc's dynamic mmap threshold (Dask would set MALLOC_TRIM_THRESHOLD_,
    which made training 1.3x slower per seed, docs/results/cluster.md) and Dask's other settings (one BLAS
    thread)."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    from engine.training.cluster import connect

    with connect("local:1") as client:
        (environ,) = client.run(_malloc_environ).values()
    assert environ["MALLOC_TRIM_THRESHOLD_"] is None
    assert environ["OPENBLAS_NUM_THREADS"] is not None


@pytest.mark.slow
def test_workers_started_by_hand_with_the_nanny_preload_start_without_it(tmp_path: Path) -> None:
    """``dask worker ... --preload-nanny engine.training.dask_nanny``, as the compose file's workers run: the same
    environment as ``--cluster local:N``'s workers."""
    from distributed import Client

    with SchedulerProcesses(tmp_path / "dask", workers=1) as dask, Client(dask.address) as client:
        # os.getenv, not this module's function: these workers cannot import the test modules
        (trim,) = client.run(os.getenv, "MALLOC_TRIM_THRESHOLD_").values()
        (blas,) = client.run(os.getenv, "OPENBLAS_NUM_THREADS").values()
    assert trim is None and blas is not None
