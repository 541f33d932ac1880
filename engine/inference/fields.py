"""An inference method's user-facing settings, declared once on its config dataclass.

A config (``engine.inference.bp.BPConfig``, ``engine.inference.relaxed.RelaxedConfig`` / ``PrunedConfig``)
marks each setting a user may give with ``setting(default, Setting(...))``: the dataclass default is the
algorithm's default, and the ``Setting`` holds the bounds and the public name. The public name is the key
in a model manifest's ``inference.<method>`` block and in an HTTP request's ``inference`` object, whatever the
field is called inside the config (BP's ``max_iterations`` and relaxed BP's ``bp_iterations`` are both
``iterations``; ``engine.cli`` maps its flags, e.g. ``--bp-iterations``, to these names).

``check_settings(config)`` validates every declared value in the config's ``__post_init__``;
``engine.inference.settings`` resolves a config from a model's manifest and the user's values; the
service states its request bounds from ``declared``. Nothing here imports an algorithm: the configs
import this module.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """A setting's public ``name``, its ``kind`` (int, float or str), inclusive bounds, the ``choices`` of a
    string, whether None is a value (``optional``, e.g. rounds=None: no limit) and a one-line ``help``."""

    name: str
    kind: type
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False

    def check(self, value: Any) -> None:
        """Raise ValueError unless ``value`` is of the setting's kind and within its bounds."""
        if value is None and self.optional:
            return
        if self.kind is str:
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}, got {value!r}")
            return
        numeric = (int,) if self.kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric) or not math.isfinite(value):
            what = "an integer" if self.kind is int else "a finite number"
            raise ValueError(f"{self.name} must be {what}{' or None' if self.optional else ''}, got {value!r}")
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise ValueError(f"{self.name} must be {self.range()}, got {value!r}")

    def range(self) -> str:
        """The bounds in words: ``at least 1``, ``between 0 and 1``, ``>= 0``."""
        if self.minimum is not None and self.maximum is not None:
            return f"between {self.minimum:g} and {self.maximum:g}"
        if self.minimum is not None:
            return f"at least {self.minimum:g}"
        return f"at most {self.maximum:g}" if self.maximum is not None else "any value"


def setting(default: Any, spec: Setting) -> Any:
    """A dataclass field with this default whose metadata declares it a user-facing setting."""
    return dataclasses.field(default=default, metadata={"setting": spec})


@dataclass(frozen=True)
class Declared:
    """One declared setting of a config class: the dataclass ``field`` name, its ``spec`` and ``default``."""

    field: str
    spec: Setting
    default: Any


_DECLARED: dict[type, dict[str, Declared]] = {}


def declared(config_class: type) -> dict[str, Declared]:
    """The settings a config class declares, by public name (a subclass's declaration of a field wins); the
    same dict on every call (do not change it)."""
    if config_class not in _DECLARED:
        out: dict[str, Declared] = {}
        for f in dataclasses.fields(config_class):
            spec = f.metadata.get("setting")
            if spec is not None:
                out[spec.name] = Declared(f.name, spec, f.default)
        _DECLARED[config_class] = out
    return _DECLARED[config_class]


def check_settings(config: Any) -> None:
    """Validate every declared setting of a config instance (ValueError naming the public setting)."""
    for d in declared(type(config)).values():
        d.spec.check(getattr(config, d.field))
