"""The ESCHER resource API on a real 4-node Ray cluster (tests/conftest.py)."""

from __future__ import annotations

import time

import pytest
import ray

from ray_adaptive import resources
from ray_adaptive.errors import ResourceError
from ray_adaptive.resources import (
    ResourceScope,
    cleanup,
    get_cluster_state,
    pending_resizes,
    set_resource,
    set_resources,
    wait_for_pending,
)
try:
    from tests.conftest import assert_no_leaks, wait_for
except ImportError:  # tests/ is not a package: conftest is a top-level module
    from conftest import assert_no_leaks, wait_for


@ray.remote(num_cpus=1)
def where(seconds: float = 0.0) -> str:
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=1)
class Holder:
    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


def total(node: str, name: str) -> float:
    return get_cluster_state([node])[node].get(name, {}).get("total", 0.0)


def available(node: str, name: str) -> float:
    return get_cluster_state([node])[node].get(name, {}).get("available", 0.0)


def test_set_on_own_node_and_tasks_run_there(ray_cluster):
    nodes = set_resource("t_local", 2)
    assert nodes == [ray_cluster.head]
    assert get_cluster_state()[ray_cluster.head]["t_local"] == {"total": 2.0, "available": 2.0}
    ran = ray.get([where.options(resources={"t_local": 1}).remote() for _ in range(4)])
    assert set(ran) == {ray_cluster.head}
    assert set_resource("t_local", 0) == [ray_cluster.head]
    # (a task's worker may still hold its unit after its result came back: the deletion converges once the
    # raylet has it back, as documented -- read at once, a full CI run saw the name there, 1 of 1 free)
    assert wait_for_pending(10)
    wait_for(lambda: "t_local" not in get_cluster_state()[ray_cluster.head], timeout=10,
             message=lambda: f"t_local deleted: {get_cluster_state()[ray_cluster.head].get('t_local')}")


def test_set_on_named_remote_node(ray_cluster):
    target = ray_cluster.node_ids[2]
    assert set_resource("t_remote", 1, target) == [target]
    assert ray.get(where.options(resources={"t_remote": 1}).remote()) == target
    set_resource("t_remote", 0, target)


def test_node_spec_constraints(ray_cluster):
    special = ray_cluster.node_ids[-1]
    try:
        assert set_resource("t_spec", 1, {"special": 2}) == [special]
        everywhere = set_resource("t_all", 1, {})
        assert sorted(everywhere) == sorted(ray_cluster.node_ids)
        racks = set_resource("t_rack", 1, {"rack_1": 1, "CPU": 2})
        assert sorted(racks) == sorted(
            n for n in ray_cluster.node_ids if ray_cluster.static_resources[n].get("rack_1")
        )
        assert set_resource("t_none", 1, {"special": 99}) == []
        assert ray.get(where.options(resources={"t_spec": 1}).remote()) == special
    finally:
        set_resource("t_spec", 0, {})
        set_resource("t_all", 0, {})
        set_resource("t_rack", 0, {})


def test_set_from_inside_a_task_lands_on_the_task_node(ray_cluster):
    """The slides' co-location: task1 creates a resource where it runs, task2 follows."""
    target = ray_cluster.node_ids[1]
    set_resource("t_pin", 1, target)

    @ray.remote(num_cpus=1, resources={"t_pin": 1})
    def leader():
        from ray_adaptive.resources import set_resource as sr

        return sr("t_follow", 1)

    assert ray.get(leader.remote()) == [target]
    assert ray.get(where.options(resources={"t_follow": 1}).remote()) == target
    set_resource("t_pin", 0, target)
    # t_follow was created by a worker process: cleanup() finds it anyway.
    removed = cleanup()
    assert "t_follow" in removed[target]


@pytest.mark.parametrize(
    "bad",
    ["CPU", "GPU", "memory", "object_store_memory", "node:10.0.0.1", "accelerator_type:A100",
     "CPU_group_abc123", "bundle_group_0_abc", "TPU"],
)
def test_reserved_names_are_refused_naming_the_value(ray_cluster, bad):
    with pytest.raises(ResourceError, match=repr(bad).replace("[", r"\[")):
        set_resource(bad, 1)


