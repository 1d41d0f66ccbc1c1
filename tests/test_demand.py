"""The policy's backlog told to the autoscaler: the bundles asked for (pure), the node types an autoscaler
may add (pure), and the reporter thread on real Ray (its request written where Ray's autoscaler reads it)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ray_adaptive._private.autoscaler import fits_any, node_types_from_cluster_config, node_types_from_config
from ray_adaptive.runtime.demand import MAX_BUNDLES, demand_bundles, shape_counts
from tests.conftest import wait_for

CPU = {"CPU": 1.0}
GPU = {"CPU": 1.0, "GPU": 1.0}


# -- demand_bundles ---------------------------------------------------------------------------------------

def test_nothing_held_clears_the_request_even_with_tasks_running():
    assert demand_bundles({}) == []
    assert demand_bundles({"a": {"held": [], "running": [[CPU, 5]]}}) == []
    assert demand_bundles({"a": {"running": [[CPU, 5]]}, "b": {}}) == []  # (a report without the keys)


def test_held_tasks_merged_with_the_running_ones_one_bundle_per_task():
    # request_resources asks the cluster to hold every bundle at once, counted against the nodes' totals:
    # 2 running + 3 held need room for 5
    got = demand_bundles({"a": {"held": [[CPU, 3]], "running": [[CPU, 2]]}})
    assert got == [CPU] * 5


def test_processes_and_shapes_are_summed_and_ordered():
    reports = {"p1": {"held": [[GPU, 1], [CPU, 1]], "running": [[CPU, 1]]},
               "p2": {"held": [[{"GPU": 1.0, "CPU": 1.0}, 2]], "running": [[GPU, 1]]}}
    got = demand_bundles(reports)
    # running first (CPU, then CPU+GPU: sorted shapes), then held; the same shape from two processes is one
    assert got == [CPU, GPU] + [CPU] + [GPU] * 3
    assert demand_bundles(dict(reversed(list(reports.items())))) == got  # deterministic: sent only on change


def test_zero_resources_and_zero_counts_are_left_out():
    assert shape_counts([[{"CPU": 0.0}, 4], [CPU, 0], [{"CPU": 0.5, "memory": 0}, 2]]) == {(("CPU", 0.5),): 2}
    assert demand_bundles({"a": {"held": [[{"CPU": 0}, 9]], "running": [[CPU, 1]]}}) == []


def test_a_huge_backlog_is_cut_keeping_every_shape_and_the_running_tasks():
    reports = {"a": {"held": [[CPU, 90_000], [GPU, 10_000]], "running": [[CPU, 100]]}}
    got = demand_bundles(reports, max_bundles=1000)
    assert len(got) <= 1000
    assert got[:100] == [CPU] * 100  # the running ones kept
    held = got[100:]
    assert held.count(CPU) == 810 and held.count(GPU) == 90  # 900 in proportion 9:1
    # a shape with a single task among many keeps one bundle
    one = demand_bundles({"a": {"held": [[CPU, 10_000], [{"GPU": 1.0}, 1]]}}, max_bundles=100)
    assert {"GPU": 1.0} in one and len(one) <= 101
    assert len(demand_bundles({"a": {"held": [[CPU, 10 ** 6]]}})) == MAX_BUNDLES
    with pytest.raises(ValueError, match="max_bundles must be >= 1, got 0"):
        demand_bundles({}, max_bundles=0)


# -- node types an autoscaler may add ---------------------------------------------------------------------

CONFIG = {
    "max_workers": 6,
    "head_node_type": "head",
    "available_node_types": {
        "head": {"resources": {"CPU": 0}, "max_workers": 0},
        "cpu": {"resources": {"CPU": 2}, "min_workers": 1, "max_workers": 4},
        "gpu": {"resources": {"CPU": 4, "GPU": 1}, "max_workers": 1},
        "off": {"resources": {"CPU": 8}, "max_workers": 0},
    },
}


def test_node_types_from_a_launcher_config():
    assert node_types_from_config(CONFIG) == [{"CPU": 2.0}, {"CPU": 4.0, "GPU": 1.0}]
    # types at their max_workers are left out; the cluster's max_workers bounds them all
    assert node_types_from_config(CONFIG, {"cpu": 4, "head": 1}) == [{"CPU": 4.0, "GPU": 1.0}]
    assert node_types_from_config(CONFIG, {"cpu": 4, "gpu": 1}) == []
    assert node_types_from_config({**CONFIG, "max_workers": 3}, {"cpu": 3}) == []


def test_node_types_from_the_gcs_cluster_config():
    groups = [{"name": "b", "resources": {"CPU": 4, "GPU": 1}, "max_count": -1},
              {"name": "a", "resources": {"CPU": 2}, "max_count": 3},
              {"name": "c", "resources": {"CPU": 8}, "max_count": 0}]
    assert node_types_from_cluster_config(groups) == [{"CPU": 2.0}, {"CPU": 4.0, "GPU": 1.0}]


def test_fits_any():
    types = [{"CPU": 2.0}, {"CPU": 4.0, "GPU": 1.0}]
    assert fits_any({"CPU": 1}, types) and fits_any({"CPU": 3, "GPU": 1}, types)
    assert not fits_any({"CPU": 5}, types) and not fits_any({"TPU": 1}, types)
    assert fits_any({"CPU": 2, "TPU": 0}, types)  # (a 0 amount asks for nothing)
    assert not fits_any({"CPU": 1}, [])


# -- the reporter on real Ray -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(ray_cluster):
    import ray

    @ray.remote(num_cpus=0)
    class Reports:
        """The store's ``loads`` alone: the reports the reporter reads, set by the test."""

        def __init__(self):
            self.reports = {}

        def set(self, reports):
            self.reports = reports

        def loads(self):
            return self.reports

    s = Reports.remote()
    yield s
    ray.kill(s)


