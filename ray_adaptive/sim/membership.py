"""A cluster that changes size during a run: nodes joining and leaving at given times.

A run's cluster holds every node that is ever in it (the scenario's, and
each :class:`NodeEvent`'s joining ones); at any time some of them are
*members* -- the nodes of the plan in force. A node that is not a member has
no slots: no scheduler sees room on it, none places a task there.

* **A node joins** at its event's time: it becomes a member with its
  executors and queue, empty.
* **A node leaves** by being *drained*: it takes no new task from then on,
  the tasks queued and running on it run to their end, and it is gone when
  empty. The simulator has no node-loss model (a task never dies with its
  node here), and draining is what a scale-in does: Ray's autoscaler removes
  only idle nodes, and ``ray drain-node`` / KubeRay's scale-down drain them
  first. (A node lost with tasks on it is the runtime's business: Ray
  re-runs them, and the runtime moves the lost node's slot, see
  ``docs/runtime.md``; nothing of that changes which plan is best.)
* **Each event is a live switch** (:meth:`~ray_adaptive.sim.plan_sim.PlanSim.switch`)
  to the plan in force on the new member set -- as the runtime makes nodes
  join and leave: the same plan with a new node list. Its roles are hosted
  again for that many nodes (a decentralized plan has one scheduler per
  member; its costs, lowered for the new count when the run is given a way
  to, ``relower``), from the exact State, with the switch's pause.

Example:
    >>> from ray_adaptive.workload.specs import NodeSpec
    >>> evs = resize_steps([(1.0, +2), (2.0, -1)], [NodeSpec("n0"), NodeSpec("n1")])
    >>> [(e.time, [n.id for n in e.join], list(e.leave)) for e in evs]
    [(1.0, ['n2', 'n3'], []), (2.0, [], ['n3'])]
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

from ray_adaptive.workload.specs import NodeSpec

__all__ = ["NodeEvent", "resize_steps", "check_events", "RESIZE_PAUSE_S"]

#: A node event's pause unless one is given: it is a live switch (the runtime's own pause is of this order,
#: see :data:`ray_adaptive.sim.adaptive.SWITCH_PAUSE_S`).
RESIZE_PAUSE_S = 0.1


@dataclass(frozen=True)
class NodeEvent:
    """At ``time`` (simulated seconds) the nodes ``join`` enter the cluster and those named in ``leave``
    are drained (see the module doc)."""

    time: float
    join: tuple[NodeSpec, ...] = ()
    leave: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.time, bool) or not isinstance(self.time, (int, float)) or not (0 <= self.time < math.inf):
            raise ValueError(f"a node event's time must be a number of seconds >= 0, found {self.time!r}")
        object.__setattr__(self, "join", tuple(self.join))
        object.__setattr__(self, "leave", tuple(self.leave))
        if not self.join and not self.leave:
            raise ValueError(f"the node event at {self.time} s neither adds nor removes a node")

    def as_dict(self) -> dict:
        return {"time": self.time, "join": [n.id for n in self.join], "leave": list(self.leave)}


def resize_steps(steps: Sequence[tuple[float, int]], nodes: Sequence[NodeSpec]) -> tuple[NodeEvent, ...]:
    """Node events from ``(time, +k / -k)`` steps on a cluster that starts as ``nodes``: +k nodes join,
    each a copy of the last node (its executors, queue, resources, fields) named ``n<i>`` after the
    highest ``n<i>`` so far; -k drains the k nodes that joined last (the newest first, as an autoscaler
    gives back what it added). The cluster never drops below one node."""
    members = [n for n in nodes]
    if not members:
        raise ValueError("resize_steps needs the cluster's first nodes")
    template = members[-1]
    taken = {n.id for n in members}
    counter = len(members)
    out = []
    last = -math.inf
    for time, k in steps:
        if isinstance(k, bool) or not isinstance(k, int) or k == 0:
            raise ValueError(f"a resize step is (time, +k or -k nodes), k a nonzero int; found ({time!r}, {k!r})")
        if time < last:
            raise ValueError(f"resize steps must be in time order: {time} s comes after {last} s")
        last = time
        if k > 0:
            join = []
            for _ in range(k):
                while f"n{counter}" in taken:
                    counter += 1
                spec = dataclasses.replace(template, id=f"n{counter}")
                taken.add(spec.id)
                join.append(spec)
            members += join
            out.append(NodeEvent(float(time), tuple(join)))
        else:
            if -k >= len(members):
                raise ValueError(f"the step at {time} s removes {-k} of the cluster's {len(members)} nodes; "
                                 f"at least one must stay")
            gone, members = members[k:], members[:k]
            out.append(NodeEvent(float(time), leave=tuple(n.id for n in reversed(gone))))
    return tuple(out)


def check_events(events: Sequence[NodeEvent], nodes: Sequence[NodeSpec]) -> list[NodeSpec]:
    """Every node that joins, in order (the run's cluster is ``nodes`` then these); an error for an
    event out of time order, a join of a member, a leave of a node that is not one, or a cluster left
    with no node."""
    members = {n.id for n in nodes}
    known = {n.id: n for n in nodes}
    joined: list[NodeSpec] = []
    last = -math.inf
    for e in events:
        if not isinstance(e, NodeEvent):
            raise TypeError(f"node events must be NodeEvent records, found {e!r}")
        if e.time < last:
            raise ValueError(f"node events must be in time order: {e.time} s comes after {last} s")
        last = e.time
        for spec in e.join:
            if spec.id in members:
                raise ValueError(f"node {spec.id!r} joins at {e.time} s but is in the cluster already")
            if spec.id in known and known[spec.id] != spec:
                raise ValueError(f"node {spec.id!r} joins again at {e.time} s with another spec than before")
            members.add(spec.id)
            if spec.id not in known:
                known[spec.id] = spec
                joined.append(spec)
        for nid in e.leave:
            if nid not in members:
                raise ValueError(f"node {nid!r} leaves at {e.time} s but is not in the cluster then")
            members.discard(nid)
        if not members:
            raise ValueError(f"the node events at {e.time} s leave the cluster with no node")
    return joined
