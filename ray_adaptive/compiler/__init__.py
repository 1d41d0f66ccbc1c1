"""The compiler: a policy's IR -> execution units -> plans -> estimates -> choice."""

from ray_adaptive.compiler.units import Analysis, Separability, StateUpdate, StateVar, Unit, analyze

__all__ = ["Analysis", "Separability", "StateUpdate", "StateVar", "Unit", "analyze"]
