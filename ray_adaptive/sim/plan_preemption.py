"""Preemption in a simulated plan: the ideal replay's rules (:mod:`ray_adaptive.sim.preemption`), taken by
the plan's own schedulers on what they can see.

A scheduler that holds waiting tasks and finds no node with room lets them choose victims, as the ideal
scheduler does, with three differences that are the plan's:

* **what it sees.** A centralized selector placed every task and is told of every finish: it sees
  every running task, and its State is exact. A decentralized scheduler sees only the tasks it placed
  itself (``books.owner``), on its replica of State: a victim that another scheduler placed is
  invisible to it -- the approximation the compiler's competitive ratio and these counts measure. A
  hybrid's selector does not know where its forwarded tasks run, and its placement schedulers do not
  hold the waiting tasks: neither can choose, so a hybrid never preempts (the compiler excludes it for
  a policy that preempts, docs/compiler.md).
* **when.** At its decision attempts that find no room (the pass shares the attempt's busy time: it
  scores the same waiting tasks), and while it waits for room, at least every
  :data:`~ray_adaptive.sim.preemption.RECHECK_S` (it is woken for it).
* **the stop.** At the end of the grace the victim leaves its node; OnPreempt (else OnFinish) runs on
  the truth and on the choosing scheduler's State, the victim waits again at that scheduler, and the
  task that chose it is placed on the victim's executor (OnDispatch there and on the truth). That
  placement is not a competitive-ratio sample (the node had no room: the ideal's choice among nodes
  with room is not its measure); preemptions and the seconds they wasted are counted in
  :class:`~ray_adaptive.sim.results.Metrics` instead. A live switch during a grace drops the
  nomination: the new plan's schedulers choose again.
"""

from __future__ import annotations

from typing import Any, Optional

from ray_adaptive.plan import Role
from ray_adaptive.sim.events import ARRIVAL, FINISH
from ray_adaptive.sim.model import Task
from ray_adaptive.sim.preemption import Nomination, fits_after, next_recheck, nominate, release

# (the run's Books, a RoleHost and its Servers are typed Any here: they import this module)
Books = RoleHost = Server = Any

__all__ = ["PlanPreemption"]


class PlanPreemption:
    """The preemptions of one simulated run (one per :class:`~ray_adaptive.sim.bookkeeping.Books`)."""

    def __init__(self, books: Books):
        policy = books.truth.policy
        assert policy.preempt is not None
        self.books = books
        self.grace = float(policy.preempt.grace)
        self.leave_hook = "OnPreempt" if policy.hook("OnPreempt") is not None else "OnFinish"

    @staticmethod
    def can_choose(host: RoleHost) -> bool:
        """Whether ``host``'s schedulers hold waiting tasks and decide their nodes (not a hybrid's roles)."""
        return bool(host.spec.entry) and not host.spec.forwards

    def consider(self, host: RoleHost, s: Server) -> None:
        """``s`` found no room: its waiting tasks choose victims among the running tasks it sees; and it
        is woken again within RECHECK_S while it waits (a condition on the clock)."""
        books, now = self.books, self.books.loop.now
        if not self.can_choose(host) or not s.pending:
            return
        visible = None if host.role is Role.SELECTOR else (lambda v: books.owner.get(v) is s)
        for nom in nominate(s.interp, s.pending.tasks(), books.members, now, visible):
            nom.task.nominee, nom.victim.doomed_by = nom.victim, nom.task
            books.loop.at(now + self.grace, FINISH, self._stop, host, s, nom, nom.victim.run)
        at = next_recheck(now)
        if s.wake_at < at:
            s.wake_at = at
            books.loop.at(at, ARRIVAL, host.wake, s)

    def _stop(self, host: RoleHost, s: Server, nom: Nomination, run: int) -> None:
        books = self.books
        victim, task, now = nom.victim, nom.task, books.loop.now
        if victim.doomed_by is not task or victim.run != run or victim.status != "running":
            return
        node = victim.node
        release(task)
        if (s.retired or task.status != "pending" or task in books.claimed or books.where.get(task) is not s
                or not fits_after(node, victim, task)):
            return
        books.cluster.stop(victim)
        books.hooks.run(books.truth, self.leave_hook, victim, node, now)
        host.run_hook(s, self.leave_hook, victim, node)
        books.gp.add(victim)
        s.pending.remove(task)
        books.where.pop(task, None)
        books.place(s, task, node, now, 1, first=True)
        host.run_hook(s, "OnDispatch", task, node)
        if s.view is not None:
            s.view.dispatched(node, now)
        host.deliver(s, victim, arrived=False)  # (it waits again here; kicks s)


def preemption_for(books: Books) -> Optional[PlanPreemption]:
    """The run's preemption, if its policy preempts."""
    return PlanPreemption(books) if books.truth.policy.preempt is not None else None


def waiting_again(task: Task) -> bool:
    """A task that started once and was preempted: owed its result, no timeout drops it."""
    return task.preemptions > 0
