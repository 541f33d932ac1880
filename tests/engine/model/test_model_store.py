"""Model files: plain arrays + JSON, atomic replacement, refusal of incompatible or tampered models."""

from __future__ import annotations

import json
import mmap
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from engine.model.store import (
    FORMAT_VERSION,
    HALF_MIN_SIZE,
    MAPPED_MIN_BYTES,
    ModelError,
    half_precision,
    load_model,
    save_model,
    update_manifest,
)


def test_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {"name": "a"}, {"weights": np.arange(5, dtype=np.float32)})
    save_model(target, {"name": "b"}, {"weights": np.ones(3, dtype=np.float32)})
    stored = load_model(target)
    assert stored.manifest["name"] == "b"
    np.testing.assert_array_equal(stored.arrays["weights"], np.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary or old copies left


def test_failed_save_leaves_old_model(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {"name": "a"}, {"weights": np.zeros(2, dtype=np.float32)})
    with pytest.raises(TypeError):
        save_model(target, {"name": "b", "bad": object()}, {"weights": np.ones(2, dtype=np.float32)})
    assert load_model(target).manifest["name"] == "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_refuses_other_versions_and_tampering(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {}, {"weights": np.zeros(4, dtype=np.float32)})
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (target / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="not supported"):
        load_model(target)
    manifest["format_version"] = FORMAT_VERSION
    (target / "manifest.json").write_text(json.dumps(manifest))
    np.save(target / "weights.npy", np.ones(4, dtype=np.float32))
    with pytest.raises(ModelError, match="checksum"):
        load_model(target)
    with pytest.raises(ModelError, match="no manifest"):
        load_model(tmp_path)


def test_large_arrays_are_mapped_read_only_and_outlive_a_replacement(tmp_path: Path) -> None:
    target = tmp_path / "m"
    rng = np.random.default_rng(0)
    big = rng.normal(size=(MAPPED_MIN_BYTES // 2, 2)).astype(np.float16)  # 2 MiB: mapped
    small = np.arange(7, dtype=np.int64)
    save_model(target, {"name": "a"}, {"big": big, "small": small})
    stored = load_model(target)
    for name, want in (("big", big), ("small", small)):
        got = stored.arrays[name]
        assert type(got) is np.ndarray and got.dtype == want.dtype and not got.flags.writeable
        np.testing.assert_array_equal(got, want)
    assert isinstance(stored.arrays["big"].base, mmap.mmap)  # a view of the file, not a copy
    save_model(target, {"name": "b"}, {"big": np.zeros_like(big), "small": small})  # replaced under the reader
    np.testing.assert_array_equal(stored.arrays["big"], big)
    assert not load_model(target).arrays["big"].any()


def test_a_tampered_large_array_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {}, {"big": np.zeros(MAPPED_MIN_BYTES, dtype=np.uint8)})
    np.save(target / "big.npy", np.ones(MAPPED_MIN_BYTES, dtype=np.uint8))
    with pytest.raises(ModelError, match="checksum"):
        load_model(target)
    np.testing.assert_array_equal(load_model(target, verify=False).arrays["big"], 1)


def test_large_object_and_truncated_files_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {}, {"big": np.zeros(MAPPED_MIN_BYTES, dtype=np.uint8)})
    np.save(target / "big.npy", np.array([b"x" * MAPPED_MIN_BYTES], dtype=object), allow_pickle=True)
    with pytest.raises(ModelError, match="object array"):
        load_model(target, verify=False)
    np.save(target / "big.npy", np.zeros(2 * MAPPED_MIN_BYTES, dtype=np.uint8))
    with open(target / "big.npy", "r+b") as f:
        f.truncate(MAPPED_MIN_BYTES + 1000)
    with pytest.raises(ModelError, match="shorter than its header"):
        load_model(target, verify=False)


def test_pickled_arrays_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {}, {"weights": np.zeros(2, dtype=np.float32)})
    np.save(target / "weights.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises((ModelError, ValueError)):
        load_model(target, verify=False)


def test_half_precision_keeps_small_and_overflowing_arrays(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    big = rng.normal(size=HALF_MIN_SIZE).astype(np.float32)
    arrays = {"big": big, "small": np.ones(3), "huge": np.full(HALF_MIN_SIZE, 1e6), "ids": np.arange(HALF_MIN_SIZE)}
    half = half_precision(arrays)
    assert half["big"].dtype == np.float16
    assert half["small"].dtype == np.float64 and half["huge"].dtype == np.float64  # too small / would overflow
    assert half["ids"].dtype == arrays["ids"].dtype
    np.testing.assert_allclose(half["big"].astype(np.float32), big, rtol=1e-3, atol=1e-7)
    save_model(tmp_path / "m", {}, half)
    assert load_model(tmp_path / "m").arrays["big"].dtype == np.float16


def test_a_saved_or_updated_model_is_readable_by_other_users(tmp_path: Path) -> None:
    """The temporary directory and manifest that make saving atomic are private (0700, 0600) when created: a model
    directory written that way and copied into a container image that runs as another user could not be read
    (found by the Docker deployment check on a trained constituency model)."""
    old = os.umask(0o022)
    try:
        save_model(tmp_path / "m", {"kind": "test"}, {"w": np.arange(4.0)})
        update_manifest(tmp_path / "m", {"note": "calibrated"})
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "m", *(tmp_path / "m").iterdir()]}
    assert modes == {"m": 0o755, "manifest.json": 0o644, "w.npy": 0o644}
