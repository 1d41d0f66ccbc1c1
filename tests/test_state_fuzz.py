"""The State stays finite and exact by construction: the runtime's Scheduler fuzzed with bad task values (issue 36).

Random steps -- tasks submitted (through the API's field check, or straight to
the scheduler as a field no check stopped), decisions, finishes -- with values
drawn to break things: ``inf``, ``-inf``, NaN, ``1e308`` (whose sums
overflow), zeros (``x / 0``), vecs of every length. After each step:

* State equals the one rebuilt, on a fresh interpreter, from the hooks of the
  tasks the scheduler accepted, in the order it ran them -- a task it refused or
  failed left nothing behind, to the bit;
* every float in State is finite and every vec has the length the policy fixes;
* the nodes' loads are the tasks running on them, and no task is lost: each is
  pending, running, finished, or was refused / failed.

No Ray: the scheduler is the one every plan's roles run (``ray_adaptive/plan/scheduler.py``).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ray_adaptive.api.fields import check_task_fields
from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.errors import PolicyRuntimeError
from ray_adaptive.plan.replicas import same_state
from ray_adaptive.plan.scheduler import NodeState, Scheduler, TaskState

# a policy of every kind of State a hook can break: floats, map values, vecs of known and unknown length
MIXED = parse_policy("""
Task:
  tenant: string
  w: float
  v: vec<float>
  u: vec<float>
State:
  total: float
  share: map<string, float>
  alloc: map<string, vec<float>>
  peak: vec<float> = [0.0, 0.0]
  last: vec<float>
Score(task, node):
  return share[task.tenant] + get_load(node) + sum(alloc[task.tenant] * [1.0, 1.0])
OnArrival(task):
  total += task.w
OnDispatch(task, node):
  share[task.tenant] += 1.0 / task.w
  alloc[task.tenant] += task.v * task.w
  peak = [max(peak[0], task.v[0]), max(peak[1], task.w)]
  last = task.u
OnFinish(task, node):
  share[task.tenant] -= 1.0 / task.w
  alloc[task.tenant] -= task.v * task.w
  total -= task.w
""", file="mixed.policy")

POLICIES = {"drf_lb": load_policy("drf_lb"), "weighted_fair": load_policy("weighted_fair"), "mixed": MIXED}

# half the values plain (so that tasks run, finish, and State builds up), half made to break things
NUMBERS = st.sampled_from([0.5, 1.0, 2.0]) | st.sampled_from([0.0, -1.0, 1e307, 1e308, -1e308, math.inf, -math.inf,
                                                              math.nan])


@st.composite
def fields_of(draw, policy):
    lengths = vec_lengths(policy)
    out = {}
    for d in policy.task_fields:
        kind = d.type.kind
        if kind == "string":
            out[d.name] = draw(st.sampled_from(["a", "b"]))
        elif kind == "vec":  # mostly of the length the policy fixes (or 2), else any
            n = lengths.get(f"task.{d.name}", 2)
            out[d.name] = draw(st.lists(NUMBERS, min_size=n, max_size=n) | st.lists(NUMBERS, min_size=n, max_size=n)
                               | st.lists(NUMBERS, max_size=4))
        else:
            out[d.name] = draw(NUMBERS)
    return out


SUBMIT = st.tuples(st.just("submit"), st.sampled_from(["checked", "unchecked"]), st.booleans())
STEP = st.one_of(SUBMIT, SUBMIT, st.tuples(st.just("decide"), st.none(), st.none()),
                 st.tuples(st.just("finish"), st.integers(0, 10), st.none()),
                 st.tuples(st.just("finish"), st.integers(0, 10), st.none()))


class Reference:
    """A fresh interpreter replaying the accepted hooks in order: what State must be."""

    def __init__(self, policy, nodes):
        self.interp = Interpreter(policy, num_nodes=len(nodes))
        self.nodes = {n.id: n.fresh() for n in nodes}

    def arrived(self, t):
        self.interp.run_hook("OnArrival", t)

    def dispatched(self, t):
        node = self.nodes[t.node]
        node.own += 1  # (as the scheduler counts it before OnDispatch runs)
        self.interp.run_hook("OnDispatch", t, node)

    def finished(self, t):
        node = self.nodes[t.node]
        node.own -= 1
        self.interp.run_hook("OnFinish", t, node)


def finite_state(state, lengths) -> bool:
    def ok(v, length=None) -> bool:
        if isinstance(v, dict):
            return all(ok(x, length) for x in v.values())
        if isinstance(v, np.ndarray):
            fixed = length is None or v.shape[0] == length or (v.shape[0] == 1 and not v[0])
            return fixed and (v.dtype.kind != "f" or bool(np.isfinite(v).all()))
        return not isinstance(v, float) or math.isfinite(v)

    return all(ok(v, lengths.get(f"state.{k}[]" if isinstance(v, dict) else f"state.{k}")) for k, v in state.items())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(POLICIES)), steps=st.lists(STEP, min_size=5, max_size=40))
def test_state_equals_the_one_rebuilt_from_the_accepted_tasks(data, name, steps):
    policy = POLICIES[name]
    nodes = [NodeState(f"n{i}", i, 1, 1, {"CPU": 1.0}) for i in range(3)]
    s, ref = Scheduler(policy, nodes), Reference(policy, nodes)
    lengths = vec_lengths(policy)
    refused = failed = finished = 0
    for k, (what, how, alone) in enumerate(steps):
        if what == "submit":
            t = TaskState(f"t{k:02d}", float(k), data.draw(fields_of(policy)))
            if how == "checked":
                try:
                    check_task_fields(policy, t.fields, "task")
                except TypeError:  # (refused at submission: the scheduler never sees it)
                    refused += 1
                    continue
            try:
                decided = s.add_and_decide(t, float(k)) if alone else (s.add(t, float(k)) or [])
            except PolicyRuntimeError as err:  # (its own submission failed: FILE:LINE, and which function)
                assert str(err).startswith(f"{policy.file}:") and str(err).endswith(")"), err
                refused += 1
            else:
                ref.arrived(t)
                for d in decided:  # (behind a queue, others are decided too)
                    failed += d.error is not None
                    if d.node is not None:
                        ref.dispatched(d)
        elif what == "decide":
            for d in s.decide(float(k)):
                if d.error is not None:
                    assert d.node is None and d.error.startswith(f"{policy.file}:"), d.error
                    failed += 1
                elif d.node is not None:
                    ref.dispatched(d)
        elif s.running:
            tid = sorted(s.running)[how % len(s.running)]
            t, errors = s.running[tid], len(s.hook_errors)
            s.finish(tid, float(k))
            finished += 1
            if len(s.hook_errors) == errors:  # (a failed OnFinish was undone: nothing to replay)
                ref.finished(t)
        assert same_state(s.interp.state, ref.interp.state), (name, k, s.interp.state, ref.interp.state)
        assert finite_state(s.interp.state, lengths), (name, k, s.interp.state)
        assert [n.own for n in s.nodes] == [sum(r.node == n.id for r in s.running.values()) for n in s.nodes]
        submitted = sum(1 for w, *_ in steps[:k + 1] if w == "submit")
        assert submitted == refused + failed + s.pending + len(s.running) + finished
    event(f"{name}: refused {min(refused, 3)}+, failed {min(failed, 3)}+, finished {min(finished, 3)}+, "
          f"OnFinish failed {bool(s.hook_errors)}")
