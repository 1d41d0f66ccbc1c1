"""A minimal discrete-event kernel: a heap of (time, priority, seq, callback).

``priority`` orders events that share a timestamp; ``seq`` (insertion order)
breaks the remaining ties, so a run is deterministic.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import math
from typing import Callable

# Same-time order of the cluster model: completions free capacity first, then
# arrivals join, then the scheduler decides, then deadlines drop what is left.
FINISH, ARRIVAL, DECIDE, TIMEOUT = 0, 1, 2, 3


class EventLoop:
    """Runs callbacks in (time, priority, insertion) order.

    Example:
        >>> loop = EventLoop()
        >>> seen = []
        >>> loop.at(2.0, ARRIVAL, seen.append, "b")
        >>> loop.at(1.0, ARRIVAL, seen.append, "a")
        >>> loop.run()
        2
        >>> seen, loop.now
        (['a', 'b'], 2.0)
    """

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = itertools.count()
        self._stopped = False

    def at(self, time: float, priority: int, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` at ``time`` (not earlier than now)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time}, before now ({self.now})")
        heapq.heappush(self._heap, (time, priority, next(self._seq), fn, args))

    def after(self, delay: float, priority: int, fn: Callable, *args) -> None:
        self.at(self.now + delay, priority, fn, *args)

    def stop(self) -> None:
        """End :meth:`run` after the current event (what is scheduled stays, for a later run)."""
        self._stopped = True

    def __len__(self) -> int:
        return len(self._heap)

    def peek(self) -> float:
        """When the next event is due (inf: none is)."""
        return self._heap[0][0] if self._heap else math.inf

    def run(self, until: float = math.inf) -> int:
        """Process events up to ``until``; return how many ran (with the garbage collector paused)."""
        heap, count = self._heap, 0
        self._stopped = False
        with gc_paused():
            while heap and heap[0][0] <= until and not self._stopped:
                time, _, _, fn, args = heapq.heappop(heap)
                self.now = time
                fn(*args)
                count += 1
        return count


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector (if it runs) for a simulation.

    A run allocates a few short-lived objects per event, which reference
    counting frees; setting it up allocates one per task and event. The
    collector's passes over a large heap (a trace of 10k tasks, the other runs'
    results) are pure cost here.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
