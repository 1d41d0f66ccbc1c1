"""Why a task waits, and why it landed where it did: the scheduler's side, free of Ray."""

from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.plan.explain import explain_placed, explain_pending, trace_score
from ray_adaptive.plan.scheduler import NodeState, Scheduler, TaskState

VEC = [0.1, 0.2, 0.1]


def _drf(slots_per_node=1, nodes=2, records=10):
    return Scheduler(load_policy("drf_lb"), [NodeState(f"n{i}", i, slots_per_node, 0, {}) for i in range(nodes)],
                     records=records)


def _task(tid, tenant, arrival=0.0, deadline=float("inf")):
    return TaskState(tid, arrival, {"tenant": tenant, "resource_vec": VEC}, deadline=deadline)


def test_a_task_behind_full_nodes_waits_first_in_line_the_others_ranked_behind_it():
    s = _drf()
    for t in (_task("a0", "a"), _task("a1", "a")):
        s.add(t, 0.0)
    assert [t.node for t in s.decide(0.0)] == ["n0", "n1"]  # every slot taken by tenant a
    for t in (_task("a2", "a", 0.1), _task("b0", "b", 0.2), _task("b1", "b", 0.3)):
        s.add(t, 0.3)
    first = explain_pending(s, "b0", 1.0)
    assert first["reason"] == "no-room" and "no node has room" in first["why"] and first["ahead"] == 0
    behind = explain_pending(s, "a2", 1.0)  # a holds two tasks' share: b's tasks go first
    assert behind["reason"] == "ranked" and behind["ahead"] == 2, behind
    assert behind["best_score"] > max(behind["winning_scores"])
    assert explain_pending(s, "b1", 1.0)["ahead"] == 1  # b0 arrived first at the same score
    assert explain_pending(s, "nope", 1.0) is None


def test_a_task_infeasible_everywhere_names_the_return_that_said_inf():
    p = load_policy("zone_affinity")
    nodes = [NodeState(f"n{i}", i, 1, 0, {}, {"zone": z}) for i, z in enumerate("ab")]
    s = Scheduler(p, nodes)
    s.add(TaskState("t", 0.0, {"zone": "mars"}), 0.0)
    assert s.decide(0.0) == []
    out = explain_pending(s, "t", 1.0)
    (where,) = out["returns"]
    assert out["reason"] == "infeasible" and where.startswith(f"{p.score.body[0].body[0].loc}")
    assert "zone_affinity.policy:12:" in where and out["returns"][where] == ["n0", "n1"]


def test_the_trace_follows_the_branch_the_interpreter_takes():
    p = parse_policy("Task:\n  w: int\nScore(task, node):\n  x = task.w * 2\n  if x > 3:\n    return x\n"
                     "  elif x > 1:\n    return -x\n  return 0", file="t.policy")
    s = Scheduler(p, [NodeState("n", 0, 1, 0, {})])
    node = s.nodes[0]
    assert [(v, l.line) for v, l in (trace_score(s.interp, p.score, TaskState("t", 0, {"w": w}), node, 0.0)
                                     for w in (3, 1, 0))] == [(6.0, 6), (-2.0, 8), (0.0, 9)]


def test_a_placed_task_shows_its_score_on_every_candidate_and_the_runner_up():
    s = _drf(nodes=3)
    s.add(_task("x", "a"), 0.0)
    (t,) = s.decide(0.0)
    out = explain_placed(s.records, "x")
    assert out["node"] == t.node == "n0" and set(out["scores"]) == {"n0", "n1", "n2"}
    assert out["runner_up"]["node"] == "n1" and out["runner_up"]["score"] == out["score"]  # all idle: a tie
    assert "runner-up was n1" in out["why"]


def test_no_records_kept_when_none_asked():
    s = _drf(records=0)
    s.add(_task("x", "a"), 0.0)
    s.decide(0.0)
    assert s.records is None and explain_placed(s.records or (), "x") is None


def test_a_task_past_its_deadline_is_said_dropped():
    s = _drf()
    for t in (_task("a0", "a"), _task("a1", "a")):
        s.add(t, 0.0)
    s.decide(0.0)
    s.add(_task("late", "b", 0.0, deadline=0.5), 0.0)
    assert explain_pending(s, "late", 1.0)["reason"] == "deadline"
