"""Faster construction of the library's frozen, slotted dataclasses.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``
(its own ``__setattr__`` refuses), which costs about twice what setting the slot through its
descriptor does. A handshake builds about a dozen such records (messages, acceptances,
claims, stored results) with some 100 fields between them, so ``fast_init`` gives a class an
``__init__`` with the same signature and defaults that sets the slots directly. Everything
else (equality, hashing, ``repr``, the refusal to change a field later) stays the
dataclass's own.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

__all__ = ["fast_init"]

T = TypeVar("T", bound=type)


class _Factory:
    """Marks a parameter whose default comes from a ``default_factory``."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def fast_init(cls: T) -> T:
    """Replace the generated ``__init__`` of a frozen, slotted dataclass by a faster one.

    Supports positional-or-keyword fields with plain defaults and default factories; a class
    with ``__post_init__``, ``InitVar``, ``init=False`` or keyword-only fields is refused
    (``TypeError``), since the faster ``__init__`` would not reproduce them.
    """
    if not is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} must be a dataclass with slots=True")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__; keep the dataclass __init__")
    declared = cls.__dataclass_fields__.values()  # type: ignore[attr-defined]
    if any("InitVar" in str(f.type) for f in declared):
        raise TypeError(f"{cls.__name__} has InitVar pseudo-fields")
    ns: dict[str, Any] = {"_FACTORY": _FACTORY}
    params: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields(cls)):
        if not f.init or f.kw_only is True:
            raise TypeError(f"{cls.__name__}.{f.name}: init=False and kw_only are not supported")
        ns[f"_set{i}"] = getattr(cls, f.name).__set__  # the slot's member descriptor
        if f.default is not MISSING:
            ns[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
            body.append(f"    _set{i}(self, {f.name})")
        elif f.default_factory is not MISSING:
            ns[f"_make{i}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(f"    _set{i}(self, _make{i}() if {f.name} is _FACTORY else {f.name})")
        else:
            params.append(f.name)
            body.append(f"    _set{i}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass")
    exec(source, ns)  # noqa: S102 - generated from the class's own field names
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    # Replacing the generated method is the point here; mypy refuses any assignment to a method.
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
