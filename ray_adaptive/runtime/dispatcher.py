"""The dispatcher thread of a submitting process: what happens when no caller is looking.

A caller of ``.remote()`` harvests finishes and launches the decisions made
in its thread itself, as it needs them (so does a ``.submit()`` caller holding
a selector's lease). The dispatcher thread (one per process and policy) does
the rest, on a clock:

* decides and launches what ``.submit()`` callers queued under a
  decentralized plan (see :meth:`~ray_adaptive.runtime.decider.Decider.submit`),
  after a harvest, as soon as they queue it;
* harvests while tasks wait for room and no caller looks for it, or once the
  last harvest is older than ``STALE_S`` (a submitting caller harvests as it
  needs: a dispatcher also looking every ``TICK_S`` would collide with it);
* ticks the decider every ``TICK_S`` (heartbeats and syncs that show room
  made elsewhere), and drops tasks past their deadline;
* every ``NODE_CHECK_S``, looks for dead nodes and times a round trip to
  the actor the decider talks to; every ``REPORT_S``, reports this process's
  load to the store; every ``metrics_every_s``, exports the Ray metrics.

It ends once its router is closed with nothing running, or when Ray was shut
down under it (the router then stops quietly: see ``Router.ray_gone``). Should it fail, its router fails every task not yet launched
with the cause (no caller waits forever).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Deque, List, Optional, Protocol

import ray

from ray_adaptive.monitor import Monitor
from ray_adaptive.runtime.harvest import Harvester

__all__ = ["Dispatcher", "Dispatched"]

log = logging.getLogger(__name__)


class Dispatched(Protocol):
    """What the dispatcher thread drives: the process's :class:`~ray_adaptive.runtime.router.Router`."""

    @property
    def fresh_s(self) -> float: ...

    def harvest(self, block: float) -> bool: ...

    def queued(self) -> bool:
        """Callers left decisions to this thread (see :meth:`~ray_adaptive.runtime.decider.Decider.submit`)."""
        ...

    def waiting_unwatched(self) -> bool:
        """Tasks wait for room here and no caller is harvesting for it."""
        ...

    def nap(self, idle_s: float, waiting_s: float) -> None:
        """Sleep until woken (a submission), at most ``waiting_s`` while tasks wait here, else ``idle_s``."""
        ...

    def tick(self) -> None: ...

    def expire(self) -> None: ...

    def check_nodes(self) -> List[str]: ...

    def ping(self, record) -> None: ...

    def send_report(self) -> None: ...

    def drained(self) -> bool:
        """Closed, with nothing of this process running."""
        ...

    def fail(self, err: BaseException) -> None: ...

    def ray_gone(self) -> None:
        """Ray was shut down under it: stop, quietly (see :meth:`~ray_adaptive.runtime.router.Router.ray_gone`)."""
        ...


class Dispatcher:
    """The thread (see the module doc)."""

    TICK_S = 0.005
    STALE_S = 0.01
    IDLE_S = 0.05  # the nap while nothing is launched or waiting here
    NODE_CHECK_S = 1.0
    REPORT_S = 1.0  # how often this process reports its load to the store

    def __init__(self, router: Dispatched, harvester: Harvester, monitor: Optional[Monitor], name: str,
                 metrics_every_s: Optional[float] = None):
        """With a ``monitor``: time the round trip to the decider's actor every NODE_CHECK_S, send the load
        report every REPORT_S, and export the Ray metrics every ``metrics_every_s`` (None: never)."""
        self._router, self._harvester, self._monitor = router, harvester, monitor
        self._metrics_every = metrics_every_s if monitor is not None else None
        now = time.monotonic()
        self._next_node_check = now + self.NODE_CHECK_S
        self._next_report = now
        self._next_metrics = now + (metrics_every_s or 0.0)
        self.message_s: Deque[float] = deque(maxlen=10_000)  # round trips of the pings
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as err:
            if ray.is_initialized():
                self._router.fail(err)
                return
            # (a call that raised because ray.shutdown() came in mid-step: not a failure of ours)
        if not ray.is_initialized():
            self._router.ray_gone()

    def _loop(self) -> None:
        r = self._router
        while ray.is_initialized():  # (after ray.shutdown, a call here would start Ray again)
            if r.queued():  # callers left their decisions to this thread: the finishes so far, then decide
                r.harvest(block=0.0)
            elif r.waiting_unwatched():  # see room the moment it is made
                r.harvest(block=self.TICK_S)
            elif self._harvester.launched:  # a submitting caller harvests as it needs; else, once stale
                stale = self._harvester.harvested_at + max(self.STALE_S, r.fresh_s) - time.monotonic()
                if stale > 0:
                    r.nap(stale, stale)  # (a submission wakes it: its task may be queued for this thread)
                else:
                    r.harvest(block=0.0)
            else:  # nothing of ours runs: a heartbeat every TICK_S while tasks wait here, else a nap
                r.nap(self.IDLE_S, self.TICK_S)
            r.tick()
            r.expire()
            now = time.monotonic()
            if now >= self._next_node_check:
                self._next_node_check = now + self.NODE_CHECK_S
                r.check_nodes()
                if self._monitor is not None:
                    self._ping()
            if self._monitor is not None and now >= self._next_report:
                self._next_report = now + self.REPORT_S
                r.send_report()
            if self._metrics_every and self._monitor is not None and now >= self._next_metrics:
                self._next_metrics = now + self._metrics_every
                try:
                    self._monitor.export(r)
                except Exception:  # figures are best effort: an actor replaced by a switch answers no more
                    log.debug("metrics export failed", exc_info=True)
            if r.drained():
                return

    def _ping(self) -> None:
        try:
            self._router.ping(self.message_s.append)
        except Exception:
            pass  # the actor is gone (shutdown): nothing to time
