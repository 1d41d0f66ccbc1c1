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

import logging
import threading
import time
from typing import Any, Callable, Optional

import ray

from ray_adaptive._private import autoinit
from ray_adaptive._private.submit import RayGoneError

__all__ = ["get", "get_ready", "POLL_S", "Periodic"]

log = logging.getLogger(__name__)

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


class Periodic:
    """A library thread of the owner's that calls ``step()`` every ``period_s`` s until :meth:`stop`ped or
    Ray is shut down, then ``at_end()`` if Ray is still up. A step that fails is tried again at the next
    period: a store restarting (``ActorUnavailableError``) silently, anything else said once -- ``what``
    names it -- until a step works again. Ray's auto-connect is held off while it runs (see
    :mod:`ray_adaptive._private.autoinit`): a step that meets ``ray.shutdown()`` starts no new Ray."""

    def __init__(self, step: Callable[[], Any], name: str, period_s: float, what: str,
                 at_end: Optional[Callable[[], Any]] = None):
        self._step, self._period_s, self._what, self._at_end = step, float(period_s), what, at_end
        self._stop = threading.Event()
        autoinit.hold()  # (released when the thread ends)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def alive(self) -> bool:
        """Not stopped, and Ray still up: a step's long wait may go on."""
        return not self._stop.is_set() and ray.is_initialized()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        warned = False
        try:
            while not self._stop.wait(self._period_s) and ray.is_initialized():
                try:
                    self._step()
                    warned = False
                except ray.exceptions.ActorUnavailableError:  # the store restarts: look again, nothing to say
                    continue
                except Exception:  # the runtime shutting down, or worse: look again
                    if self.alive() and not warned:
                        warned = True
                        log.warning("ray-adaptive: %s failed; trying again every %g s", self._what, self._period_s,
                                    exc_info=True)
            if self._at_end is not None and ray.is_initialized():
                self._at_end()
        except Exception:
            if ray.is_initialized():
                log.warning("ray-adaptive: %s: its last step at stop failed", self._what, exc_info=True)
        finally:
            autoinit.release()
