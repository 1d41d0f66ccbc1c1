"""What a resource name and a capacity must be before anything is sent to a raylet.

Every path to the raylet (``set_resource(s)``, ``ResourceScope``,
``primitives.resize_many``, ``esl.Gang``) runs these checks first, so bad
input fails with a message naming it and never needs a cluster.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Dict, Iterable, Mapping, Optional

from ray_adaptive.errors import ResourceError

__all__ = ["RESERVED_NAMES", "is_reserved_name", "check_capacities"]

#: Names with a meaning to Ray itself; refused by ``set_resource``.
RESERVED_NAMES = frozenset(
    {"CPU", "GPU", "TPU", "NPU", "HPU", "memory", "object_store_memory", "neuron_cores"}
)
_RESERVED_PREFIXES = ("node:", "accelerator_type:", "TPU-", "bundle_group_", "ray.io/")
# Placement-group bundle resources: CPU_group_<pg>, CPU_group_<i>_<pg>, bundle_group_...
_RESERVED_INFIX = "_group_"
_MAX_NAME_LEN = 256
# Ray stores resource quantities as fixed point with this granularity.
GRANULARITY = 1e-4
_MAX_CAPACITY = 1e14


def is_reserved_name(name: str) -> bool:
    """True if Ray gives ``name`` a meaning of its own (see :data:`RESERVED_NAMES`)."""
    return (
        name in RESERVED_NAMES
        or name.startswith(_RESERVED_PREFIXES)
        or _RESERVED_INFIX in name
    )


def _unprintable(name: str) -> Optional[str]:
    """The first character of ``name`` that has no place in a resource name: a control character (NUL,
    newline, escape, ...), a format character (e.g. a bidirectional override) or a line separator."""
    for ch in name:
        category = unicodedata.category(ch)
        if category[0] == "C" or category in ("Zl", "Zp"):
            return ch
    return None


def check_spelling(name) -> str:
    """What every name sent to the raylet must be, Ray's own (CPU, ...) included."""
    if not isinstance(name, str):
        raise TypeError(
            f"resource name must be a str, got {type(name).__name__} {name!r}"
        )
    if not name or name.strip() != name or len(name) > _MAX_NAME_LEN:
        shown = repr(name) if len(name) <= 80 else f"{name[:40]!r}... ({len(name):,} characters)"
        raise ValueError(
            f"resource name {shown} must be 1-{_MAX_NAME_LEN} characters without "
            "leading or trailing whitespace"
        )
    bad = _unprintable(name)
    if bad is not None:
        raise ValueError(
            f"resource name {name!r} holds the control character {bad!r} (U+{ord(bad):04X}); "
            "use printable characters only"
        )
    return name


def _check_name(name) -> str:
    """A name ``set_resource`` may set: well spelt and not one of Ray's own."""
    check_spelling(name)
    if is_reserved_name(name):
        raise ResourceError(
            f"resource name {name!r} is reserved by Ray (CPU, GPU, TPU, memory, "
            "object_store_memory, node:*, accelerator_type:*, *_group_* placement-group "
            "names); choose a name of your own"
        )
    return name


def _check_capacity(name: str, capacity) -> float:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
        raise TypeError(
            f"capacity of {name!r} must be a number, got {type(capacity).__name__} "
            f"{capacity!r}"
        )
    value = float(capacity)
    if not math.isfinite(value) or value < 0 or value > _MAX_CAPACITY:
        raise ValueError(
            f"capacity of {name!r} must be a finite number in [0, {_MAX_CAPACITY:g}] "
            f"(0 deletes the resource), got {capacity!r}"
        )
    rounded = round(value / GRANULARITY) * GRANULARITY
    if value > 0 and rounded == 0:
        raise ValueError(
            f"capacity of {name!r} is {capacity!r}, below Ray's resource granularity "
            f"{GRANULARITY}"
        )
    return round(rounded, 4)


def check_capacities(capacities: Mapping[str, float], *, convert_from: Iterable[str] = ()) -> Dict[str, float]:
    """``capacities`` checked as ``set_resource`` and ``resize_many`` check them -- names
    (1-256 printable characters, not Ray's own unless in ``convert_from``) and capacities (finite,
    in [0, 1e14], not below Ray's granularity of 1e-4 unless 0) -- without touching the cluster; returns
    them rounded as they would be set. Libraries that derive names (``esl.Gang``) check them up front.

    Example:
        >>> check_capacities({"my-slot": 2})
        {'my-slot': 2.0}
        >>> check_capacities({"bad\\nname": 1})
        Traceback (most recent call last):
        ...
        ValueError: resource name 'bad\\nname' holds the control character '\\n' (U+000A); use printable characters only
    """
    if not isinstance(capacities, Mapping):
        raise TypeError(f"capacities must be a dict of name -> capacity, got {capacities!r}")
    allowed = set(convert_from)
    return {(check_spelling(name) if name in allowed else _check_name(name)): _check_capacity(name, capacity)
            for name, capacity in capacities.items()}


def same_amount(a: float, b: float) -> bool:
    """Whether two totals are one quantity to Ray (they differ by less than half its granularity)."""
    return abs(a - b) < GRANULARITY / 2
