"""The exceptions of ray-adaptive: one base, one subclass per area."""

from __future__ import annotations

from typing import Optional


class RayAdaptiveError(Exception):
    """Base of every error ray-adaptive raises on purpose."""


class PolicyError(RayAdaptiveError):
    """A policy file is malformed or ill-typed.

    ``str(err)`` is ``FILE:LINE:COL: error: MESSAGE``, the format compilers use,
    so editors and CI logs can jump to the spot.
    """

    #: The closed set of ``kind`` values, so tests and tools can tell errors apart.
    KINDS = (
        "syntax",        # the text does not parse
        "section",       # unknown, duplicate, misplaced or malformed section header
        "name",          # unknown variable, field, function; duplicate declaration
        "type",          # an operation applied to values of the wrong type
        "readonly",      # assignment to a task/node field or, in Score, to state
        "no-node",       # a hook without a node parameter uses `node`
        "unsupported",   # valid Python that is not part of the policy language
        "structure",     # missing return, empty body, code after return, ...
        "limit",         # over one of the limits of docs/limits.md (file size, statements, depth, size)
    )

    def __init__(
        self,
        message: str,
        file: str = "<policy>",
        line: int = 0,
        col: int = 0,
        kind: str = "syntax",
    ):
        if kind not in self.KINDS:
            raise ValueError(f"unknown PolicyError kind {kind!r}; expected one of {self.KINDS}")
        self.kind = kind
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        super().__init__(f"{file}:{line}:{col}: error: {message}")


class PolicyRuntimeError(RayAdaptiveError):
    """A well-typed policy failed while running (e.g. vectors of different lengths, a string or a
    map over its limit); the message starts with the policy file's ``FILE:LINE:COL``."""


class FileError(RayAdaptiveError):
    """A file the user named cannot be read or written: ``PATH: cannot read the scenario: CAUSE``."""

    def __init__(self, path: str, message: str):
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}")


class ScenarioError(RayAdaptiveError):
    """A scenario or trace file is malformed; the message names the task/node and key."""


class ResourceError(RayAdaptiveError):
    """An ephemeral-resource operation was refused or failed (bad name, dead node, RPC error)."""


class PlacementDeadlineExceeded(RayAdaptiveError, TimeoutError):
    """A task with ``deadline_s`` was not placed by its deadline: it was dropped and never ran.

    ``placed_after_s``: None when no scheduler placed it in time; else how many seconds after its
    submission a placement reached the submitting process -- decided just before the deadline, seen
    after it, so not launched (its room went back at once). Many of these mean a backlog served oldest
    first: decisions spent on tasks too old to use them (``rt.stats()["dropped_placed_late"]``). One
    below its ``deadline_s`` was placed in time, but its process came to launch it after the deadline
    -- busy launching a burst decided at once, e.g. the backlog a live switch handed over -- so it was
    not launched either (``rt.stats()["dropped_launched_late"]``)."""

    def __init__(self, message: str, placed_after_s: Optional[float] = None):
        super().__init__(message)
        self.placed_after_s = placed_after_s

    def __reduce__(self):  # (the attribute survives pickling: Ray carries errors between processes)
        return type(self), (str(self), self.placed_after_s)


class InfeasibleTaskError(RayAdaptiveError, ValueError):
    """A task asks for Ray resources no node of the cluster has, and no node the autoscaler may add would
    have: it could never run. The message names what it asks for and the largest node."""
