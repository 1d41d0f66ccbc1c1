"""The State audit: is the State in force what the tasks in flight imply?

A drifted State is invisible: a tenant whose DRF allocation went negative
gets more than its share for the rest of the run, and nothing fails. The
audit rebuilds the State from scratch -- the policy's initial State, plus the
OnArrival of every undecided task and the OnDispatch of every placed one,
over every process attached to the runtime (the recovery a restarted
selector or a ``rebuild`` switch performs) -- and compares it with the State
the runtime decides on now, variable by variable:

* **in force**: the selector's State (the lease holder's, while a lone
  process holds the selector's lease); the store's merged State of the
  replicas for a decentralized plan; both for a hybrid whose placement
  schedulers keep replicas (each variable from where the plan keeps it);
* **implied**: each attached process says which of its tasks are
  undecided and which are placed (and where): the store's ``survey`` asks
  every registered process at once, through the channel ``why`` uses
  (:meth:`~ray_adaptive.runtime.store.StateStore.survey`; each process's
  :class:`~ray_adaptive.runtime.switch.PlanWatcher` answers with
  :func:`tasks_held`).

Which variables are compared. The replay runs the hooks in one order
(arrival, then task id); the runtime ran them in another. Only variables
whose every hook write is a ``+=`` / ``-=`` (merge rule ``add``: the
hooks commute) and those no hook writes are compared; a variable written
otherwise (``max``/``min``/last-writer, e.g. ``home[key] = node.id``) depends
on the order and on finished tasks, and is listed under ``not_compared``
with its rule. A policy whose OnFinish does not undo its OnDispatch (a
counter of every task ever dispatched) keeps history the replay cannot
know: it shows as a difference, as it would be lost by a recovery.

Floats are equal within ``ABS_TOL + REL_TOL * |expected|`` (an allocation
is a sum of ``+=`` and ``-=`` of the same values in another order: equal up
to rounding, ~1e-16 per step); a map key missing on one side reads as the
zero value of the other's (the DSL's rule).

The two sides are read at different moments, so one reading is trusted only
when it is *settled*: every process answered, none is frozen for a live
switch, all follow the generation in force, and the tasks each holds are the
same before and after the State was read. A finish whose OnFinish is on its
way (a notification to the selector, a replica's next push) shows as a
difference for a few milliseconds: the audit reads again until the two
agree or ``timeout_s`` passes. A runtime with no task in flight (quiesced)
must audit to its initial State.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import ray

from ray_adaptive.plan import Scheduler, TaskState
from ray_adaptive.plan.replicas import copy_state, merge_into

__all__ = ["AUDIT", "ABS_TOL", "REL_TOL", "AuditReport", "audit", "audit_store", "tasks_held", "rebuild", "compare"]

AUDIT = "__ra_audit__"  # what the store's survey asks each process (in place of a task id: see StateStore.survey)
ABS_TOL = 1e-9
REL_TOL = 1e-9
COMPARED_RULES = ("add", "const")  # (see the module doc: hooks that commute, or none)


@dataclass
class AuditReport:
    """The verdict of one audit (see the module doc). ``differences``: variable -> ``[{"key", "in_force",
    "implied"}]`` (``key`` None for a scalar or vec); ``not_compared``: variable -> its merge rule;
    ``reason``: why not exact, in words (empty when exact)."""

    policy: str
    plan: str
    generation: int
    exact: bool
    settled: bool
    processes: int = 0
    undecided: int = 0
    placed: int = 0
    differences: Dict[str, List[dict]] = field(default_factory=dict)
    not_compared: Dict[str, str] = field(default_factory=dict)
    unanswered: List[str] = field(default_factory=list)
    reason: str = ""
    readings: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def format(self) -> str:
        head = (f"audit {self.policy} ({self.plan}, generation {self.generation}): "
                f"{'exact' if self.exact else 'NOT EXACT'} -- {self.processes} process(es), {self.undecided} "
                f"undecided and {self.placed} placed task(s), {self.readings} reading(s) in {self.seconds:.2f} s")
        lines = [head]
        if self.reason:
            lines.append(f"  {self.reason}")
        for var, diffs in sorted(self.differences.items()):
            for d in diffs[:20]:
                key = f"[{d['key']!r}]" if d["key"] is not None else ""
                lines.append(f"  {var}{key}: in force {_show(d['in_force'])}, implied {_show(d['implied'])}")
            if len(diffs) > 20:
                lines.append(f"  {var}: ... {len(diffs) - 20} more")
        for var, rule in sorted(self.not_compared.items()):
            lines.append(f"  {var}: not compared (merge rule {rule}: its value depends on the hooks' order)")
        return "\n".join(lines)


def _show(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return "[" + ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v.tolist()) + "]"
    return repr(v)


# -- in each submitting process ------------------------------------------------------------------------
def tasks_held(router: Any) -> dict:
    """What this process holds, for an audit (a :class:`~ray_adaptive.runtime.router.Router`): its undecided
    tasks, its placed ones (decided onto a node, launched or about to be, not finished), the generation it
    follows, whether a live switch froze it, and the State of the selector's lease if it holds it. A task
    settled without running (dropped at its deadline, refused) is in neither list."""
    with router._cond:  # (the router's one lock: the book and the gate do not change under it)
        undecided, placed = [], []
        for t in router.book.tasks.values():
            s = t.state
            if t.error is not None:
                continue
            if s.node is None:
                undecided.append((s.id, s.arrival, dict(s.fields)))
            else:
                placed.append((s.id, s.arrival, dict(s.fields), s.node))
        decider = router.decider
        unpushed, syncing = _unpushed(decider)
        out = {"generation": router.topology.generation, "frozen": bool(router.gate.frozen),
               "held": len(router.gate.held), "undecided": undecided, "placed": placed, "lease_state": None,
               "unpushed": unpushed, "syncing": syncing}
    if decider.thread_safe and not decider.remote:  # a selector's client holding its lease: State is here
        out["lease_state"] = decider.export().get("lease", {}).get("state")
    return out


def _unpushed(decider: Any) -> Tuple[Optional[dict], bool]:
    """A decentralized decider's replica changes the store has not counted yet (held under the router's
    lock): the deltas pushed and not answered, and those not pushed -- a process pushes when tasks wait
    or finished, so the OnDispatch of a burst's last decisions wait here until its next submission or
    finish. None for a decider that keeps no replica. And whether a push is in flight: the store may or
    may not have merged it yet (the reading is then not settled). An answer that came and was not
    applied yet -- an idle process applies it at its next sync, which may be long coming -- is applied
    first: its deltas are the store's, counted twice otherwise."""
    client = getattr(decider, "_m", None)  # (a LocalDecider's StoreClient)
    log = getattr(getattr(client, "sched", None), "log", None)
    if client is None or log is None:
        return None, False
    if client._inflight is not None and client._inflight.done():
        client._apply()  # (under the router's lock, as every call of this decider)
    if client._inflight is not None:
        return None, True
    rules = dict(client.spec.merge or {})
    out: dict = {}
    for _, delta in client._unanswered:
        merge_into(out, delta, rules)
    merge_into(out, log.peek(), rules)
    return out, False


