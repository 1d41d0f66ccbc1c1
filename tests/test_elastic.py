"""Elastic and mixed clusters: nodes without CPUs get no task, nodes that join are used, nodes that leave lose
nothing, and a task's Ray resources decide which nodes it may go to."""

from __future__ import annotations

import os
import threading
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive import resources
from ray_adaptive._private.actors import call_in_actor
from ray_adaptive.runtime.topology import NAMESPACE, actor_name
from tests.conftest import NUM_NODES as NODES, state_in_force, wait_for

VEC = [1.0, 0.5, 0.0]


@ray.remote(num_cpus=1, max_retries=3)
def marked(folder: str, i: int) -> int:
    """A marker per run, named by the task and its node, created exclusively: a body run twice on one node
    fails on its second. (A task running on a node that leaves is run again elsewhere by Ray's retry.)"""
    node = ray.get_runtime_context().get_node_id()
    os.close(os.open(os.path.join(folder, f"t{i}-{node}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    time.sleep(0.02)
    return i


def _runs(folder) -> dict:
    """task -> the nodes its body ran on."""
    out: dict = {}
    for name in os.listdir(folder):
        task, node = name.split("-", 1)
        out.setdefault(task, []).append(node)
    return out


def _alive(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


class Submitter:
    """Submits marked tasks of one tenant from a thread until stopped."""

    def __init__(self, folder, policy: str = "drf_lb"):
        self.fn = ra.policy(policy)(marked).options(task={"tenant": "a", "resource_vec": VEC})
        self.folder, self.refs, self._stop = str(folder), [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.refs.append(self.fn.remote(self.folder, i))
            i += 1

    def stop(self) -> list:
        self._stop.set()
        self._thread.join(30)
        return ray.get(self.refs, timeout=120)


def _check_once(out: list, refs: list, folder, left: str = "") -> None:
    """Each task's result once; each body once, or twice where Ray retried it off the node that ``left``."""
    assert sorted(out) == list(range(len(refs)))
    runs = _runs(folder)
    assert len(runs) == len(refs)
    again = {t: nodes for t, nodes in runs.items() if len(nodes) > 1}
    assert all(len(nodes) == 2 and left in nodes for nodes in again.values()), again


def _drf_alloc(rt) -> dict:
    return {k: list(v) for k, v in state_in_force(rt)["alloc"].items()}


def test_a_node_without_cpus_gets_no_task_and_every_task_completes(ray_cluster, tmp_path):
    zero = ray_cluster.cluster.add_node(num_cpus=0)
    ray_cluster.cluster.wait_for_nodes()
    try:
        rt = ra.start("least_loaded", plan="centralized")
        try:
            by_id = {n.id: n for n in rt.topology.nodes}
            assert (by_id[zero.node_id].executors, by_id[zero.node_id].queue) == (0, 0)
            fn = ra.policy("least_loaded")(marked)
            out = ray.get([fn.remote(str(tmp_path), i) for i in range(40)], timeout=60)
        finally:
            ra.shutdown()
        assert sorted(out) == list(range(40))
        runs = _runs(tmp_path)
        assert len(runs) == 40 and not any(zero.node_id in nodes for nodes in runs.values())
    finally:
        ray_cluster.cluster.remove_node(zero)
    assert resources.created_resources() == {}


def test_a_task_no_node_can_run_fails_at_once_saying_what_it_asks_for(ray_cluster):
    ra.start("least_loaded", plan="centralized")
    try:
        gpu = ra.policy("least_loaded")(marked).options(num_gpus=1)
        with pytest.raises(ra.InfeasibleTaskError, match=r"asks for \{'CPU': 1, 'GPU': 1\}.*no autoscaler") as err:
            gpu.remote("/nonexistent", 0)
        assert "\n" not in str(err.value)
        assert ra.runtime_of("least_loaded").stats()["submitted"] == 0  # refused before it was counted
    finally:
        ra.shutdown()


def test_a_task_asking_for_a_resource_one_node_has_goes_only_there(ray_cluster, tmp_path):
    special = [n for n, r in ray_cluster.static_resources.items() if r.get("special")]
    assert len(special) == 1  # (the session cluster's last node: see conftest)
    ra.start("least_loaded", plan="decentralized")
    try:
        fn = ra.policy("least_loaded")(marked).options(resources={"special": 1})
        plain = ra.policy("least_loaded")(marked)
        refs = [fn.remote(str(tmp_path), i) if i % 2 else plain.remote(str(tmp_path), i) for i in range(30)]
        assert sorted(ray.get(refs, timeout=60)) == list(range(30))
    finally:
        ra.shutdown()
    runs = _runs(tmp_path)
    assert all(runs[f"t{i}"] == special for i in range(1, 30, 2)), runs
    assert len({n for i in range(0, 30, 2) for n in runs[f"t{i}"]}) > 1  # the others spread as before


# (the centralized plan's selector learns of nodes as the hybrid's does: CI runs the hybrid, `-m slow` all three)
@pytest.mark.parametrize("plan", [pytest.param("centralized", marks=pytest.mark.slow), "decentralized", "hybrid"])
def test_a_node_that_joins_is_used_and_one_that_leaves_loses_nothing(ray_cluster, tmp_path, plan):
    rt = ra.start("drf_lb", plan=plan, executors=1, queue=2)
    load = Submitter(tmp_path)
    try:
        wait_for(lambda: len(load.refs) >= 20, timeout=30, message="tasks under way")
        _wait_spare(rt)
        node = ray_cluster.cluster.add_node(num_cpus=2)
        wait_for(lambda: _alive(node.node_id), timeout=30, message="the node alive in the GCS")
        joined = time.monotonic()
        wait_for(lambda: any(node.node_id in n for n in _runs(tmp_path).values()), timeout=30,
                 message=f"a task on the node that joined, under {plan}")
        first = time.monotonic() - joined
        assert rt.plan.name.startswith(plan)  # (the same plan, on one node more)
        entry = next(h for h in rt.history if "joined" in h["reason"])
        print(f"\n{plan}: first task on the node {first:.2f} s after it joined (the switch: build "
              f"{entry['build_s']:.2f} s, prepare {entry['prepare_s']:.2f} s, freeze {entry['freeze_s']:.3f} s)")
        # the new node list put in force by the actors started ahead (a hybrid's: its selector and a placement
        # actor per node, one more among them)
        assert entry["from_spare"] == {"centralized": 1, "decentralized": 0, "hybrid": NODES + 2}[plan], entry
        ray_cluster.cluster.remove_node(node)
        wait_for(lambda: any("left" in h["reason"] for h in rt.history), timeout=30, message="the node's leave")
        submitted = len(load.refs)
        wait_for(lambda: len(load.refs) >= submitted + 20, timeout=60, message="tasks after the node left")
    finally:
        out = load.stop()
    try:
        _check_once(out, load.refs, tmp_path, left=node.node_id)
        wait_for(lambda: all(abs(x) < 1e-9 for v in _drf_alloc(rt).values() for x in v), timeout=20,
                 message=lambda: f"the State back to its start: {_drf_alloc(rt)}")
    finally:
        ra.shutdown()
    assert resources.created_resources() == {}


def _wait_spare(rt) -> None:
    """Until the owner's spare generation is up (a generation in force 2 s has one; see runtime.spare)."""
    wait_for(lambda: rt.spares.generation == rt.topology.generation + 1, timeout=30, message="the spare generation")
    rt.spares.wait_ready()


def _try(call):
    try:
        return call()
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return None


def _selector(rt):
    return ray.get_actor(rt.topology.config()["selector"], namespace=NAMESPACE)


def test_a_spare_selector_restarted_before_or_after_its_switch_knows_the_nodes_that_joined(ray_cluster, tmp_path):
    """The centralized selector that puts a joining node in force was started ahead, unconfigured; restarted
    then (its process killed), it is configured all the same, and restarted once in force it takes its node
    list -- the new node in it -- from the store, not from its first (empty) arguments."""
    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=2)
    load = Submitter(tmp_path)
    node = None
    try:
        try:
            wait_for(lambda: len(load.refs) >= 20, timeout=30, message="tasks under way")
            _wait_spare(rt)
            spare = ray.get_actor(actor_name("drf_lb", "selector", rt.topology.generation + 1), namespace=NAMESPACE)
            ray.kill(spare, no_restart=False)  # (restarted unconfigured: its switch has not prepared its config)
            node = ray_cluster.cluster.add_node(num_cpus=2)
            wait_for(lambda: any(node.node_id in n for n in _runs(tmp_path).values()), timeout=30,
                     message="a task on the node that joined")
            entry = next(h for h in rt.history if "joined" in h["reason"])
            assert entry["from_spare"] == 1, entry
            selector = _selector(rt)
            before = ray.get(call_in_actor(selector, lambda s: s.incarnation))
            ray.kill(selector, no_restart=False)  # (restarted in force: the clients hand their tasks back)
            after = wait_for(lambda: _try(lambda: ray.get(call_in_actor(selector, lambda s: (s.incarnation,
                                                                                              sorted(s._s.by_id))),
                                                          timeout=5)),
                             until=lambda got: got is not None and got[0] != before, timeout=60,
                             message="the restart")
            assert node.node_id in after[1]  # (its node list is the store's config in force, not its arguments)
            submitted = len(load.refs)
            wait_for(lambda: len(load.refs) >= submitted + 20, timeout=60, message="tasks after the restart")
        finally:
            out = load.stop()
        _check_once(out, load.refs, tmp_path)
        wait_for(lambda: all(abs(x) < 1e-9 for v in _drf_alloc(rt).values() for x in v), timeout=20,
                 message=lambda: f"the State back to its start: {_drf_alloc(rt)}")
    finally:
        ra.shutdown()
        if node is not None:
            ray_cluster.cluster.remove_node(node)
    assert resources.created_resources() == {}
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("ra-drf_lb")]


def test_a_node_joining_during_a_live_switch_is_used_and_every_task_runs_once(ray_cluster, tmp_path):
    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=2)
    load = Submitter(tmp_path)
    switched: list = []
    try:
        wait_for(lambda: len(load.refs) >= 20, timeout=30, message="tasks under way")
        switching = threading.Thread(target=lambda: switched.append(rt.switch("hybrid")), daemon=True)
        switching.start()
        node = ray_cluster.cluster.add_node(num_cpus=2)
        switching.join(120)
        assert switched and "rolled_back" not in switched[0], switched
        wait_for(lambda: any(node.node_id in n for n in _runs(tmp_path).values()), timeout=30,
                 message="a task on the node that joined during the switch")
        assert rt.plan.name.startswith("hybrid")
    finally:
        out = load.stop()
    try:
        _check_once(out, load.refs, tmp_path)
        wait_for(lambda: all(abs(x) < 1e-9 for v in _drf_alloc(rt).values() for x in v), timeout=20,
                 message=lambda: f"the State back to its start: {_drf_alloc(rt)}")
    finally:
        ra.shutdown()
        ray_cluster.cluster.remove_node(node)
    assert resources.created_resources() == {}


def test_a_cluster_whose_monitor_has_no_autoscaling_config_has_no_autoscaler(ray_cluster, caplog):
    """ray.cluster_utils.Cluster (and a plain `ray start --head`) runs Ray's monitor, which publishes a status
    but adds no node: no node type may be added, and nothing is warned about."""
    from ray_adaptive._private.autoscaler import launchable_node_types, v1_status

    assert v1_status() is not None  # (the monitor reports)
    with caplog.at_level("WARNING"):
        assert launchable_node_types() is None
    assert "autoscaler" not in caplog.text
