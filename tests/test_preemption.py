"""Preemption and aging in the ideal replay (issue 39): the shipped policies on scenarios worked out by
hand -- which task is preempted, when, and the State after -- replayed exactly.

The rules applied by hand are those of :mod:`ray_adaptive.sim.preemption` (docs/language.md,
*Preemption*): a waiting task with no candidate node chooses a victim at a decision point (or at the
next whole second while it waits), the victim runs on for the grace, then leaves its node (OnPreempt)
and waits again in its old place, and the waiting task takes its executor (OnDispatch).
"""

import numpy as np
import pytest

from ray_adaptive.dsl import parse_policy
from ray_adaptive.sim import replay
from ray_adaptive.workload import scenario_from_dict

from _builders import node, run, task

VEC = [0.375, 0.5, 0.25]  # a quarter of drf_reclaim's capacity [1.5, 2.0, 1.0]: dominant share 0.25


def pt(id, arrival, duration, preemptible=True, **fields):
    t = task(id, arrival, duration, **fields)
    t["preemptible"] = preemptible
    return t


def rows(result):
    return [(d.t, d.task, d.node, d.victim) for d in result.decisions]


def by_id(result):
    return {t.id: t for t in result.tasks}


# --------------------------------------------------------------- priority_preemptive


def test_priority_preemptive_hand_worked():
    """Two single-executor nodes without queues, two long preemptible low tasks, then two urgent ones.

    t=0    lo1 (priority 0) -> n0;  t=0.5  lo2 (priority 1) -> n1 (both nodes are now full)
    t=3    hi (5) arrives, no room: victims lo1 (0 * 1e6 + ran 3 s = 3) and lo2 (1e6 + 2.5): lo1, the lower
           priority; it runs on for the grace of 2 s
    t=3.5  mid (3) arrives, no room: lo1 is taken; lo2 (1 < 3) is its victim
    t=5    lo1 stops (ran 5 s, wasted), waits again; hi takes n0     (score recorded: Preempt's 3)
    t=5.5  lo2 stops (ran 5 s), waits again; mid takes n1            (1e6 + 3)
    t=6    hi finishes: lo2 (priority 1) before lo1 (0) -> n0
    t=7.5  mid finishes: lo1 -> n1; lo2 ends at 26, lo1 at 27.5
    """
    nodes = [node("n0", queue=0), node("n1", queue=0)]
    tasks = [pt("lo1", 0.0, 20, priority=0), pt("lo2", 0.5, 20, priority=1),
             pt("hi", 3.0, 1, False, priority=5), pt("mid", 3.5, 2, False, priority=3)]
    r = run("priority_preemptive", nodes, tasks)
    assert rows(r) == [(0.0, "lo1", "n0", None), (0.5, "lo2", "n1", None), (5.0, "hi", "n0", "lo1"),
                       (5.5, "mid", "n1", "lo2"), (6.0, "lo2", "n0", None), (7.5, "lo1", "n1", None)]
    assert [d.score for d in r.decisions[2:4]] == [3.0, 1e6 + 3.0]
    t = by_id(r)
    assert [(t[i].status, t[i].finished_at, t[i].preemptions) for i in ("lo1", "lo2", "hi", "mid")] == [
        ("finished", 27.5, 1), ("finished", 26.0, 1), ("finished", 6.0, 0), ("finished", 7.5, 0)]
    assert t["lo1"].stopped == [("n0", 0.0, 5.0)] and t["lo2"].stopped == [("n1", 0.5, 5.5)]
    s = r.summary()
    assert (s["preemptions"], s["wasted_s"]) == (2, 10.0)


def test_only_preemptible_tasks_are_victims():
    """The same arrivals with lo1 not preemptible: hi takes lo2 (its only possible victim) at 3 + 2."""
    nodes = [node("n0", queue=0), node("n1", queue=0)]
    tasks = [pt("lo1", 0.0, 20, False, priority=0), pt("lo2", 0.5, 20, priority=1),
             pt("hi", 3.0, 1, False, priority=5)]
    assert rows(run("priority_preemptive", nodes, tasks))[2] == (5.0, "hi", "n1", "lo2")


