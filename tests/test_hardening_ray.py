"""Issue 36's rows that need a running policy on the session's Ray cluster (the rest: tests/test_hardening.py).

* a task field that would poison its tenant -- ``inf`` in ``resource_vec``, a
  vec of the wrong length -- is refused at ``.options()`` and at every
  submission, naming the length expected, and the runtime's stats add up;
* ``rt.switch("hybrid")`` after ``ra.shutdown()`` raises at once;
* ``rt.switch("adaptive")`` says what is wrong.
"""

from __future__ import annotations

import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive import resources


@ray.remote(num_cpus=1)
def noop(x):
    return x


@pytest.fixture
def drf(ray_cluster):
    rt = ra.start("drf_lb", plan="decentralized", queue=1)
    yield rt
    ra.shutdown()
    assert resources.created_resources() == {}


def test_a_poisoning_resource_vec_is_refused_every_time_and_the_stats_add_up(drf):
    fn = ra.policy("drf_lb")(noop)
    with pytest.raises(TypeError, match=r"'resource_vec' must be vec<float> \(a list of finite numbers\), "
                                        r"got \[inf, 0\.5, 0\]"):
        fn.options(task={"tenant": "a", "resource_vec": [float("inf"), 0.5, 0]})
    with pytest.raises(TypeError, match=r"'resource_vec' must be a vec of length 3 .*drf_lb\.policy:15"):
        fn.options(task={"tenant": "a", "resource_vec": [1.0]})
    # (a function given its fields before the policy ran: refused at each submission instead)
    ra.shutdown("drf_lb")
    early = fn.options(task={"tenant": "b", "resource_vec": [1.0]})
    rt = ra.start("drf_lb", plan="decentralized", queue=1)
    for _ in range(7):  # (before: 3 of 7 succeeded, 4 raised PolicyRuntimeError, and stats went wrong)
        with pytest.raises(TypeError, match=r"must be a vec of length 3"):
            early.remote(1)
    good = fn.options(task={"tenant": "b", "resource_vec": [0.1, 0.2, 0.1]})
    assert ray.get([good.remote(i) for i in range(5)]) == list(range(5))
    deadline = time.monotonic() + 10
    while rt.stats()["finished"] < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    s = rt.stats()
    assert (s["submitted"], s["dispatched"], s["finished"], s["pending"]) == (5, 5, 5, 0), s


def test_switch_to_adaptive_says_it_is_the_controller(drf):
    with pytest.raises(ValueError, match=r"'adaptive' is not a plan but the controller .*ra\.start\(policy, "
                                         r"plan='adaptive'\)"):
        drf.switch("adaptive")


def test_switch_after_shutdown_raises_at_once(ray_cluster):
    rt = ra.start("drf_lb", plan="centralized", queue=1)
    ra.shutdown()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="shut down"):
        rt.switch("hybrid")
    assert time.monotonic() - start < 2  # (it blocked for over 30 s)


OVERFLOW = """
Task:
  big: float

State:
  total: float = 0.0

Score(task, node):
  return get_load(node)

OnArrival(task):
  total += task.big

OnFinish(task, node):
  total -= task.big
"""


def test_a_hook_that_fails_on_a_task_fails_that_task_alone_and_the_stats_add_up(ray_cluster, tmp_path):
    """A finite field whose hook would make the State non-finite (no field check can see it: it is the
    sum that overflows) fails its submission with PolicyRuntimeError; the State and the stats stay exact."""
    from ray_adaptive.errors import PolicyRuntimeError

    path = tmp_path / "overflow.policy"
    path.write_text(OVERFLOW)
    rt = ra.start(str(path), plan="decentralized", queue=1)
    try:
        fn = ra.policy(rt.name)(noop)
        hold = fn.options(task={"big": 1e308}).submit(1)  # total 1e308 until its OnFinish ...
        with pytest.raises(PolicyRuntimeError, match=r"overflow\.policy:\d+:\d+: total would become inf"):
            fn.options(task={"big": 1e308}).remote(2)  # ... + 1e308 = inf: refused, undone
        assert ray.get(hold.result(timeout=30)) == 1
        deadline = time.monotonic() + 10
        while rt.stats()["finished"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        s = rt.stats()
        assert (s["submitted"], s["dispatched"], s["finished"], s["failed"], s["pending"]) == (2, 1, 1, 1, 0), s
        assert rt.export()["caller"]["state"]["total"] == 0.0
    finally:
        ra.shutdown()
    assert resources.created_resources() == {}
