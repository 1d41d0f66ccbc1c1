"""The user API: run a policy on a Ray cluster and submit policy-decorated tasks.

Example (inside a connected Ray driver)::

    import ray, ray_adaptive as ra

    ra.start("drf_lb")

    @ra.policy("drf_lb")
    @ray.remote(num_cpus=1)
    def work(x):
        return x * 2

    ref = work.options(task={"tenant": "a", "resource_vec": [1, .5, 0]}).remote(21)
    assert ray.get(ref) == 42
    ra.shutdown()

``.remote()`` returns a real ``ray.ObjectRef`` owned by the caller, once the
policy has placed the task: immediately while some node has room, otherwise
after one frees (backpressure). ``.submit()`` returns at once with a
``concurrent.futures.Future`` of that ObjectRef, so one thread can keep a
backlog for the policy to order.

* :mod:`~ray_adaptive.api.lifecycle` -- :func:`start`, :func:`shutdown`, :func:`stop`, :func:`runtime_of`;
* :mod:`~ray_adaptive.api.owner` -- the owner of a runtime (a driver, or the policy service);
* :mod:`~ray_adaptive.api.service` -- the policy service: one runtime for the whole cluster, owned by no driver;
* :mod:`~ray_adaptive.api.runtime` -- :class:`PolicyRuntime`, a running policy as this process sees it;
* :mod:`~ray_adaptive.api.function` -- ``@ra.policy``: :class:`PolicyFunction`;
* :mod:`~ray_adaptive.api.actor_class` -- ``@ra.policy`` above a ``@ray.remote`` class: :class:`PolicyActorClass`
  (actors placed by the policy);
* :mod:`~ray_adaptive.api.cluster`, :mod:`~ray_adaptive.api.fields` -- the cluster's nodes and the
  policy's fields, as a policy sees them.
"""

from ray_adaptive.api.actor_class import PolicyActorClass
from ray_adaptive.api.function import PolicyFunction, policy
from ray_adaptive.api.lifecycle import runtime_of, shutdown, start, stop
from ray_adaptive.api.runtime import PolicyRuntime

__all__ = ["start", "shutdown", "stop", "policy", "PolicyRuntime", "PolicyFunction", "PolicyActorClass", "runtime_of"]