def test_a_victim_that_finishes_within_its_grace_is_not_stopped():
    """lo ends at 4, inside hi's grace (3 -> 5): it finishes (OnFinish) and hi takes the freed node then."""
    tasks = [pt("lo", 0.0, 4, priority=0), pt("hi", 3.0, 1, False, priority=5)]
    r = run("priority_preemptive", [node("n0", queue=0)], tasks)
    assert rows(r) == [(0.0, "lo", "n0", None), (4.0, "hi", "n0", None)]
    assert by_id(r)["lo"].preemptions == 0 and "preemptions" not in r.summary()


def test_a_task_is_preempted_at_most_max_times():
    """max=3: lo is displaced by h1, h2, h3 (each 1 s, arriving as the last ends) but not by h4.

    lo starts at 0; h1 at 1 -> lo stops at 3 (grace 2), h1 runs 3-4, lo 4-...; h2 at 4.5 -> lo stops at 6.5,
    h2 6.5-7.5, lo 7.5-; h3 at 8 -> stops 10, h3 10-11, lo 11-; h4 at 12: lo was preempted 3 times: h4
    waits until lo ends at 11 + 30 = 41.
    """
    tasks = [pt("lo", 0.0, 30, priority=0)] + [
        pt(f"h{i + 1}", a, 1, False, priority=5) for i, a in enumerate((1.0, 4.5, 8.0, 12.0))]
    r = run("priority_preemptive", [node("n0", queue=0)], tasks)
    assert [(t, v) for t, _, _, v in rows(r) if v] == [(3.0, "lo"), (6.5, "lo"), (10.0, "lo")]
    t = by_id(r)
    assert (t["lo"].preemptions, t["lo"].finished_at, t["h4"].started_at) == (3, 41.0, 41.0)


def test_a_preempted_task_keeps_its_place_and_is_not_dropped_by_its_timeout():
    """lo (timeout 1 s) started in time; preempted at 2 and waiting past its deadline, it still runs."""
    tasks = [pt("lo", 0.0, 5, priority=0), pt("hi", 0.0, 1, False, priority=5)]
    tasks[0]["arrival"], tasks[1]["arrival"], tasks[0]["timeout"] = 0.0, 0.1, 1.0
    r = run("priority_preemptive", [node("n0", queue=0)], tasks)
    assert rows(r) == [(0.0, "lo", "n0", None), (2.1, "hi", "n0", "lo"), (3.1, "lo", "n0", None)]
    assert by_id(r)["lo"].status == "finished"


def test_a_condition_on_the_clock_is_rechecked_every_second():
    """Preempt allows only after 2.5 s of waiting: hi (arrival 0.2) may preempt from 2.7 -- the first
    recheck after that is t=3 (whole seconds), so lo stops at 3 + grace 0.5."""
    policy = """
Task:
  priority: int
Score(task, node):
  return -task.priority
Preempt(task, victim, node): [grace=0.5]
  return 0 if task.waited >= 2.5 else inf
"""
    tasks = [pt("lo", 0.0, 10, priority=0), pt("hi", 0.2, 1, False, priority=5)]
    assert rows(run(policy, [node("n0", queue=0)], tasks))[1] == (3.5, "hi", "n0", "lo")


def test_a_task_placed_elsewhere_within_the_grace_spares_its_victim():
    """hi chooses lo on n0 at 1 (grace 2); short ends on n1 at 2: hi goes there, lo is spared."""
    tasks = [pt("lo", 0.0, 10, priority=0), pt("short", 0.0, 2, False, priority=9),
             pt("hi", 1.0, 1, False, priority=5)]
    r = run("priority_preemptive", [node("n0", queue=0), node("n1", queue=0)], tasks)
    assert rows(r) == [(0.0, "short", "n0", None), (0.0, "lo", "n1", None), (2.0, "hi", "n0", None)]
    assert by_id(r)["lo"].preemptions == 0


# --------------------------------------------------------------------- drf_reclaim


