"""Shared fixtures: one real multi-node Ray cluster for the whole test session.

``ray_cluster`` (module scope) hands a test module the session's
``ray.cluster_utils.Cluster`` (4 nodes x 2 CPUs, started once, ~12 s) with the
driver connected, and after the module checks that no resource created by
ray-adaptive is left on any node and that no node's ``CPU`` total drifted
from what it registered with. Modules that do not ask for it never start Ray.

The cluster lives in its own temp dir (``RAY_TMPDIR``), so a stale
``/tmp/ray/ray_current_cluster`` never matters, and runs with metrics
collection off: that avoids the SIGSEGV in opencensus
``DeltaProducer::RunHarvesterLoop`` seen at shutdown of multi-node clusters.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List

import pytest

NUM_NODES = 4
CPUS_PER_NODE = 2
# Static resources, to test node_spec constraints: node i has {"rack_<i % 2>": 1},
# and the last node also {"special": 2}.
SYSTEM_CONFIG = {
    # Keeps worker shutdown clean on multi-node clusters (no opencensus
    # harvester thread left to crash at exit).
    "enable_metrics_collection": False,
}


@dataclass
class RayCluster:
    """The running test cluster: ``nodes[0]`` is the head (the driver's node),
    then the workers in the order they were added; the last has ``special``."""

    cluster: object
    nodes: List[str]
    temp_dir: str
    static: Dict[str, Dict[str, float]] = field(default_factory=dict)

    @property
    def head(self) -> str:
        return self.nodes[0]


def wait_for(predicate, timeout: float = 20.0, period: float = 0.02, message: str = ""):
    """Poll ``predicate`` until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(period)


def _start_cluster() -> RayCluster:
    import ray
    from ray.cluster_utils import Cluster

    root = tempfile.mkdtemp(prefix="ra-test-", dir="/tmp")
    temp_dir = os.path.join(root, "ray")
    os.makedirs(temp_dir)
    os.environ["RAY_TMPDIR"] = root  # where ray_current_cluster is written
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=CPUS_PER_NODE,
            temp_dir=temp_dir,
            resources={"rack_0": 1},
            include_dashboard=False,
            _system_config=SYSTEM_CONFIG,
        ),
    )
    nodes = [cluster.head_node.node_id]
    for i in range(1, NUM_NODES):
        extra = {f"rack_{i % 2}": 1}
        if i == NUM_NODES - 1:
            extra["special"] = 2
        node = cluster.add_node(num_cpus=CPUS_PER_NODE, temp_dir=temp_dir, resources=extra)
        nodes.append(node.node_id)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=True)
    assert ray.get_runtime_context().get_node_id() == nodes[0]
    alive = [n for n in ray.nodes() if n["Alive"]]
    static = {n["NodeID"]: dict(n["Resources"]) for n in alive}
    return RayCluster(cluster=cluster, nodes=nodes, temp_dir=root, static=static)


@pytest.fixture(scope="session")
def _ray_cluster_session():
    rc = _start_cluster()
    yield rc
    import ray

    ray.shutdown()
    rc.cluster.shutdown()
    # RAY_ADAPTIVE_KEEP_TEST_LOGS=1 keeps the session's Ray logs (e.g. to grep for crashes).
    if os.environ.get("RAY_ADAPTIVE_KEEP_TEST_LOGS") == "1":
        print(f"\nRay logs kept in {rc.temp_dir}")
    else:
        shutil.rmtree(rc.temp_dir, ignore_errors=True)


def assert_no_leaks(rc: RayCluster) -> None:
    """Fail naming any ray-adaptive resource left on a node, or a CPU total that drifted."""
    from ray_adaptive import resources

    def clean():
        leaks = resources.created_resources()
        state = resources.get_cluster_state()
        drift = {
            n: (r.get("CPU", {}).get("total"), rc.static[n].get("CPU"))
            for n, r in state.items()
            if r.get("CPU", {}).get("total") != rc.static[n].get("CPU")
        }
        return (not leaks and not drift), leaks, drift

    deadline = time.monotonic() + 10
    while True:
        ok, leaks, drift = clean()
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"resources leaked after the module: created={leaks}, CPU drift={drift}"
            )
        time.sleep(0.05)


@pytest.fixture(scope="module")
def ray_cluster(_ray_cluster_session):
    """The shared cluster; after the module, asserts nothing was leaked."""
    yield _ray_cluster_session
    assert_no_leaks(_ray_cluster_session)
