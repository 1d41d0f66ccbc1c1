"""A policy task's submission (``ray_adaptive._private.submit``): the call Ray's ``.remote()`` makes to
its core worker, with the per-call work that depends only on the options done once -- checked against
the call Ray itself makes, on the installed Ray, for several sets of options."""

from __future__ import annotations

import pytest
import ray

from ray_adaptive._private.submit import fast_path_off, launcher


@ray.remote(num_cpus=0)
def echo(a, b=0, *, c=0):
    return a, b, c


class _DryRun:
    """Stands in for the core worker during one ``.remote()`` made in this thread alone: keeps the
    arguments Ray gives ``submit_task`` and submits nothing (so nothing casts it to a CoreWorker)."""

    def __init__(self, real):
        self._real, self.args = real, None

    def submit_task(self, *args):
        self.args = args
        return [None]

    def __getattr__(self, name):
        return getattr(self._real, name)


def _rays_call(bound, args, kwargs) -> tuple:
    """The arguments Ray's own ``.remote()`` would give ``submit_task`` for this call."""
    worker = ray._private.worker.global_worker
    real = worker.core_worker
    worker.core_worker = dry = _DryRun(real)
    try:
        bound.remote(*args, **kwargs)
    finally:
        worker.core_worker = real
    return dry.args


OPTIONS = [
    {},
    {"num_cpus": 0.5, "resources": {"rack_0": 0.001}, "max_retries": 0, "retry_exceptions": True},
    {"name": "named", "memory": 1000, "runtime_env": {"env_vars": {"RA_TEST": "1"}}},
    {"retry_exceptions": [ValueError], "label_selector": {"zone": "a"}, "enable_task_events": False},
]


@pytest.mark.parametrize("options", OPTIONS, ids=["defaults", "resources-retries", "name-env", "selector"])
def test_the_call_is_the_call_ray_makes(ray_cluster, options):
    """After the first call (Ray's own), each call passes submit_task what Ray's ``.remote()`` passes
    it for the same arguments -- every argument Ray derives from the options, and the flattened
    arguments -- and the task runs with them."""
    bound = echo.options(**options)
    launch = launcher(bound)
    assert ray.get(launch((1,), {"c": 3})) == (1, 0, 3)  # (Ray's own .remote(): it exports the function)
    assert launch.fast == 0 and launch._recorded is not None, "no fast path: does Ray's _remote still derive so?"
    head, middle, tail = launch._recorded
    for args, kwargs in [((1,), {"c": 3}), ((4, 5), {}), ((6,), {"b": 7, "c": 8})]:
        expected = _rays_call(bound, args, kwargs)
        assert (*head, *middle, b"", *tail) == (*expected[:2], *expected[3:]), "the call differs from Ray's"
        assert expected[2][1::2] == [*args, *kwargs.values()]
        assert ray.get(launch(args, kwargs)) == (args[0], kwargs.get("b", args[1] if len(args) > 1 else 0),
                                                 kwargs.get("c", 0))
    assert launch.fast == 3


def test_large_and_object_ref_arguments_go_as_with_ray(ray_cluster):
    """Arguments Ray puts in the object store (large ones) or passes by reference: the fast path hands
    them to Ray's core worker as ``.remote()`` does."""
    import numpy as np

    big, ref = np.ones(500_000), ray.put(7)
    launch = launcher(echo.options(num_cpus=0))
    for _ in range(3):
        a, b, c = ray.get(launch((big,), {"b": ref, "c": [ref]}))
        assert a.shape == big.shape and b == 7 and ray.get(c[0]) == 7
    assert ray.get(launch((ref,), {}))[0] == 7
    assert launch.fast == 3


def test_bad_arguments_fail_as_ray_fails_them(ray_cluster):
    launch = launcher(echo.options(num_cpus=0))
    assert ray.get(launch((1,), {})) == (1, 0, 0)
    for args, kwargs in [((), {}), ((1, 2, 3), {}), ((1,), {"d": 1})]:
        with pytest.raises(TypeError):
            echo.remote(*args, **kwargs)
        with pytest.raises(TypeError):
            launch(args, kwargs)
    assert ray.get(launch((2,), {"b": 1})) == (2, 1, 0)  # (a shape checked once, then flattened)


def test_outside_a_driver_it_is_rays_remote(ray_cluster):
    """In a task, the calling context may carry a placement group that captures its children: each
    call is Ray's own ``.remote()``."""

    @ray.remote(num_cpus=0)
    def submit_from_a_task():
        launch = launcher(echo.options(num_cpus=0))
        out = [ray.get(launch((i,), {})) for i in range(3)]
        return out, launch.fast, fast_path_off(echo)

    out, fast, why = ray.get(submit_from_a_task.remote())
    assert out == [(0, 0, 0), (1, 0, 0), (2, 0, 0)] and fast == 0 and "not a driver" in why


def test_another_core_worker_is_recorded_again(ray_cluster):
    """A launcher made under one ``ray.init`` keeps working under the next, whose core worker is
    another: the first call there is Ray's own again, the next ones take the fast path.
    (Stood in for by forgetting the core worker recorded with: a second ray.init costs a Ray.)"""
    launch = launcher(echo.options(num_cpus=0))
    assert [ray.get(launch((i,), {})) for i in range(3)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert launch.fast == 2
    launch._core = object()
    assert [ray.get(launch((i,), {})) for i in range(3)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert launch.fast == 4 and launch._core is ray._private.worker.global_worker.core_worker
