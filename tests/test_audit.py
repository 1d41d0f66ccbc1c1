"""The State audit (ray_adaptive/runtime/audit.py): the replay and comparison alone, then on real runtimes of
each plan -- quiesced, with tasks in flight in two processes, and with a drift injected at the store."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import ray

import ray_adaptive as ra
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import NodeState
from ray_adaptive.runtime.audit import ABS_TOL, compare, rebuild
from tests.conftest import wait_for

VEC = [0.4, 0.8, 0.4]


# -- the replay and the comparison, free of Ray ------------------------------------------------------------
def _nodes(k: int = 2):
    return [NodeState(f"n{i}", i, 1, 2, {}) for i in range(k)]


def test_the_replay_is_the_initial_state_plus_the_dispatch_of_every_placed_task():
    policy = load_policy("drf_lb")
    answers = {"p1": {"undecided": [("p1-1", 0.2, {"tenant": "a", "resource_vec": VEC})],
                      "placed": [("p1-0", 0.1, {"tenant": "a", "resource_vec": VEC}, "n0")]},
               "p2": {"undecided": [], "placed": [("p2-0", 0.1, {"tenant": "b", "resource_vec": VEC}, "n1"),
                                                  ("p2-1", 0.3, {"tenant": "b", "resource_vec": VEC}, "n1")]},
               "silent": None}
    state, problems = rebuild(policy, _nodes(), answers)
    assert problems == []
    assert np.allclose(state["alloc"]["a"], VEC) and np.allclose(state["alloc"]["b"], [2 * v for v in VEC])
    assert np.allclose(state["capacity"], [1.5, 2.0, 1.0])
    empty, _ = rebuild(policy, _nodes(), {})
    assert empty["alloc"] == {}  # quiesced: the initial State


def test_a_task_on_a_node_the_plan_lacks_is_a_problem_of_the_reading_not_a_crash():
    _, problems = rebuild(load_policy("drf_lb"), _nodes(),
                          {"p": {"undecided": [], "placed": [("p-0", 0.0, {"tenant": "a", "resource_vec": VEC}, "gone")]}})
    assert len(problems) == 1 and "gone" in problems[0]


def test_the_comparison_reports_each_key_that_differs_and_reads_a_missing_key_as_zero():
    rules = {"alloc": "add"}
    implied = {"alloc": {"a": np.array(VEC)}, "capacity": np.array([1.5, 2.0, 1.0])}
    # rounding of a different order of += / -= is no difference; a zero entry equals a missing one
    in_force = {"alloc": {"a": np.array(VEC) + ABS_TOL / 10, "b": np.zeros(3)}, "capacity": np.array([1.5, 2.0, 1.0])}
    assert compare(in_force, implied, rules) == ({}, {})
    drifted = {"alloc": {"a": np.array(VEC), "b": np.array([-0.4, -0.8, -0.4])}, "capacity": np.array([1.5, 2, 1])}
    diffs, _ = compare(drifted, implied, rules)
    assert list(diffs) == ["alloc"] and [d["key"] for d in diffs["alloc"]] == ["b"]
    assert np.allclose(diffs["alloc"][0]["in_force"], [-0.4, -0.8, -0.4])
    assert np.allclose(diffs["alloc"][0]["implied"], 0.0)
    diffs, _ = compare({**implied, "capacity": np.array([1.5, 2.0, 2.0])}, implied, rules)
    assert list(diffs) == ["capacity"] and diffs["capacity"][0]["key"] is None


def test_variables_whose_hooks_do_not_commute_are_listed_not_compared():
    diffs, skipped = compare({"home": {"k": "n1"}, "next": 3}, {"home": {}, "next": 0}, {"home": "none", "next": "none"})
    assert diffs == {} and skipped == {"home": "none", "next": "none"}


# -- on Ray ------------------------------------------------------------------------------------------------
@ray.remote(num_cpus=1)
def hold(path: str) -> int:
    """Run until ``path`` exists (so that tasks stay placed while the audit reads)."""
    import time

    while not os.path.exists(path):
        time.sleep(0.01)
    return 1


@ray.remote(num_cpus=0)
class Submitter:
    """A second submitting process: tasks of tenant ``b`` that run until released."""

    def submit(self, path: str, n: int) -> int:
        fn = ra.policy("drf_lb")(hold).options(task={"tenant": "b", "resource_vec": VEC})
        self.futures = [fn.submit(path) for _ in range(n)]  # (.remote() waits for room; these may not get any yet)
        return n

    def pid(self) -> int:
        return os.getpid()

    def wait(self) -> int:
        return sum(ray.get([f.result(timeout=120) for f in self.futures], timeout=120))


@pytest.fixture
def runtime(ray_cluster):
    yield lambda plan: ra.start("drf_lb", plan=plan, executors=1, queue=1)
    ra.shutdown()


@pytest.mark.parametrize("plan", ["centralized", "decentralized", "hybrid"])
def test_a_runtime_audits_exact_quiesced_and_with_tasks_in_flight_in_two_processes(runtime, plan):
    rt = runtime(plan)
    quiet = ra.audit("drf_lb")
    assert quiet.exact and quiet.placed == quiet.undecided == 0, quiet.format()
    release = os.path.join(tempfile.mkdtemp(prefix="ra-audit-"), "release")
    other = Submitter.remote()
    ray.get(other.submit.remote(release, 3), timeout=60)
    fn = ra.policy("drf_lb")(hold).options(task={"tenant": "a", "resource_vec": VEC})
    futures = [fn.submit(release) for _ in range(8)]  # 11 tasks, 8 slots (4 nodes x (1 executor + 1 queued))
    try:
        # (a decentralized process decides on its replica and the loads last heard: it may place more)
        wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.exact and r.placed >= 8 and r.processes == 2,
                 timeout=30, message="an exact audit with 8 tasks placed in 2 processes")
        report = rt.audit()
        assert report.exact and report.undecided + report.placed == 11, report.format()
    finally:
        open(release, "w").close()
    assert sum(ray.get([f.result(timeout=120) for f in futures], timeout=120)) == 8
    assert ray.get(other.wait.remote(), timeout=120) == 3
    ray.kill(other)
    done = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.exact and r.placed == r.undecided == 0, timeout=30)
    assert done.processes == 1


def test_a_drift_injected_at_the_store_is_reported_per_variable_and_by_status(runtime):
    from click.testing import CliRunner

    from ray_adaptive.cli import main

    rt = runtime("decentralized")
    store = rt.topology.store
    # an OnFinish the store merged without its OnDispatch: tenant a's allocation below zero
    ray.get(store.sync.remote("ghost", {}, {}, rt.topology.generation, ("x", [(1, {"alloc": {"a": -np.array(VEC)}})])))
    report = rt.audit(timeout_s=0.5)
    assert not report.exact and report.settled, report.format()
    assert list(report.differences) == ["alloc"] and report.differences["alloc"][0]["key"] == "a"
    assert "alloc['a']: in force [-0.4, -0.8, -0.4], implied [0, 0, 0]" in report.format()
    out = CliRunner().invoke(main, ["status", "drf_lb", "--audit", "--timeout", "0.5"])
    assert out.exit_code == 1 and "NOT EXACT" in out.output and "alloc['a']" in out.output, out.output
    ray.get(store.sync.remote("ghost", {}, {}, rt.topology.generation, ("x", [(2, {"alloc": {"a": np.array(VEC)}})])))
    out = CliRunner().invoke(main, ["status", "drf_lb", "--audit", "--json"])
    assert out.exit_code == 0 and '"exact": true' in out.output, out.output


def test_a_process_taken_for_dead_at_a_switch_keeps_its_running_tasks_share_of_state(runtime, monkeypatch, caplog):
    """What release_tests/chaos.py --seed 3 found (a store restart slowed a live driver's ack past the switch's
    timeout): a decentralized replica whose last OnDispatch were not pushed yet (it pushes when tasks wait or
    finish) misses a switch's freeze; the switch collects the merged State without them, and the process,
    resuming, counts its running tasks under the new plan with no hook: their OnFinish drive the allocation
    below zero. Made deterministic by stopping the process (SIGSTOP) across the switch's ack timeout."""
    import signal

    from ray_adaptive.runtime import switch as switching

    rt = runtime("decentralized")
    release = os.path.join(tempfile.mkdtemp(prefix="ra-audit-"), "release")
    other = Submitter.remote()
    pid = ray.get(other.pid.remote(), timeout=30)
    try:
        ray.get(other.submit.remote(release, 2), timeout=60)
        wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.exact and r.placed == 2, timeout=30)
        monkeypatch.setitem(switching.switch.__kwdefaults__, "ack_timeout_s", 2.0)  # (10 s by default)
        os.kill(pid, signal.SIGSTOP)
        try:
            entry = rt.switch("centralized")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert entry["unacked"], entry  # (the interleaving: the process missed the freeze)
        assert "s (silent for the ack timeout, 2 s)" in caplog.text, caplog.text
        # heard from again, it gets the State rebuilt from every process's tasks (see PolicyRuntime.rebuild_late)
        wait_for(lambda: any("took for dead" in h["reason"] for h in rt.history), timeout=30,
                 message=lambda: f"the rebuild after the late process came back: {rt.history}")
        report = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.settled and r.processes == 2, timeout=30)
        assert report.exact, report.format()
    finally:
        open(release, "w").close()
    assert ray.get(other.wait.remote(), timeout=120) == 2
    after = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.settled, timeout=30)
    assert after.exact, after.format()


