"""The simulator's fast path for split Scores decides exactly as the full score matrix does."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ray_adaptive.compiler import PlanSpace, Profile, analyze, enumerate_plans, lower
from ray_adaptive.compiler.separability import score_split
from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.dsl.printer import format_expr
from ray_adaptive.sim.model import Task, TaskSpec
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.plan.scoring import MatrixScoring, SplitScoring
from ray_adaptive.workload.generate import paper_tenants, paper_workload, policy_workload

POLICY = """
Task:
  tenant: string
  a: float
  k: int
State:
  m: map<string, float>
  v: map<string, vec<float>>
  w: float = 1.0
  task_count: int
Score(task, node):
  {body}
"""

SPLIT_BODIES = [
    "t = max(v[task.tenant] / [1.5, 2.0]) * 1000\n  n = get_load(node)\n  return t + n",  # DRF-LB's shape
    "return get_load(node) + m[task.tenant] * w",  # node part first
    "return task.k * 0.5 + (node.index - get_load(node))",  # float + int
    "return max(m[task.tenant] + task.a, get_load(node) * 0.5)",
    "return min(task.a - m[task.tenant], get_load(node))",  # min: a NaN node part is worse than +inf
    "return abs(task.a + m[task.tenant]) * (get_load(node) + 1)",  # product, task part provably >= 0
    "return task.a / w + node.speed",  # a static node field
    "return m[task.tenant] * w - task.a",  # one-sided: the task alone
    "return task.k * 2",  # one-sided, an int
    "return get_load(node)",  # one-sided: the node alone (least_loaded)
    "return (node.index - task_count) % num_nodes() + node.speed",  # the node and State (round_robin's shape)
]


@dataclasses.dataclass
class FakeNode:
    """What the interpreter reads of a node."""

    index: int
    load: int
    speed: float
    id: str = ""
    executors: int = 1
    queue: int = 2
    resources: dict = dataclasses.field(default_factory=dict)
    available: dict = dataclasses.field(default_factory=dict)

    @property
    def fields(self):
        return {"speed": self.speed}


POLICY_WITH_SPEED = POLICY.replace("Score(task, node):", "Node:\n  speed: float\nScore(task, node):")

odd = st.sampled_from([0.0, -0.0, 1.0, 0.1, 0.2, 0.30000000000000004, 1e-17, -3.0, 1e300, math.inf, -math.inf, math.nan])
value = st.one_of(odd, st.floats(-5, 5))
tenants = st.sampled_from(["a", "b", "c"])


@st.composite
def scenes(draw):
    rows = draw(st.lists(st.tuples(tenants, value, st.integers(-3, 3)), min_size=1, max_size=5))
    nodes = draw(st.lists(st.tuples(st.integers(0, 3), value), min_size=1, max_size=6))
    states = draw(st.lists(st.tuples(st.dictionaries(tenants, value), st.dictionaries(
        tenants, st.tuples(value, value)), value, st.integers(-2, 2)), min_size=1, max_size=4))
    return rows, nodes, states


@pytest.mark.parametrize("body", SPLIT_BODIES)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf and friends: the simulator silences them
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scene=scenes())
def test_split_scoring_is_the_matrix(body, scene):
    policy = parse_policy(POLICY_WITH_SPEED.format(body=body))
    split = score_split(policy)
    assert split is not None
    rows, nodes, states = scene
    tasks = [Task(TaskSpec(f"t{i}", float(i), fields={"tenant": t, "a": a, "k": k})) for i, (t, a, k) in enumerate(rows)]
    fast, slow = SplitScoring(split), MatrixScoring()
    it = Interpreter(policy, num_nodes=len(nodes))
    for m, v, w, c in states:  # one SplitScoring across State changes: what it remembers must not go stale
        it.state.update(m=dict(m), v={k: np.array(x) for k, x in v.items()}, w=w, task_count=c)
        cands = [FakeNode(i, load, speed) for i, (load, speed) in enumerate(nodes)]
        want, got = slow.scores(it, tasks, cands, 0.0), fast.scores(it, tasks, cands, 0.0)
        assert got.argmin() == want.argmin()
        assert got.row_min() == want.row_min()
        for i, t in enumerate(tasks):
            for j, c in enumerate(cands):
                assert got.cell(i, j) == want.cell(i, j) or math.isnan(want.cell(i, j))
                assert fast.pair(it, t, c, 0.0) == want.cell(i, j)


@pytest.mark.parametrize("body, op, task_part", [
    ("return max(v[task.tenant] / [1.0]) * 1000 + get_load(node)", "+", "max(v[task.tenant] / [1.0]) * 1000"),
    ("return get_load(node) + task.a", "+", "task.a"),
    ("return max(task.a, get_load(node))", "max", "task.a"),
    ("return abs(task.a) * get_load(node)", "*", "abs(task.a)"),
    ("t = task.a\n  return t * 2", "task", "task.a * 2"),
    ("return get_load(node)", "node", None),
])
def test_score_split_forms(body, op, task_part):
    s = score_split(parse_policy(POLICY.format(body=body)))
    assert (s.op, s.task and format_expr(s.task)) == (op, task_part)


@pytest.mark.parametrize("body", [
    "return task.a + get_load(node) + m[task.tenant]",  # separable, but regrouping could round differently
    "return task.a * get_load(node)",  # the task part may be negative: not monotone in the node part
    "return task.a - get_load(node)",  # decreasing in the node part
    "return task.k + get_load(node)",  # int: wraps at 2**63
    "return task.a if get_load(node) > 1 else 0.0",
])
def test_scores_that_do_not_split_exactly(body):
    assert score_split(parse_policy(POLICY.format(body=body))) is None


def test_shipped_policies_that_split():
    ops = {name: getattr(score_split(load_policy(name)), "op", None) for name in
           ("drf_lb", "drf_lb_paper", "fifo", "least_loaded", "round_robin", "locality")}
    # drf_lb_paper: tscore * nscore, tscore >= 0 not provable; locality branches
    assert ops == {"drf_lb": "+", "drf_lb_paper": None, "fifo": "task", "least_loaded": "node",
                   "round_robin": "node", "locality": None}


DRF = load_policy("drf_lb")
A = analyze(DRF)
PLANS, _ = enumerate_plans(A, 12, PlanSpace())


@pytest.mark.parametrize("name", [p.name for p in PLANS])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), rate=st.sampled_from([300, 650, 900]), prefill=st.booleans())
def test_a_simulation_with_the_fast_path_is_the_same_simulation(name, seed, rate, prefill):
    """Every plan of DRF-LB: the same placements, times, competitive-ratio samples and scheduler counters."""
    plan = lower(next(p for p in PLANS if p.name == name), A, Profile(default_unit_s=10e-6), 12)
    assert plan.split is not None and (plan.architecture != "hybrid" or plan.task_split and plan.node_split)
    same_simulation(plan, paper_workload(rate, seconds=0.4, seed=seed), seed, prefill)


@pytest.mark.parametrize("policy", ["fifo", "least_loaded", "round_robin"])
def test_one_sided_scores_take_the_fast_path_too(policy):
    """Every plan of three one-sided shipped policies (round_robin's node part reads State)."""
    p = load_policy(policy)
    a = analyze(p)
    plans, _ = enumerate_plans(a, 8, PlanSpace())
    sc = policy_workload(p, paper_tenants(400), 0.4, nodes=8, seed=2)
    for plan in plans:
        same_simulation(lower(plan, a, Profile(default_unit_s=10e-6), 8), sc, seed=2, prefill=True)


def same_simulation(plan, sc, seed, prefill):
    """``plan`` simulated with its splits and with the score matrix: the very same run. (Both must run:
    an error on both sides once passed here, and hid every plan that failed to simulate.)"""
    b = simulate(dataclasses.replace(plan, split=None, task_split=None, node_split=None), sc, seed=seed,
                 prefill=prefill, cr_from=0.1)
    a = simulate(plan, sc, seed=seed, prefill=prefill, cr_from=0.1)
    assert any(t.status == "finished" for t in b.tasks), "nothing ran: the comparison proves nothing"
    assert [(t.id, t.status, t.node and t.node.id, t.dispatched_at, t.finished_at) for t in a.tasks] == \
           [(t.id, t.status, t.node and t.node.id, t.dispatched_at, t.finished_at) for t in b.tasks]
    assert a.cr_impl.tolist() == b.cr_impl.tolist() and a.cr_ideal.tolist() == b.cr_ideal.tolist()
    assert a.schedulers == b.schedulers and a.events == b.events


def test_state_no_hook_writes_is_fixed():
    from ray_adaptive.plan.scoring import written_by_hooks

    assert written_by_hooks(DRF) == {"alloc"}  # capacity is never written: parts need not be keyed by it
    assert written_by_hooks(load_policy("weighted_fair")) == {"vt", "backlog", "vclock"}
