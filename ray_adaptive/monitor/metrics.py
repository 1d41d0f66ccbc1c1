"""The figures an operator scrapes: Ray metrics (``ray.util.metrics``) at each node's Prometheus endpoint.

Each submitting process exports its own (Prometheus sums them by tags):

================================================  ==========  ==============  =====================================
metric                                            kind        tags            what
================================================  ==========  ==============  =====================================
``ray_adaptive_decisions_total``                  counter     policy, group   tasks placed
``ray_adaptive_drops_total``                      counter     policy, group   tasks dropped at their deadline
``ray_adaptive_finishes_total``                   counter     policy, group   tasks finished
``ray_adaptive_pending``                          gauge       policy, group   tasks waiting for a decision
``ray_adaptive_decision_latency_s``               histogram   policy          decision latency (this process's)
``ray_adaptive_arrival_rate``                     gauge       policy          tasks/s arriving (last 10 s)
``ray_adaptive_goodput_measured``                 gauge       policy          tasks/s finished (last 10 s)
``ray_adaptive_goodput_estimated``                gauge       policy          the compiler's estimate for the plan
                                                                              in force at the measured load
``ray_adaptive_plan_in_force``                    gauge       policy, plan    1 for the plan in force, 0 before
``ray_adaptive_switches_total``                   counter     policy          live plan switches
``ray_adaptive_preemptions_total``                counter     policy          runs of this process's tasks stopped
                                                                              for a preemption (they ran again)
``ray_adaptive_preempted_wasted_seconds_total``   counter     policy          seconds those runs had run, from their
                                                                              dispatch to their stop (work lost)
``ray_adaptive_outstanding``                      gauge       policy          tasks queued or running on nodes
``ray_adaptive_actors_alive``                     gauge       policy          the policy's actors alive (placed,
                                                                              not ended)
``ray_adaptive_actor_arrivals_total``             counter     policy          actor creation requests
``ray_adaptive_actor_placements_total``           counter     policy          actor placements (an actor that lost
                                                                              its node is placed again: one more)
``ray_adaptive_actor_ends_total``                 counter     policy, kind    actor placements ended: ``dead``
                                                                              (killed, exited, owner or node gone),
                                                                              ``moved`` (its node died; restarted),
                                                                              ``released`` (``ra.shutdown()`` here)
================================================  ==========  ==============  =====================================

The preemption counters (issue 39; docs/language.md, *On Ray*) count the
runs this process stopped when its selector asked (the seconds from its
own dispatch of each). The actor metrics (issue 38; docs/runtime.md,
*Actors*) appear once this process has submitted an actor of the policy;
an actor is also a task to the other counters (a decision at its
placement, a finish at its end).
``group`` is the runtime's ``group_by`` field (``tenant`` by default). Ray
exports them with its own ``ray_`` prefix (``ray_ray_adaptive_pending``);
``examples/grafana/ray_adaptive.json`` plots them next to Ray's panels.
Counters advance by what changed since the last export, so nothing is
counted on the submission path.
"""

from __future__ import annotations

from typing import Dict, Optional

__all__ = ["RayMetrics", "LATENCY_BOUNDARIES"]

LATENCY_BOUNDARIES = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0]