@pytest.mark.parametrize(
    "name, capacity, exc, fragment",
    [
        (3, 1, TypeError, "must be a str"),
        ("", 1, ValueError, "1-256 characters"),
        ("ok", -1, ValueError, "-1"),
        ("ok", float("nan"), ValueError, "nan"),
        ("ok", "1", TypeError, "'1'"),
        ("ok", True, TypeError, "True"),
        ("ok", 1e-6, ValueError, "granularity"),
    ],
)
def test_bad_arguments(ray_cluster, name, capacity, exc, fragment):
    with pytest.raises(exc, match=fragment):
        set_resource(name, capacity)


def test_bad_node_spec(ray_cluster):
    with pytest.raises(ResourceError, match="not part of this Ray cluster"):
        set_resource("t_x", 1, "ab" * 28)
    with pytest.raises(TypeError, match="node_spec"):
        set_resource("t_x", 1, 42)
    with pytest.raises(TypeError, match="must be a number"):
        set_resource("t_x", 1, {"CPU": "two"})


def test_shrink_below_in_use_converges_after_release(ray_cluster):
    """Raylet clamps to in-use and never catches up; the library re-applies the target."""
    node = ray_cluster.node_ids[1]
    set_resource("t_shrink", 2, node)
    refs = [where.options(resources={"t_shrink": 1}).remote(1.0) for _ in range(2)]
    wait_for(lambda: available(node, "t_shrink") == 0, message="both units in use")
    set_resource("t_shrink", 1, node)
    # Clamped: both units stay held, the target is remembered.
    assert total(node, "t_shrink") == 2
    assert pending_resizes() == {node: {"t_shrink": 1.0}}
    ray.get(refs)
    assert wait_for_pending(10)
    assert total(node, "t_shrink") == 1
    set_resource("t_shrink", 0, node)


def test_delete_in_use_then_gone_after_release(ray_cluster):
    """Delete while held: the holder keeps its unit, the name goes once it is released.

    (A task already queued for the name at that raylet can still be granted the
    released unit before the library re-applies the deletion: the raylet grants
    queued leases in the same step that releases the unit. See resources docs.)
    """
    node = ray_cluster.node_ids[2]
    set_resource("t_del", 1, node)
    ref = where.options(resources={"t_del": 1}).remote(1.0)
    wait_for(lambda: available(node, "t_del") == 0 and total(node, "t_del") == 1)
    set_resource("t_del", 0, node)
    assert total(node, "t_del") == 1  # clamped: still held
    assert pending_resizes() == {node: {"t_del": 0.0}}
    assert ray.get(ref) == node
    assert wait_for_pending(10)
    assert "t_del" not in get_cluster_state([node])[node]
    waiting = where.options(resources={"t_del": 1}).remote()
    ready, _ = ray.wait([waiting], timeout=0.5)
    assert not ready, "a task started on a deleted resource"
    # Re-creating the name lets the waiting task start.
    set_resource("t_del", 1, node)
    assert ray.get(waiting, timeout=30) == node
    set_resource("t_del", 0, node)


def test_delete_while_tasks_wait_then_recreate(ray_cluster):
    node = ray_cluster.node_ids[3]
    ref = where.options(resources={"t_later": 1}).remote()
    ready, _ = ray.wait([ref], timeout=0.3)
    assert not ready
    set_resource("t_later", 1, node)
    assert ray.get(ref, timeout=30) == node
    set_resource("t_later", 0, node)


def test_actor_holds_resource_until_killed(ray_cluster):
    node = ray_cluster.node_ids[1]
    set_resource("t_actor", 1, node)
    actor = Holder.options(resources={"t_actor": 1}).remote()
    assert ray.get(actor.node.remote()) == node
    set_resource("t_actor", 0, node)
    assert total(node, "t_actor") == 1  # held by the actor
    ray.kill(actor)
    assert wait_for_pending(10)
    assert "t_actor" not in get_cluster_state([node])[node]


def test_many_names_in_one_batch(ray_cluster):
    node = ray_cluster.node_ids[1]
    names = {f"t_many_{i}": 1 for i in range(1200)}
    assert set_resources(names, node) == [node]
    state = get_cluster_state([node])[node]
    assert all(state[n]["total"] == 1 for n in names)
    assert ray.get(where.options(resources={"t_many_1199": 1}).remote()) == node
    set_resources({n: 0 for n in names}, node)
    # (the task's leased worker may still hold its t_many_1199 unit: that one goes once released)
    assert wait_for_pending(10)
    state = get_cluster_state([node])[node]
    assert not any(n.startswith("t_many_") for n in state)


