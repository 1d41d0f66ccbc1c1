"""A bad value never poisons a tenant, and the newer surfaces refuse bad input with one clear line (issue 36).

Each test is one row of the issue's table (or one clause of "what to build"),
and fails on the code before it:

* State stays finite and keeps its vec lengths: a task field that would make it
  otherwise is refused at submission (``inf`` like NaN; a vec of the wrong
  length, naming the length the policy fixes), and a hook that would leave a
  non-finite value or change a vec's length fails that task alone --
  PolicyRuntimeError naming the policy's FILE:LINE -- with State, the queue and
  the nodes exactly as before (hooks are atomic per task);
* ``simulate``'s flags and rate profiles: NaN times, all-zero profiles with
  ``--adaptive``, a cap on the tasks simulated, rates and durations out of
  range, empty rates, tenants' fields and shares;
* ``status``/``why`` addresses that are not a cluster's;
* ``ra.start(rate=)``, ``node_fields=``, ``rt.switch("adaptive")``'s message and
  the list of plans.

Nothing here starts Ray (``tests/test_hardening_ray.py`` has the rows that need it);
``tests/test_state_fuzz.py`` fuzzes the scheduler.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from click.testing import CliRunner

from ray_adaptive.api import cluster
from ray_adaptive.api.fields import check_task_fields
from ray_adaptive.cli import MAX_RATE as CLI_MAX_RATE
from ray_adaptive.cli import main
from ray_adaptive.compiler.select import select_plan
from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.errors import PolicyRuntimeError, ScenarioError
from ray_adaptive.plan.replicas import copy_state, same_state
from ray_adaptive.plan.scheduler import NodeState, Scheduler, TaskState
from ray_adaptive.workload import scenario_from_dict
from ray_adaptive.workload.limits import MAX_RATE, MAX_SIM_TASKS
from ray_adaptive.workload.rates import parse_profile

INF, NAN = float("inf"), float("nan")
DRF = load_policy("drf_lb")


def nodes(n=2, executors=1, queue=1):
    return [NodeState(f"n{i}", i, executors, queue, {"CPU": 1.0}) for i in range(n)]


def task(tid, tenant="a", vec=(0.1, 0.2, 0.1), arrival=0.0, **fields):
    return TaskState(tid, arrival, {"tenant": tenant, "resource_vec": list(vec), **fields})


def snapshot(s: Scheduler):
    """What a failed task must leave as it was: State, the queue, the running tasks, each node's load."""
    return copy_state(s.interp.state), sorted(s.queue.ids), sorted(s.running), [n.own for n in s.nodes]


def same(a, b) -> bool:
    return same_state(a[0], b[0]) and a[1:] == b[1:]


ARRIVAL_SUM = """
Task:
  w: float
State:
  total: float
  seen: map<string, int>
Score(task, node):
  return get_load(node)
OnArrival(task):
  seen[task.id] += 1
  total += task.w
OnDispatch(task, node):
  total += task.w
OnFinish(task, node):
  total -= 2.0 * task.w
"""


# ------------------------------------------------------------------ task fields: inf and vec lengths


@pytest.mark.parametrize("vec", [[INF, 0.5, 0.0], [0.1, -INF, 0.0], [NAN, 0.5, 0.0]])
def test_a_non_finite_resource_vec_is_refused_at_submission_like_nan(vec):
    with pytest.raises(TypeError, match=r"field 'resource_vec' must be vec<float> \(a list of finite numbers\)"):
        check_task_fields(DRF, {"tenant": "a", "resource_vec": vec}, "task for policy 'drf_lb'")


def test_a_non_finite_value_in_a_scenario_is_refused_naming_the_entry():
    data = {"nodes": [{"id": "n0"}], "tasks": [{"id": "t0", "arrival": 0, "fields": {"expected_duration": INF}}]}
    from ray_adaptive.workload import check_fields

    with pytest.raises(ScenarioError, match=r"tasks\[0\].*'expected_duration' must be float \(a finite number\)"):
        check_fields(load_policy("shortest_job_first"), scenario_from_dict(data))


