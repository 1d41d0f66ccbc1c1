"""The selector's lease, both ends: a lone submitting process runs the selector's decisions itself.

A ``.remote()`` loop waits for each decision, so a selector reached over an
actor call would cost one actor round trip per task. When one client is
alone -- nothing pending or running at the selector, no other client heard
from for ``QUIET_S`` -- the selector answers its exchange with a *lease*:
its exact State, handed over, and the client's tasks back undecided. The
client then runs the selector's own scheduler (same program, every node,
the only one with tasks) in its process, so its decisions are exactly the
selector's, with no actor in the launch path. The holder keeps a long poll
at the selector; the first exchange of any other client *recalls* the
lease, and the holder hands back State, its running tasks and its pending
ones before anything else is decided. A holder silent for ``TIMEOUT_S``
after a recall loses the lease (its process is presumed dead; State reverts
to what it was at the grant, and should it hand back after all, its running
tasks rebuild their share by their OnDispatch, as after a restart).

A hybrid's selector leases too (see :func:`~ray_adaptive.plan.roles.lease_spec`):
the holder runs the whole policy, and the running tasks it hands back were
placed by no placement scheduler; the selector counts them in the loads it
sends the placements until they finish.

* :class:`LeaseDesk` -- the selector's side: whether to grant, when to recall, what waits for the lease to end;
* :class:`HeldLease` -- the holder's side: the selector's scheduler, run here.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ray_adaptive.plan import NodeState, RoleSpec, Scheduler, TaskState
from ray_adaptive.plan.explain import explain_pending, explain_placed
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.runtime.messages import Handback, Lease

__all__ = ["LeaseDesk", "HeldLease"]


class LeaseDesk:
    """The selector's side of its lease (its lock held throughout)."""

    QUIET_S = 1.0
    TIMEOUT_S = 5.0

    def __init__(self, enabled: bool, restarted: bool):
        self.enabled = enabled
        self.holder: Optional[str] = None  # the client holding the lease
        self.recalled_at: Optional[float] = None
        # client -> running tasks it handed back as a rebuild while a lease was out: adopted when it ends
        self.rebuilt: Dict[str, Dict[str, TaskState]] = {}
        self.granted = 0
        self._seen: Dict[str, float] = {}  # client -> when last heard from (monotonic)
        # restarted, the selector has heard from no client yet: none is alone until all had time to call
        self._quiet_until = time.monotonic() + (self.QUIET_S if restarted else 0.0)

    def heard(self, client: str) -> None:
        self._seen[client] = time.monotonic()

    def forget(self, client: str) -> None:
        self._seen.pop(client, None)

    def hold_off(self) -> None:
        """Grant nothing for ``QUIET_S``: every process hands its tasks over first (a switch installed State)."""
        self._quiet_until = time.monotonic() + self.QUIET_S

    def may_grant(self, client: str) -> bool:
        """Whether ``client`` is alone (the caller checked that nothing is pending or running)."""
        now = time.monotonic()
        if not self.enabled or now < self._quiet_until:
            return False
        quiet = now - self.QUIET_S
        return all(seen < quiet for c, seen in self._seen.items() if c != client)

    def grant(self, client: str) -> None:
        self.holder, self.recalled_at = client, None
        self.granted += 1

    def recall(self) -> bool:
        """Another client wants decisions: the holder is asked for the lease back. True the first time
        (the holder's long poll must be woken)."""
        if self.recalled_at is not None:
            return False
        self.recalled_at = time.monotonic()
        return True

    def holder_silent(self) -> bool:
        """The holder was recalled ``TIMEOUT_S`` ago and has not handed back: take the lease back."""
        return self.recalled_at is not None and time.monotonic() - self.recalled_at > self.TIMEOUT_S

    def end(self) -> Dict[str, Dict[str, TaskState]]:
        """The lease is back (or taken back): the running tasks rebuilt meanwhile, to adopt now."""
        self.holder, self.recalled_at = None, None
        rebuilt, self.rebuilt = self.rebuilt, {}
        return rebuilt

    def finished(self, task_id: str) -> None:
        for waiting in self.rebuilt.values():  # finished before its rebuild could land
            waiting.pop(task_id, None)


class HeldLease:
    """The holder's side: the selector's scheduler (``spec``, the whole policy over every node), run here
    from the State the lease carries. ``latencies`` gathers its decisions' latencies over every lease."""

    def __init__(self, spec: RoleSpec, nodes: Sequence[NodeState], lease: Lease, dead: Set[str], latencies: deque,
                 records: int = 0):
        s = spec.scheduler(nodes, records=records)
        s.decision_s = latencies
        s.interp.state.update(lease.state)
        for n in s.nodes:
            n.alive = n.alive and n.id not in dead and n.id not in lease.dead
        self.sched: Scheduler = s
        self.granted_by = lease.incarnation

    def take(self, undecided: Sequence[TaskState], running: Sequence[TaskState], now: float) -> List[TaskState]:
        """Start deciding: this process's undecided tasks (the selector leases only with nothing pending or
        running, so none is there), and its running tasks an incarnation that died decided (their room
        and State are here now). Returns what is decided at once."""
        for t in undecided:
            self.sched.add(t, now)
        self.sched.adopt(list(running), dispatch_hooks=True, now=now)
        return self.sched.decide(now)

    def submit(self, tasks: Sequence[TaskState], now: float) -> List[TaskState]:
        if len(tasks) == 1:
            return self.sched.add_and_decide(tasks[0], now)
        for t in tasks:
            self.sched.add(t, now)
        return self.sched.decide(now)

    def finished(self, ids: Sequence[str], now: float) -> List[TaskState]:
        self.sched.finish_all(ids, now)
        return self.sched.decide(now)

    def hand_back(self, with_pending: bool) -> Tuple[List[TaskState], Handback]:
        """Stop deciding: the pending tasks (``with_pending``; else they stay behind, cancelled) and the
        handback -- State, the running tasks, and who granted the lease."""
        pending = self.sched.cancel_pending() if with_pending else []
        return pending, Handback(self.sched.release_running(), state=copy_state(self.sched.interp.state),
                                 granted_by=self.granted_by)

    def mark_dead(self, node_id: str) -> None:
        self.sched.by_id[node_id].alive = False

    def explain(self, task_id: str, now: float) -> Optional[dict]:
        return explain_pending(self.sched, task_id, now) or explain_placed(self.sched.records or (), task_id)

    @property
    def pending(self) -> int:
        return self.sched.pending

    def export(self) -> dict:
        return self.sched.export()
