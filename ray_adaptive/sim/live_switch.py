"""A live switch in a plan simulation: the run handed over to another plan's schedulers, as the runtime's is.

* **Freeze and retire.** The schedulers in force stop; what they hold -- a
  decision not yet in effect (picked and being sent, or forwarded and not
  placed), finish notifications and syncs not yet applied -- is dropped
  with them: the runtime undoes such a decision, and the State handed over
  already counts the rest.
* **The State.** Every new scheduler starts from the exact State -- the
  truth's: the OnArrival of every undecided task, the OnDispatch of every
  task on a node, the OnFinish of every task gone.
* **The tasks.** Undecided ones go, in arrival order, to the role where
  tasks enter under the new plan (no second OnArrival); one whose dispatch
  deadline passed while a decision on it was in flight is dropped now.
  Tasks on nodes keep running; their finishes go to the new plan's roles
  that handle finishes (OnFinish applied to the State that counts them); a
  forwarding selector counts them as holding slots.
* **The pause.** No scheduler works for ``pause_s``: arrivals and finishes
  wait in inboxes.

The cluster, the clock, deadlines, the truth and the metrics go on: one
run, several plans (see :mod:`ray_adaptive.runtime.switch` for the runtime's).
"""

from __future__ import annotations

import math

from ray_adaptive.plan import LoweredPlan
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.sim.events import DECIDE

__all__ = ["switch", "check_switch"]


def check_switch(sim, plan: LoweredPlan, now: float, pause_s: float, overloaded: str) -> None:
    """Refuse a switch of ``sim`` that cannot be made (``overloaded``: why ``plan`` could not run, or "")."""
    if plan.policy.name != sim.plan.policy.name:
        raise ValueError(f"a run of policy {sim.plan.policy.name!r} cannot switch to a plan of "
                         f"{plan.policy.name!r}")
    if overloaded:
        raise ValueError(f"plan {plan.name!r} cannot run: {overloaded}")
    if isinstance(pause_s, bool) or not (isinstance(pause_s, (int, float)) and 0 <= pause_s < math.inf):
        raise ValueError(f"pause_s must be a number of seconds >= 0, got {pause_s!r}")
    if now < sim.loop.now or sim.loop.peek() < now:
        raise ValueError(f"switch at {now} s: the run is at {sim.loop.now} s with events due before; "
                         f"advance it to {now} s first")


def switch(sim, plan: LoweredPlan, now: float, pause_s: float) -> dict:
    """Hand ``sim`` (a :class:`~ray_adaptive.sim.plan_sim.PlanSim`, checked by :func:`check_switch`) over
    to ``plan`` at ``now`` (see the module doc); what was handed over."""
    books = sim.books
    books.loop.now = now
    old, before = sim.servers(), sim.plan.name
    sim.generation += 1
    for s in old:
        s.retired = True
        s.name = f"{s.name}@{sim.generation - 1}"  # (its counters stay in the run's, beside the new ones')
    sim.retired += old
    undecided = books.hand_over()
    recorded = books.record_loads
    sim.install(plan, copy_state(books.truth.state))
    if books.record_loads and not recorded:  # (loads were not logged under a plan without cached views)
        books.history.reset()
    on_nodes = [t for node in books.nodes for t in (*node.running, *node.waiting)]
    if books.forwarder is not None:
        books.forwarder.outstanding = len(on_nodes)  # (each holds a slot of the pool until it leaves)
    for i, t in enumerate(on_nodes):
        for host in books.hosts:  # (the schedulers' server told of it, if they are told, else the selector)
            s = host.told_of(t, i)
            if s is not None:
                books.owner[t] = s
    dropped = 0
    entry = books.entry
    for t in sorted(undecided, key=lambda x: (x.arrival, x.id)):
        if books.deadline == "dispatch" and now >= t.spec.deadline:
            books.timeout(t)
            dropped += 1
        else:
            entry.deliver(entry.entry_for(t), t, arrived=False)
    books.frozen = pause_s > 0
    if books.frozen:
        books.loop.at(now + pause_s, DECIDE, sim.resume, sim.generation)
    else:
        sim.resume(sim.generation)
    return {"time": now, "from": before, "to": plan.name, "pause_s": pause_s, "undecided": len(undecided) - dropped,
            "on_nodes": len(on_nodes), "dropped": dropped}
