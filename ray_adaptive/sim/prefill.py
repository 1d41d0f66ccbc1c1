"""Starting a plan simulation from a busy cluster: node slots hold copies of the scenario's tasks.

``level`` 1: every slot of every node (the steady state of an overloaded
cluster); below 1, that share of the executors, spread over the nodes, and
no queue (the steady state of a cluster executing that share of its
execution bound -- a plan whose schedulers carry less than the nodes can
run). Running copies have a residual duration drawn uniformly from their
task's duration (the steady state of a busy executor), queued ones the full
duration. They go through the policy's hooks like dispatched tasks (so
DRF's allocations include them): the truth's, and each role's as a task it
decided. They are left out of the metrics. A slot no task's resources fit
into stays empty.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Sequence

from ray_adaptive.sim.bookkeeping import Books
from ray_adaptive.sim.model import Task

__all__ = ["prefill"]


def prefill(books: Books, hosts: Sequence, level: float = 1.0) -> None:
    """Fill ``level`` of the cluster's slots (see the module doc) under the roles ``hosts`` (selector first)."""
    nodes = books.members
    if level >= 1:
        slots = [(node, slot) for node in nodes for slot in range(node.slots)]
    else:
        layers = max(n.executors for n in nodes)
        slots = [(node, slot) for slot in range(layers) for node in nodes if slot < node.executors]
        slots = slots[:int(round(level * len(slots)))]
    src = itertools.cycle(books.tasks)
    i = 0
    full: set = set()  # nodes no task fits into any more (what a node holds only grows while it fills)
    for node, slot in slots:
        if node in full:
            continue
        t = next((t for t in itertools.islice(src, len(books.tasks)) if node.fits(t)), None)
        if t is None:
            full.add(node)
            continue
        d = t.spec.duration * (float(books.rng.uniform()) if slot < node.executors else 1.0)
        warm = Task(dataclasses.replace(t.spec, id=f"~warm{i}", arrival=0.0, duration=d, timeout=math.inf))
        i += 1
        books.warm.add(warm)
        books.cluster.dispatch(warm, node)
        books.hooks.run(books.truth, "OnDispatch", warm, node, books.loop.now)
        for host in hosts:  # (the copy's home is its task's; the schedulers' told of it last win)
            s = host.told_of(t, i)
            if s is not None:
                host.adopt(s, warm, node)
                books.owner[warm] = s