def test_a_vec_of_the_wrong_length_is_refused_every_time_naming_the_length():
    for _ in range(7):  # (the same call succeeded 3 times of 7 before)
        with pytest.raises(TypeError, match=r"'resource_vec' must be a vec of length 3 \(the length of the vec "
                                            r"literal at drf_lb\.policy:15:\d+ it is combined with\), got \[1\.0\]"):
            check_task_fields(DRF, {"tenant": "a", "resource_vec": [1.0]}, "task for policy 'drf_lb'")
    check_task_fields(DRF, {"resource_vec": [1.0, 0.5, 0.0]}, "options", partial=True)  # (.options(): some fields)


def test_vec_lengths_are_inferred_from_the_literals_a_vec_is_combined_with():
    assert vec_lengths(DRF) == {"task.resource_vec": 3, "state.alloc[]": 3, "state.capacity": 3}
    p = parse_policy("Task:\n  v: vec<float>\n  w: vec<float>\nState:\n  m: map<string, vec<float>>\n"
                     "Score(task, node):\n  x = task.v + [0.0]\n  y = m[\"k\"] * 2.0 + task.w\n"
                     "  return sum(x if len(x) > 2 else [1.0, 2.0])\n")
    assert vec_lengths(p) == {"task.v": 2}  # ([0.0] fixes nothing: it takes the length of what it meets)
    both = parse_policy("Task:\n  v: vec<float>\nScore(task, node):\n"
                        "  return sum(task.v + [1.0, 2.0]) if task.v[0] > 0 else sum(task.v + [1.0, 2.0, 3.0])\n")
    assert vec_lengths(both) == {}  # (two lengths: none is known)


# --------------------------------------------------------------- the State stays finite, hooks are atomic


def test_a_hook_that_would_make_state_non_finite_fails_that_task_and_leaves_everything_as_it_was():
    s = Scheduler(DRF, nodes())
    s.add_and_decide(task("ok", "a"), 0.0)
    before = snapshot(s)
    with pytest.raises(PolicyRuntimeError, match=r"^drf_lb\.policy:23:3: alloc\['a'\] would become \[inf, 0\.7, 0\.1\], "
                                                 r"not finite: refused, State left as it was \(in OnDispatch\)$"):
        s.add_and_decide(task("bad", "a", (INF, 0.5, 0.0)), 0.1)  # (a field no submission check let through)
    assert same(snapshot(s), before)
    s.finish("ok", 1.0)
    placed = s.add_and_decide(task("next", "a"), 1.1)  # the tenant is not starved: its next task is placed
    assert [t.node for t in placed] == ["n0"] and np.isfinite(s.interp.state["alloc"]["a"]).all()


def test_a_vec_of_the_wrong_length_never_reaches_state_whatever_was_there():
    s = Scheduler(DRF, nodes())
    for i in range(7):
        with pytest.raises(PolicyRuntimeError, match=r"alloc\['b'\] would become \[1\.0\], a vec of length 1, not 3"):
            s.add_and_decide(task(f"u{i}", "b", (1.0,)), 0.0)
    assert s.interp.state["alloc"] == {} and not s.running and not s.pending and [n.own for n in s.nodes] == [0, 0]


def test_a_queued_task_the_policy_fails_on_is_returned_failed_and_the_queue_behind_it_goes_on():
    s = Scheduler(DRF, nodes(executors=2, queue=2))
    for t in [task("g0", "c", arrival=0.0), task("x0", "c", (1.0,), arrival=0.5), task("g1", "c", arrival=1.0),
              task("g2", "d", arrival=2.0)]:
        s.add(t, 0.0)  # (x0: a field no submission check let through)
    out = {t.id: t for t in s.decide(2.0)}
    assert out["x0"].node is None and out["x0"].error == ("drf_lb.policy:23:3: vectors of different lengths (3 and 1) "
                                                          "in one operation (in OnDispatch)")
    assert sorted(t for t in out if out[t].node) == ["g0", "g1", "g2"] and not s.pending
    np.testing.assert_allclose(s.interp.state["alloc"]["c"], [0.2, 0.4, 0.2])