def test_drf_reclaim_hand_worked():
    """Greedy tenant A fills 4 nodes at 0 (8 tasks of 10 s, a quarter of capacity each); B brings 3 at 1.

    t=0    A0..A3 -> n0..n3, A's share 1.0; A4..A7 wait
    t=1    B arrives: 2 tenants, fair share 0.5; B holds 0 < 0.5 x 0.5 with tasks waiting: below since 1
    t=2..5 rechecks: B has been below for less than the timeout of 5 s
    t=6    B0: A after losing a task 0.75 >= 0.5 and B's 0.25 <= 0.75: victim A0 (n0; all of A's ran 6 s,
           node order), -750 + 6 = -744. Assuming it done, B1: B 0.25 + 0.25 <= 0.5, A 0.75 - 0.25 = 0.5:
           victim A1, -500 + 6 = -494. B2 would take B to 0.75 > 0.5: no.
    t=8    A0, A1 stop (ran 8 s each); B0 -> n0, B1 -> n1: B reaches its fair share 7 s after arriving
    t=10   A2, A3 end: A0, A1 (back in their old place, ahead of A4) -> n2, n3 (A's share 0.5, B's 0.5)
    t=18   B0, B1 end: B2 (B holds 0, score 0) -> n0, then A4 (A holds n2, n3: 0.5, score 500) -> n1
    """
    nodes = [node(f"n{i}", queue=0) for i in range(4)]
    tasks = ([pt(f"A{i}", 0.0, 10, tenant="A", resource_vec=VEC) for i in range(8)]
             + [pt(f"B{i}", 1.0, 10, tenant="B", resource_vec=VEC) for i in range(3)])
    r = run("drf_reclaim", nodes, tasks)
    assert rows(r)[4:10] == [(8.0, "B0", "n0", "A0"), (8.0, "B1", "n1", "A1"), (10.0, "A0", "n2", None),
                             (10.0, "A1", "n3", None), (18.0, "B2", "n0", None), (18.0, "A4", "n1", None)]
    assert [d.score for d in r.decisions[4:6]] == [-744.0, -494.0]
    t = by_id(r)
    assert t["A0"].stopped == [("n0", 0.0, 8.0)] and t["A1"].stopped == [("n1", 0.0, 8.0)]
    # the State after: everything released; the last change of below[] for each tenant
    s = r.state
    assert {k: list(v) for k, v in s["alloc"].items()} == {"A": [0.0, 0.0, 0.0], "B": [0.0, 0.0, 0.0]}
    assert (s["tasks"], s["waiting"], s["tenants"]) == ({"A": 0, "B": 0}, {"A": 0, "B": 0}, 0)
    assert s["below"] == {"A": False, "B": False}


def test_drf_reclaim_state_in_the_grace_and_after_the_stop():
    """The State at 7 (in the grace: nothing changed yet) and at 8.5 (A0, A1 stopped, B0, B1 placed)."""
    from ray_adaptive.sim import Replay
    from ray_adaptive.dsl import load_policy

    nodes = [node(f"n{i}", queue=0) for i in range(4)]
    tasks = ([pt(f"A{i}", 0.0, 10, tenant="A", resource_vec=VEC) for i in range(8)]
             + [pt(f"B{i}", 1.0, 10, tenant="B", resource_vec=VEC) for i in range(3)])
    rp = Replay(load_policy("drf_reclaim"), scenario_from_dict({"nodes": nodes, "tasks": tasks}))
    rp.run(until=7.0)
    s = rp.state
    assert (list(s["alloc"]["A"]), s["waiting"], s["below"], s["below_since"]["B"]) == (
        [1.5, 2.0, 1.0], {"A": 4, "B": 3}, {"A": False, "B": True}, 1.0)
    rp.run(until=8.5)
    assert (list(s["alloc"]["A"]), list(s["alloc"]["B"])) == ([0.75, 1.0, 0.5], [0.75, 1.0, 0.5])
    # A: 4 waiting + 2 preempted; B: 1 left. B at 0.5 = its fair share: no longer below
    assert (s["waiting"], s["below"]) == ({"A": 6, "B": 1}, {"A": False, "B": False})


def test_drf_lb_without_preemption_keeps_the_newcomer_waiting():
    """The same scenario under drf_lb: B waits for A's tasks to end at 10."""
    nodes = [node(f"n{i}", queue=0) for i in range(4)]
    tasks = ([pt(f"A{i}", 0.0, 10, tenant="A", resource_vec=[0.1, 0.2, 0.1]) for i in range(8)]
             + [pt(f"B{i}", 1.0, 10, tenant="B", resource_vec=[0.1, 0.2, 0.1]) for i in range(3)])
    r = run("drf_lb", nodes, tasks)
    assert min(by_id(r)[f"B{i}"].started_at for i in range(3)) == 10.0


# ------------------------------------------------------------------- priority + aging


def _stream(policy):
    """One node; a high task (priority 1, 1 s) arriving each second from 1 -- 100% load -- and a low one
    (priority 0) at 0.5, behind a busy task until 1."""
    tasks = [task("busy", 0.0, 1.0, priority=1), task("low", 0.5, 1.0, priority=0)]
    tasks += [task(f"h{k}", float(k), 1.0, priority=1) for k in range(1, 30)]
    return run(policy, [node("n0", queue=0)], tasks)


