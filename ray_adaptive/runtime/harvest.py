"""How a submitting process learns that its tasks finished: harvests, not callbacks.

One ``ray.wait(refs, fetch_local=False)`` finds what finished since the last
look, made by whichever thread needs it (a caller waiting for room, a caller
whose view of the loads is stale, or the dispatcher thread). A callback per
task (``ObjectRef.future()``) would wake a thread per completion, take the
GIL from Ray's io thread for each, and pull every result into this process;
here results stay on the nodes that made them until someone fetches them.

A harvest looks at *windows*, not at every task in flight. Ray's owner runs
the tasks of one shape (one function with one set of options) bound to one
node in the order they were submitted -- one queue per scheduling class,
served by the workers it leases there -- so what finished is, but for the
few running side by side, a prefix of that order. ``ray.wait`` costs per ref
it is given, and with Ray holding a full cluster's tasks thousands may be in
flight: each harvest looks at the first ``window`` unharvested tasks of each
(node, shape), and at every task once every ``SCAN_S`` (every
``SCAN_BLOCKED_S`` while the windows find nothing finished), for the tasks
that finish out of that order (those that waited for their arguments).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Tuple

import ray

from ray_adaptive.runtime.routed import RoutedTask, RouterStats

__all__ = ["Harvester"]


class Harvester:
    """The tasks this process launched, in launch order per (node, shape), until a harvest takes them.

    Shares the router's lock (``lock``): :meth:`add` and the bookkeeping of
    :meth:`collect` run under it, the ``ray.wait`` outside it. A finished task
    is taken out once, by the one harvest that pops it.
    """

    SCAN_S = 1.0
    SCAN_BLOCKED_S = 0.1

    def __init__(self, lock: threading.Condition, stats: RouterStats, window: int = 8, wake_after: int = 1):
        self._lock = lock
        self._stats = stats
        self.window = max(1, window)
        # a caller waiting for room wakes after this many finishes: room comes in batches, but before a
        # node's queue can run dry (Ray returns a leased worker whose queue of the task's shape is empty)
        self.wake_after = wake_after
        self.launched: Dict[Any, RoutedTask] = {}  # ObjectRef -> its task, in launch order, until harvested
        self._order: Dict[tuple, Deque[Any]] = {}  # (node, shape) -> refs in launch order (harvested: dropped lazily)
        self._scan_at = 0.0  # (monotonic) when a harvest looks at every task again
        self._blocked = False  # the last windowed look found nothing finished
        self.harvested_at = time.monotonic()

    def add(self, task: RoutedTask, ref: Any) -> None:
        """A task was launched (holds the lock)."""
        self.launched[ref] = task
        key = (task.node, task.shape)
        order = self._order.get(key)
        if order is None:
            order = self._order[key] = deque()
        order.append(ref)

    def collect(self, block: float) -> List[RoutedTask]:
        """The launched tasks that have finished, taken out -- waiting up to ``block`` seconds for some if
        none has (waking after ``wake_after`` of them, or when ``block`` is up)."""
        with self._lock:
            refs, windowed = self._watch()
            self._stats.harvests += 1
            self._stats.scans += not windowed
            self._stats.watched += len(refs)
        self.harvested_at = time.monotonic()
        if not refs:
            if block:
                time.sleep(block)
            return []
        # waiting: room comes in batches launched back to back, not a wake-up and a launch per finish
        want = min(self.wake_after, len(refs)) if block else len(refs)
        ready, _ = ray.wait(refs, num_returns=want, timeout=block, fetch_local=False)
        # woken by a batch, more may have finished meanwhile: a second look collects them. Woken by one
        # finish (shallow queues), the room it made is what matters: a second non-blocking ray.wait costs
        # about as much as it would find
        if 1 < want < len(refs) and len(ready) == want:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        if windowed:
            self._blocked = not ready
        if not ready:
            return []
        with self._lock:
            launched = self.launched
            return [t for t in (launched.pop(r, None) for r in ready) if t is not None]

    def _watch(self) -> Tuple[List[Any], bool]:
        """The refs a harvest looks at (holds the lock), and whether they are windows (see the module doc)."""
        launched = self.launched
        now = time.monotonic()
        if now >= self._scan_at or (self._blocked and now >= self._scan_at - self.SCAN_S + self.SCAN_BLOCKED_S):
            self._scan_at = now + self.SCAN_S
            return list(launched), False
        refs: List[Any] = []
        w = self.window
        for key, order in list(self._order.items()):
            while order and order[0] not in launched:
                order.popleft()
            if not order:
                del self._order[key]
                continue
            n = 0
            for ref in order:
                if ref in launched:
                    refs.append(ref)
                    n += 1
                    if n == w:
                        break
        return refs, True
