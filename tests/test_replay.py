"""The cluster model under the ideal scheduler: invariants, timeouts, scenario errors."""

import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ray_adaptive.dsl import load_policy
from ray_adaptive.errors import ScenarioError
from ray_adaptive.sim import replay
from ray_adaptive.workload import scenario_from_dict
from ray_adaptive.sim.events import ARRIVAL, FINISH, EventLoop

from _builders import node, placements, run, task

VEC = [0.1, 0.2, 0.1]


@st.composite
def scenarios(draw):
    nodes = [{"id": f"n{i}", "executors": draw(st.integers(1, 2)), "queue": draw(st.integers(0, 3)),
              "resources": {"CPU": draw(st.sampled_from([1.0, 2.0, 4.0]))}}
             for i in range(draw(st.integers(1, 4)))]
    tasks = []
    for i in range(draw(st.integers(0, 40))):
        tasks.append({
            "id": f"t{i}",
            "arrival": draw(st.floats(0, 2, allow_nan=False).map(lambda x: round(x, 2))),
            "duration": draw(st.sampled_from([0.01, 0.1, 0.5, 1.0])),
            "timeout": draw(st.sampled_from([None, 0.0, 0.2, 1.0])),
            "resources": {"CPU": draw(st.sampled_from([0.0, 1.0, 2.0]))},
            "fields": {"tenant": draw(st.sampled_from(["a", "b", "g"])), "resource_vec": VEC},
        })
    return {"nodes": nodes, "tasks": tasks}


def _occupancy_ok(result, scenario):
    """Reconstruct each node's timeline from the task records and check capacity."""
    specs = {n["id"]: n for n in scenario["nodes"]}
    events = []  # (time, order, node, d_load, d_running, d_cpu)
    for t in result.tasks:
        if t.dispatched_at is None:
            continue
        cpu = t.spec.resources.get("CPU", 0.0)
        leave = t.finished_at if t.status == "finished" else t.spec.deadline
        events += [(t.dispatched_at, 1, t.node.id, 1, 0, cpu), (leave, 0, t.node.id, -1, 0, -cpu)]
        if t.started_at is not None:
            events += [(t.started_at, 1, t.node.id, 0, 1, 0.0), (t.finished_at, 0, t.node.id, 0, -1, 0.0)]
    state = {n: [0, 0, 0.0] for n in specs}
    for time, _, n, dl, dr, dc in sorted(events):
        s = state[n]
        s[0] += dl; s[1] += dr; s[2] += dc
        spec = specs[n]
        assert s[0] <= spec["executors"] + spec["queue"], f"{n} over capacity at {time}"
        assert s[1] <= spec["executors"], f"{n} runs too many at {time}"
        assert s[2] <= spec["resources"]["CPU"] + 1e-9, f"{n} over-committed CPU at {time}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios(), policy=st.sampled_from(["drf_lb", "drf_lb_paper", "fifo", "least_loaded", "round_robin", "bin_pack"]))
def test_replay_never_loses_or_duplicates_and_respects_capacity(sc, policy):
    p = load_policy(policy)
    if not p.task_fields:
        sc = {**sc, "tasks": [{**t, "fields": {}} for t in sc["tasks"]]}
    scenario = scenario_from_dict(sc)
    result = replay(p, scenario)
    ids = [t["id"] for t in sc["tasks"]]
    # every task ends exactly once, finished or dropped; none is decided twice
    assert sorted(t.id for t in result.tasks) == sorted(ids)
    # a task ends finished or dropped, unless no node could ever hold it and it has no timeout
    never_fits = {t["id"] for t in sc["tasks"]
                  if all(t["resources"]["CPU"] > n["resources"]["CPU"] for n in sc["nodes"])}
    for t in result.tasks:
        assert t.status in ("finished", "dropped") or (
            t.status == "pending" and t.id in never_fits and t.spec.timeout == math.inf), t
    assert result.summary()["pending"] == sum(t.status == "pending" for t in result.tasks)
    decided = [d.task for d in result.decisions]
    assert len(decided) == len(set(decided))
    assert {t.id for t in result.tasks if t.dispatched_at is not None} == set(decided)
    for t in result.tasks:
        if t.started_at is not None:  # started only after arrival and by the deadline
            assert t.arrival <= t.dispatched_at <= t.started_at <= t.spec.deadline + 1e-9
            assert t.status == "finished" and math.isclose(t.finished_at - t.started_at, t.spec.duration)
        if t.status == "dropped":
            assert t.started_at is None
    _occupancy_ok(result, sc)
    # nodes run their queue FIFO: start order is dispatch order
    for n in sc["nodes"]:
        mine = [t for t in result.tasks if t.node is not None and t.node.id == n["id"] and t.started_at is not None]
        by_dispatch = sorted(mine, key=lambda t: (t.dispatched_at, decided.index(t.id)))
        assert [t.id for t in sorted(mine, key=lambda t: (t.started_at, decided.index(t.id)))] == [t.id for t in by_dispatch]