def test_a_decision_whose_on_dispatch_overflows_fails_that_task_only():
    s = Scheduler(parse_policy(ARRIVAL_SUM, file="sum.policy"), nodes(executors=4, queue=0))
    for i, w in enumerate([1.0, 1e307, 1e308, 2.0]):  # OnArrival: total 1.1e308; t2's OnDispatch: inf
        s.add(TaskState(f"t{i}", float(i), {"w": w}), 0.0)
    out = {t.id: t for t in s.decide(1.0)}
    assert out["t2"].node is None and out["t2"].error.startswith("sum.policy:13:3: total would become inf")
    assert sorted(t for t in out if out[t].node) == ["t0", "t1", "t3"] and sorted(s.running) == ["t0", "t1", "t3"]
    assert s.interp.state["total"] == (1.0 + 1e307 + 1e308 + 2.0) + 1.0 + 1e307 + 2.0


SCORE_INDEX = """
Task:
  k: int
State:
  w: vec<float> = [1.0, 2.0]
Score(task, node):
  return w[task.k] + get_load(node)
OnDispatch(task, node):
  w[0] += 1.0
"""


def test_a_score_that_raises_on_one_task_fails_that_task_only():
    s = Scheduler(parse_policy(SCORE_INDEX, file="idx.policy"), nodes(executors=4, queue=0))
    for i, k in enumerate([0, 5, 1, 0]):  # (k=5: out of range)
        s.add(TaskState(f"t{i}", float(i), {"k": k}), 0.0)
    out = {t.id: t for t in s.decide(1.0)}
    assert out["t1"].node is None and out["t1"].error == "idx.policy:7:10: vec index out of range (length 2) (in Score)"
    assert all(out[t].node for t in ("t0", "t2", "t3")) and s.interp.state["w"][0] == 4.0


def test_tasks_of_different_lengths_in_one_queue_fail_the_odd_one_not_the_queue():
    p = parse_policy("Task:\n  v: vec<float>\nScore(task, node):\n  return sum(task.v) + get_load(node)\n")
    s = Scheduler(p, nodes(executors=4, queue=0))
    for i, v in enumerate([[1.0, 2.0], [1.0, 2.0], [3.0], [1.0, 1.0]]):
        s.add(TaskState(f"t{i}", float(i), {"v": v}), 0.0)
    out = {t.id: t for t in s.decide(1.0)}
    assert out["t2"].node is None and "different lengths" in out["t2"].error
    assert sorted(t for t in out if out[t].node) == ["t0", "t1", "t3"]


def test_on_arrival_that_fails_leaves_neither_state_nor_queue_holding_the_task():
    s = Scheduler(parse_policy(ARRIVAL_SUM, file="sum.policy"), nodes(queue=0))
    s.add(TaskState("a", 0.0, {"w": 1e308}), 0.0)  # fine alone
    before = snapshot(s)
    with pytest.raises(PolicyRuntimeError, match=r"^sum\.policy:11:3: total would become inf, not a finite number"):
        s.add(TaskState("b", 0.0, {"w": 1e308}), 0.0)  # (its first write, seen["b"], is undone too)
    assert same(snapshot(s), before) and "b" not in s.interp.state["seen"]


def test_a_submission_whose_on_dispatch_fails_takes_its_on_arrival_back():
    s = Scheduler(parse_policy(ARRIVAL_SUM, file="sum.policy"), nodes(queue=0))
    before = snapshot(s)
    with pytest.raises(PolicyRuntimeError, match=r"sum\.policy:13:3: total would become inf.*\(in OnDispatch\)"):
        s.add_and_decide(TaskState("a", 0.0, {"w": 1e308}), 0.0)  # OnArrival: 1e308; OnDispatch: 2e308 = inf
    assert same(snapshot(s), before)


