"""The owner's watch over the cluster's nodes: nodes that join enter the policy, nodes that leave are marked.

A runtime's nodes were fixed when it started; an autoscaling cluster (the
cluster launcher, KubeRay) adds and removes nodes all the time. Ray has no
public subscription to node events, so :class:`NodeWatch`, a thread in the
runtime's owner (the process that started it, or the policy service), asks
the GCS for the live nodes every ``PERIOD_S`` and calls ``follow`` -- which
compares them with the plan in force's and, when they differ, gives the
nodes that joined a slot resource and puts the new node list in force by a
live switch to the same plan (see
:meth:`ray_adaptive.api.PolicyRuntime.follow_cluster`). A switch is the one
way every process's decider, the selector and the placement actors take up
a new node set together, State handed over exactly.

The submitting processes still notice a dead node themselves within
``NodeMembership.CHECK_S`` (:mod:`ray_adaptive.runtime.membership`): they
stop deciding for it at once and the owner moves its slot; the watch's
switch only records it in the node list that later processes join with.
"""

from __future__ import annotations

from typing import Any, Callable

from ray_adaptive.runtime.background import Periodic

__all__ = ["NodeWatch"]


class NodeWatch:
    """The thread (see the module doc); ``follow()`` is called every ``PERIOD_S``."""

    PERIOD_S = 0.5

    def __init__(self, follow: Callable[[], Any], name: str, period_s: float = PERIOD_S):
        self._thread = Periodic(follow, f"ra-nodes-{name}", period_s, "following the cluster's nodes")

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop(timeout)