def test_a_task_not_started_by_its_deadline_is_dropped_and_releases_state():
    nodes = [node("n0", queue=1)]
    tasks = [task("t0", 0.0, 1.0, tenant="a", resource_vec=VEC),
             task("t1", 0.0, 1.0, timeout=0.5, tenant="b", resource_vec=VEC),   # queued at n0, dropped at 0.5
             task("t2", 0.1, 1.0, timeout=0.3, tenant="b", resource_vec=VEC)]   # pending, dropped at 0.4
    r = run("drf_lb", nodes, tasks)
    status = {t.id: t.status for t in r.tasks}
    assert status == {"t0": "finished", "t1": "dropped", "t2": "dropped"}
    assert r.state["alloc"]["b"].tolist() == [0.0, 0.0, 0.0]  # OnFinish ran for the dropped t1
    s = r.summary()
    assert (s["finished"], s["dropped"], s["on_time"]) == (1, 2, 1)


def test_a_task_started_at_its_deadline_runs_but_finishes_late():
    r = run("fifo", [node("n0", queue=1)], [task("t0", 0.0, 1.0), task("t1", 0.0, 1.0, timeout=1.0)])
    t1 = r.tasks[1]
    assert (t1.status, t1.started_at, t1.on_time) == ("finished", 1.0, False)
    assert r.summary()["late"] == 1


def test_same_time_events_finish_then_arrive_then_decide():
    # t0 finishes at 1.0 as t1 and t2 arrive: the decision at 1.0 sees both and n0 free
    r = run("shortest_job_first", [node("n0", queue=0)],
            [task("t0", 0.0, 1.0, expected_duration=1.0), task("t1", 1.0, expected_duration=9.0),
             task("t2", 1.0, expected_duration=2.0)])
    assert placements(r) == [("t0", "n0"), ("t2", "n0"), ("t1", "n0")]


def test_event_loop_orders_by_time_priority_then_insertion():
    loop, seen = EventLoop(), []
    loop.at(1.0, ARRIVAL, seen.append, "arrive")
    loop.at(1.0, FINISH, seen.append, "finish")
    loop.at(1.0, ARRIVAL, seen.append, "arrive2")
    loop.at(0.5, ARRIVAL, seen.append, "early")
    assert loop.run() == 4 and seen == ["early", "finish", "arrive", "arrive2"]
    with pytest.raises(ValueError, match="before now"):
        loop.at(0.1, ARRIVAL, seen.append, "past")


@pytest.mark.parametrize("data, message", [
    ({"tasks": []}, "top level: missing key 'nodes'"),
    ({"nodes": [], "tasks": []}, "at least one node"),
    ({"nodes": [{"id": "n0"}], "tasks": [{"id": "t0"}]}, "tasks[0] (id \"t0\"): missing key 'arrival'"),
    ({"nodes": [{"id": "n0"}], "tasks": [{"id": "t0", "arrival": "soon"}]}, "'arrival' must be a number, found \"soon\""),
    ({"nodes": [{"id": "n0", "queue": -1}], "tasks": []}, "nodes[0] (id \"n0\"): 'queue' must be a non-negative integer"),
    ({"nodes": [{"id": "n0", "cpus": 2}], "tasks": []}, "unknown key 'cpus'"),
    ({"nodes": [{"id": "n0"}, {"id": "n0"}], "tasks": []}, "duplicate node id"),
    ({"nodes": [{"id": "n0"}], "tasks": [{"id": "t", "arrival": 0, "resources": {"CPU": "x"}}]}, "resource 'CPU' must be"),
])
def test_malformed_scenarios_name_the_entry_and_key(data, message):
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data, "sc.json")
    assert message in str(err.value) and str(err.value).startswith("sc.json: ")


@pytest.mark.parametrize("fields, message", [
    ({"tenant": "a"}, "missing field 'resource_vec' (vec<float>)"),
    ({"tenant": 3, "resource_vec": VEC}, "field 'tenant' must be string, found 3"),
    ({"tenant": "a", "resource_vec": VEC, "colour": "red"}, "unknown field 'colour'"),
    ({"tenant": "a", "resource_vec": ["x"]}, "field 'resource_vec' must be vec<float>"),
])
def test_task_fields_are_checked_against_the_policy(fields, message):
    sc = scenario_from_dict({"nodes": [{"id": "n0"}], "tasks": [{"id": "t7", "arrival": 0, "fields": fields}]})
    with pytest.raises(ScenarioError, match="tasks\\[0\\] \\(id \"t7\"\\)") as err:
        replay(load_policy("drf_lb"), sc)
    assert message in str(err.value)
