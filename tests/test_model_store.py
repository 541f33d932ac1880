"""Model files: plain arrays + JSON, atomic replacement, refusal of incompatible or tampered models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.model.store import FORMAT_VERSION, ModelError, load_model, save_model


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


def test_pickled_arrays_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "m"
    save_model(target, {}, {"weights": np.zeros(2, dtype=np.float32)})
    np.save(target / "weights.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises((ModelError, ValueError)):
        load_model(target, verify=False)