class RayMetrics:
    """This process's ``ray_adaptive_*`` metrics for one policy, set by :meth:`export` (every ``metrics_every_s``)."""

    SAMPLE = 500  # decision latencies observed per export, at most

    def __init__(self, policy: str):
        from ray.util import metrics

        g, p = ("policy", "group"), ("policy",)
        self.tag = {"policy": policy}
        self.counters = {k: metrics.Counter(f"ray_adaptive_{k}_total", f"tasks {what}", g)
                         for k, what in (("decisions", "placed"), ("drops", "dropped at their deadline"),
                                         ("finishes", "finished"))}
        self.pending = metrics.Gauge("ray_adaptive_pending", "tasks waiting for a decision", g)
        self.latency = metrics.Histogram("ray_adaptive_decision_latency_s", "decision latency (s)",
                                         boundaries=LATENCY_BOUNDARIES, tag_keys=p)
        self.gauges = {k: metrics.Gauge(f"ray_adaptive_{k}", what, p) for k, what in (
            ("arrival_rate", "tasks/s arriving"), ("goodput_measured", "tasks/s finished"),
            ("goodput_estimated", "the compiler's estimated tasks/s for the plan in force"),
            ("outstanding", "tasks queued or running on nodes"))}
        self.plan = metrics.Gauge("ray_adaptive_plan_in_force", "1 for the plan in force", ("policy", "plan"))
        self.switches = metrics.Counter("ray_adaptive_switches_total", "live plan switches", p)
        self.actors_alive = metrics.Gauge("ray_adaptive_actors_alive", "the policy's actors alive", p)
        self.counters.update({f"actor_{k}": metrics.Counter(f"ray_adaptive_actor_{k}_total", what, p) for k, what in (
            ("arrivals", "actor creation requests"), ("placements", "actor placements"))})
        self.counters["actor_ends"] = metrics.Counter("ray_adaptive_actor_ends_total", "actor placements ended",
                                                      ("policy", "kind"))
        self.counters["preemptions"] = metrics.Counter("ray_adaptive_preemptions_total",
                                                       "runs stopped for a preemption", p)
        self.counters["wasted_s"] = metrics.Counter("ray_adaptive_preempted_wasted_seconds_total",
                                                    "seconds the runs stopped for a preemption had run", p)
        self._last: Dict[tuple, float] = {}  # (counter, group or kind) -> value exported
        self._decided = 0  # this process's tasks decided, at the last export
        self._plan: Optional[str] = None
        self._generation = 0

    def _advance(self, counter: str, group: str, value: float, tag: str = "group") -> None:
        delta = value - self._last.get((counter, group), 0)
        if delta > 0:
            self.counters[counter].inc(delta, {**self.tag, tag: group} if tag else self.tag)
            self._last[(counter, group)] = value

    def export(self, monitor, router=None) -> None:
        # one report -- the monitor's counters and rates, with the router's tasks pending per group --
        # and no pass over the monitor's records: this runs on the router's thread every period
        load = router.report() if router is not None else monitor.load()
        for group, c in load["groups"].items():
            self._advance("decisions", group, c["decided"])
            self._advance("drops", group, c["dropped"])
            self._advance("finishes", group, c["finished"])
        self.gauges["arrival_rate"].set(load["arrival_rate_per_s"], self.tag)
        self._advance("preemptions", "", load.get("preemptions", 0), tag="")  # (issue 39; absent: none yet)
        self._advance("wasted_s", "", load.get("wasted_s", 0.0), tag="")
        self.gauges["goodput_measured"].set(sum(c.get("goodput_per_s", 0.0) for c in load["groups"].values()), self.tag)
        if monitor.estimate is not None:
            self.gauges["goodput_estimated"].set(monitor.estimate, self.tag)
        if router is None:
            return
        actors = load.get("policy_actors")  # (the router's report: this process's actors of the policy)
        if actors:
            self.actors_alive.set(actors["alive"], self.tag)
            self._advance("actor_arrivals", "", actors["arrivals"], tag="")
            self._advance("actor_placements", "", actors["placements"], tag="")
            for kind, n in actors["ended"].items():
                self._advance("actor_ends", kind, n, tag="kind")
        for group, c in load["groups"].items():
            self.pending.set(c.get("pending", 0), {**self.tag, "group": group})
        self.gauges["outstanding"].set(sum(router.outstanding().values()), self.tag)
        # As many of the newest latencies as this process had tasks decided since the last export
        # (the scheduler keeps a ring, whose length stops telling what is new once it is full), at
        # most SAMPLE: a histogram needs a sample, not every decision (an observation costs ~15 us).
        decided = sum(c["decided"] for c in load["groups"].values())
        new = min(decided - self._decided, self.SAMPLE)
        if new > 0:
            for v in router.decision_latencies()[-new:]:
                self.latency.observe(v, self.tag)
        self._decided = decided
        plan, generation = router.topology.plan.name, router.topology.generation
        if plan != self._plan:
            if self._plan is not None:
                self.plan.set(0, {**self.tag, "plan": self._plan})
            self.plan.set(1, {**self.tag, "plan": plan})
            self._plan = plan
        if generation > self._generation:
            self.switches.inc(generation - self._generation, self.tag)
            self._generation = generation
