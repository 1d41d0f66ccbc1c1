"""What ray-adaptive asks of an actor handle beyond Ray's public API, in one place.

Ray gives every actor two built-in methods, ``__ray_ready__`` (answers once
the actor's constructor has run) and ``__ray_call__`` (runs a function in the
actor's process), and every handle an ``_actor_id``; none of the three is
documented. ``tests/test_private_ray.py`` calls each function here against
the installed Ray, so a release that moves one fails there, by name.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

__all__ = ["wait_ready", "actor_key", "call_in_actor"]


def wait_ready(handles: Iterable[Any], timeout: Optional[float] = None) -> None:
    """Block until every actor of ``handles`` has run its constructor (a failed one raises its error)."""
    import ray

    ray.get([h.__ray_ready__.remote() for h in handles], timeout=timeout)


def actor_key(handle: Any) -> str:
    """The actor's id, as hex: equal for every handle of one actor, across a restart."""
    return handle._actor_id.hex()


def call_in_actor(handle: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(actor_instance, *args)`` run in the actor's process; the ObjectRef of its result."""
    return handle.__ray_call__.remote(fn, *args)