def _standing_request():
    """The request as Ray's autoscaler v1 reads it (the GCS KV key ``request_resources`` writes)."""
    from ray.experimental.internal_kv import _internal_kv_get  # (a test may read private Ray)

    raw = _internal_kv_get("autoscaler_resource_request")
    return None if raw is None else json.loads(raw)


def test_the_reporter_sends_on_change_and_clears_when_drained(store):
    import ray

    from ray_adaptive.runtime.demand import DemandReporter

    sent = []
    rep = DemandReporter(store, "t1", period_s=0.1, request=sent.append)
    try:
        ray.get(store.set.remote({"a": {"held": [[CPU, 2]], "running": [[CPU, 1]]}}))
        wait_for(lambda: sent, timeout=5)
        assert sent == [[CPU] * 3]
        time.sleep(0.5)  # unchanged reports: nothing more is sent
        assert len(sent) == 1
        ray.get(store.set.remote({"a": {"held": [[CPU, 1]], "running": [[CPU, 2]]}}))
        time.sleep(0.5)
        assert len(sent) == 1  # the same bundles (3 CPU tasks): not sent again
        ray.get(store.set.remote({"a": {"held": [[GPU, 1]], "running": [[CPU, 2]]}}))
        wait_for(lambda: len(sent) == 2, timeout=5)
        assert sent[-1] == [CPU, CPU, GPU]
        ray.get(store.set.remote({"a": {"held": [], "running": [[CPU, 2]]}}))
        wait_for(lambda: len(sent) == 3, timeout=5)
        assert sent[-1] == []  # drained: cleared
    finally:
        t0 = time.monotonic()
        rep.stop()
        assert time.monotonic() - t0 < 0.3
    assert len(sent) == 3  # nothing stood at stop: no clear sent


def test_a_request_standing_at_stop_is_cleared_and_ray_s_request_is_written(store):
    """With Ray's own request_resources: the request lands where autoscaler v1 reads it, and stop clears it."""
    import ray

    from ray_adaptive.runtime.demand import DemandReporter

    ray.get(store.set.remote({"a": {"held": [[CPU, 2]], "running": []}}))
    rep = DemandReporter(store, "t2", period_s=0.1)
    try:
        wait_for(lambda: _standing_request() == [CPU, CPU], timeout=5, message=lambda: _standing_request())
    finally:
        rep.stop()
    assert _standing_request() == []
    assert rep.calls == 2 and rep.sent == []
    assert not [t for t in threading.enumerate() if t.name == "ra-demand-t2"]
    ray.get(store.set.remote({}))


def test_stop_is_prompt_while_the_store_does_not_answer(ray_cluster):
    import ray

    from ray_adaptive.runtime.demand import DemandReporter

    @ray.remote(num_cpus=0)
    class Slow:
        def loads(self):
            time.sleep(3)
            return {}

    slow = Slow.remote()
    ray.get(slow.__ray_ready__.remote())
    rep = DemandReporter(slow, "t3", period_s=0.05, request=lambda b: None)
    time.sleep(0.3)  # in a loads() call now
    t0 = time.monotonic()
    rep.stop()
    assert time.monotonic() - t0 < 0.3
    ray.kill(slow)
