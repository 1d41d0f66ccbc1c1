"""Discrete-event simulation of the cluster model: the ideal scheduler's replay and the plan simulator.

* :mod:`~ray_adaptive.sim.model` -- the cluster and scheduling model (nodes, tasks, their lives);
* :mod:`~ray_adaptive.sim.events`, :mod:`~ray_adaptive.sim.cluster` -- the event loop and the nodes on it;
* :mod:`~ray_adaptive.sim.ideal`, :mod:`~ray_adaptive.sim.replay` -- the ideal scheduler, end to end; its
  preemptions: :mod:`~ray_adaptive.sim.preemption` (the rules), a plan's: :mod:`~ray_adaptive.sim.plan_preemption`;
* :mod:`~ray_adaptive.sim.plan_sim` -- a lowered plan's schedulers, with their latencies: its roles hosted by
  :mod:`~ray_adaptive.sim.hosts` (on :mod:`~ray_adaptive.sim.servers`, :mod:`~ray_adaptive.sim.sync_rounds`),
  the run's books in :mod:`~ray_adaptive.sim.bookkeeping`, a busy start in :mod:`~ray_adaptive.sim.prefill`,
  a plan handed over in :mod:`~ray_adaptive.sim.live_switch`;
* :mod:`~ray_adaptive.sim.timeline`, :mod:`~ray_adaptive.sim.adaptive` -- a run epoch by epoch, and the
  adaptive controller switching its plan live (:meth:`~ray_adaptive.sim.plan_sim.PlanSim.switch`);
* :mod:`~ray_adaptive.sim.metrics` -- goodput, fairness, the competitive ratio.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.workload import scenario_from_dict
    >>> sc = scenario_from_dict({"nodes": [{"id": "n0"}, {"id": "n1"}], "tasks": [{"id": "t0", "arrival": 0.0}]})
    >>> [d.node for d in replay(load_policy("least_loaded"), sc).decisions]
    ['n0']
"""

from ray_adaptive.sim.events import EventLoop
from ray_adaptive.sim.ideal import Decision, IdealScheduler
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.sim.replay import Replay, ReplayResult, replay

__all__ = ["EventLoop", "Decision", "IdealScheduler", "Replay", "ReplayResult", "replay", "simulate"]
