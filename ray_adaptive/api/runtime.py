"""A running policy as one process sees it: :class:`PolicyRuntime`."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import ray

from ray_adaptive.control_loop import ControlLoop
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.monitor import Monitor, percentiles
from ray_adaptive.plan import Plan
from ray_adaptive.runtime import background
from ray_adaptive.runtime.actor_life import placed_actor_task_id, release_actors, remove_bindings_of
from ray_adaptive.runtime.binding import SlotBinding
from ray_adaptive.runtime.job_watch import JobWatch
from ray_adaptive.runtime.demand import DemandReporter
from ray_adaptive.runtime.node_watch import NodeWatch
from ray_adaptive.runtime.router import Router
from ray_adaptive.runtime.spare import Spares
from ray_adaptive.runtime.switch import SwitchNotStarted, switch
from ray_adaptive.runtime.topology import NAMESPACE, Topology, actor_name
from ray_adaptive.workload.specs import TaskSpec

if TYPE_CHECKING:
    from ray_adaptive.compiler import Analysis

__all__ = ["PolicyRuntime"]

log = logging.getLogger("ray_adaptive")


class PolicyRuntime:
    """A policy running on the connected cluster (see :func:`ray_adaptive.start`), as this process sees it.

    ``binding`` is None in a process that joined a runtime another one (or the policy service) owns.
    ``plan`` / ``why``: the plan in force and why it was chosen; ``history``: every live switch
    this process made (see :meth:`switch`); ``holding``: who holds tasks while every node is
    full, and why (``hold=`` of :func:`~ray_adaptive.start`); ``bound``: the Task fields the
    operator bound to this process's job, and their values (see :mod:`ray_adaptive.runtime.tenancy`).
    """

    def __init__(self, policy: Policy, analysis: "Optional[Analysis]", why: str, router: Router,
                 binding: Optional[SlotBinding] = None, holding: str = "", bound: Optional[Dict[str, Any]] = None):
        self.policy = policy
        self.why = why
        self.router = router
        self.binding = binding
        self.holding = holding
        self.bound: Dict[str, Any] = dict(bound or {})
        self.control_loop: Optional[ControlLoop] = None  # plan="adaptive": the controller's loop
        self.jobs: Optional[JobWatch] = None  # the owner's watch over the attached jobs
        self.nodes: Optional[NodeWatch] = None  # the owner's watch over the cluster's nodes
        self.demand: Optional[DemandReporter] = None  # the owner's report of the held backlog to the autoscaler
        self.node_options: tuple = (None, 2)  # (executors, queue) of start(): what a node that joins gets
        self._analysis = analysis  # (the compiler's analysis of the policy, for switches: the starting process's)
        self._history: List[dict] = []
        self._switching = threading.Lock()
        self._owned: Optional[Topology] = None  # the topology this process built last (it owns its actors)
        # processes a switch took for dead that were still registered -> when (this process's monotonic clock)
        self._late: Dict[str, float] = {}
        self.spares = Spares()  # the owner's: the next switch's actors, started ahead (see runtime.spare)

    def __repr__(self) -> str:
        return f"PolicyRuntime({self.name!r}, plan={self.plan.name!r})"

    @property
    def plan(self) -> Plan:
        """The plan in force (as this process's router follows it)."""
        return self.topology.plan.plan

    @property
    def topology(self) -> Topology:
        """The plan in force's actors, as this process's router follows them."""
        return self.router.topology

    @property
    def name(self) -> str:
        return self.policy.name

    def _live(self) -> None:
        """Raise at once if this runtime can reach no actor any more: shut down here, or Ray went away."""
        if self.router.closed:
            gone = "Ray was shut down under it" if not ray.is_initialized() else "it is shut down in this process"
            raise RuntimeError(f"policy {self.name!r}: {gone} (ra.start or attach again)")

    @property
    def slots(self) -> Dict[str, str]:
        return self.topology.slots

    @property
    def monitor(self) -> Monitor:
        """The :class:`~ray_adaptive.monitor.Monitor` of this process's submissions."""
        assert self.router.monitor is not None  # (every runtime's router has one)
        return self.router.monitor

    def stats(self) -> dict:
        """Counts so far (this process's submissions: submitted = dispatched + dropped + failed + pending;
        ``dropped_placed_late``: of the dropped, those whose placement reached this process after their
        deadline, ``dropped_launched_late``: those placed in time whose launch here came after it -- see
        :class:`~ray_adaptive.errors.PlacementDeadlineExceeded`) and decision latency percentiles (seconds)."""
        s = self.router.stats
        p50, p99 = percentiles(self.router.decision_latencies(), (0.5, 0.99))
        return {"plan": self.plan.name, "architecture": self.plan.architecture,
                "held_by": "ray" if self.topology.overflow else "caller", "submitted": s.submitted,
                "dispatched": s.dispatched, "finished": s.finished, "dropped": s.dropped,
                "dropped_placed_late": s.dropped_placed_late, "dropped_launched_late": s.dropped_launched_late,
                "failed": s.failed, "pending": self.router.pending, "decision_p50_s": p50, "decision_p99_s": p99}

    def export(self) -> dict:
        """Queues and State of every scheduler this process can reach: what a replacing plan needs."""
        self._live()
        return {"plan": self.plan.name, "caller": self.router.export(), **self.topology.export()}

    @property
    def history(self) -> List[dict]:
        """Every live switch made from this process: when, from, to, why, the estimates that decided it,
        how long processes were frozen (``freeze_s``) and the pause this process's callers saw
        (``pause_s``: its last decision under the old plan to its first under the new; None while
        no task waited for it). A switch whose actors could not start, twice, is rolled back before
        any process stopped deciding: its entry has ``rolled_back`` (why) and the plan stays."""
        pauses = dict(self.router.gate.pauses)
        return [{**e, "pause_s": pauses.get(e["generation"])} for e in self._history]

    @property
    def evaluations(self) -> list:
        """The adaptive controller's recent verdicts (empty unless ``plan="adaptive"``)."""
        return list(self.control_loop.evaluations) if self.control_loop is not None else []

    def switch(self, plan: Any, reason: str = "forced", *, estimates: Optional[dict] = None,
               measured: Optional[dict] = None, _on_phase=None) -> dict:
        """Replace the plan in force by ``plan`` (a :class:`~ray_adaptive.plan.Plan`, or anything
        :func:`~ray_adaptive.start` takes as a plan) live: no task lost, none run twice; running tasks
        finish under the new plan. The owner switches: the process that started the runtime, or the
        policy service (any attached process's switch is made by the service). Returns the entry
        appended to :attr:`history`.

        Example::

            rt = ra.start("drf_lb", plan="centralized")
            ...
            rt.switch("hybrid")
        """
        # (the compiler -- and the simulator it stands on -- is imported only where a plan is chosen: a
        # process that joins a runtime, a task submitting policy tasks, never pays for it)
        from ray_adaptive.compiler import lower, select_plan

        self._live()
        if self.binding is None or self._analysis is None:
            service = self._service()
            if service is None:
                raise RuntimeError(f"only the process that started policy {self.name!r} can switch its plan")
            return ray.get(service.switch.remote(plan, reason), timeout=600)
        with self._switching:
            if self.router.closed:
                raise RuntimeError(f"policy {self.name!r} is shut down: there is no plan to switch")
            live = [n for n in self.topology.nodes if n.alive]
            chosen, why = select_plan(self.policy, plan, cluster=live, queue=self.node_options[1],
                                      analysis=self._analysis)
            if chosen.name == self.plan.name:
                raise ValueError(f"plan {chosen.name!r} is already in force")
            entry = self._replace(lower(chosen, self._analysis), reason, estimates=estimates, measured=measured,
                                  on_phase=_on_phase)
            if "rolled_back" not in entry:
                self.why = f"switched ({reason}): {why}"
            self.publish_info()
        if self.control_loop is not None and "rolled_back" not in entry:
            self.control_loop.switched(chosen.name)
        return entry

    def evict(self, job: str, clients: List[str]) -> Optional[dict]:
        """Take the processes of Ray job ``job``, which ended, out of the runtime (the owner's
        :class:`~ray_adaptive.runtime.job_watch.JobWatch` calls it): they are unregistered at once (a
        switch in progress stops waiting for them), then a live switch to the plan in force rebuilds
        the State from the remaining processes' tasks -- the OnDispatch of each running one, the
        OnArrival of each undecided one -- so that what the job's tasks held (their OnDispatch: Ray
        killed them with their owner) leaves with it, and its undecided tasks are dropped as at a
        deadline. Returns the entry appended to :attr:`history` (None: shut down meanwhile)."""
        store = self.topology.store
        ray.get([store.leave.remote(c) for c in clients], timeout=30)
        with self._switching:
            if self.router.closed:
                return None
            reason = (f"job {job} ended: its {len(clients)} process(es) left, the State rebuilt from the "
                      f"remaining jobs' tasks")
            entry = self._replace(self.topology.plan, reason, rebuild=True)
            self.publish_info()
        try:  # (its actors died with it: the bindings its thread would have removed)
            remove_bindings_of(self.name, clients)
        except Exception:  # noqa: BLE001  (left on the nodes: the eviction itself is done)
            log.warning("policy %r: removing the actor bindings of job %s's processes failed", self.name, job,
                        exc_info=True)
        if "rolled_back" in entry:  # (the job watch tries again: the job's share is still in the State)
            raise RuntimeError(f"policy {self.name!r}: evicting job {job} failed: {entry['rolled_back']}")
        return entry

    def follow_cluster(self) -> Optional[dict]:
        """Owner: put the cluster's live nodes in force if they changed (the owner's
        :class:`~ray_adaptive.runtime.node_watch.NodeWatch` calls it every 0.5 s). Nodes that joined get a
        slot resource and their ``Node:`` fields from their Ray labels, and a node that left is marked
        so, by a live switch to the plan in force on the new node list (see
        :mod:`ray_adaptive.runtime.node_watch`). Returns the entry appended to :attr:`history`, or None if
        nothing changed."""
        from ray_adaptive.api.cluster import alive_node_ids, joined_nodes
        from ray_adaptive.plan.room import slots_of

        assert self.binding is not None  # (the owner's)
        with self._switching:
            if self.router.closed:
                return None
            known = self.topology.nodes
            alive = alive_node_ids()
            left = {n.id for n in known if n.alive and n.id not in alive}
            joined = joined_nodes(self.policy, known, *self.node_options)
            if not left and not joined:
                self.spares.keep(self.topology)
                return None
            self.binding.add({n.id: slots_of(n.executors, n.queue) for n in joined})
            nodes = [dataclasses.replace(n, alive=False) if n.id in left else n for n in known] + joined
            slots = {**self.topology.slots, **{n.id: self.binding.slots[n.id].resource for n in joined}}
            parts = ([f"{len(joined)} node(s) joined ({', '.join(n.id[:12] for n in joined)})"] if joined else []) + \
                    ([f"{len(left)} left ({', '.join(sorted(i[:12] for i in left))})"] if left else [])
            entry = self._replace(self.topology.plan, " and ".join(parts), nodes=nodes, slots=slots)
            self.publish_info()
        if "rolled_back" in entry:  # (the watch tries again at its next look: the nodes are not in force)
            raise RuntimeError(f"policy {self.name!r}: taking up the cluster's nodes failed: {entry['rolled_back']}")
        return entry

    def rebuild_late(self) -> Optional[dict]:
        """Owner: rebuild the State once a process a switch took for dead is heard from again (the owner's
        job watch calls it every 0.5 s). Such a process -- stopped, or too slow to freeze within the ack
        timeout -- missed the handover: a decentralized replica's last changes (the OnDispatch of tasks it
        just placed: it pushes when tasks wait or finish) never reached the State the new plan started
        from, and it resumes with those tasks running, so their OnFinish would take from the State what
        was never added. A live switch to the plan in force with ``rebuild`` recomputes the State from
        every process's tasks. A process that left or was evicted meanwhile needs none (its eviction
        rebuilt it). Returns the entry appended to :attr:`history`, or None."""
        if not self._late or self.router.closed:
            return None
        quiet = background.get(self.topology.store.quiet_for.remote(list(self._late)), timeout=30)
        now = time.monotonic()
        back = [c for c, since in self._late.items() if c in quiet and quiet[c] < now - since]
        for c in [c for c in self._late if c not in quiet]:
            del self._late[c]
        if not back:
            return None
        with self._switching:
            if self.router.closed:
                return None
            reason = (f"{len(back)} process(es) a switch took for dead live on: the State rebuilt from every "
                      f"process's tasks")
            entry = self._replace(self.topology.plan, reason, rebuild=True)
            if "rolled_back" not in entry:  # (else tried again at the next look)
                for c in back:
                    if self._late.get(c, 0.0) < now:  # (unless this very rebuild took it for dead again)
                        self._late.pop(c, None)
            self.publish_info()
        return entry

    def _replace(self, lowered: Any, reason: str, *, rebuild: bool = False, estimates: Optional[dict] = None,
                 measured: Optional[dict] = None, on_phase=None, nodes=None, slots=None) -> dict:
        """Put ``lowered`` in force by a live switch (holds ``_switching``); the entry for :attr:`history`.
        A switch whose actors do not start (a node left under one) is tried once more on the nodes left;
        failing again, it is rolled back -- nothing had changed -- and the entry says so (``rolled_back``)."""
        before, start = self.plan.name, time.time()
        for attempt in (1, 2):
            try:
                spare = self.spares.take(self.topology.generation + 1) if attempt == 1 else None
                new, what = switch(self.topology, lowered, on_phase=on_phase, rebuild=rebuild, nodes=nodes, slots=slots,
                                   spare=spare)
                break
            except SwitchNotStarted as err:
                log.warning("ray-adaptive: policy %r: switch to %s, attempt %d: %s", self.name, lowered.name,
                            attempt, err)
                failure = str(err)
        else:
            entry = {"time": start, "generation": self.topology.generation, "from": before, "to": lowered.name,
                     "reason": reason, "estimates": estimates or {}, "measured": measured or {}, "freeze_s": 0.0,
                     "exact": True, "unacked": [], "rolled_back": failure}
            self._history.append(entry)
            return entry
        self._owned = new  # (actors live while their creator holds a handle: this process, until retired)
        for client in what["unacked"]:  # (see rebuild_late)
            self._late.setdefault(client, time.monotonic())
        self.router.wait_generation(new.generation)
        entry = {"time": start, "generation": new.generation, "from": before, "to": lowered.name,
                 "reason": reason, "estimates": estimates or {}, "measured": measured or {},
                 "freeze_s": what["freeze_s"], "freeze_steps_s": what["freeze_steps_s"], "install_s": what["install_s"],
                 "build_s": what["build_s"], "prepare_s": what["prepare_s"], "from_spare": what["from_spare"],
                 "exact": what["exact"], "unacked": what["unacked"]}
        log.info("ray-adaptive: policy %r: %s -> %s in %.3f s: %s", self.name, before, lowered.name,
                 what["freeze_s"], reason)
        self._history.append(entry)
        return entry

    def audit(self, timeout_s: float = 10.0) -> Any:
        """Check the State in force against what the tasks in flight imply -- the initial State plus the
        OnArrival of every undecided task and the OnDispatch of every placed one, over every attached
        process -- and return the verdict (an :class:`~ray_adaptive.runtime.audit.AuditReport`: ``exact``,
        the differences per State variable). See :mod:`ray_adaptive.runtime.audit` and ``ra.audit``."""
        from ray_adaptive.runtime.audit import audit_store

        self._live()
        return audit_store(self.topology.store, timeout_s)

    def _service(self) -> Any:
        """The policy service that owns this runtime, if one does (None: a driver owns it)."""
        try:
            return ray.get_actor(actor_name(self.name, "service"), namespace=NAMESPACE)
        except ValueError:
            return None

    def why_pending(self, task: Any) -> dict:
        """Why a task submitted from this process is not placed yet, in words (``why``) and as data
        (``reason``: no-room, infeasible -- with the policy's FILE:LINE that said inf --, ranked --
        behind how many tasks, its best and the winning scores --, next, deadline, switching).
        ``task``: a task id, or the Future :meth:`PolicyFunction.submit` returned."""
        self._live()
        return self.router.explain(self._task_id(task))

    def why_placed(self, task: Any) -> dict:
        """Where a task of this process was placed and why: its score on each candidate node at the
        moment of the decision and the runner-up (from the deciding scheduler's recent decisions,
        ``decision_records`` of :func:`~ray_adaptive.start`). ``task``: a task id, its Future, or its
        ObjectRef while it runs; an actor's handle while it lives."""
        self._live()
        return self.router.explain(self._task_id(task))

    def _task_id(self, task: Any) -> str:
        if isinstance(task, str):
            return task
        if isinstance(task, Future) and hasattr(task, "task_id"):
            return task.task_id
        found = self.router.task_id_of(task) if isinstance(task, ray.ObjectRef) else placed_actor_task_id(task)
        if found is None:
            raise ValueError(f"{task!r} is not a task of this process that runs now: give its task id or its Future")
        return found

    def publish_info(self, **extra: Any) -> None:
        """Tell the store what operators see of this runtime (``ray-adaptive status``): why this plan,
        the switches, the estimates."""
        self.topology.store.set_info.remote({"why": self.why, "history": self.history[-20:], **extra})

    def pauses(self) -> Dict[int, float]:
        """Generation -> the pause this process's callers saw at that switch: its last decision under
        the old plan to its first under the new one (seconds; only switches while tasks waited)."""
        return {g: p for g, p in self.router.gate.pauses}

    def pause_parts(self) -> Dict[int, Dict[str, float]]:
        """Generation -> where that switch's pause (:meth:`pauses`) went, in seconds: ``idle`` (no
        decision here between the last one and the freeze: e.g. every node was full), ``frozen``
        (the switch itself, freeze to resume; ``handing`` of it: until this process's decider had handed
        over what it held) and ``after`` (resumed to the first decision)."""
        return {g: {"idle": i, "frozen": f, "after": a, "handing": h} for g, i, f, a, h in self.router.gate.pause_parts}

    # -- what the control loop reads (see ray_adaptive.control_loop.ControlledRuntime) -------------
    def cluster_loads(self) -> Dict[str, dict]:
        self._live()
        return background.get(self.topology.store.loads.remote(), timeout=30)  # (the control loop's thread)

    def recorded_tasks(self, since: float) -> List[TaskSpec]:
        return self.monitor.records(since)  # (actors alive too: from ``since`` on, their lifetime so far)

    def clock(self) -> float:
        return self.router.now()

    def show_evaluation(self, evaluation: dict, estimated_goodput: Optional[float]) -> None:
        self.monitor.set_estimate(estimated_goodput)
        self.topology.store.set_info.remote({"evaluation": evaluation})

    def shutdown(self, timeout: float = 60.0) -> None:
        """Cancel undecided tasks, wait up to ``timeout`` s for dispatched ones; the owner also removes
        the actors and the slots. After ``ray.shutdown()`` it only stops this process's threads (a call
        to Ray would start it again; the actors went with the driver that owned them)."""
        if self.jobs is not None:
            self.jobs.stop()
        if self.nodes is not None:
            self.nodes.stop()
        if self.demand is not None:
            self.demand.stop()  # (clears a standing request while Ray is up)
        if self.control_loop is not None:
            self.control_loop.stop()
        release_actors(self.name, join=timeout <= 0)  # (issue 38: its policy actors' OnFinish, see runtime.actor_life)
        self.router.close(timeout)
        if self.binding is not None and ray.is_initialized():
            with self._switching:  # (a look of the node watch that started a spare has ended: none comes)
                self.spares.drop()
            if self._owned is not None:
                self._owned.retire()  # (the handles of the actors the last switch made here: killed as well)
            self.router.topology.close()
            self.binding.close()
