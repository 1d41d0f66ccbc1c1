"""The exceptions of ray-adaptive: one base, one subclass per area."""

from __future__ import annotations


class RayAdaptiveError(Exception):
    """Base of every error ray-adaptive raises on purpose."""


class PolicyError(RayAdaptiveError):
    """A policy file is malformed or ill-typed.

    ``str(err)`` is ``FILE:LINE:COL: error: MESSAGE``, the format compilers use,
    so editors and CI logs can jump to the spot.
    """

    def __init__(self, message: str, file: str = "<policy>", line: int = 0, col: int = 0):
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        super().__init__(f"{file}:{line}:{col}: error: {message}")


class PolicyRuntimeError(RayAdaptiveError):
    """A well-typed policy failed while running (e.g. vectors of different lengths)."""


class ScenarioError(RayAdaptiveError):
    """A scenario or trace file is malformed; the message names the task/node and key."""


class ResourceError(RayAdaptiveError):
    """An ephemeral-resource operation was refused or failed (bad name, dead node, RPC error)."""
