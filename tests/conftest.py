"""Shared fixtures: one real multi-node Ray cluster for the whole test session.

``ray_cluster`` (module scope) hands a test module the session's
:class:`ray_adaptive.local_multinode.LocalCluster` (4 nodes x 2 CPUs, started
once, ~12 s) with the driver connected, and after the module checks that no resource created by
ray-adaptive is left on any node and that no node's ``CPU`` total drifted
from what it registered with. Modules that do not ask for it never start Ray.

The cluster lives in its own temp dir and runs with metrics collection off
(see ray_adaptive/local_cluster.py).
"""

from __future__ import annotations

import compileall
import os
import sys
import threading
import time
from pathlib import Path

import pytest

NUM_NODES = 4
CPUS_PER_NODE = 2
ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Compile the repository's Python to bytecode once, when this interpreter writes none
    (``PYTHONDONTWRITEBYTECODE``, set in many CI images and on this project's machine). The session
    starts many Ray worker processes -- every actor is one: 76 in test_switch alone -- and
    subprocess drivers, and each would otherwise compile every ray-adaptive module it imports from
    source: ~0.3 s of CPU a process, a fifth of test_switch's CPU time (docs/benchmarks.md, the test
    suite). Python still takes a ``.pyc`` whose source changed for stale and compiles that module."""
    if sys.dont_write_bytecode:
        for folder in ("ray_adaptive", "esl", "tests", "release_tests", "examples"):
            compileall.compile_dir(ROOT / folder, quiet=1)


def wait_for(predicate, timeout: float = 20.0, period: float = 0.02, message="", until=None):
    """Poll ``predicate`` until it returns a truthy value -- with ``until``, a value for which
    ``until(value)`` holds --; return that value. Fails (AssertionError) after ``timeout`` s.

    ``message``: what is waited for, in the error on a timeout; a callable is called then (to
    describe what was seen last). With ``until``, the error shows the last value too."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if until(value) if until is not None else value:
            return value
        if time.monotonic() > deadline:
            what = message() if callable(message) else message
            seen = f"; the last value: {value!r}" if until is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}{seen}")
        time.sleep(period)


def state_in_force(rt) -> dict:
    """The State the runtime ``rt`` decides on now, as this process reads it: its own while it holds the
    selector's lease or decides itself (a plan without a selector), else the selector's. This process is
    read first, so a lease it handed back before that left the State at the selector; a selector that
    says it leased its State while this process held no lease when read has a grant on its way (a lone
    submitter may lease the idle selector again at any time: see ``runtime.lease``), and both are read
    again -- for 20 s at most: a grant that never arrives is a lost lease. So is a selector retired by a
    live switch meanwhile (a node's leave): the next one holds the State."""
    import ray

    deadline = time.monotonic() + 20
    while True:
        try:
            ex = rt.export()
        except ray.exceptions.RayActorError:
            ex = None
        if ex is not None:
            caller, selector = ex["caller"], ex.get("selector")
            if "lease" in caller:
                return caller["lease"]["state"]
            if selector is None:
                return caller["state"]
            if selector.get("leased_to") is None:
                return selector["state"]
        if time.monotonic() > deadline:
            where = "the selector could not be read" if ex is None else f"the selector says {selector['leased_to']} holds its lease"
            raise AssertionError(f"no State in force found in 20 s: {where}, and this process holds none")
        time.sleep(0.05)


class RaisingThread(threading.Thread):
    """A thread whose error reaches the test: :meth:`join` raises it (a plain thread's error is only
    printed, and the test goes on as if the thread had ended normally)."""

    def __init__(self, target, args=()):
        super().__init__(target=self._guarded, args=(target, *args))
        self.error = None

    def _guarded(self, target, *args):
        try:
            target(*args)
        except BaseException as err:  # (kept for join)
            self.error = err

    def join(self, timeout=None):
        super().join(timeout)
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="session")
def _ray_cluster_session():
    from ray_adaptive.local_multinode import start_local_cluster

    # node i has {"rack_<i % 2>": 1}; the last node also {"special": 2}
    extra = [{f"rack_{i % 2}": 1} for i in range(NUM_NODES)]
    extra[-1]["special"] = 2
    # Ray node labels: zone "a" on the first half, "b" on the rest (zone_affinity reads them)
    labels = [{"zone": "a" if i < NUM_NODES // 2 else "b"} for i in range(NUM_NODES)]
    lc = start_local_cluster(NUM_NODES, CPUS_PER_NODE, node_resources=extra, node_labels=labels, quiet=False)
    import ray

    assert ray.get_runtime_context().get_node_id() == lc.head
    yield lc
    # RAY_ADAPTIVE_KEEP_TEST_LOGS=1 keeps the session's Ray logs (e.g. to grep for crashes).
    keep = os.environ.get("RAY_ADAPTIVE_KEEP_TEST_LOGS") == "1"
    lc.shutdown(keep_temp_dir=keep)
    if keep:
        print(f"\nRay logs kept in {lc.temp_dir}")


def assert_no_leaks(rc) -> None:
    """Fail naming any ray-adaptive resource left on a node, or a CPU total that drifted."""
    from ray_adaptive import resources

    def clean():
        leaks = resources.created_resources()
        state = resources.get_cluster_state()
        drift = {
            n: (r.get("CPU", {}).get("total"), rc.static_resources[n].get("CPU"))
            for n, r in state.items()
            if r.get("CPU", {}).get("total") != rc.static_resources[n].get("CPU")
        }
        return (not leaks and not drift), leaks, drift

    wait_for(lambda: clean()[0], timeout=10, period=0.05,
             message=lambda: "no resource left after the module; created={}, CPU drift={}".format(*clean()[1:]))


def wait_for_removed_nodes_dead(rc, timeout: float = 90.0) -> None:
    """Wait until the GCS counts dead every node a test removed from the shared cluster. A removed node's
    raylet is killed, and the GCS learns it only when its health checks fail (tens of seconds): until
    then Ray may place a task or an actor there -- a ``num_cpus=0`` actor fits the ``num_cpus=0`` node
    test_preempt_ray adds and removes -- which then dies with "the actor's node was terminated
    unexpectedly: health check failed due to missing too many heartbeats" in whatever module comes next
    (test_private_ray's first actors, in two CI runs)."""
    import ray

    ours = {n.node_id for n in rc.cluster.list_all_nodes()}

    def stray() -> list:
        return [n["NodeID"][:8] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in ours]

    wait_for(lambda: not stray(), timeout=timeout, period=0.5,
             message=lambda: f"the nodes removed by the module counted dead by the GCS; still alive: {stray()}")


@pytest.fixture(scope="module")
def ray_cluster(_ray_cluster_session):
    """The shared cluster; after the module, waits for the nodes it removed to be dead and asserts that
    nothing was leaked."""
    yield _ray_cluster_session
    wait_for_removed_nodes_dead(_ray_cluster_session)
    assert_no_leaks(_ray_cluster_session)
