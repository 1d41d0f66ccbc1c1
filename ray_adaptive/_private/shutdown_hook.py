"""The library's runtimes stopped before Ray shuts down (``ray.shutdown`` wrapped; private Ray, kept here alone).

Ray has no hook that runs before ``ray.shutdown()``. A library thread inside a
Ray call as the core worker goes makes Ray end the process ("The core worker
has already been shutdown ... The process will exit"), and one that checked
``ray.is_initialized()`` a moment before finds the worker half torn down. So
``ray.shutdown`` is wrapped, once, to run ``before()`` first -- what
``ra.shutdown()`` does, without waiting for running tasks -- and the same runs
at interpreter exit ahead of Ray's own ``atexit`` shutdown (``atexit`` runs
last-registered first, and this registers after Ray's).
"""

from __future__ import annotations

import atexit
import functools
from typing import Callable

__all__ = ["install"]

_installed = False


def install(before: Callable[[], None]) -> None:
    """Run ``before()`` ahead of every ``ray.shutdown()`` and of Ray's shutdown at exit (idempotent)."""
    global _installed
    import ray

    if _installed:
        return
    original = ray.shutdown

    @functools.wraps(original)
    def shutdown(*args, **kwargs):
        try:
            before()
        finally:
            return original(*args, **kwargs)

    ray.shutdown = shutdown
    atexit.register(before)
    _installed = True