def test_an_on_finish_that_fails_is_undone_logged_and_the_node_freed():
    s = Scheduler(parse_policy(ARRIVAL_SUM, file="sum.policy"), nodes(queue=0))
    s.add_and_decide(TaskState("a", 0.0, {"w": 1e307}), 0.0)
    s.interp.state["total"] = -1.7e308  # (as if other tasks had taken it there)
    s.finish("a", 1.0)  # -1.7e308 - 2e307 = -inf: refused
    assert s.interp.state["total"] == -1.7e308 and not s.running and [n.own for n in s.nodes] == [0, 0]
    assert s.hook_errors[-1][0] == "a" and "(in OnFinish)" in s.hook_errors[-1][1]


def test_a_hook_may_not_change_a_state_vec_s_length():
    p = parse_policy("State:\n  cap: vec<float> = [1.0, 2.0, 3.0]\nScore(task, node):\n  return 0\n"
                     "OnArrival(task):\n  cap = [1.0, 2.0]\n", file="cap.policy")
    s = Scheduler(p, nodes())
    with pytest.raises(PolicyRuntimeError, match=r"cap\.policy:6:3: cap would become \[1\.0, 2\.0\], a vec of length 2, "
                                                 r"not 3"):
        s.add(TaskState("t", 0.0, {}), 0.0)
    assert list(s.interp.state["cap"]) == [1.0, 2.0, 3.0]


# ----------------------------------------------------------------------------------- simulate's flags


def simulate(*args, tmp_path):
    out = CliRunner().invoke(main, ["simulate", "drf_lb", "--nodes", "4", "--window", "60", "--no-progress",
                                    "--plan", "centralized", "--out", str(tmp_path), *args])
    return out.exit_code, out.output.strip()


@pytest.mark.parametrize("rates", ["steps:0=200,nan=800", "steps:nan=800", "ramp:nan=200", "ramp:0=100,inf=200"])
def test_a_rate_profile_s_nan_time_is_refused(rates, tmp_path):
    code, out = simulate("--rates", rates, "--seconds", "1", tmp_path=tmp_path)
    assert code == 1 and out.startswith("error: --rates: ") and "finite times" in out and "\n" not in out


@pytest.mark.parametrize("rates", ["steps:0=0", "ramp:0=0,5=0", "bursts:base=0,peak=0,every=5,length=1",
                                   "sine:mean=0,amplitude=0,period=20", "const:0"])
def test_an_all_zero_profile_with_adaptive_says_nothing_arrives(rates, tmp_path):
    code, out = simulate("--rates", rates, "--adaptive", "--seconds", "1", tmp_path=tmp_path)
    assert code == 1 and out == (f"error: --adaptive: the rate {parse_profile(rates).label()} is 0 throughout the 1 s "
                                 "run: no task arrives, so there is nothing to adapt to; give a rate above 0")


def test_a_run_over_the_task_cap_is_refused_before_any_work(tmp_path):
    start = time.monotonic()
    code, out = simulate("--seconds", "3600", "--rates", "100000", tmp_path=tmp_path)
    assert code == 1 and time.monotonic() - start < 10
    assert out == (f"error: --rates 100000 over --seconds 3600 would simulate ~360,000,000 tasks, over the limit of "
                   f"{MAX_SIM_TASKS:,} (docs/limits.md): lower --rates or --seconds")
    assert not any(tmp_path.iterdir())  # (nothing was written)
    code, out = simulate("--seconds", "3600", "--rates", "steps:0=10,5=2000", tmp_path=tmp_path)
    assert code == 1 and "~7,200,000 tasks" in out  # (a profile: at its peak)


