"""ray-adaptive status and why, run from a separate process that never called ra.start, against runtimes
on the 4-node cluster: the plan, actors, slots and tenants; why a task waits (no room, ranked behind,
infeasible -- naming the policy's line) and why a task landed where it did (its score on each node)."""

import json
import os
import subprocess
import sys
import tempfile

import pytest
import ray

import ray_adaptive as ra
from tests.conftest import wait_for

VEC = [0.1, 0.2, 0.1]


@ray.remote(num_cpus=0)
def hold(gate: str):
    """Run until ``gate`` exists (a file): holds its slot as long as the test needs (fails after 120 s)."""
    wait_for(lambda: os.path.exists(gate), timeout=120, message=f"the gate {gate}")
    return ray.get_runtime_context().get_node_id()


def _cli(address: str, *args) -> subprocess.CompletedProcess:
    """The command line in a process of its own (a driver of its own, connected to the cluster)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "ray_adaptive", *args, "--address", address], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.fixture
def gate():
    d = tempfile.mkdtemp(prefix="ra-gate-", dir="/tmp")
    path = os.path.join(d, "open")
    yield path
    open(path, "w").close()


def test_status_and_why_of_a_running_policy_from_another_process(ray_cluster, gate):
    address = ray_cluster.cluster.address
    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=0)  # 4 slots
    try:
        f = ra.policy("drf_lb")(hold)
        held = [f.options(task={"tenant": "a", "resource_vec": VEC}).remote(gate) for _ in range(4)]
        waiting = [f.options(task={"tenant": t, "resource_vec": VEC}).submit(gate) for t in ("b", "a", "b")]
        wait_for(lambda: rt.router.pending == 3, message="three tasks waiting")

        out = _cli(address, "status", "--json")
        assert out.returncode == 0, out.stderr
        (d,) = json.loads(out.stdout)
        assert (d["policy"], d["architecture"], d["generation"]) == ("drf_lb", "centralized", 0)
        assert d["actors"]["selector"]["node"] in ray_cluster.node_ids
        assert [n["slot_capacity"] for n in d["nodes"]] == [1.0] * 4 and [n["slot_in_use"] for n in d["nodes"]] == [1.0] * 4
        wait_for(lambda: json.loads(_cli(address, "status", "drf_lb", "--json").stdout)["groups"].get("b", {})
                 .get("pending") == 2, timeout=20, message="the processes' reports")
        text = _cli(address, "status", "drf_lb")
        assert "policy drf_lb: plan centralized" in text.stdout and "decision latency" in text.stdout

        first, behind, _third = (w.task_id for w in waiting)
        answer = json.loads(_cli(address, "why", "drf_lb", first, "--json").stdout)
        assert answer["reason"] == "no-room" and "no node has room" in answer["why"], answer
        ranked = json.loads(_cli(address, "why", "drf_lb", behind, "--json").stdout)  # a holds 4 tasks' share
        assert ranked["reason"] == "ranked" and ranked["ahead"] == 2, ranked
        assert rt.why_pending(waiting[2])["ahead"] == 1  # the same answer in this process

        placed = _cli(address, "why", "drf_lb", rt.router.task_id_of(held[0]))
        assert placed.returncode == 0 and "placed on" in placed.stdout and "runner-up" in placed.stdout, placed
        assert placed.stdout.count("\n  ") == 4  # its score on each of the 4 nodes

        unknown = _cli(address, "why", "drf_lb", "nobody-000000001")
        assert unknown.returncode == 1 and "no process 'nobody'" in unknown.stdout
    finally:
        open(gate, "w").close()
        ra.shutdown()


def test_why_a_task_is_infeasible_everywhere_names_the_policys_line(ray_cluster, gate):
    address = ray_cluster.cluster.address
    zones = {n: {"zone": z} for n, z in zip(ray_cluster.node_ids, "aabb")}
    rt = ra.start("zone_affinity", plan="decentralized", node_fields=zones, queue=1)
    try:
        f = ra.policy("zone_affinity")(hold).options(task={"zone": "mars"})
        fut = f.submit(gate)
        answer = json.loads(_cli(address, "why", "zone_affinity", fut.task_id, "--json").stdout)
        assert answer["reason"] == "infeasible", answer
        (where,) = answer["returns"]
        assert "zone_affinity.policy:12:" in where and len(answer["returns"][where]) == 4
        assert "zone_affinity.policy:12:" in rt.why_pending(fut)["why"]
    finally:
        ra.shutdown()


def test_status_says_what_is_wrong(ray_cluster):
    out = _cli(ray_cluster.cluster.address, "status")
    assert out.returncode == 1 and "no ray-adaptive runtime runs on this cluster" in out.stderr
    out = _cli(ray_cluster.cluster.address, "status", "nope")
    assert out.returncode == 1 and "policy 'nope' has no runtime on this cluster" in out.stderr
    out = _cli("127.0.0.1:1", "status")
    assert out.returncode == 1 and out.stderr.startswith("error: cannot") and "Traceback" not in out.stderr
