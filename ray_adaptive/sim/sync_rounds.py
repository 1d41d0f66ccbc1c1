"""Periodic State sync of a schedulers role: each replica's rounds, and none simulated for an idle one.

Each replica syncs every period, at its own phase: a sync item joins its
inbox, and serving it pushes what the replica changed and pulls the merged
State (:meth:`~ray_adaptive.sim.replication.HookRunner.push_pull`). A
replica with nothing to push, nothing to decide and nothing in its inbox
would only pull: its rounds are then not simulated one by one (a thousand
idle schedulers would cost ten thousand events a second) -- it goes
*dormant*, and when something next reaches it, :meth:`SyncRounds.rouse`
runs the rounds it skipped at once: each kept it busy for a sync and left
it with the store as of that moment
(:meth:`~ray_adaptive.sim.replication.HookRunner.store_at`), as if they had
been simulated.
"""

from __future__ import annotations

from ray_adaptive.sim.events import ARRIVAL, DECIDE
from ray_adaptive.sim.servers import Server

__all__ = ["SyncRounds", "SYNC"]

SYNC = "sync"  # an inbox item: a periodic sync round (push, then pull)


class SyncRounds:
    """The sync rounds of one host's replicas, every ``period_s`` (``host``: a
    :class:`~ray_adaptive.sim.hosts.SchedulersHost`, whose ``kick`` and ``item_done`` serve them)."""

    def __init__(self, host, period_s: float):
        self.host, self.books, self.loop, self.period_s = host, host.books, host.loop, period_s

    def first(self, s: Server) -> None:
        """A scheduler used for the first time: dormant since before its first round."""
        s.next_tick = float(s.rng.uniform(0, self.period_s))
        s.ticking = False

    def tick(self, s: Server) -> None:
        if self.books.unresolved <= 0 or s.retired:
            s.ticking = False
            return
        idle = not (s.busy or s.inbox or s.pending or s.unpushed or s.sync_queued)
        if idle:  # only a pull: dormant until something reaches it
            s.ticking = False
            return
        s.next_tick = self.loop.now + self.period_s
        if not s.sync_queued:  # one sync catches up everything: a tick while one waits or runs adds nothing
            s.sync_queued = True
            s.inbox.append((SYNC, None))
            self.host.kick(s)
        self.loop.at(s.next_tick, ARRIVAL, self.tick, s)

    def rouse(self, s: Server) -> None:
        """Run the sync rounds a dormant scheduler skipped, up to now, and schedule its next."""
        if s.ticking:
            return
        hooks, now = self.books.hooks, self.loop.now
        period, t = self.period_s, s.next_tick
        while t <= now:
            w = s.work_time(s.costs.sync_s, t)
            s.busy_s += w
            if t + w > now:  # mid-sync now: it ends as a simulated one does
                s.busy = s.sync_queued = True
                self.loop.at(t + w, DECIDE, self.host.item_done, s, SYNC, None)
            else:
                hooks.pull(s.interp, hooks.store_at(t + w))
            t = t + period
        s.next_tick = t
        s.ticking = True
        self.loop.at(t, ARRIVAL, self.tick, s)

    def skipped_busy(self, s: Server, until: float) -> float:
        """The busy time of the sync rounds a dormant scheduler skipped up to ``until``."""
        busy, t = 0.0, s.next_tick
        while t <= until:
            busy += s.work_time(s.costs.sync_s, t)
            t = t + self.period_s
        return busy