def test_a_process_stopped_across_a_store_restart_and_two_switches_keeps_its_share_of_state(runtime, monkeypatch):
    """The CI run's and the chaos run's inexact audit: a store killed and restarted, then two live switches
    (decentralized -> centralized -> decentralized) before a submitting process registered with the
    restarted store. Neither switch waited for it -- only processes registered with the incarnation alive
    were announced to -- so it decided on under the first plan, took up the third directly, and counted
    its running tasks there with no hook: the State handed over (the selector's, exact) never held their
    OnDispatch, and their OnFinish drove its allocation below zero. A process registered with an
    incarnation that died is waited for as any other: stopped here (SIGSTOP) across both switches, it is
    taken for dead by each, and rebuilt for once heard from again."""
    import signal

    from ray_adaptive.runtime import switch as switching

    rt = runtime("decentralized")
    release = os.path.join(tempfile.mkdtemp(prefix="ra-audit-"), "release")
    other = Submitter.remote()
    pid = ray.get(other.pid.remote(), timeout=30)
    try:
        ray.get(other.submit.remote(release, 2), timeout=60)
        wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.exact and r.placed == 2, timeout=30)
        monkeypatch.setitem(switching.switch.__kwdefaults__, "ack_timeout_s", 2.0)  # (10 s by default)
        store = rt.topology.store

        def restarted() -> bool:
            try:
                return ray.get(store.restarted.remote(), timeout=10)
            except ray.exceptions.RayActorError:
                return False
        os.kill(pid, signal.SIGSTOP)
        try:
            ray.kill(store, no_restart=False)  # (Ray restarts it)
            wait_for(restarted, timeout=30, message="the store restarted")
            rebuilt = rt.switch("centralized")
            exact = rt.switch("decentralized")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert len(rebuilt["unacked"]) == len(exact["unacked"]) == 1, (rebuilt, exact)  # (the stopped process)
        wait_for(lambda: any("took for dead" in h["reason"] for h in rt.history), timeout=30,
                 message=lambda: f"the rebuild after the late process came back: {rt.history}")
        report = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.settled and r.processes == 2, timeout=30)
        assert report.exact and report.placed == 2, report.format()
    finally:
        open(release, "w").close()
    assert ray.get(other.wait.remote(), timeout=120) == 2
    after = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.settled and r.placed == 0, timeout=30)
    assert after.exact, after.format()
    ray.kill(other)