# -- the replay and the comparison (pure) -----------------------------------------------------------------
def rebuild(policy: Any, nodes: List[Any], answers: Mapping[str, Optional[dict]]) -> Tuple[dict, List[str]]:
    """The State the tasks in ``answers`` (client -> :func:`tasks_held`) imply for ``policy`` (its IR) on
    ``nodes``: the initial State, each undecided task's OnArrival, each placed task's OnDispatch (in
    arrival order). Also what could not be replayed (a hook that failed, a task on a node the plan lacks)."""
    sched = Scheduler(policy, [n.fresh() for n in nodes])
    problems: List[str] = []
    undecided, placed = [], []
    for client, a in sorted(answers.items()):
        if a is None:
            continue
        undecided += [TaskState(tid, arr, fields, client) for tid, arr, fields in a["undecided"]]
        for tid, arr, fields, node in a["placed"]:
            if node in sched.by_id:
                placed.append(TaskState(tid, arr, fields, client, node=node))
            else:
                problems.append(f"task {tid} of {client} is placed on node {node[:12]}, which the plan does not have")
    order = (lambda t: (t.arrival, t.id))
    for t in sorted(undecided, key=order):
        sched.add(t, t.arrival)
    sched.adopt(sorted(placed, key=order), dispatch_hooks=True)
    problems += [f"the hook of task {tid} failed in the replay: {msg}" for tid, msg in sched.hook_errors]
    return copy_state(sched.interp.state), problems


