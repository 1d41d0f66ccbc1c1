"""The plan's Scheduler, free of Ray: decisions on grouped pending queues are the full matrix's."""

import math
import random

import pytest

from ray_adaptive.compiler.separability import score_split
from ray_adaptive.dsl import load_policy, shipped_policies
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.scheduler import NodeState, Scheduler, TaskState


def _fields(policy, rng):
    out = {}
    for d in policy.task_fields:
        kind = d.type.kind
        if kind == "string":
            out[d.name] = rng.choice(["a", "b", "c"])
        elif kind == "vec":
            out[d.name] = [rng.choice([0.1, 0.2]), 0.2, 0.1]
        elif kind == "int":
            out[d.name] = rng.choice([1, 2, 3])
        elif kind == "bool":
            out[d.name] = rng.random() < 0.5
        else:
            out[d.name] = rng.choice([0.5, 1.0])
    return out


def _nodes(policy):
    # a string field takes the values the tasks' do (zone_affinity: a task of zone "b" fits node 1 only;
    # with a value no task had, nothing was placed and the runs compared were empty)
    def fields(i):
        return {d.name: ({"string": "abc"[i % 3], "int": 1, "float": 1.0, "bool": True}.get(d.type.kind, [1.0, 1.0, 1.0]))
                for d in policy.node_fields}
    return [NodeState(f"n{i}", i, 2, 1, {"CPU": 2.0}, fields(i)) for i in range(4)]


