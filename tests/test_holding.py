"""Who holds a full cluster's tasks (ray_adaptive.plan.holding), free of Ray: the proof and the overflow decisions."""

import math

import pytest

from ray_adaptive.compiler.separability import score_split
from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.plan.holding import ray_may_hold, resolve_hold
from ray_adaptive.plan.scheduler import NodeState, Scheduler, TaskState


@pytest.mark.parametrize("policy, provable", [
    ("least_loaded", True),
    ("round_robin", False),  # node-only, but its turn comes from State, not from the load
    ("fifo", False),  # reads the task; every overflowing task would go to node 0
    ("bin_pack", False),  # -get_load: the busiest node would take every overflowing task
    ("drf_lb", False),  # a backlog is DRF's to order
    ("zone_affinity", False),
])
def test_shipped_policies(policy, provable):
    ok, why = ray_may_hold(score_split(load_policy(policy)))
    assert ok is provable, why


@pytest.mark.parametrize("score, provable", [
    ("return get_load(node)", True),
    ("return 2 * get_load(node) + 1", True),
    ("return get_load(node) / 4", True),
    ("return get_load(node) - node.index", True),
    ("return get_load(node) + get_load(node)", True),
    ("return -get_load(node)", False),
    ("return 10 - get_load(node)", False),
    ("return 1 / (get_load(node) + 1)", False),
    ("return max(get_load(node), node.index)", False),  # flat past the index: node 0 could take all
    ("return node.index", False),
    ("return get_load(node) * -2", False),
])
def test_node_only_scores(score, provable):
    policy = parse_policy(f"Score(task, node):\n  {score}\n", file="x.policy")
    assert ray_may_hold(score_split(policy))[0] is provable, score


def test_resolve_hold():
    split = score_split(load_policy("drf_lb"))
    assert resolve_hold("ray", split)[0] and not resolve_hold("caller", split)[0]
    assert not resolve_hold("auto", split)[0]
    assert resolve_hold("auto", score_split(load_policy("least_loaded")))[0]
    with pytest.raises(ValueError, match="hold must be one of 'auto', 'caller', 'ray', got 'nobody'"):
        resolve_hold("nobody", split)


def _sched(overflow: bool, policy: str = "least_loaded", nodes: int = 3, executors: int = 1, queue: int = 1):
    p = load_policy(policy)
    return Scheduler(p, [NodeState(f"n{i}", i, executors, queue, {}) for i in range(nodes)],
                     split=score_split(p), overflow=overflow)


def _decide(sched, tasks, now=0.0):
    for t in tasks:
        sched.add(t, now)
    return sched.decide(now)


def test_overflow_decides_alike_while_a_node_has_room_and_spreads_the_rest():
    tasks = [TaskState(f"t{i:02d}", float(i), {}) for i in range(6)]  # 3 nodes x 2 slots
    gated, held = _sched(False), _sched(True)
    assert [(t.id, t.node) for t in _decide(gated, tasks)] == \
        [(t.id, t.node) for t in _decide(held, [TaskState(t.id, t.arrival, {}) for t in tasks])]
    more = [TaskState(f"u{i:02d}", 10.0 + i, {}) for i in range(7)]
    assert _decide(gated, more) == [] and gated.pending == 7  # the gate holds them
    out = _decide(held, more)
    assert [t.id for t in out] == [t.id for t in more] and held.pending == 0  # in arrival order
    loads = sorted(n.own for n in held.nodes)
    assert loads == [4, 4, 5]  # least-loaded among full nodes: spread, not piled on one
    assert not any(n.has_room for n in held.nodes)


def test_overflow_leaves_a_task_with_a_deadline_and_those_behind_it_to_wait_for_room():
    held = _sched(True, nodes=1, queue=0)
    first = _decide(held, [TaskState("a", 0.0, {})])
    assert [t.node for t in first] == ["n0"]
    out = _decide(held, [TaskState("b", 1.0, {}, deadline=5.0), TaskState("c", 2.0, {})], now=2.0)
    assert out == [] and held.pending == 2  # b waits for room (its deadline is a placement deadline); c behind it
    held.finish("a", 3.0)
    assert [(t.id, t.node) for t in held.decide(3.0)] == [("b", "n0"), ("c", "n0")]  # b with room, c overflows
    assert held.by_id["n0"].own == 2


def test_overflow_places_nothing_on_dead_nodes_nor_where_score_is_infeasible():
    held = _sched(True, nodes=2, queue=0)
    for n in held.nodes:
        n.alive = False
    assert _decide(held, [TaskState("a", 0.0, {})]) == [] and held.pending == 1
    p = parse_policy("Task:\n  ok: bool\nScore(task, node):\n  if task.ok:\n    return get_load(node)\n"
                     "  return inf\n", file="x.policy")
    sched = Scheduler(p, [NodeState("n0", 0, 1, 0, {})], split=score_split(p), overflow=True)
    out = _decide(sched, [TaskState("x", 0.0, {"ok": True}), TaskState("y", 1.0, {"ok": False}),
                          TaskState("z", 2.0, {"ok": True})])
    assert [t.id for t in out] == ["x", "z"] and sched.pending == 1 and math.isinf(sched.queue.tasks()[0].deadline)


@pytest.mark.parametrize("policy", ["least_loaded", "drf_lb", "round_robin", "fifo", "bin_pack", "locality",
                                    "weighted_fair", "priority"])
@pytest.mark.parametrize("overflow", [False, True])
def test_a_task_decided_on_arrival_is_decided_as_through_the_queue(policy, overflow):
    """Scheduler.add_and_decide (a submission decided at once while nothing waits) makes exactly the
    decisions, State and records of add + decide, with and without overflow, deadlines included."""
    import random

    from test_scheduler import _fields

    p = load_policy(policy)

    def run(fast: bool):
        rng = random.Random(7)
        s = Scheduler(p, [NodeState(f"n{i}", i, 1, 1, {"CPU": 1.0}, {"zone": "z1"}) for i in range(3)],
                      split=score_split(p), overflow=overflow, records=50)
        out, running = [], []
        for i in range(300):
            now = i * 0.01
            t = TaskState(f"t{i:04d}", now, _fields(p, rng), deadline=now + 0.05 if i % 7 == 0 else math.inf)
            decided = s.add_and_decide(t, now) if fast else (s.add(t, now) or s.decide(now))
            out += [(d.id, d.node) for d in decided]
            running += [d.id for d in decided if d.node is not None]
            if rng.random() < 0.6 and running:
                s.finish(running.pop(rng.randrange(len(running))), now)
                out += [(d.id, d.node) for d in s.decide(now)]
        recs = [(r.task, r.node, r.scores) for r in s.records]
        return out, repr(s.export()), recs

    assert run(True) == run(False)
