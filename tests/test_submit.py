"""A policy task's submission (``ray_adaptive._private.submit``): the call Ray's ``.remote()`` makes to
its core worker, with the per-call work that depends only on the options done once -- checked against
the call Ray itself makes, on the installed Ray, for several sets of options; and Ray's own
``.remote()`` on a Ray release the derived call is not verified on.

A Ray release joins ``VERIFIED_RAY_VERSIONS`` once this module passes on it (docs/ray-versions.md)."""

from __future__ import annotations

import inspect

import pytest
import ray

from ray_adaptive._private import submit
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


def _by_name(call: tuple) -> dict:
    """A positional ``submit_task`` call as {parameter name: value}, by the installed Ray's signature."""
    bound = inspect.signature(ray._raylet.CoreWorker.submit_task).bind(None, *call).arguments
    return {k: v for k, v in bound.items() if k != "self"}


def _has_option(name: str) -> bool:
    from ray._common import ray_option_utils

    return name in ray_option_utils.task_options


OPTIONS = [
    pytest.param({}, id="defaults"),
    pytest.param({"num_cpus": 0.5, "resources": {"rack_0": 0.001}, "max_retries": 0, "retry_exceptions": True},
                 id="resources-retries"),
    pytest.param({"name": "named", "memory": 1000, "runtime_env": {"env_vars": {"RA_TEST": "1"}}}, id="name-env"),
    pytest.param({"retry_exceptions": [ValueError], "label_selector": {"zone": "a"}, "enable_task_events": False},
                 id="selector"),
    pytest.param({"label_selector": {"zone": "b"}, "fallback_strategy": [{"label_selector": {"zone": "a"}}],
                  "_labels": {"kind": "probe"}}, id="fallback-labels",
                 marks=pytest.mark.skipif(not _has_option("fallback_strategy"),
                                          reason="fallback_strategy is a task option since Ray 2.51")),
]


@pytest.mark.parametrize("options", OPTIONS)
def test_the_call_is_the_call_ray_makes(ray_cluster, options):
    """After the first call (Ray's own), each call passes submit_task what Ray's ``.remote()`` passes
    it for the same arguments -- every argument Ray derives from the options, by parameter name, and
    the flattened arguments -- and the task runs with them. This is what puts a release in
    ``VERIFIED_RAY_VERSIONS``; it derives the call whether or not the installed release is listed."""
    bound = echo.options(**options)
    worker = ray._private.worker.global_worker
    assert ray.get(bound.remote(1, c=3)) == (1, 0, 3)  # (Ray's own .remote(): it exports the function)
    derived = submit._derived_arguments(bound, submit._function_of(bound), worker)
    assert derived is not None, "no derived call for these options: does Ray's _remote still derive so?"
    layout = submit._submit_layout(derived, submit._submit_task_parameters(worker.core_worker))
    assert layout is not None, ("submit_task's parameters are not the derived ones: "
                                f"{submit._submit_task_parameters(worker.core_worker)} vs {sorted(derived)}")
    head, middle, tail = layout
    for args, kwargs in [((1,), {"c": 3}), ((4, 5), {}), ((6,), {"b": 7, "c": 8})]:
        expected = _by_name(_rays_call(bound, args, kwargs))
        ours = _by_name((*head, expected["args"], *middle, expected["debugger_breakpoint"], *tail))
        differ = {k: (ours[k], expected[k]) for k in expected if ours[k] != expected[k]}
        assert not differ, f"the call differs from Ray's (ours, Ray's): {differ}"
        assert expected["args"][1::2] == [*args, *kwargs.values()]


@pytest.mark.parametrize("options", OPTIONS)
def test_the_fast_path_runs_the_task_with_those_options(ray_cluster, options):
    """On a verified release, calls after the first take the derived call, and the task runs."""
    launch = launcher(echo.options(**options))
    assert ray.get(launch((1,), {"c": 3})) == (1, 0, 3)
    assert launch.fast == 0 and launch._recorded is not None, fast_path_off(echo.options(**options))
    for args, kwargs in [((1,), {"c": 3}), ((4, 5), {}), ((6,), {"b": 7, "c": 8})]:
        assert ray.get(launch(args, kwargs)) == (args[0], kwargs.get("b", args[1] if len(args) > 1 else 0),
                                                 kwargs.get("c", 0))
    assert launch.fast == 3


def test_the_installed_ray_is_verified():
    """The Ray this project is developed on has its launches derived: a Ray release not listed still
    works (as the next test shows), but at the cost of Ray's own ``.remote()`` per task."""
    assert ray.__version__ in submit.VERIFIED_RAY_VERSIONS, (
        f"Ray {ray.__version__} is not in VERIFIED_RAY_VERSIONS: if test_the_call_is_the_call_ray_makes passes "
        "on it, add it there (docs/ray-versions.md, 'Extending the range')")


def test_an_unverified_ray_release_takes_rays_remote(ray_cluster, monkeypatch):
    """On a Ray release not in VERIFIED_RAY_VERSIONS every call is Ray's own ``.remote()``, and says so."""
    monkeypatch.setattr(submit, "VERIFIED_RAY_VERSIONS", submit.VERIFIED_RAY_VERSIONS - {ray.__version__})
    launch = launcher(echo.options(num_cpus=0))
    assert [ray.get(launch((i,), {"b": i})) for i in range(4)] == [(i, i, 0) for i in range(4)]
    assert launch.fast == 0 and launch._recorded is None
    assert f"Ray {ray.__version__} is not a release" in fast_path_off(echo)


def test_a_submit_task_with_other_parameters_takes_rays_remote(ray_cluster, monkeypatch):
    """On a verified release whose submit_task has a parameter the launcher does not derive (as a patched
    or rebuilt Ray could), every call is Ray's own ``.remote()``."""
    real = submit._submit_task_parameters
    monkeypatch.setattr(submit, "_submit_task_parameters", lambda core: (*real(core), "new_in_a_later_ray"))
    launch = launcher(echo.options(num_cpus=0))
    assert [ray.get(launch((i,), {})) for i in range(3)] == [(i, 0, 0) for i in range(3)]
    assert launch.fast == 0 and launch._recorded is None


def test_the_layout_follows_submit_tasks_order():
    """Each derived value goes to the parameter of its name wherever a release puts it: two parameters
    swapped (same names, same count) swap their values; a parameter not derived, a derived one
    missing from the call's per-call pair, or a name twice gives no layout."""
    derived = {"language": "L", "name": "N", "num_returns": 1, "resources": {"CPU": 1}, "labels": None}
    params = ("language", "args", "name", "num_returns", "resources", "debugger_breakpoint", "labels")
    assert submit._submit_layout(derived, params) == (("L",), ("N", 1, {"CPU": 1}), (None,))
    swapped = ("language", "args", "num_returns", "name", "resources", "debugger_breakpoint", "labels")
    assert submit._submit_layout(derived, swapped) == (("L",), (1, "N", {"CPU": 1}), (None,))
    assert submit._submit_layout(derived, (*params, "fallback_strategy")) is None
    assert submit._submit_layout(derived, tuple(p for p in params if p != "debugger_breakpoint")) is None
    assert submit._submit_layout(derived, (*params, "labels")) is None
    assert submit._submit_layout(derived, None) is None


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
