"""ESCHER scheduling libraries (ESLs): ready placement policies over ephemeral resources.

Each class turns a scheduling policy into resource requirements for Ray's
own resource-matching scheduler and keeps all state of its ephemeral
resources (see :mod:`ray_adaptive.resources`) inside itself. Pass what they
return to ``.options(**...)``; combine several with :func:`combine`; call
``close()`` (or use ``with``) to remove what they created.

Example (the slides' composition: load-balanced pairs of co-located tasks)::

    import ray, esl

    @ray.remote(num_cpus=1)
    def leader(token):
        return esl.CoLocation.join_here(token)   # this node becomes the pair's home

    @ray.remote(num_cpus=1)
    def follower():
        return ray.get_runtime_context().get_node_id()

    with esl.LoadBalance(num_tasks=4) as lb, esl.CoLocation() as colo:
        refs = []
        for i in range(4):
            refs.append(leader.options(**lb.options()).remote(colo.token(f"pair{i}")))
            refs.append(follower.options(**colo.follow(f"pair{i}", {"CPU": 1})).remote())
        print(ray.get(refs))   # each follower on its leader's node, one pair per node
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
