"""Preemptible tasks on Ray (issue 39, ray_adaptive/runtime/preempt.py): a stopped run, then the final one;
the caller's ref resolves to the final run's result, and each task's body completes exactly once (a
marker file per completed body). Not yet wired to a policy: the runs are stopped and relaunched here by hand."""

import os

import pytest
import ray

from ray_adaptive.runtime.preempt import FAILED, FINISHED, PREEMPTED, PreemptibleRuns

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
