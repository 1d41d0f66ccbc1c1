"""Who holds a task while every node is full: the scheduler (the cluster model's gate) or Ray.

Under the cluster model a scheduler places a task only on a node with room
(queued + running < executors + queue); the rest wait in its pending queue,
where the policy orders them, and are decided when room appears. That gate
costs throughput even with no policy at all (Ray's owner returns a leased
worker whenever its queue of a task shape runs dry, and shallow node queues
run dry often), and it makes a ``.remote()`` loop wait for room in the caller.

For some policies the gate decides nothing the policy cares about. When

* Score reads nothing of the task (the compiler's split is one-sided,
  ``node``): every task scores alike, so tasks are decided in arrival order
  whoever holds them -- there is no backlog for the policy to order; and
* Score's node part *strictly increases* with the node's load (it reads
  ``get_load(node)`` through sums, positive scalings and
  subtractions of load-free terms only): with every node full, the next
  task goes to the node the policy ranks first by the load it would have,
  so overflow spreads as the policy spreads tasks (least_loaded),

a task can be decided at once and launched with its node's slot resource,
and Ray's own queue holds it (behind that slot, whose capacity is
``executors + queue``) until the node has room: ``hold="ray"``. A node with
room is still preferred exactly as under the gate; only the decision for a
task arriving at a full cluster is made early (on the load it sees) instead
of when a node frees.

Policies outside the proof can ask for it all the same (``ra.start(...,
hold="ray")``): round_robin keeps its turns (a node-only Score whose order
comes from State); fifo and bin_pack would send every overflowing task to
their first choice (node 0, the busiest node) -- their node choice is only
right among nodes with room -- and DRF orders a backlog that Ray's queue
would serve in arrival order.

A task with a ``deadline_s`` always waits for room under the scheduler: the
deadline is a placement deadline, which a task placed at once could never miss.
"""

from __future__ import annotations

from typing import Optional, Tuple

from ray_adaptive.dsl import ir
from ray_adaptive.plan.scoring import ScoreSplit

__all__ = ["HOLDS", "ray_may_hold", "resolve_hold"]

HOLDS = ("auto", "caller", "ray")

_UP, _FLAT = "up", "flat"  # strictly increasing in load / load-free (None: neither, or unknown)


def _reads_load(e: ir.Expr) -> bool:
    return any(isinstance(x, ir.Call) and x.fn == "get_load" for x in ir.walk(e))


def _load_trend(e: ir.Expr) -> Optional[str]:
    """``"up"`` if ``e`` strictly increases with the node's load, ``"flat"`` if it does not read it."""
    if not _reads_load(e):
        return _FLAT
    if isinstance(e, ir.Call) and e.fn == "get_load":
        return _UP
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        left, right = _load_trend(e.left), _load_trend(e.right)
        if e.op == "-":
            right = _FLAT if right == _FLAT else None  # (subtracting load turns the trend)
        if left == _UP and right in (_UP, _FLAT) or left == _FLAT and right == _UP:
            return _UP
        return None
    if isinstance(e, ir.Binary) and e.op in ("*", "/"):
        const, other = (e.left, e.right) if isinstance(e.left, ir.Const) else (e.right, e.left)
        if e.op == "/" and const is not e.right:
            return None  # c / load decreases
        if isinstance(const, ir.Const) and isinstance(const.value, (int, float)) and const.value > 0:
            return _load_trend(other)
        return None
    return None


def ray_may_hold(split: Optional[ScoreSplit]) -> Tuple[bool, str]:
    """Whether the policy whose Score the compiler split as ``split`` can leave tasks to Ray's queue
    when every node is full (see the module doc), and why."""
    if split is None or split.op != "node" or split.node is None:
        return False, "Score reads the task: a backlog is for the policy to order"
    if _load_trend(split.node) != _UP:
        return False, "Score's node part does not strictly increase with the node's load"
    return True, "Score reads no task and strictly increases with the node's load"


def resolve_hold(hold: str, split: Optional[ScoreSplit]) -> Tuple[bool, str]:
    """``hold`` (one of :data:`HOLDS`) for a policy split as ``split``: (Ray holds overflow?, why)."""
    if hold not in HOLDS:
        raise ValueError(f"hold must be one of {', '.join(map(repr, HOLDS))}, got {hold!r}")
    if hold == "caller":
        return False, "asked: the scheduler holds tasks until a node has room"
    if hold == "ray":
        return True, "asked: Ray's queue holds tasks behind the slot resources"
    ok, why = ray_may_hold(split)
    return ok, ("Ray's queue holds tasks when every node is full: " if ok else "the scheduler holds tasks: ") + why