@pytest.mark.parametrize("args, message", [
    (["--rates", "inf"], "error: --rates: inf is not a rate in (0, 1e+09] tasks/s"),
    (["--rates", "1e308"], "error: --rates: 1e+308 is not a rate in (0, 1e+09] tasks/s"),
    (["--rates", "200,nan"], "error: --rates: nan is not a rate in (0, 1e+09] tasks/s"),
    (["--rates", "1e99%"], "error: --rates 1e99% (of 170 tasks/s): 1.7e+99 is not a rate in (0, 1e+09] tasks/s"),
    (["--rates", ""], "error: --rates is empty: give rates (200,400), percentages of the execution bound (50%,120%) "
                      "or a rate profile (ramp:0=100,10=900)"),
    (["--rates", "  "], "error: --rates is empty"),
    (["--rates", "200,,400"], "error: --rates: an empty item in '200,,400'; rates are comma-separated, e.g. 200,400"),
    (["--rates", "const:1e308"], "error: --rates: const rates (rate) must be at most 1e+09 tasks/s"),
    (["--duration", "1e-300"], "error: --duration 1e-300: the execution bound would be 4e+300 tasks/s (4 nodes x 1 "
                               "executors / 1e-300 s), over the limit of 1e+09 tasks/s: give a longer --duration"),
    (["--tenants", "a:inf"], "error: --tenants: the share of tenant 'a' must be a finite number > 0, found inf"),
    (["--tenants", "a:1:nofield=3"], "error: --tenants: tenant 'a': unknown field 'nofield'; policy drf_lb declares: "
                                     "tenant, resource_vec"),
    (["--tenants", "a:1:resource_vec=[1]"], "error: --tenants: tenant 'a': field 'resource_vec' must be a vec of "
                                            "length 3"),
    (["--tenants", "a:1:resource_vec=[Infinity]"], "error: --tenants: tenant 'a': field 'resource_vec' must be "
                                                       "vec<float> (a list of finite numbers)"),
])
def test_simulate_s_flags_get_our_message_naming_the_flag(args, message, tmp_path):
    code, out = simulate(*args, "--seconds", "1", tmp_path=tmp_path)
    assert code == 1 and out.startswith(message) and "\n" not in out and "internal error" not in out, out


def test_a_long_task_duration_shows_its_execution_bound_and_what_to_change(tmp_path):
    code, out = simulate("--duration", "3600", "--seconds", "1", tmp_path=tmp_path)
    assert code == 1 and "execution bound 0 " not in out
    assert out.startswith("error: at 0.000444 tasks/s the compiler's window of 60 tasks would span") \
        and "(the execution bound is 0.00111 tasks/s) or lower --window" in out


def test_a_run_s_epochs_read_in_order_are_the_epochs_read_alone():
    """(run_epochs keeps an index over the run instead of scanning every task per epoch)"""
    from ray_adaptive.dsl import load_policy as load
    from ray_adaptive.plan import LoweredPlan, Plan
    from ray_adaptive.sim.plan_sim import PlanSim
    from ray_adaptive.sim.timeline import epoch_of, run_epochs
    from ray_adaptive.workload.generate import paper_workload

    sim = PlanSim(LoweredPlan(Plan("centralized", "centralized"), load("drf_lb")),
                  paper_workload(1500, seconds=3.0, timeout=0.1))
    alone = []  # (read when the run reads it: a task dropped later would count then)
    epochs = run_epochs(sim, every=0.25, on_epoch=lambda e, s: alone.append(epoch_of(s, e.start, e.end)))
    assert len(epochs) == 12 and sum(e.dropped for e in epochs) > 0 and epochs == alone


def test_the_rate_limit_is_one_number():
    assert CLI_MAX_RATE == MAX_RATE  # (the CLI keeps its own copy: parsing its flags imports no numpy)


# ------------------------------------------------------------------------------ status / why addresses


@pytest.mark.parametrize("command", ["status", "why"])
@pytest.mark.parametrize("address, message", [
    ("[::1]:6379", "error: cannot reach a Ray cluster at '[::1]:6379': nothing answers there"),
    ("127.0.0.1:-1", "error: cannot reach a Ray cluster at '127.0.0.1:-1': -1 is not a port (1-65535)"),
    ("127.0.0.1:70000", "error: cannot reach a Ray cluster at '127.0.0.1:70000': 70000 is not a port (1-65535)"),
    ("local", "error: --address local would start a new, empty Ray cluster just for this command"),
    ("ray://localhost:1", "error: cannot reach a Ray cluster at 'ray://localhost:1': nothing answers there"),
    ("[zz]:1", "error: '[zz]:1' is not a Ray cluster address: expected host:port, [IPv6]:port, ray://host:port or auto"),
    (":6379", "error: ':6379' is not a Ray cluster address"),
    ("", "error: '' is not a Ray cluster address"),
])
def test_an_address_that_is_no_cluster_is_refused_in_seconds(command, address, message, monkeypatch):
    import ray

    started = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # (as a fresh process: the session's cluster may run)
    monkeypatch.setattr(ray, "init", lambda *a, **k: started.append(k))  # (it must never be reached)
    args = [command, "drf_lb"] + (["t1"] if command == "why" else []) + ["--address", address]
    start = time.monotonic()
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1 and out.output.strip().startswith(message) and time.monotonic() - start < 10
    assert not started


