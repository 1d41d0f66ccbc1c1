"""ray-adaptive: programmable and adaptive scheduling for Ray.

Write a scheduling policy in a small DSL, let the compiler choose how to run
it, and bind every decision through ESCHER-style ephemeral resources.

Example:
    >>> import ray_adaptive as ra
    >>> policy = ra.load_policy("drf_lb")
    >>> policy.score.limit
    1.2
"""

from __future__ import annotations

from ray_adaptive.errors import (
    InfeasibleTaskError,
    PlacementDeadlineExceeded,
    PolicyError,
    PolicyRuntimeError,
    RayAdaptiveError,
    ResourceError,
    ScenarioError,
)

__version__ = "0.1.0"

# The ESCHER resource API imports Ray; load it only when asked for, so that
# checking or replaying a policy does not pay for `import ray`.
_RESOURCE_EXPORTS = (
    "set_resource",
    "set_resources",
    "get_cluster_state",
    "created_resources",
    "pending_resizes",
    "wait_for_pending",
    "ResourceScope",
    "cleanup",
)
# The runtime API (Ray-facing): start a policy, decorate tasks, shut down.
_API_EXPORTS = ("start", "shutdown", "stop", "policy", "runtime_of")
# The DSL front end is light, but keep the package import cheap all the same.
_DSL_EXPORTS = ("load_policy", "parse_policy", "format_policy", "shipped_policies")

__all__ = [
    "RayAdaptiveError",
    "PolicyError",
    "PolicyRuntimeError",
    "ScenarioError",
    "ResourceError",
    "PlacementDeadlineExceeded",
    "InfeasibleTaskError",
    *_DSL_EXPORTS,
    *_RESOURCE_EXPORTS,
    *_API_EXPORTS,
    "audit",
]


def __getattr__(name: str):
    if name in _RESOURCE_EXPORTS:
        from ray_adaptive import resources

        return getattr(resources, name)
    if name in _API_EXPORTS:
        from ray_adaptive import api

        return getattr(api, name)
    if name == "audit":  # (the State audit: see ray_adaptive.runtime.audit)
        from ray_adaptive.runtime.audit import audit

        return audit
    if name in _DSL_EXPORTS:
        from ray_adaptive import dsl

        return getattr(dsl, name)
    raise AttributeError(f"module 'ray_adaptive' has no attribute {name!r}")
