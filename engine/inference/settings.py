"""The one way an inference config is made from what the user and the model say.

Each BP-based method declares its settings, defaults and bounds on its config class
(``engine.inference.fields``): ``bp`` -> ``BPConfig``, ``relaxed`` -> ``RelaxedConfig``, ``pruned`` ->
``PrunedConfig``; ``exact`` has none. ``resolve`` fills each setting from, in order:

1. the user's value (a command-line flag, a request field) where the user gave one;
2. the model's manifest, block ``inference.<method>`` (``{"inference": {"tag_samples": 16, "bp":
   {"iterations": 3}}}``); a model trained approximation-aware through T BP iterations gets
   ``inference.bp.iterations = T`` (``engine.training.pipeline``), and one saved before that block existed
   recorded T only as ``training.inference_iterations``, which is read in its place;
3. the method's declared default.

The command line (``engine.cli``), the service (``service.parsing``) and ``BPParser.parse`` all resolve
here, so relaxed inference with the same settings gives the same beliefs everywhere, and a model's own
settings apply wherever it is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.inference.bp import BPConfig
from engine.inference.fields import Declared, declared
from engine.inference.relaxed import InferenceConfig, PrunedConfig, RelaxedConfig

METHODS: dict[str, type[BPConfig] | type[RelaxedConfig] | type[PrunedConfig]] = {
    "bp": BPConfig, "relaxed": RelaxedConfig, "pruned": PrunedConfig}


def method_settings(method: str) -> dict[str, Declared]:
    """The settings ``method`` declares, by public name (none for ``exact``)."""
    if method == "exact":
        return {}
    if method not in METHODS:
        raise ValueError(f"unknown inference method {method!r} (one of exact, {', '.join(METHODS)})")
    return declared(METHODS[method])


def model_settings(manifest: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The settings a model's manifest gives ``method`` (``inference.<method>``; for ``bp`` of an older
    approximation-aware model, ``training.inference_iterations``)."""
    block = (manifest.get("inference") or {}).get(method) or {}
    if not isinstance(block, Mapping):
        raise ValueError(f"inference.{method} must be an object, got {block!r}")
    out = dict(block)
    legacy = (manifest.get("training") or {}).get("inference_iterations")
    if method == "bp" and "iterations" not in out and legacy is not None:
        out["iterations"] = legacy
    return out


def resolve(method: str, manifest: Mapping[str, Any] | None = None,
            given: Mapping[str, Any] | None = None) -> InferenceConfig:
    """The config of ``method`` (bp, relaxed, pruned) for a model with this ``manifest``: the ``given`` values
    (by public name; only what the user gave), else the manifest's, else the declared defaults. A given value
    of a setting the method does not have (``epsilon`` for bp) is ignored, as both front ends always have.
    ValueError names the setting when a value is out of bounds or the manifest names an unknown setting."""
    table = method_settings(method)
    if method == "exact":
        raise ValueError("exact inference has no config")
    model = model_settings(manifest or {}, method)
    unknown = sorted(set(model) - set(table))
    if unknown:
        raise ValueError(f"inference.{method} has no setting {', '.join(unknown)} (it has {', '.join(table)})")
    values = {}
    for name, d in table.items():
        if given is not None and name in given:
            values[d.field] = given[name]
        elif name in model:
            values[d.field] = model[name]
    return METHODS[method](**values)


def check_manifest(manifest: Mapping[str, Any]) -> None:
    """ValueError unless every method block of the manifest's ``inference`` resolves."""
    for method in METHODS:
        try:
            resolve(method, manifest)
        except (TypeError, ValueError) as e:
            raise ValueError(f"manifest inference.{method}: {e}") from e
