"""Preemptible tasks on Ray (issue 39): a stopped run, then the final one; the caller's ref resolves to the
final run's result, and each task's body completes exactly once (a marker file per completed body).

First the mechanism alone (ray_adaptive/runtime/preempt.py: runs stopped and relaunched here by hand),
then driven by a policy: priority_preemptive's selector chooses the victim, its process stops the run,
the task waits again and completes once, and the State returns to zero."""

import collections
import os
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive.dsl import parse_policy
from ray_adaptive.runtime.preempt import FAILED, FINISHED, PREEMPTED, PreemptibleRuns

from _builders import counted_preemptive
from conftest import wait_for


@ray.remote(num_cpus=1)
def body(task_id, run, seconds, folder, fail=False):
    import time

    open(os.path.join(folder, f"{task_id}.started.{run}"), "w").close()
    time.sleep(seconds)
    if fail:
        raise ValueError(f"{task_id} failed on its own")
    open(os.path.join(folder, f"{task_id}.done.{run}"), "w").close()  # (a stopped run never gets here)
    return f"{task_id}: run {run}"


def markers(folder, kind):
    return sorted(f for f in os.listdir(folder) if f".{kind}." in f)


def test_a_preempted_task_resolves_to_its_final_run_and_completes_once(ray_cluster, tmp_path):
    folder = str(tmp_path)
    runs = PreemptibleRuns()
    try:
        refs = {t: runs.submit(t, lambda t=t: body.remote(t, 0, 20.0, folder)) for t in ("a", "b")}
        wait_for(lambda: len(markers(folder, "started")) == 2, timeout=30, message="both first runs start")
        assert runs.preempt("a") == 0
        assert runs.outcome("a", timeout=30) == PREEMPTED
        assert runs.relaunch("a", lambda: body.remote("a", 1, 0.5, folder)) == 1
        assert ray.get(refs["a"], timeout=60) == "a: run 1"  # the caller's ref: the final run, no error
        assert runs.outcome("a", timeout=30) == FINISHED
        assert markers(folder, "done") == ["a.done.1"]  # run 0 was stopped before it completed
        runs.preempt("b")
        assert runs.outcome("b", timeout=30) == PREEMPTED
        runs.relaunch("b", lambda: body.remote("b", 1, 0.5, folder))
        assert ray.get(refs["b"], timeout=60) == "b: run 1"
        assert markers(folder, "done") == ["a.done.1", "b.done.1"]  # each body completed exactly once
    finally:
        runs.close()


def test_a_cancel_that_comes_after_the_finish_is_a_finish(ray_cluster, tmp_path):
    folder = str(tmp_path)
    runs = PreemptibleRuns()
    try:
        ref = runs.submit("c", lambda: body.remote("c", 0, 0.0, folder))
        assert ray.get(ref, timeout=60) == "c: run 0"
        runs.preempt("c")  # too late: nothing to stop
        assert runs.outcome("c", timeout=30) == FINISHED
        with pytest.raises(ValueError, match="not in progress here"):
            runs.relaunch("c", lambda: body.remote("c", 1, 0.0, folder))  # a finished task is forgotten
    finally:
        runs.close()


def test_the_tasks_own_error_reaches_its_caller_and_is_no_preemption(ray_cluster, tmp_path):
    folder = str(tmp_path)
    runs = PreemptibleRuns()
    try:
        ref = runs.submit("d", lambda: body.remote("d", 0, 0.0, folder, fail=True))
        with pytest.raises(ValueError, match="d failed on its own"):
            ray.get(ref, timeout=60)
        assert runs.outcome("d", timeout=30) == FAILED
    finally:
        runs.close()


# ---------------------------------------------------------------------------------------------------------
# Driven by a policy (the selector chooses the victim, its process stops the run): priority_preemptive.

COUNTED_PREEMPTIVE = counted_preemptive()  # (see tests/_builders.py)


