"""Ray calls from the library's background threads, made so that ``ray.shutdown()`` never finds one waiting.

Ray has no hook that runs before ``ray.shutdown()``. A thread blocked in ``ray.get``
when the driver shuts Ray down is not woken: it waits out its timeout (or for
ever), and the thread that joins it -- ``ra.shutdown()``, a router stopping --
waits with it. :func:`get` waits in short ``ray.wait`` steps instead and stops
as soon as Ray is gone, so a background thread notices within ``POLL_S``. (A
call that starts while ``ray.shutdown()`` runs can still meet Ray's core worker
gone, which ends the process: the steps keep that window to one check. Call
``ra.shutdown()`` before ``ray.shutdown()``.)
"""

from __future__ import annotations

import time
from typing import Any, Optional

import ray

from ray_adaptive._private.submit import RayGoneError

__all__ = ["get", "get_ready", "POLL_S"]

POLL_S = 0.1


def get(ref: Any, timeout: Optional[float] = None) -> Any:
    """``ray.get(ref, timeout=timeout)``, given up with :class:`RayGoneError` as soon as Ray is shut down."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if not ray.is_initialized():
            raise RayGoneError("Ray was shut down while a call of the library waited")
        left = POLL_S if deadline is None else min(POLL_S, max(0.0, deadline - time.monotonic()))
        try:
            if ray.wait([ref], timeout=left, fetch_local=True)[0]:
                return ray.get(ref)
        except SystemExit:  # (Ray's core worker shut down under a call in flight: it ends the calling thread so)
            raise RayGoneError("Ray was shut down while a call of the library waited") from None
        if deadline is not None and time.monotonic() >= deadline:
            raise ray.exceptions.GetTimeoutError(f"no answer in {timeout:g} s")


def get_ready(ref: Any, timeout: float) -> bool:
    """Whether ``ref`` is ready within ``timeout`` s (``ray.wait``); :class:`RayGoneError` if Ray was shut down."""
    try:
        return bool(ray.wait([ref], timeout=timeout)[0])
    except SystemExit:  # (see get)
        raise RayGoneError("Ray was shut down while a call of the library waited") from None
