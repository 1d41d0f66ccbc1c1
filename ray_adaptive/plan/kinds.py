"""The closed sets a plan is described with: architectures, roles, load views, sync, merge rules.

Each is a ``str`` enum, so a plan file (JSON) holds the plain word and a
member compares equal to it (``Architecture.HYBRID == "hybrid"``); parsing
one from text goes through :meth:`_Kind.parse`, whose error lists the
allowed values.

Example:
    >>> Architecture.parse("hybrid") is Architecture.HYBRID, f"{Architecture.HYBRID}"
    (True, 'hybrid')
    >>> Architecture.parse("central")
    Traceback (most recent call last):
    ...
    ValueError: unknown architecture 'central'; expected one of: centralized, decentralized, hybrid
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Type, TypeVar

__all__ = ["Architecture", "Role", "LoadKind", "SyncKind", "Merge"]


K = TypeVar("K", bound="_Kind")


class _Kind(str, Enum):
    """A ``str`` enum that prints as its value (in f-strings and JSON alike, on every Python)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls: Type[K], value: Any) -> K:
        """The member named by ``value`` (a member or its word)."""
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown {cls._what()} {value!r}; expected one of: {allowed}") from None

    @classmethod
    def _what(cls) -> str:
        return cls.__name__.lower()


class Architecture(_Kind):
    """Where a plan's execution units run (the paper's three implementations)."""

    CENTRALIZED = "centralized"  # one selector: the global pending queue, exact State
    DECENTRALIZED = "decentralized"  # k schedulers, each with its own tasks and a replica of State
    HYBRID = "hybrid"  # a selector picks the task, k placement schedulers pick the node


class Role(_Kind):
    """The two roles a plan may have (see :mod:`ray_adaptive.plan.roles`)."""

    SELECTOR = "selector"  # one instance with the global pending queue
    SCHEDULERS = "schedulers"  # k instances: decentralized schedulers, or the hybrid's placements


class LoadKind(_Kind):
    """How a scheduler learns node loads (see :class:`~ray_adaptive.plan.plans.LoadView`)."""

    PROBE = "probe"  # every node, per decision
    SAMPLE = "sample"  # d random nodes, per decision (power-of-d choices)
    CACHED = "cached"  # a heartbeat every period, plus the scheduler's own dispatches since

    @classmethod
    def _what(cls) -> str:
        return "load view kind"


class SyncKind(_Kind):
    """How replicas of State agree (see :class:`~ray_adaptive.plan.plans.Sync`)."""

    EXACT = "exact"  # one owner, no replicas
    INSTANT = "instant"  # every decision reads the shared store, every update writes it
    PERIODIC = "periodic"  # push local changes and pull the merged State every period

    @classmethod
    def _what(cls) -> str:
        return "sync kind"


class Merge(_Kind):
    """How a replicated State variable's changes merge (see :mod:`ray_adaptive.plan.replicas`)."""

    ADD = "add"  # += / -= deltas: replicas' deltas sum
    MAX = "max"
    MIN = "min"
    NONE = "none"  # last writer wins

    @classmethod
    def _what(cls) -> str:
        return "merge rule"