@ray.remote(num_cpus=1)
def job(name, seconds, folder, gate=None):
    """A task body that tolerates starting more than once: each start leaves a marker; it runs until the
    file ``gate`` exists (if given), then ``seconds``; its completion creates its marker with O_EXCL, so a
    second completed run would fail (the test sees the error)."""
    import time

    started = time.time()
    with open(os.path.join(folder, f"{name}.started.{os.getpid()}"), "w") as f:
        f.write(repr(started))
    while gate is not None and not os.path.exists(gate):
        time.sleep(0.05)
    time.sleep(seconds)
    os.close(os.open(os.path.join(folder, f"{name}.done"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return f"{name} done", started


def _selector_stats(rt) -> dict:
    return ray.get(rt.topology.selector.stats.remote(), timeout=30)


def test_priority_preemptive_stops_low_tasks_for_high_ones_and_every_low_task_completes_once(ray_cluster, tmp_path):
    folder = str(tmp_path)
    rt = ra.start(parse_policy(COUNTED_PREEMPTIVE, name="h39_preemptive"), plan="centralized", queue=0, hold="caller")
    try:
        slots = sum(n.executors for n in rt.topology.nodes if n.runs_tasks)
        work = ra.policy("h39_preemptive")(job)
        low = work.options(task={"priority": 0}, preemptible=True)
        gate = os.path.join(folder, "gate")  # (no low task ends before the high one started: none is spared)
        high_gate = os.path.join(folder, "high_gate")  # (the high tasks run on while why_placed is asked)
        refs = {f"low{i}": low.remote(f"low{i}", 1.0, folder, gate) for i in range(slots)}  # every executor
        wait_for(lambda: len(markers(folder, "started")) == slots, timeout=60, message="every low task started")
        submitted = time.time()
        high = work.options(task={"priority": 10})  # (each placed once a low one stops)
        futures = [high.submit(f"high{i}", 0.1, folder, high_gate) for i in range(2)]
        why = wait_for(lambda: rt.why_pending(futures[0]), until=lambda w: "victim" in w or w["state"] != "pending",
                       timeout=30, message="why_pending names the victim the high task chose")
        assert why["state"] == "pending" and "displaces" in why["why"] and why["victim"].startswith(rt.router.client)
        highs = [f.result(timeout=60) for f in futures]
        placed = time.time()
        # why_placed names the task each high one displaced: the victim why_pending named, each a different one
        displaced = [rt.why_placed(f) for f in futures]
        assert all(w["state"] == "placed" and w["displaced"].startswith(rt.router.client)
                   and "displaced" in w["why"] and w["displaced"] in w["why"] for w in displaced), displaced
        assert displaced[0]["displaced"] == why["victim"] and len({w["displaced"] for w in displaced}) == 2, displaced
        open(high_gate, "w").close()
        high_started = min(started for _, started in ray.get(highs, timeout=60))
        grace = rt.policy.preempt.grace
        assert high_started >= submitted + grace - 0.05, "the victims ran on for their grace"
        open(gate, "w").close()
        # every low task's ref resolves to its own result -- the stopped one's too, from its final run
        results = ray.get(list(refs.values()), timeout=120)
        assert [r for r, _ in results] == [f"{name} done" for name in refs]
        done = [f for f in os.listdir(folder) if f.endswith(".done")]
        assert sorted(done) == sorted(f"{name}.done" for name in [*refs, "high0", "high1"])  # each completed once
        starts = collections.Counter(m.split(".")[0] for m in markers(folder, "started"))
        stopped = sorted(name for name, k in starts.items() if k > 1)
        assert len(stopped) == 2 and all(starts[n] == 2 for n in stopped), starts  # two victims, each started again once
        stats = _selector_stats(rt)
        assert stats["preemptions"] == 2 and stats["nominated"] == 0, stats
        assert rt.router.stats.preempted == 2 and rt.monitor.load()["preemptions"] == 2
        # the State is back to zero: OnPreempt once for the stopped run, OnFinish once per completion
        wait_for(lambda: rt.export()["selector"], until=lambda s: not s["running"] and not s["pending"], timeout=30)
        assert rt.export()["selector"]["state"] == {"holding": 0}
        report = rt.audit()
        assert report.exact, report
        print(f"high tasks: placed {placed - submitted:.2f} s, the first started {high_started - submitted:.2f} s "
              f"after submission (grace {grace:g} s)")
    finally:
        ra.shutdown()


def test_a_live_switch_in_a_victims_grace_preempts_once_and_loses_nothing(ray_cluster, tmp_path):
    """A live switch (a node joins: no executor, so no room for the high task there) while a high task's
    victim runs its grace: the nomination is not carried -- the new generation's selector chooses again
    -- and the high task still gets a low one's executor; one low run stopped in all, every low task
    completing once with its own result, the State back to zero and the audit exact. (Here the switch
    publishes about 0.7 s before the grace ends, measured; the test holds whichever comes first.)"""
    folder = str(tmp_path)
    rt = ra.start(parse_policy(COUNTED_PREEMPTIVE, name="h39_switch"), plan="centralized", queue=0, hold="caller")
    joined = None
    try:
        slots = sum(n.executors for n in rt.topology.nodes if n.runs_tasks)
        work = ra.policy("h39_switch")(job)
        gate = os.path.join(folder, "gate")
        refs = {f"low{i}": work.options(task={"priority": 0}, preemptible=True).remote(f"low{i}", 1.0, folder, gate)
                for i in range(slots)}
        wait_for(lambda: len(markers(folder, "started")) == slots, timeout=60, message="every low task started")
        future = work.options(task={"priority": 10}).submit("high0", 0.1, folder)
        why = wait_for(lambda: rt.why_pending(future), until=lambda w: "victim" in w or w["state"] != "pending",
                       timeout=30, message="the high task's victim nominated")
        before = len(rt.history)
        joined = ray_cluster.cluster.add_node(num_cpus=0)  # (a live switch to the same plan: its nodes changed)
        switch = wait_for(lambda: rt.history[before:], until=lambda h: any("joined" in e["reason"] for e in h),
                          timeout=60, message=lambda: f"the switch for the node that joined: {rt.history[before:]}")[-1]
        published = switch["time"] + switch["build_s"] + switch["prepare_s"] + switch["freeze_s"] - rt.topology.t0
        print(f"nominated, grace ends at {why.get('grace_ends_at')}; the switch published at {published:.3f} s")
        assert ray.get(future.result(timeout=60), timeout=60)[0] == "high0 done"
        open(gate, "w").close()
        results = ray.get(list(refs.values()), timeout=120)
        assert [r for r, _ in results] == [f"{name} done" for name in refs]
        done = [f for f in os.listdir(folder) if f.endswith(".done")]
        assert sorted(done) == sorted(f"{name}.done" for name in [*refs, "high0"])  # each completed once
        starts = collections.Counter(m.split(".")[0] for m in markers(folder, "started"))
        assert sorted(starts.values()) == [1] * slots + [2], starts  # one low run stopped (started twice), in all
        assert rt.router.stats.preempted == 1
        wait_for(lambda: rt.export()["selector"], until=lambda s: not s["running"] and not s["pending"], timeout=30)
        assert rt.export()["selector"]["state"] == {"holding": 0}
        report = rt.audit()
        assert report.exact, report
    finally:
        open(os.path.join(folder, "gate"), "w").close()
        ra.shutdown()
        if joined is not None:
            ray_cluster.cluster.remove_node(joined)


def test_preemptible_is_checked_early_and_refused_for_actors(ray_cluster):
    fn = ra.policy("priority_preemptive")(job)
    with pytest.raises(TypeError, match="preemptible must be True or False, got 'yes'"):
        fn.options(preemptible="yes")
    with pytest.raises(TypeError, match="preemptible must be True or False"):
        fn.options(preemptible=1)
    assert fn.options(preemptible=True)._preemptible and not fn.options(preemptible=True).options(
        preemptible=False)._preemptible

    @ray.remote
    class Actor:
        pass

    with pytest.raises(ValueError, match="cannot be preemptible"):
        ra.policy("priority_preemptive")(Actor).options(preemptible=True)
