"""How long the selector's decisions take to reach their processes, per process: the slack of its deadlines.

A decision the selector makes waits in the process's mailbox until that process's next exchange takes
it -- at once when the process is waiting in a long poll, later when it is busy launching what the last
answer carried. A task placed with less time than that before its deadline reaches its process after
the deadline: the process does not launch it (the caller was promised a task placed by then), gives its
room back, and the decision and the slot were spent for nothing. Under overload, with a backlog served
oldest first, that is about half the decisions of the tenant with the deepest backlog (issue 37:
DRF-LB's greedy tenant at 800-1,200 tasks/s on this machine, 47-55% of its decisions).

So the selector measures, per process, the time from the first decision put in an empty mailbox to the
exchange that takes it, smooths it as TCP smooths round trips (RFC 6298: ``srtt``, ``rttvar``), and
drops a task whose deadline is less than ``srtt + 4 rttvar`` away as if past it (``Scheduler.slack``):
a decision made by the deadline and used, or none. A process never measured has no slack.

Example:
    >>> clock = DeliveryClock()
    >>> clock.mailed("c", at=10.0); clock.taken("c", at=10.04)
    >>> round(clock.slack("c"), 3), clock.slack("unknown")
    (0.12, 0.0)
"""

from __future__ import annotations

import time
from typing import Dict, Optional

__all__ = ["DeliveryClock", "Smoothed"]


class Smoothed:
    """One delay, smoothed as TCP smooths round trips (RFC 6298): ``srtt`` and ``rttvar``; its bound,
    ``srtt + 4 rttvar``, is the slack a deadline needs. (Also the hybrid's forwarding hop, see
    :class:`~ray_adaptive.runtime.placement.Forwarder`.)

    Example:
        >>> s = Smoothed(); s.add(0.04); round(s.bound(), 3)
        0.12
    """

    ALPHA, BETA, K = 0.125, 0.25, 4.0  # RFC 6298's gains and variance factor

    def __init__(self) -> None:
        self.srtt: Optional[float] = None  # (None: never measured)
        self.rttvar = 0.0

    def add(self, sample: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = sample, sample / 2
        else:
            self.rttvar = (1 - self.BETA) * self.rttvar + self.BETA * abs(self.srtt - sample)
            self.srtt = (1 - self.ALPHA) * self.srtt + self.ALPHA * sample

    def bound(self) -> float:
        """Seconds the delay stays under but rarely (0 unmeasured)."""
        return 0.0 if self.srtt is None else self.srtt + self.K * self.rttvar


class DeliveryClock:
    """Per process: when its mailbox got its oldest undelivered decision, and the smoothed delivery time."""

    def __init__(self) -> None:
        self._since: Dict[str, float] = {}  # process -> (monotonic) when its mailbox went non-empty
        self._smoothed: Dict[str, Smoothed] = {}  # process -> its delivery time

    def mailed(self, client: str, at: Optional[float] = None) -> None:
        """A decision was put in ``client``'s mailbox (the first since it was last emptied starts the clock)."""
        self._since.setdefault(client, time.monotonic() if at is None else at)

    def taken(self, client: str, at: Optional[float] = None) -> None:
        """``client``'s exchange took its mailbox: one delivery time measured."""
        since = self._since.pop(client, None)
        if since is None:
            return
        sample = max(0.0, (time.monotonic() if at is None else at) - since)
        self._smoothed.setdefault(client, Smoothed()).add(sample)

    def discarded(self, client: str) -> None:
        """``client``'s mailbox was emptied without a delivery (the process left, a switch took it)."""
        self._since.pop(client, None)

    def forget(self, client: str) -> None:
        self._since.pop(client, None)
        self._smoothed.pop(client, None)

    def slack(self, client: str) -> float:
        """Seconds before a deadline from which a task of ``client`` would reach it too late (0 unmeasured)."""
        smoothed = self._smoothed.get(client)
        return 0.0 if smoothed is None else smoothed.bound()

    def stats(self) -> Dict[str, float]:
        """Per process: its slack, seconds (for ``Selector.stats``)."""
        return {c: round(self.slack(c), 6) for c in self._smoothed}
