"""Building frozen, slotted records fast from values that are already valid.

A frozen attrs class refuses plain attribute stores, and calling each slot's
descriptor costs a call (an argument tuple) per field. A *twin* is a subclass
of the record class that adds no slot (hence the very same memory layout) and
takes back object's own `__setattr__`, `__delattr__` and `__init__`: its
instances take the interpreter's fast slot stores (the record's own slot
descriptors), and then become instances of the record class by `__class__`
assignment. Because the twin only extends the record class with nothing,
CPython finds the two layouts compatible by walking one base up, with no
comparison of their slot names (a sibling class with the same slots costs a
name-by-name check on every assignment, about half the time of building the
instance). The record class must be slotted, derive from `object` directly
and have no `__weakref__` slot (the domain's hot records are declared
`weakref_slot=False`). Only decoders of rows our own code wrote use it: no
validator or converter runs.
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
        or "__new__" in cls.__dict__  # the twin allocates with object's own
    ):
        return None
    twin = type(
        f"_{cls.__name__}Twin",
        (cls,),
        {
            "__slots__": (),
            # object's own: the interpreter's generic store (slot stores through
            # the record's descriptors), and an allocation with no validation.
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__init__": object.__init__,
            "__module__": __name__,
        },
    )
    # Proof on one instance: built through the twin, it becomes a `cls` whose
    # own slot descriptors read back each value stored.
    probe: Any = twin()
    markers = {name: object() for name in slots}
    for name, marker in markers.items():
        setattr(probe, name, marker)
    try:
        probe.__class__ = cls
    except TypeError:  # pragma: no cover - a layout CPython will not convert
        return None
    if type(probe) is not cls or any(  # pragma: no cover
        cls.__dict__[name].__get__(probe, cls) is not m for name, m in markers.items()
    ):
        raise AssertionError(f"{cls.__name__}: the twin's slots do not match")
    return twin
