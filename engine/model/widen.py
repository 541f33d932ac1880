"""Weight vectors that a loaded model keeps as stored until something needs them in float64.

A parser's ``weights`` (and ``pruner``) are float64 vectors as far as training, averaging and saving are
concerned, but a model stores them as float16 or float32, and parsing never reads the float64 values: the
fused first-order kernel reads a table laid out from the stored arrays (``engine.scoring.fused.stored_table``)
and the higher-order factors the narrowest exact copy of their block. Widening at load cost the shipped
pipeline 0.57 s of CPU and 170 MB of fresh pages in every process that loads it (``docs/performance.md``).

``Widened`` is a dataclass field descriptor: a loaded model assigns ``loaded(array)`` (``Stored(array)``),
and the field reads as ``array.astype(float64)`` (read-only) from its first read on; anything assigned
otherwise is kept as it is (the type checker sees the field as the float64 array it reads as).
``kernel_array(obj, name)`` is what the kernels read: the stored array while the field still holds the
loaded value (whether it has been widened or not), else the assigned array itself.

How compiled kernels read a stored float16 array without widening it: through its ``uint16`` view,
``HALF_VALUES`` (or ``HALF_VALUES32``) and ``weight_value``, which reads float16 bits and float32/float64 entries
alike (``kernel_table`` gives the array to pass); ``finite_half`` tests such an array for infinities and NaNs on
its bits.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np
from numba import njit, types  # type: ignore[import-untyped]
from numba.extending import overload  # type: ignore[import-untyped]

HALF_VALUES = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
"""The float64 value of each float16 bit pattern. Compiled kernels read a float16 array as stored, through its
``uint16`` view and this table (numba has no float16 type): each value is exact, so what they add up is what
the widened array would give, without the widened copy."""
HALF_VALUES32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)  # the same, in float32


def weight_value(v, decode):  # type: ignore[no-untyped-def]  # a weight from its table entry, in compiled code
    """In a compiled kernel: the weight that table entry ``v`` stands for, in the precision of ``decode``
    (``HALF_VALUES`` or ``HALF_VALUES32``): ``decode[v]`` for float16 bits (an unsigned integer), else ``v`` itself
    as a float of that precision."""
    raise NotImplementedError  # pragma: no cover (compiled through the overload below)


@overload(weight_value)
def _weight_value(v, decode):  # type: ignore[no-untyped-def]
    if isinstance(v, types.Integer):  # float16 bits
        return lambda v, decode: decode[v]
    if decode.dtype == types.float32:
        return lambda v, decode: np.float32(v)
    return lambda v, decode: np.float64(v)


def kernel_table(weights: np.ndarray) -> np.ndarray:
    """What a compiled kernel reads through ``weight_value``: float16 weights as their ``uint16`` bits (contiguous),
    any other array as it is."""
    return np.ascontiguousarray(weights).view(np.uint16) if weights.dtype == np.float16 else weights


def finite_half(values: np.ndarray) -> bool:
    """Whether a float16 array holds no infinity and no NaN (an all-ones exponent), read as stored: testing
    the bits costs a fraction of widening the array first."""
    return not _non_finite_bits(np.ascontiguousarray(values).view(np.uint16).reshape(-1))


@njit(cache=True, nogil=True)
def _non_finite_bits(bits: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether a float16 bit pattern of ``bits`` has the all-ones exponent (0x7C00): adding 0x0400 to the
    exponent field carries into bit 15 exactly then. One pass of ORs, no temporary arrays (the numpy test made
    two 40 MB temporaries per loaded pipeline)."""
    acc = np.uint16(0)
    for i in range(len(bits)):
        acc |= ((bits[i] & np.uint16(0x7C00)) + np.uint16(0x0400)) & np.uint16(0x8000)
    return acc != 0


@dataclasses.dataclass(frozen=True)
class Stored:
    """The array of a model file, as stored (read-only; float16 or float32)."""

    array: np.ndarray


class Widened:
    """A field that reads as float64: ``Stored`` values are widened on first read (see the module docstring).
    ``default``: the field's default (``dataclasses.MISSING``: none)."""

    def __init__(self, default: Any = dataclasses.MISSING) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:  # dataclasses ask the class for the field's default
            if self.default is dataclasses.MISSING:
                raise AttributeError(self.name)
            return self.default
        value = obj.__dict__[self.name]
        if isinstance(value, Stored):
            wide = value.array.astype(np.float64)
            wide.flags.writeable = False
            obj.__dict__[self.name] = wide
            obj.__dict__[_stored_key(self.name)] = (wide, value.array)
            return wide
        return value

    def __set__(self, obj: object, value: Any) -> None:
        obj.__dict__.pop(_stored_key(self.name), None)
        if isinstance(value, Stored):
            value.array.flags.writeable = False
        obj.__dict__[self.name] = value


def loaded(array: np.ndarray) -> np.ndarray:
    """What a loaded model assigns to a ``Widened`` field: a float16 or float32 array as stored (``Stored``, typed
    as the float64 array the field reads as), any other widened now; read-only either way."""
    if array.dtype in (np.float16, np.float32):
        return cast(np.ndarray, Stored(array))
    wide = array.astype(np.float64)
    wide.flags.writeable = False
    return wide


def _stored_key(name: str) -> str:
    return f"_{name}__stored"


def kernel_array(obj: object, name: str) -> Any:
    """The array the kernels read for field ``name``: the stored one while the field holds a loaded model's
    value (widened or not; read-only, also after unpickling, which gives arrays back writeable), else the
    field's value (e.g. float64 weights a trainer changes)."""
    value = obj.__dict__[name]
    pair = obj.__dict__.get(_stored_key(name))
    stored = value.array if isinstance(value, Stored) else pair[1] if pair is not None and pair[0] is value else None
    if stored is None:
        return value
    stored.flags.writeable = False
    return stored


def is_widened(obj: object, name: str) -> bool:
    """Whether field ``name`` has been materialised in float64 (or never was a stored array)."""
    return not isinstance(obj.__dict__[name], Stored)
