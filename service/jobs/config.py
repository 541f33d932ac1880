"""The settings a client may give a training job (the ``config`` form field of ``POST /jobs``).

``JobConfig``'s fields are generated from the engine's declaration of the training options
(``engine.training.options``: type, default, choices, bounds and help text of each), for the options declared
with ``job=True``; the service's stricter bounds come from ``service.settings.JOB_LIMITS``. Only the model's
``name`` (the name it is published under) is the service's own. A field's name is the option's name, so
``to_options`` is a plain copy.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from engine.training import options as train_options
from engine.training.options import TrainOptions
from service.settings import JOB_LIMITS, MODEL_NAME


class JobConfigBase(BaseModel):
    """How to train a model; every field has a default, unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("custom", pattern=MODEL_NAME.pattern,
                      description="Model name; the trained model is published as version N of this name.")
    calibrate: bool = Field(True, description="With a dev upload: fit the model's calibration on it after training "
                            "(head, label and tree probabilities, conformal thresholds), as `python -m engine train "
                            "--dev` does; false skips it.")

    @field_validator("factors", check_fields=False)
    @classmethod
    def _unique(cls, factors: list[str]) -> list[str]:
        return list(dict.fromkeys(factors))

    @field_validator("components", check_fields=False)
    @classmethod
    def _with_parser(cls, components: list[str]) -> list[str]:
        if "parser" not in components:
            raise ValueError("components must include parser")
        return list(dict.fromkeys(components))

    @model_validator(mode="after")
    def _consistent(self) -> JobConfigBase:
        """Options that cannot work together (e.g. tag_samples without the tagger), as the engine checks them."""
        try:
            self.to_options()
        except train_options.TrainOptionsError as e:
            raise ValueError(str(e)) from None
        return self

    def to_options(self) -> TrainOptions:
        """The engine's training options for this config."""
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in self.model_dump(exclude={"calibrate"}).items()}
        return TrainOptions(**values)


def _field(name: str, spec: train_options.Option, default: Any) -> tuple[Any, Any]:
    """The annotation and ``Field`` of option ``name`` in a job config."""
    scalar, optional, many = train_options.base_type(name)
    item: Any = Literal[spec.choices] if spec.choices else scalar  # Literal[("a", "b")] is Literal["a", "b"]
    description = spec.help[0].upper() + spec.help[1:] + "."
    if many:
        return list[item], Field(default_factory=lambda: list(default), min_length=spec.min_items,
                                 max_length=len(spec.choices) if spec.choices else None, description=description)
    bounds = {k: getattr(spec, k) for k in ("ge", "gt", "le") if getattr(spec, k) is not None}
    bounds.update(JOB_LIMITS.get(name, {}))
    return (item | None if optional else item), Field(default, description=description, **bounds)


_DEFAULTS = TrainOptions()
JobConfig: type[JobConfigBase] = create_model(  # type: ignore[call-overload]
    "JobConfig", __base__=JobConfigBase, __doc__=JobConfigBase.__doc__,
    **{name: _field(name, spec, getattr(_DEFAULTS, name)) for name, spec in train_options.specs().items()
       if spec.job})


class ConstituencyJobConfig(BaseModel):
    """A training job of a constituency model (issue 26): ``train`` and the optional ``dev`` uploads are Penn
    Treebank ``.mrg`` files, trained as ``python -m engine train --formalism constituency`` trains them (the
    engine's own defaults); unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid")

    formalism: Literal["constituency"] = Field(description="a constituency model (the default is dependency)")
    name: str = Field("custom", pattern=MODEL_NAME.pattern,
                      description="Model name; the trained model is published as version N of this name.")
