"""Stage 1 of the compiler: execution units, their sides, State merge rules, separability."""

import pytest

from ray_adaptive.compiler.analysis import analyze
from ray_adaptive.dsl import load_policy, parse_policy

DRF = load_policy("drf_lb")


def sides(policy):
    return {u.id: u.side for u in analyze(policy).units}


def test_drf_lb_units_match_the_paper():
    a = analyze(DRF)
    # Line 7 (DRF) and line 8 (LB) of the paper's Figure 4 are separate units
    assert [(u.id, u.label, u.side, u.probes) for u in a.score_units] == [
        ("Score.1", "tscore", "task", False),
        ("Score.2", "nscore", "node", True),
        ("Score.3", "return", "joint", False),
    ]
    tscore = a.score_units[0]
    assert [str(r) for r in tscore.reads] == ["state alloc", "state capacity", "task.tenant"]
    assert [str(w) for w in tscore.writes] == ["tscore"]
    assert [u.id for u in a.hook_units] == ["OnDispatch.1", "OnFinish.1"]
    assert all(u.side == "task" for u in a.hook_units)


def test_drf_lb_state_is_mergeable():
    a = analyze(DRF)
    alloc, capacity = a.var("alloc"), a.var("capacity")
    assert (alloc.merge, alloc.readers, alloc.writers) == ("add", ("Score.1",), ("OnDispatch.1", "OnFinish.1"))
    assert capacity.merge == "const" and not capacity.dynamic
    assert [v.name for v in a.score_state()] == ["alloc"]
    assert {u.merge for u in a.updates} == {"add"}


@pytest.mark.parametrize("name, form, task_part, node_part, assumptions", [
    ("drf_lb", "additive", "max(alloc[task.tenant] / capacity) * 1000", "get_load(node)", ()),
    ("drf_lb_paper", "product", "max(alloc[task.tenant] / capacity)", "get_load(node)",
     ("max(alloc[task.tenant] / capacity) >= 0",)),
    # (priority ages since issue 39: task.waited is now() - task.arrival in the IR)
    ("priority", "additive", "-task.priority * 1000 - age_weight * min((now() - task.arrival) / max_age, 1.0) "
     "- 1000000000.0 * (now() - task.arrival >= max_age)", "get_load(node)", ()),
    ("priority_preemptive", "additive", "-task.priority * 1000", "get_load(node)", ()),
    ("drf_reclaim", "additive", "max(alloc[task.tenant] / capacity) * 1000", "get_load(node)", ()),
    ("shortest_job_first", "additive", "task.expected_duration * 1000", "get_load(node)", ()),
    ("fifo", "task-only", None, None, ()),
    ("weighted_fair", "task-only", None, None, ()),
    ("least_loaded", "node-only", None, None, ()),
    ("bin_pack", "node-only", None, None, ()),
    ("round_robin", "node-only", None, None, ()),
])
def test_separable_shipped_policies(name, form, task_part, node_part, assumptions):
    s = analyze(load_policy(name)).separability
    assert s.separable and s.form == form
    assert (s.task_part, s.node_part, s.assumptions) == (task_part, node_part, assumptions)


@pytest.mark.parametrize("name, why", [
    ("locality", "Score.2 (line 13) branches on `h == node.id`"),
    ("zone_affinity", "Score.1 (line 11) branches on `task.zone != node.zone`"),
])
def test_branching_joint_scores_are_not_separable(name, why):
    s = analyze(load_policy(name)).separability
    assert not s.separable and s.form == "" and why in s.why


POLICY = """
Task:
  a: float
State:
  x: float
  m: map<string, float>
Score(task, node):
  {body}
"""


@pytest.mark.parametrize("body, form, separable", [
    ("return max(task.a, get_load(node))", "max", True),
    ("return min(task.a * 2, get_load(node) + 1)", "min", True),
    ("t = task.a\n  t += x\n  n = get_load(node)\n  return 3 * t * n", "product", True),
    ("return task.a - get_load(node)", "additive", True),  # N = -load: still T + N
    ("return task.a * get_load(node) + task.a", "", False),
    ("return -1 * task.a * get_load(node)", "", False),  # a negative factor flips monotonicity
    ("return task.a / get_load(node)", "", False),
    ("return task.a if get_load(node) > 1 else 0.0", "", False),
    ("return x", "constant", True),
])
def test_separability_forms(body, form, separable):
    s = analyze(parse_policy(POLICY.format(body=body))).separability
    assert (s.separable, s.form) == (separable, form), s.why
    if not separable:
        assert "not a monotone combination" in s.why


def test_product_of_provably_nonnegative_parts_has_no_assumption():
    s = analyze(parse_policy(POLICY.format(body="return abs(task.a) * get_load(node)"))).separability
    assert (s.form, s.assumptions) == ("product", ())


def test_locals_carry_the_side_of_their_definitions():
    p = parse_policy(POLICY.format(body="t = task.a\n  n = get_load(node)\n  s = t\n  s += n\n  return s"))
    assert sides(p) == {"Score.1": "task", "Score.2": "node", "Score.3": "task", "Score.4": "joint", "Score.5": "joint"}


HOOKS = """
Task:
  a: float
  k: string
State:
  total: float
  hi: float
  lo: map<string, float>
  last: string
  scaled: float
  weird: float
Score(task, node):
  return total + hi + lo[task.k] + scaled + weird
OnArrival(task):
  total += task.a
  hi = max(hi, task.a)
  lo[task.k] = min(task.a, lo[task.k])
  last = task.k
  scaled *= 2
  weird += weird
OnFinish(task, node):
  total -= task.a
  hi = task.a
"""


def test_hook_updates_are_classified():
    a = analyze(parse_policy(HOOKS))
    merge = {u.text: u.merge for u in a.updates}
    assert merge == {
        "total += task.a": "add", "hi = max(hi, task.a)": "max", "lo[task.k] = min(task.a, lo[task.k])": "min",
        "last = task.k": None, "scaled *= 2": None, "weird += weird": None,
        "total -= task.a": "add", "hi = task.a": None,
    }
    state = {v.name: v.merge for v in a.state}
    assert state == {"total": "add", "hi": "none", "lo": "min", "last": "none", "scaled": "none", "weird": "none"}
    assert "overwrite" in a.var("hi").why and "OnFinish.2" in a.var("hi").why
    assert "reads weird itself" in a.var("weird").why


def test_probe_covers_node_available():
    p = parse_policy("Score(task, node):\n  return -node.available[\"CPU\"]\n")
    u = analyze(p).score_units[0]
    assert u.probes and u.side == "node" and [str(r) for r in u.reads] == ["node.available"]


def test_as_dict_is_json_ready():
    import json

    d = analyze(DRF).as_dict()
    json.dumps(d)
    assert d["units"][1]["reads"] == ["get_load(node)"] and d["separability"]["form"] == "additive"
