"""ESCHER scheduling libraries (ESLs): ready placement policies over ephemeral resources.

Each class turns a scheduling policy into resource requirements for Ray's
own resource-matching scheduler and keeps all state of its ephemeral
resources (see :mod:`ray_adaptive.resources`) inside itself. Pass what they
return to ``.options(**...)``; combine several with :func:`combine`; call
``close()`` (or use ``with``) to remove what they created.

Example (slides: load-balanced pairs of co-located tasks)::

    import ray, esl

    @ray.remote(num_cpus=1)
    def task(i):
        return ray.get_runtime_context().get_node_id()

    with esl.LoadBalance(num_tasks=4) as lb, esl.CoLocation() as colo:
        refs = []
        for i in range(4):
            node = lb.node_for_next()                  # or let Ray pick with lb.options()
            refs.append(task.options(**esl.combine(lb.options(), colo.group(f"pair{i}"))).remote(i))
        print(ray.get(refs))
"""

from esl._base import combine
from esl.gang import Gang, GangTimeoutError
from esl.placement import (
    AntiAffinity,
    BinPack,
    CoLocation,
    DataLocality,
    LoadBalance,
    SoftConstraint,
    Spread,
)
from esl.queueing import DRFLB, HierarchicalFairShare, Priority

__all__ = [
    "combine",
    "Gang",
    "GangTimeoutError",
    "CoLocation",
    "AntiAffinity",
    "Spread",
    "LoadBalance",
    "BinPack",
    "Priority",
    "SoftConstraint",
    "DataLocality",
    "DRFLB",
    "HierarchicalFairShare",
]