def test_an_address_where_something_else_answers_is_refused_in_seconds(monkeypatch):
    """(An HTTP server, sshd: Ray's connect waits for a GCS there for minutes.)"""
    import socket
    import threading

    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init reached"))
    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    start = time.monotonic()
    out = CliRunner().invoke(main, ["status", "--address", address])
    server.close()
    assert out.exit_code == 1 and time.monotonic() - start < 10
    assert out.output.strip() == (f"error: cannot reach a Ray cluster at '{address}': something answers there, but not "
                                  "as Ray does (gRPC); is it the cluster's GCS port (ray start --head --port)?")


# ------------------------------------------------------------------------ ra.start, node_fields, plans


@pytest.mark.parametrize("rate", [True, 1e308, float("inf"), float("nan"), 0, -1, "100"])
def test_start_refuses_a_rate_that_is_not_one(rate):
    import ray_adaptive as ra

    with pytest.raises(ValueError, match=r"rate must be a number of tasks/s in \(0, 1e\+09\], got "):
        ra.start("drf_lb", rate=rate)  # (refused before Ray is looked at)


def fake_nodes(monkeypatch, n=2):
    infos = [{"NodeID": f"{i:02d}" * 28, "Alive": True, "Resources": {"CPU": 1.0}, "Labels": {}} for i in range(n)]
    monkeypatch.setattr(cluster, "_alive_nodes", lambda: infos)
    return [i["NodeID"] for i in infos]


@pytest.mark.parametrize("node_fields, error, message", [
    ([1, 2], TypeError, r"node_fields= must be a dict of node id -> \{Node field: value\}, got \[1, 2\]"),
    ({3: {}}, TypeError, r"node_fields=: a node id is a string .*got 3"),
    ({"ff" * 28: {"zone": "a"}}, ValueError, r"node_fields=: no live node has id 'ffff.*' \(the live nodes: 0000"),
])
def test_node_fields_that_are_not_node_id_to_values_are_refused(node_fields, error, message, monkeypatch):
    fake_nodes(monkeypatch)
    with pytest.raises(error, match=message):
        cluster.policy_nodes(load_policy("zone_affinity"), None, 2, node_fields)


def test_node_fields_values_none_is_refused_naming_the_node(monkeypatch):
    ids = fake_nodes(monkeypatch)
    with pytest.raises(TypeError, match=rf"node_fields\['{ids[1]}'\] must be a dict of the policy's Node fields, "
                                        r"got None"):
        cluster.policy_nodes(load_policy("zone_affinity"), None, 2, {ids[0]: {"zone": "a"}, ids[1]: None})
    got = cluster.policy_nodes(load_policy("zone_affinity"), None, 2, {i: {"zone": "a"} for i in ids})
    assert [n.fields for n in got] == [{"zone": "a"}] * 2


def test_switching_to_adaptive_says_it_is_the_controller_not_a_plan():
    with pytest.raises(ValueError, match=r"^'adaptive' is not a plan but the controller that switches between plans .*"
                                         r"ra\.start\(policy, plan='adaptive'\); a switch \(rt\.switch\) takes one plan"):
        select_plan(DRF, "adaptive", nodes=4, executors=1, queue=2)


def test_the_list_of_plans_names_each_once():
    with pytest.raises(ValueError, match="unknown plan") as err:
        select_plan(DRF, "nope", nodes=4, executors=1, queue=2)
    names = str(err.value).split("expected one of: ")[1].removesuffix(", or a plan file").split(", ")
    assert "centralized" in names and len(names) == len(set(names))
