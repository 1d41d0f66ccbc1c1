"""Ray's real autoscaler (v1, the fake multi-node provider) under a backlog the policy holds.

The cluster: a 0-CPU head and a node type of 1 CPU, 1 to 3 of them. Tasks the
policy holds in the caller are not in Ray's queue; the demand reporter tells
the autoscaler, which adds nodes up to the maximum; the policy places tasks on
them as they join; once the backlog drains the request is cleared and the idle
nodes go back to the minimum. Every task body runs once (a marker file per
task, created exclusively). The cluster runs in a session of its own and is
stopped by PID (never ``ray stop``): no process of it may be left.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive._private.autoscaler import launchable_node_types
from ray_adaptive._private.fake_autoscaler import FakeAutoscalingCluster
from tests.conftest import wait_for

MIN, MAX = 1, 3
TYPES = {"cpu1": {"resources": {"CPU": 1}, "min_workers": MIN, "max_workers": MAX},
         # a kind no node has until a task asks for it (its tasks wait for it: "waiting-for-node")
         # (with a CPU: a node's executors are its CPUs, and a node with none is given no task)
         "gpu1": {"resources": {"CPU": 1, "GPU": 1}, "min_workers": 0, "max_workers": 1}}


def _workers() -> list:
    """The alive nodes of type cpu1 (the head has no CPU; a gpu1 node, a GPU), by id."""
    return sorted(n["NodeID"] for n in ray.nodes()
                  if n["Alive"] and n["Resources"].get("CPU", 0) > 0 and not n["Resources"].get("GPU"))


def _standing_request():
    from ray.experimental.internal_kv import _internal_kv_get  # (a test may read private Ray)

    raw = _internal_kv_get("autoscaler_resource_request")
    return None if raw is None else json.loads(raw)


@pytest.fixture(scope="module")
def fake_cluster():
    # this driver leaves the session's shared cluster for the fake one, and comes back to it after (its
    # raylets run on: only the connection moves)
    session = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    if session is not None:
        ray.shutdown()
    fc = FakeAutoscalingCluster({"CPU": 0}, TYPES, idle_timeout_s=4)
    try:
        ray.init(address=fc.start(), logging_level="ERROR", log_to_driver=False)
        wait_for(lambda: len(_workers()) == MIN, timeout=60, message=lambda: f"workers: {_workers()}")
        yield fc
    finally:
        ray.shutdown()
        sid = fc.sid
        try:
            fc.shutdown()  # (raises naming any process left)
        finally:
            if session is not None:
                ray.init(address=session)
    assert sid is not None and fc.pids() == []


@ray.remote(num_cpus=1, max_retries=0)
def marked(folder: str, i: int, go: str) -> str:
    """Runs until the test creates ``go``: the backlog (and so the request) stays whole until the cluster has
    grown, however slowly this machine starts nodes. With fixed-length bodies the tasks drained on the
    first node while the next ones started, the request fell below the max, and the cluster stopped
    short of it (a CI failure on a slower machine)."""
    node = ray.get_runtime_context().get_node_id()
    os.close(os.open(os.path.join(folder, f"t{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.1)
    return node


def test_the_node_types_the_autoscaler_may_add(fake_cluster):
    assert sorted(launchable_node_types(), key=len) == [{"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]  # 1 of 3 up, 0 of 1


def test_a_held_backlog_grows_the_cluster_to_its_max_and_drained_it_shrinks_back(fake_cluster, tmp_path):
    first = _workers()
    rt = ra.start("least_loaded", plan="centralized")  # (hold "auto": the caller, with an autoscaler)
    assert not rt.topology.overflow and "autoscaler" in rt.holding
    reporter = rt.demand  # the owner's (see ray_adaptive.runtime.demand)
    assert reporter is not None
    try:
        fn = ra.policy("least_loaded")(marked)
        bodies = tmp_path / "bodies"
        bodies.mkdir()
        go = tmp_path / "go"
        refs = [fn.remote(str(bodies), i, str(go)) for i in range(12)]
        # the policy holds 11 of them (1 executor): the request asks room for all 12 (1 running + 11 held)
        wait_for(lambda: reporter.sent, timeout=10, message="no request sent")
        assert reporter.sent and len(reporter.sent) <= 12 and all(b == {"CPU": 1.0} for b in reporter.sent)
        try:
            wait_for(lambda: len(_workers()) == MAX, timeout=60, message=lambda: f"workers: {_workers()}")
        finally:
            go.touch()
        nodes = ray.get(refs, timeout=90)
    finally:
        try:
            wait_for(lambda: reporter.sent == [], timeout=10, message=lambda: f"still requested: {reporter.sent}")
        finally:
            ra.shutdown()
    assert sorted(os.listdir(bodies)) == sorted(f"t{i}" for i in range(12))  # every body once
    joined = set(nodes) - set(first)
    assert joined, f"no task ran on a node the autoscaler added: {sorted(set(nodes))}, first {first}"
    assert _standing_request() == []  # cleared once drained
    # idle nodes are removed: back to the minimum
    wait_for(lambda: len(_workers()) == MIN, timeout=45, message=lambda: f"workers: {_workers()}")


@ray.remote(num_cpus=0, num_gpus=1, max_retries=0)
def on_gpu(folder: str) -> str:
    os.close(os.open(os.path.join(folder, "gpu"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return ray.get_runtime_context().get_node_id()


def test_a_task_only_a_node_type_to_come_can_hold_waits_for_it_and_runs_there(fake_cluster, tmp_path):
    """No live node has a GPU, but the autoscaler may add one: the task is accepted (not refused as
    infeasible), says it waits for a node, is asked of the autoscaler, and runs on the node that joins."""
    assert not [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
    rt = ra.start("least_loaded", plan="centralized")
    try:
        future = ra.policy("least_loaded")(on_gpu).submit(str(tmp_path))
        why = rt.why_pending(future)
        assert why["reason"] == "waiting-for-node" and "GPU" in why["why"], why
        wait_for(lambda: rt.demand is not None and {"GPU": 1.0} in (rt.demand.sent or []), timeout=10,
                 message=lambda: f"the GPU asked of the autoscaler: {rt.demand and rt.demand.sent}")
        node = ray.get(future.result(timeout=90), timeout=90)
        gpus = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
    finally:
        ra.shutdown()
    assert gpus == [node] and os.listdir(tmp_path) == ["gpu"]  # (the node that joined; the body once)