def test_dead_node_is_a_clear_error(ray_cluster):
    """A node added and removed within the test: setting on it raises ResourceError."""
    extra = ray_cluster.cluster.add_node(num_cpus=1, temp_dir=ray_cluster.temp_dir + "/ray")
    ray_cluster.cluster.wait_for_nodes()
    node_id = extra.node_id
    try:
        assert set_resource("t_dead", 1, node_id) == [node_id]
        set_resource("t_dead", 0, node_id)
    finally:
        ray_cluster.cluster.remove_node(extra)

    def is_dead():
        return any(n["NodeID"] == node_id and not n["Alive"] for n in ray.nodes())

    wait_for(is_dead, message="removed node marked dead")
    with pytest.raises(ResourceError, match="dead"):
        set_resource("t_dead", 1, node_id)
    assert node_id not in get_cluster_state()


def test_scope_removes_its_resources(ray_cluster):
    with ResourceScope() as scope:
        nodes = scope.set_resource("t_scope", 1, node_spec={})
        scope.set_resource("t_scope2", 3)
        assert sorted(nodes) == sorted(ray_cluster.node_ids)
        assert scope.owned[ray_cluster.head] == ["t_scope", "t_scope2"]
        assert ray.get(where.options(resources={"t_scope": 1}).remote()) in nodes
    state = get_cluster_state()
    assert not any(n.startswith("t_scope") for r in state.values() for n in r)
    with pytest.raises(ResourceError, match="closed"):
        scope.set_resource("t_scope", 1)


def test_scope_as_owner_object_with_held_resource(ray_cluster):
    scope = ResourceScope()
    node = ray_cluster.node_ids[2]
    scope.set_resource("t_owner", 1, node)
    ref = where.options(resources={"t_owner": 1}).remote(0.5)
    wait_for(lambda: available(node, "t_owner") == 0)
    scope.close()
    scope.close()  # idempotent
    assert ray.get(ref) == node
    assert wait_for_pending(10)
    assert "t_owner" not in get_cluster_state([node])[node]


def test_cleanup_removes_everything(ray_cluster):
    set_resource("t_c1", 1, {})
    set_resource("t_c2", 2, ray_cluster.node_ids[1])
    removed = cleanup()
    assert "t_c1" in removed[ray_cluster.head]
    assert not resources.created_resources()


def test_a_stale_lock_holder_cannot_overwrite_what_the_next_holder_wrote(ray_cluster):
    """Holder A reads a node's CPU total under the lock and stalls past its staleness; B takes the
    lock over and converts a CPU unit. A's write of what it computed from its stale read must not
    happen (it would give B's unit back to the node): compare_and_resize refuses it, and refuses a
    changed total even to a holder that still holds the lock."""
    from ray_adaptive._private.raylet import ClusterLock

    node = ray.get_runtime_context().get_node_id()
    cpu = lambda: resources.get_cluster_state([node])[node]["CPU"]["total"]  # noqa: E731
    before = cpu()
    a = ClusterLock("ray_adaptive.test-cas", stale_s=0.3)
    a.acquire()
    read = {node: {"CPU": before}}
    time.sleep(0.5)  # A stalls
    with ClusterLock("ray_adaptive.test-cas", stale_s=0.3) as b:  # B takes the stale lock over
        assert not a.held() and b.held()
        assert resources.compare_and_resize({node: {"CPU": before}}, {node: {"CPU": before - 1}},
                                            convert_from=["CPU"], lock=b) is not None
    try:
        assert resources.compare_and_resize(read, {node: {"CPU": before - 1}}, convert_from=["CPU"], lock=a) is None
        with ClusterLock("ray_adaptive.test-cas") as c:  # held, but the total moved since `read`
            assert resources.compare_and_resize(read, {node: {"CPU": before - 2}}, convert_from=["CPU"],
                                                lock=c) is None
        assert cpu() == before - 1  # B's conversion stands
    finally:
        a.release()  # (no longer its: leaves the key alone)
        resources.resize_many({node: {"CPU": before}}, convert_from=["CPU"])
    assert cpu() == before


def test_zz_no_leaks(ray_cluster):
    assert_no_leaks(ray_cluster)
