"""Inference settings: declared once on the configs, resolved the user's value > the model's manifest > the
method's default, the same way by the command line and the service (``engine.inference.settings``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.cli import _given_settings, build_parser
from engine.inference.bp import BPConfig
from engine.inference.fields import declared
from engine.inference.relaxed import PrunedConfig, RelaxedConfig
from engine.inference.settings import check_manifest, method_settings, model_settings, resolve
from engine.model.store import ModelError
from engine.pipeline import Pipeline
from service.schemas import InferenceOptions

O1 = Path(__file__).resolve().parents[3] / "models" / "en_ewt-o1"


def test_defaults_are_the_configs_own() -> None:
    """Nothing given and nothing in the manifest: each method's dataclass defaults."""
    assert resolve("bp") == BPConfig() and resolve("relaxed") == RelaxedConfig() and resolve("pruned") == PrunedConfig()
    assert (BPConfig().max_iterations, BPConfig().schedule) == (5, "serial")
    assert (RelaxedConfig().bp_iterations, RelaxedConfig().epsilon, RelaxedConfig().rounds) == (50, 1e-4, None)
    assert (PrunedConfig().bp_iterations, PrunedConfig().threshold) == (5, 0.1)
    assert set(method_settings("relaxed")) == {"iterations", "schedule", "epsilon", "rounds"}
    assert method_settings("exact") == {}
    with pytest.raises(ValueError, match="unknown inference method"):
        method_settings("mean-field")


def test_the_user_overrides_the_model_which_overrides_the_default() -> None:
    manifest = {"inference": {"tag_samples": 4, "bp": {"iterations": 3}, "relaxed": {"rounds": 2, "epsilon": 0.01}}}
    assert resolve("bp", manifest).max_iterations == 3
    assert resolve("bp", manifest, {"iterations": 7}).max_iterations == 7
    relaxed = resolve("relaxed", manifest, {"epsilon": 0.5})
    assert (relaxed.epsilon, relaxed.rounds, relaxed.bp_iterations) == (0.5, 2, 50)  # bp's block is bp's only
    assert resolve("relaxed", manifest, {"rounds": None}).rounds is None  # None is a value: no limit
    assert resolve("bp", manifest, {"epsilon": 0.5}) == BPConfig(max_iterations=3)  # not a bp setting: ignored


def test_an_older_approximation_aware_model_gives_its_training_iterations() -> None:
    """Before ``inference.bp`` existed, training recorded T only as ``training.inference_iterations``."""
    legacy = {"training": {"objective": "l2", "inference_iterations": 2}}
    assert model_settings(legacy, "bp") == {"iterations": 2} and model_settings(legacy, "relaxed") == {}
    assert resolve("bp", legacy).max_iterations == 2
    assert resolve("bp", {**legacy, "inference": {"bp": {"iterations": 4}}}).max_iterations == 4


def test_bad_settings_name_the_setting() -> None:
    with pytest.raises(ValueError, match="iterations must be at least 1"):
        resolve("bp", None, {"iterations": 0})
    with pytest.raises(ValueError, match="iterations must be an integer"):
        resolve("relaxed", None, {"iterations": 2.5})
    with pytest.raises(ValueError, match="schedule must be one of flooding, serial"):
        BPConfig(schedule="random")
    with pytest.raises(ValueError, match="no setting damping"):
        check_manifest({"inference": {"bp": {"damping": 0.5}}})
    with pytest.raises(ValueError, match="inference.relaxed: epsilon must be at least 0"):
        check_manifest({"inference": {"relaxed": {"epsilon": -1}}})
    check_manifest({"inference": {"tag_samples": 3, "bp": {"iterations": 2}}})


def test_a_model_with_bad_inference_settings_does_not_load(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(O1, model)
    manifest = json.loads((model / "manifest.json").read_text())
    manifest["inference"] = {"relaxed": {"rounds": 0}}
    (model / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="inference.relaxed: rounds must be at least 1"):
        Pipeline.load(model)


def test_the_command_line_gives_only_what_the_user_typed() -> None:
    def given(*argv: str) -> dict[str, object]:
        return _given_settings(build_parser().parse_args(["parse", "--model", "m", *argv]))

    assert given() == {}
    assert given("--rounds", "inf", "--epsilon", "0.1") == {"rounds": None, "epsilon": 0.1}
    assert given("--bp-iterations", "8", "--prune-threshold", "0.2", "--schedule", "flooding") == {
        "iterations": 8, "threshold": 0.2, "schedule": "flooding"}


def test_request_bounds_are_the_declared_ones() -> None:
    """The request schema's lower bounds come from the declarations (upper ones are service limits)."""
    schema = InferenceOptions.model_json_schema()["properties"]
    for name, method in (("iterations", "bp"), ("epsilon", "relaxed"), ("rounds", "relaxed")):
        (bounded,) = [s for s in schema[name]["anyOf"] if "minimum" in s]
        assert bounded["minimum"] == declared({"bp": BPConfig, "relaxed": RelaxedConfig}[method])[name].spec.minimum
    with pytest.raises(ValidationError):
        InferenceOptions(iterations=0)
    assert InferenceOptions().model_fields_set == set() and InferenceOptions(rounds=None).model_fields_set == {"rounds"}