def _run(policy, grouped: bool, seed: int, split=None):
    """Arrivals in bursts, finishes in between, a cancellation: the decisions in order."""
    # the reference, ungrouped: every pending task scored at every decision
    queue = None if grouped else PendingQueue(None, deadlines=True)
    sched = Scheduler(policy, _nodes(policy), split=split, queue=queue)
    rng, decided, running = random.Random(seed), [], []
    for burst in range(12):
        now = float(burst)
        for i in range(rng.randint(5, 60)):
            sched.add(TaskState(f"t{burst:02d}-{i:03d}", now + rng.uniform(0, 1), _fields(policy, rng)), now)
        if burst == 6:
            sched.cancel_pending(lambda t: t.id.endswith("7"))
        for t in sched.decide(now):
            decided.append((t.id, t.node))
            running.append(t.id)
        rng.shuffle(running)
        for tid in running[: len(running) // 2]:
            sched.finish(tid, now + 0.5)
        running = running[len(running) // 2:]
    state = {k: repr(v) for k, v in sched.export()["state"].items()}  # (numpy arrays compare elementwise)
    return decided, [t["id"] for t in sched.export()["pending"]], state


@pytest.mark.parametrize("policy", shipped_policies())
def test_grouped_decisions_are_the_full_matrix_decisions(policy):
    p = load_policy(policy)
    for seed in range(3):
        grouped = _run(p, True, seed)
        assert len({node for _, node in grouped[0]}) == 4, "tasks must be placed on every node for the comparison to mean anything"
        assert grouped == _run(p, False, seed)


_SPLITTING = [n for n in shipped_policies() if score_split(load_policy(n)) is not None]


def test_most_shipped_scores_split():
    assert {"drf_lb", "least_loaded", "fifo"} <= set(_SPLITTING), _SPLITTING


@pytest.mark.parametrize("policy", _SPLITTING)
def test_split_scoring_decides_as_the_matrix(policy):
    """A Score the compiler splits into T(task) op N(node) is scored part by part, each value
    remembered while what it reads is unchanged: the same decisions, State and queue."""
    from ray_adaptive.plan.scoring import SplitScoring

    p = load_policy(policy)
    split = score_split(p)
    assert isinstance(Scheduler(p, _nodes(p), split=split).scoring, SplitScoring)
    for seed in range(3):
        assert _run(p, True, seed, split=split) == _run(p, True, seed)


def test_a_backlog_scores_one_row_per_group():
    p = load_policy("drf_lb")
    sched = Scheduler(p, _nodes(p))
    rng = random.Random(0)
    for i in range(3000):
        sched.add(TaskState(f"t{i:05d}", rng.uniform(0, 10), {"tenant": rng.choice("abc"), "resource_vec": [0.1, 0.2, 0.1]}), 0.0)
    rows = sched.queue.rows()
    assert len(rows) == 3 and [t.arrival for t in rows] == sorted(t.arrival for t in rows)
    assert len(sched.decide(0.0)) == 12 and sched.pending == 2988



@pytest.mark.parametrize("queue", ["grouped", "ungrouped", "fifo"])
def test_a_task_pending_at_its_deadline_is_dropped_not_placed(queue):
    """As in the cluster model: no hook runs for it, and it never takes room another task could use."""
    policy = load_policy("drf_lb")
    nodes = [NodeState(f"n{i}", i, 1, 0, {"CPU": 1.0}) for i in range(2)]  # 2 slots
    sched = Scheduler(policy, nodes, fifo=queue == "fifo",
                      queue=PendingQueue(None, deadlines=True) if queue == "ungrouped" else None)
    vec = [0.1, 0.2, 0.1]
    blockers = [TaskState(f"b{i}", 0.0, {"tenant": "a", "resource_vec": vec}) for i in range(2)]
    for t in blockers:
        sched.add(t, 0.0)
    assert [t.node for t in sched.decide(0.0)] == ["n0", "n1"]  # every slot taken
    late = [TaskState(f"l{i}", 0.1 + i / 100, {"tenant": t, "resource_vec": vec}, deadline=0.5)
            for i, t in enumerate("abab")]
    fresh = TaskState("f", 0.2, {"tenant": "a", "resource_vec": vec}, deadline=9.0)
    for t in (*late, fresh):
        sched.add(t, 0.1)
    assert sched.decide(0.4) == []  # no room, nothing late yet
    sched.finish("b0", 1.0)
    out = sched.decide(1.0)  # room for one; the four past their deadline go first, unplaced
    assert sorted(t.id for t in out if t.node is None) == ["l0", "l1", "l2", "l3"]
    assert [(t.id, t.node) for t in out if t.node is not None] == [("f", "n0")]
    assert sched.pending == 0 and set(sched.running) == {"b1", "f"}
    # OnDispatch ran for the placed tasks only: a holds b1 and f, b holds nothing
    assert sched.interp.state["alloc"]["a"] == pytest.approx([0.2, 0.4, 0.2])
    assert sched.interp.state["alloc"].get("b", [0.0] * 3) == pytest.approx([0.0] * 3)


def test_an_ungrouped_queue_never_places_a_task_past_its_deadline():
    """Every task is scored there, so one past its deadline behind a timely head can win: it is
    dropped, not placed -- a decision is made by the task's deadline or not at all."""
    policy = load_policy("drf_lb")
    sched = Scheduler(policy, [NodeState("n0", 0, 1, 0, {"CPU": 1.0})], queue=PendingQueue(None, deadlines=True))
    vec = [0.1, 0.2, 0.1]
    sched.interp.state["alloc"]["a"] = [0.5, 0.5, 0.5]  # a holds a lot: b's task scores best
    timely = TaskState("f", 0.05, {"tenant": "a", "resource_vec": vec}, deadline=9.0)
    late = TaskState("l", 0.1, {"tenant": "b", "resource_vec": vec}, deadline=0.5)
    for t in (timely, late):
        sched.add(t, 0.1)
    out = sched.decide(1.0)
    assert [(t.id, t.node) for t in out] == [("l", None), ("f", "n0")]
    assert set(sched.running) == {"f"} and "b" not in sched.interp.state["alloc"]



@pytest.mark.parametrize("queue", ["grouped", "ungrouped", "fifo"])
def test_a_task_within_its_slack_of_the_deadline_is_dropped_the_others_placed(queue):
    """A host's slack (the selector's: how long its decisions take to reach each process) moves the deadline
    earlier per task: a task of a slow process with less time left than its slack is dropped unplaced --
    placed, it would reach its process too late and hold a slot for nothing -- while a task of a fast
    process with the same deadline is placed."""
    policy = load_policy("drf_lb")
    nodes = [NodeState(f"n{i}", i, 1, 0, {"CPU": 1.0}) for i in range(2)]
    sched = Scheduler(policy, nodes, fifo=queue == "fifo",
                      queue=PendingQueue(None, deadlines=True) if queue == "ungrouped" else None)
    sched.slack = lambda t: {"slow": 0.3, "fast": 0.01}[t.origin]
    vec = [0.1, 0.2, 0.1]
    slow = TaskState("s", 0.0, {"tenant": "a", "resource_vec": vec}, origin="slow", deadline=1.0)
    fast = TaskState("f", 0.1, {"tenant": "b", "resource_vec": vec}, origin="fast", deadline=1.0)
    for t in (slow, fast):
        sched.add(t, 0.1)
    out = sched.decide(0.8)  # 0.2 s left: within the slow process's 0.3 s, not within the fast one's
    assert [(t.id, t.node) for t in out] == [("s", None), ("f", "n0")]
    assert set(sched.running) == {"f"} and "a" not in sched.interp.state["alloc"]  # (no hook for the dropped)


def _backlog(newest_first):
    """Two slots; tenant a's tasks arrived 0.0-0.9 s with 1 s deadlines, b's one task at 0.95 s, c's two without."""
    policy = load_policy("drf_lb")
    sched = Scheduler(policy, [NodeState(f"n{i}", i, 1, 0, {"CPU": 1.0}) for i in range(2)], newest_first=newest_first)
    vec = [0.1, 0.2, 0.1]
    for i in range(10):
        sched.add(TaskState(f"a{i}", i / 10, {"tenant": "a", "resource_vec": vec}, deadline=i / 10 + 1.0), 0.0)
    sched.add(TaskState("b0", 0.95, {"tenant": "b", "resource_vec": vec}, deadline=1.95), 0.0)
    for i in range(2):
        sched.add(TaskState(f"c{i}", i / 10, {"tenant": "c", "resource_vec": vec}), 0.0)
    return sched


def test_a_backlogged_group_is_served_newest_first():
    """Adaptive LIFO (plan.queue): a's oldest task has waited more than half its deadline's span, so a's
    newest goes first -- placed oldest first, it would start at its deadline's edge; b's one task and c's
    tasks without deadlines keep their order. The decisions of the policy are the same: which tenant goes
    where; only which of a's tasks."""
    fifo, lifo = _backlog(None), _backlog(0.5)
    for s in (fifo, lifo):
        s.interp.state["alloc"]["c"] = [0.9, 0.9, 0.9]  # c holds much: a and b go first
    assert [t.id for t in fifo.queue.rows()] == ["a0", "c0", "b0"]
    assert [t.id for t in lifo.queue.rows()] == ["a0", "c0", "b0"]  # (before a decision's clock: oldest first)
    placed_fifo, placed_lifo = fifo.decide(0.6), lifo.decide(0.6)
    assert [t.node for t in placed_fifo] == [t.node for t in placed_lifo] == ["n0", "n1"]
    assert [t.id for t in placed_fifo] == ["a0", "b0"]
    assert [t.id for t in placed_lifo] == ["a9", "b0"]
    a0 = next(t for t in lifo.queue.tasks() if t.id == "a0")
    assert lifo.queue.position(a0) == 8  # eight of a's tasks go before it now
    # a finish frees a slot: a's next newest, not its oldest (a0 still has 0.4 s)
    lifo.finish("a9", 0.7)
    assert [t.id for t in lifo.decide(0.7)] == ["a8"]
    # what waits past its deadline is dropped at the head as before, unplaced
    lifo.finish("a8", 1.25)
    out = lifo.decide(1.25)
    assert [t.id for t in out if t.node is None] == ["a0", "a1", "a2"]
    assert [t.id for t in out if t.node is not None] == ["a7"]


def test_newest_first_only_past_the_fraction_and_validated():
    sched = _backlog(0.5)
    sched.interp.state["alloc"]["c"] = [0.9, 0.9, 0.9]
    assert [t.id for t in sched.decide(0.4)] == ["a0", "b0"]  # a0 waited 0.4 of 1 s: oldest first still
    with pytest.raises(ValueError, match="newest_first.*1.5"):
        PendingQueue(lambda t: t, newest_first=1.5)


def test_a_backlog_whose_newest_task_has_no_deadline_stays_oldest_first():
    """Newest first serves a timed backlog's freshest task; a newest task without a deadline would gain
    nothing by going first, and take the room of the timed tasks behind the head."""
    from types import SimpleNamespace as T

    q = PendingQueue(lambda t: t.tenant, deadlines=True, newest_first=0.5)
    for i in range(3):
        q.add(T(id=f"a{i}", arrival=0.1 * i, deadline=0.1 * i + 1.0, tenant="a"))
    q.at(0.7)  # a0 waited 0.7 of its 1 s
    assert [t.id for t in q.rows()] == ["a2"]
    q.add(T(id="a3", arrival=0.3, deadline=math.inf, tenant="a"))
    assert [t.id for t in q.rows()] == ["a0"] and q.position(q.rows()[0]) == 0