def test_a_switch_does_not_wait_for_a_submitting_process_that_died(runtime, monkeypatch, caplog):
    """The 30-minute chaos run's slow switches (p99 10 s): a submitter killed just before a switch never
    acks, and the switch waited its whole ack timeout for it -- until the job watch evicted the process,
    every switch did. The switch looks at the GCS as the job watch does, and takes a dead one for dead at
    once. (The job watch is stopped here: the switch alone must find it.)"""
    from ray_adaptive.runtime import switch as switching

    rt = runtime("decentralized")
    rt.jobs.stop()
    release = os.path.join(tempfile.mkdtemp(prefix="ra-audit-"), "release")
    other = Submitter.remote()
    try:
        ray.get(other.submit.remote(release, 2), timeout=60)
        wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.placed == 2 and r.processes == 2, timeout=30)
        theirs = sorted(set(ray.get(rt.topology.store.clients.remote(), timeout=30)) - {rt.router.client})
        monkeypatch.setitem(switching.switch.__kwdefaults__, "ack_timeout_s", 120.0)
        ray.kill(other)
        entry = rt.switch("centralized")
    finally:
        open(release, "w").close()
    assert entry["unacked"] == theirs and entry["freeze_s"] < 60, entry
    assert "(their job ended or their Ray worker died)" in caplog.text, caplog.text


