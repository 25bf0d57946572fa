"""Building frozen, slotted records fast from values that are already valid.

A frozen attrs class refuses plain attribute stores, and calling each slot's
descriptor costs a call (an argument tuple) per field. A *twin* is a plain
class with the very same slots in the same order, hence the same memory
layout: its instances take the interpreter's fast slot stores, and then
become instances of the record class by `__class__` assignment (Python
allows that between classes of identical layout). The record class must be
slotted, derive from `object` directly and have no `__weakref__` slot (with
one, CPython refuses the class change; the domain's hot records are declared
`weakref_slot=False` for this). Only decoders of rows our own code wrote use
it: no validator or converter runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["twin_class"]

_TWINS: dict[type[Any], type[Any] | None] = {}


def twin_class(cls: type[Any]) -> type[Any] | None:
    """The twin of `cls` (built once), or None when `cls` does not allow one.

    Usage, in a generated decoder: `o = object.__new__(twin)`, `o.field = value`
    for every field, then `o.__class__ = cls`."""
    if cls not in _TWINS:
        _TWINS[cls] = _make_twin(cls)
    return _TWINS[cls]


def _make_twin(cls: type[Any]) -> type[Any] | None:
    slots = cls.__dict__.get("__slots__")
    if (
        cls.__bases__ != (object,)
        or not isinstance(slots, tuple)
        or "__weakref__" in slots
        or "__dict__" in slots
    ):
        return None
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": slots, "__module__": __name__})
    # Proof on one instance: built through the twin, it becomes a `cls` whose
    # own slot descriptors read back each value stored (same slots, same order).
    probe: Any = object.__new__(twin)
    markers = {name: object() for name in slots}
    for name, marker in markers.items():
        setattr(probe, name, marker)
    try:
        probe.__class__ = cls
    except TypeError:  # pragma: no cover - a layout CPython will not convert
        return None
    if any(cls.__dict__[name].__get__(probe, cls) is not m for name, m in markers.items()):
        raise AssertionError(f"{cls.__name__}: the twin's slots do not match")  # pragma: no cover
    return twin
