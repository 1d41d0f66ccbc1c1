"""An adaptive runtime on the 4-node cluster: the plan in force follows the compiler's choice for the
measured rate, and a rate oscillating around a boundary does not make it flap.

The latency model makes the centralized plan saturate near 50 tasks/s (``message_s`` 6 ms), so that
rates this 2-core machine can offer cross the boundary: at 20 tasks/s the compiler chooses a
centralized plan, at 120 tasks/s a decentralized one.
"""

import threading
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive.compiler import Profile
from tests.conftest import RaisingThread, wait_for

VEC = [0.1, 0.2, 0.1]
SLOW_MESSAGES = Profile(message_s=6e-3)
GRID = (0.05, 0.1, 0.2, 0.4)  # x the execution bound (~340 tasks/s here): 17, 34, 68, 136 tasks/s


@ray.remote(num_cpus=1)
def work(i):
    time.sleep(0.02)  # (the task's work)
    return i


def _drive(fn, rate_of, seconds: float, refs: list, stop: threading.Event = None) -> None:
    """Submit at ``rate_of(elapsed)`` tasks/s for ``seconds`` (paced, not bursty)."""
    start = nxt = time.monotonic()
    while time.monotonic() - start < seconds and not (stop and stop.is_set()):
        refs.append(fn.remote(len(refs)))
        nxt += 1.0 / rate_of(time.monotonic() - start)
        time.sleep(max(0.0, nxt - time.monotonic()))  # (pacing: the rate is what the test sets)


@pytest.fixture(scope="module")
def grid_table(ray_cluster):
    """The estimate table of this cluster on GRID, computed once -- by the runtime's own Ray task, as
    ``start()`` without ``table=`` does -- and handed to the tests' runtimes as ``table=``."""
    rt = ra.start("drf_lb", plan="adaptive", rate=20, profile=SLOW_MESSAGES, fractions=GRID)
    try:
        wait_for(lambda: rt.control_loop.controller is not None, timeout=60, message="the estimate table")
        return rt.control_loop.table
    finally:
        ra.shutdown()


@pytest.fixture
def adaptive(grid_table):
    def start(**settings):
        rt = ra.start("drf_lb", plan="adaptive", initial=grid_table.at(20)[1], profile=SLOW_MESSAGES,
                      table=grid_table, **settings)
        assert rt.control_loop.table is grid_table and rt.control_loop.controller is not None
        return rt

    yield start
    ra.shutdown()


def test_a_table_for_another_policy_or_cluster_is_refused(grid_table):
    import dataclasses

    from ray_adaptive import resources

    with pytest.raises(ValueError, match="computed for policy 'drf_lb' on 4 nodes; this runtime runs 'least_loaded'"):
        ra.start("least_loaded", plan="adaptive", table=grid_table)
    with pytest.raises(ValueError, match="on 12 nodes; this runtime runs 'drf_lb' on 4"):
        ra.start("drf_lb", plan="adaptive", table=dataclasses.replace(grid_table, nodes=12))
    with pytest.raises(TypeError, match="give one or the other"):
        ra.start("drf_lb", plan="adaptive", table=grid_table, fractions=GRID)
    with pytest.raises(TypeError, match="must be an EstimateTable"):
        ra.start("drf_lb", plan="adaptive", table={"rates": [1]})
    assert resources.created_resources() == {}  # (refused before any slot was made)


def test_the_plan_in_force_follows_the_compilers_choice_for_the_measured_rate(adaptive):
    rt = adaptive(every_s=0.5, window_s=2.0, consecutive=2, dwell_s=2.0)
    table = rt.control_loop.table
    low, high = table.at(20)[1], table.at(120)[1]
    assert low.startswith("centralized") and high.startswith("decentralized"), (low, high)  # (the test's premise)
    fn = ra.policy("drf_lb")(work).options(task={"tenant": "a", "resource_vec": VEC})
    refs = []
    _drive(fn, lambda t: 20, 5.0, refs)
    assert rt.plan.name == low and rt.history == []
    stop = threading.Event()
    loader = RaisingThread(target=_drive, args=(fn, lambda t: 120, 30.0, refs, stop))
    loader.start()
    try:
        wait_for(lambda: rt.history, timeout=20, message="a switch at 120 tasks/s")
    finally:
        stop.set()
        loader.join()
    entry = rt.history[0]
    rate = entry["measured"]["rate"]
    assert rate > 48 and entry["to"] == table.at(rate)[1]  # the compiler's choice at the rate measured then
    assert entry["from"] == low and entry["reason"].startswith("goodput")
    assert entry["estimates"][entry["to"]]["goodput"] > entry["estimates"][low]["goodput"]
    assert rt.plan.name.startswith("decentralized")
    assert ray.get(refs, timeout=60) == list(range(len(refs)))


def test_a_rate_oscillating_around_a_boundary_does_not_flap(adaptive):
    rt = adaptive(every_s=0.5, window_s=1.0, consecutive=3, dwell_s=5.0)
    fn = ra.policy("drf_lb")(work).options(task={"tenant": "a", "resource_vec": VEC})
    refs = []
    # a second at 30 tasks/s, a second at 70: the grid's boundary (~48 tasks/s) between them
    _drive(fn, lambda t: 30 if int(t) % 2 == 0 else 70, 12.0, refs)
    seen = {v.candidate for v in rt.evaluations}
    assert len(seen) == 2, seen  # the measured rate did cross the boundary, both ways
    assert len(rt.history) <= 1, rt.history
    assert ray.get(refs, timeout=60) == list(range(len(refs)))


def test_tables_refreshed_after_a_given_one_keep_its_grid(adaptive, grid_table):
    rt = adaptive()
    refreshed = rt.control_loop._table_for(None)  # (what a refresh computes, here on the default workload)
    assert refreshed.rates == pytest.approx(grid_table.rates)