def test_a_submitting_process_lost_with_its_node_is_evicted(ray_cluster, runtime):
    """The chaos run's last slow switches: a submitter lost with its node stays "alive" in the GCS worker
    table for good (its raylet never reports its death), so the job watch never evicted it and every switch
    waited the whole ack timeout for it. A worker whose node the GCS marks dead is dead."""
    rt = runtime("decentralized")
    far = ray_cluster.cluster.add_node(num_cpus=0, resources={"far": 1})  # (0 CPUs: no executor, no task)
    release = os.path.join(tempfile.mkdtemp(prefix="ra-audit-"), "release")
    try:
        other = Submitter.options(resources={"far": 0.1}).remote()
        ray.get(other.submit.remote(release, 2), timeout=60)
        wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.placed == 2 and r.processes == 2, timeout=30)
        ray_cluster.cluster.remove_node(far)
        far = None
        wait_for(lambda: [h for h in rt.history if "died, the job lives on" in h.get("reason", "")], timeout=30,
                 message=lambda: f"the process lost with its node evicted: {rt.history[-2:]}")
        report = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.settled and r.processes == 1, timeout=30)
        assert report.exact and report.placed == 0, report.format()
    finally:
        open(release, "w").close()
        if far is not None:
            ray_cluster.cluster.remove_node(far)


@ray.remote(num_cpus=0)
class Busy:
    """A submitting process that keeps tasks of tenant ``c`` coming (short ones) until it has run ``n``."""

    def run(self, n: int) -> int:
        import time

        @ray.remote(num_cpus=1)
        def short(i: int) -> int:
            time.sleep(0.02)
            return i

        fn = ra.policy("drf_lb")(short).options(task={"tenant": "c", "resource_vec": VEC})
        return len(ray.get([fn.remote(i) for i in range(n)], timeout=300))


@pytest.mark.parametrize("plan", ["decentralized", "hybrid"])
def test_a_switch_right_after_the_store_restarts_keeps_the_state_exact(runtime, plan):
    """A store killed under load and restarted by Ray, then a live switch at once: processes that had not
    registered with the restarted store yet were not waited for by the switch -- a decentralized replica's
    last OnDispatch never reached the State handed over (the allocation ended at -6 tasks' worth), a
    process's finish notifications reached the frozen hybrid selector after its State was taken (+8) --
    so such a switch rebuilds the State from every process's tasks (switch._collect)."""
    rt = runtime(plan)
    busy = [Busy.remote() for _ in range(2)]
    runs = [b.run.remote(300) for b in busy]
    wait_for(lambda: rt.audit(timeout_s=1), until=lambda r: r.processes == 3, timeout=60, message="3 processes")
    ray.kill(rt.topology.store, no_restart=False)  # (Ray restarts it)
    entry = rt.switch("centralized")
    assert not entry["exact"]  # (rebuilt)
    rt.switch(plan)
    assert ray.get(runs, timeout=300) == [300, 300]
    done = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.settled and r.placed == r.undecided == 0,
                    timeout=60)
    assert done.exact, done.format()
    for b in busy:
        ray.kill(b)


def test_a_push_answered_but_not_yet_applied_is_counted_once(runtime):
    """An idle decentralized process applies its last push's answer only at its next sync: the audit applies
    it first -- else the store's merged State and the replica's unanswered deltas count that change twice
    (an idle submitter's last OnFinish read as one task's share below zero) -- and a push still in flight
    makes the reading unsettled."""
    from ray_adaptive.runtime.audit import _unpushed

    rt = runtime("decentralized")
    decider = rt.router.decider
    client = decider._m  # (the replica's StoreClient)
    with rt.router._cond:  # (the decider's lock: its dispatcher thread cannot apply the answer meanwhile)
        client.sched.interp.state["alloc"]["a"] = np.array(VEC)  # a change of the replica, pushed now
        client._next = 0.0
        client.refresh(want=True)
        assert client._unanswered  # (pushed, not answered yet)
        wait_for(lambda: client._inflight.done(), timeout=30, message="the store's answer")
        unpushed, syncing = _unpushed(decider)
        assert not syncing and not client._unanswered  # applied: the store holds the change, counted there only
        assert not unpushed.get("alloc"), unpushed
        client.sched.interp.state["alloc"]["a"] = np.zeros(3)  # (undone, pushed at the next sync)