def compare(in_force: Mapping[str, Any], implied: Mapping[str, Any], rules: Mapping[str, str]
            ) -> Tuple[Dict[str, List[dict]], Dict[str, str]]:
    """Differences per variable (see :class:`AuditReport`), and the variables not compared (their rule)."""
    diffs: Dict[str, List[dict]] = {}
    skipped: Dict[str, str] = {}
    for var in sorted(set(in_force) | set(implied)):
        rule = rules.get(var, "const")
        if rule not in COMPARED_RULES:
            skipped[var] = rule
            continue
        a, b = in_force.get(var), implied.get(var)
        found: List[dict] = []
        if isinstance(a, dict) or isinstance(b, dict):
            a, b = a or {}, b or {}
            for key in sorted(set(a) | set(b), key=repr):
                x, y = a.get(key), b.get(key)
                x = _zero_like(y) if x is None else x
                y = _zero_like(x) if y is None else y
                if not _equal(x, y):
                    found.append({"key": key, "in_force": x, "implied": y})
        elif not _equal(a, b):
            found.append({"key": None, "in_force": a, "implied": b})
        if found:
            diffs[var] = found
    return diffs, skipped


def _zero_like(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return np.zeros_like(v)
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return type(v)(0)
    if isinstance(v, str):
        return ""
    if isinstance(v, dict):
        return {}
    return v


def _equal(x: Any, y: Any) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            return bool(np.allclose(x, y, rtol=REL_TOL, atol=ABS_TOL, equal_nan=True))
        return bool(np.array_equal(x, y))
    if isinstance(x, float) or isinstance(y, float):
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            return False
        if math.isnan(x) and math.isnan(y):
            return True
        return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(x, dict) or isinstance(y, dict):
        if not (isinstance(x, dict) and isinstance(y, dict)):
            return False
        return all(_equal(x[k] if k in x else _zero_like(y[k]), y[k] if k in y else _zero_like(x[k]))
                   for k in set(x) | set(y))
    return bool(x == y)


# -- the audit itself (any process connected to the cluster) ----------------------------------------------
def _in_force(cfg: dict, store: Any, answers: Mapping[str, Optional[dict]]) -> Tuple[dict, str]:
    """The State the runtime decides on now, and where it was read (see the module doc)."""
    from ray_adaptive.runtime.topology import NAMESPACE

    merged = ray.get(store.state.remote(), timeout=30)
    lowered = cfg["plan"]
    if not cfg.get("selector"):  # the replicas' changes not merged yet are in force in their processes
        rules = dict(lowered.merge)
        for a in answers.values():
            if a is not None and a.get("unpushed"):
                merge_into(merged, a["unpushed"], rules)
        return merged, "the store's merged State and the replicas' changes not pushed yet"
    selector = ray.get_actor(cfg["selector"], namespace=NAMESPACE)
    out = ray.get(selector.export.remote(), timeout=30)
    state, where = out["state"], "the selector"
    holder = out.get("leased_to")
    if holder is not None:
        held = (answers.get(holder) or {}).get("lease_state")
        if held is None:
            raise _Unsettled(f"process {holder} holds the selector's lease and did not give its State")
        state, where = held, f"the selector's lease holder {holder}"
    if lowered.local_state:  # the hybrid's placements keep replicas: those variables from the store
        kept = dict(lowered.plan.state)
        for var, value in merged.items():
            if "selector" not in kept.get(var, "selector"):
                state[var] = value
        where += " and the store's merged State"
    return state, where


class _Unsettled(Exception):
    """This reading cannot be trusted (see the module doc); the audit reads again."""


def _survey(store: Any, timeout_s: float) -> Dict[str, Optional[dict]]:
    """Every registered process's :func:`tasks_held` (None: it did not answer, or could not say)."""
    answers = ray.get(store.survey.remote(AUDIT, timeout_s), timeout=timeout_s + 30)
    return {c: (a if isinstance(a, dict) and "undecided" in a else None) for c, a in answers.items()}


def _tasks(answers: Mapping[str, Optional[dict]]) -> dict:
    return {c: (sorted(t[0] for t in a["undecided"]), sorted((t[0], t[3]) for t in a["placed"]))
            for c, a in answers.items() if a is not None}


def audit_store(store: Any, timeout_s: float = 10.0, answer_s: float = 5.0) -> AuditReport:
    """Audit the runtime whose state store actor is ``store`` (see the module doc): read both sides until
    a settled reading agrees, or ``timeout_s`` passes (then the last reading's differences, and why)."""
    start = time.monotonic()
    deadline = start + timeout_s
    readings = 0
    while True:
        readings += 1
        report = AuditReport("", "", -1, exact=False, settled=False)
        try:
            cfg = ray.get(store.config.remote(), timeout=30)
            lowered = cfg["plan"]
            report.policy, report.plan, report.generation = lowered.policy.name, lowered.name, cfg["generation"]
            before = _survey(store, answer_s)
            state, where = _in_force(cfg, store, before)
            after = _survey(store, answer_s)
            phase = ray.get(store.stats.remote(), timeout=30)
            implied, problems = rebuild(lowered.policy, cfg["nodes"], after)
            report.differences, report.not_compared = compare(state, implied, dict(lowered.merge))
            report.unanswered = sorted(c for c, a in after.items() if a is None)
            report.processes = len(after)
            report.undecided = sum(len(a["undecided"]) for a in after.values() if a is not None)
            report.placed = sum(len(a["placed"]) for a in after.values() if a is not None)
            why = []
            if report.unanswered:
                why.append(f"process(es) {', '.join(report.unanswered)} did not answer in {answer_s:g} s")
            if phase["phase"] != "running" or phase["generation"] != cfg["generation"]:
                why.append(f"a live switch is under way (phase {phase['phase']})")
            syncing = sorted(c for c, a in after.items() if a is not None and a.get("syncing"))
            if syncing:
                why.append(f"process(es) {', '.join(syncing)} were syncing with the store")
            behind = sorted(c for c, a in after.items() if a is not None and (a["frozen"] or a["held"]
                                                                               or a["generation"] != cfg["generation"]))
            if behind:
                why.append(f"process(es) {', '.join(behind)} are switching plans")
            if _tasks(before) != _tasks(after):
                why.append("tasks were decided or finished while the State was read")
            why += problems
            report.settled = not why
            if report.differences:
                why.append(f"the State in force ({where}) differs from the one the tasks in flight imply in "
                           f"{', '.join(sorted(report.differences))}")
            report.reason = "; ".join(why)
            report.exact = not why
        except _Unsettled as err:
            report.reason = str(err)
        except (ray.exceptions.RayError, ValueError) as err:  # (the store or the selector restarts: read again)
            report.reason = f"an actor of the runtime did not answer ({type(err).__name__}: {str(err)[:200]})"
        report.readings, report.seconds = readings, round(time.monotonic() - start, 3)
        if report.exact or time.monotonic() > deadline:
            return report
        time.sleep(0.05)


def audit(policy: str, timeout_s: float = 10.0) -> AuditReport:
    """Audit the State of policy ``policy``'s runtime on the connected cluster, from any process (see the
    module doc): exact when the State in force equals the initial State plus the OnArrival of every
    undecided task and the OnDispatch of every placed one, over every attached process.

    Example::

        report = ra.audit("drf_lb")
        assert report.exact, report.format()
    """
    from ray_adaptive.runtime.topology import NAMESPACE, actor_name

    if not ray.is_initialized():
        raise RuntimeError(f"auditing policy {policy!r} needs a connected Ray cluster: call ray.init(...) first")
    try:
        store = ray.get_actor(actor_name(policy, "store"), namespace=NAMESPACE)
    except ValueError:
        raise ValueError(f"policy {policy!r} has no runtime on this cluster: start it with ra.start({policy!r}) "
                         f"(or check the name: `ray-adaptive status` lists the running ones)") from None
    return audit_store(store, timeout_s)