def test_priority_ages_a_low_task_past_a_steady_high_load():
    """At t=k, low (waited k - 0.5) scores -2000 x min((k - 0.5) / 10, 1) = -200 (k - 0.5), h_k -1000:
    low wins once 200 (k - 0.5) > 1000, i.e. at k = 6 -- a wait of 5.5 s, within max_age (10 s)."""
    r = _stream("priority")
    low = by_id(r)["low"]
    assert low.started_at == 6.0 and low.started_at - low.arrival <= 10.0
    assert [d.task for d in r.decisions[:7]] == ["busy", "h1", "h2", "h3", "h4", "h5", "low"]


def test_without_aging_the_low_task_starves():
    """max_age 1e9 s: no task ages in this run -- strict priority: low waits for the last high task."""
    from ray_adaptive.dsl import load_policy, format_policy

    text = format_policy(load_policy("priority")).replace("max_age: float = 10.0", "max_age: float = 1e9")
    r = _stream(text)
    assert by_id(r)["low"].started_at == 30.0  # only after the last high task (h29, 29 -> 30)


def _overload(policy):
    """One node; high tasks of 1 s every 0.5 s from 0 (200% load: a growing backlog), low at 0.25."""
    tasks = [task(f"h{i:02d}", i * 0.5, 1.0, priority=1) for i in range(60)] + [task("low", 0.25, 1.0, priority=0)]
    return run(policy, [node("n0", queue=0)], tasks)


def test_a_task_that_waited_max_age_goes_ahead_even_of_aged_high_tasks():
    """One high task starts each second (t=0..10: h00..h10, which arrived at 0..5); at t=k the oldest high
    waiting arrived at k/2. At 11 low has waited 10.75 >= max_age: it goes ahead of h11 (waited 5.5).
    Slurm's factor alone would not let it: low -2000 (capped) against h11's -1000 - 2000 x 0.55 = -2100,
    and the high tasks' waits grow from there -- low would start only after the last high, at 60."""
    from ray_adaptive.dsl import load_policy, format_policy

    r = _overload("priority")
    assert by_id(r)["low"].started_at == 11.0
    assert [d.task for d in r.decisions][10:13] == ["h10", "low", "h11"]
    slurm = format_policy(load_policy("priority")).replace(" - 1000000000.0 * aged", "")
    assert by_id(_overload(slurm))["low"].started_at == 60.0


def test_aging_weights_are_state_constants():
    from ray_adaptive.dsl import load_policy

    p = load_policy("priority")
    assert {d.name: d.init.value for d in p.state} == {"age_weight": 2000.0, "max_age": 10.0}


# ----------------------------------------------------------------------- scenario files


def test_preemptible_is_a_scenario_key_read_and_written():
    from ray_adaptive.workload.scenario import scenario_to_dict

    sc = scenario_from_dict({"nodes": [{"id": "n0"}], "tasks": [{"id": "t", "arrival": 0, "preemptible": True},
                                                               {"id": "u", "arrival": 0}]})
    assert [t.preemptible for t in sc.tasks] == [True, False]
    d = scenario_to_dict(sc)
    assert d["tasks"][0]["preemptible"] is True and "preemptible" not in d["tasks"][1]
    from ray_adaptive.errors import ScenarioError

    with pytest.raises(ScenarioError, match="'preemptible' must be true or false, found 1"):
        scenario_from_dict({"nodes": [{"id": "n0"}], "tasks": [{"id": "t", "arrival": 0, "preemptible": 1}]})


def test_a_policy_without_preempt_replays_as_before():
    """No Preempt: the same decisions whether tasks are preemptible or not."""
    nodes = [node("n0", queue=0)]
    a = [task("a", 0.0, 5, priority=0), task("b", 1.0, 1, priority=5)]
    b = [dict(t, preemptible=True) for t in a]
    p = parse_policy("Task:\n  priority: int\nScore(task, node):\n  return -task.priority\n")
    ra = replay(p, scenario_from_dict({"nodes": nodes, "tasks": a}))
    rb = replay(p, scenario_from_dict({"nodes": nodes, "tasks": b}))
    assert rows(ra) == rows(rb) == [(0.0, "a", "n0", None), (5.0, "b", "n0", None)]
    assert np.isfinite(ra.summary()["makespan_s"])
