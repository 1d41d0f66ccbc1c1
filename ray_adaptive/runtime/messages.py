"""The messages between a plan's processes: what the selector and the state store answer, what a client hands back.

Plain dataclasses, pickled by Ray. Each names the incarnation of the actor
that sent it, so a client can tell a restarted actor (which knows nothing of
its tasks) from the one it was talking to.

Example:
    >>> Decisions([("t1", "node-a"), ("t2", None)], "f00d").placed()
    [('t1', 'node-a')]
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from ray_adaptive.plan.scheduler import TaskState

__all__ = ["Actor", "Decision", "Stop", "Decisions", "Lease", "Recall", "Reply", "Handback", "Handover", "SyncAnswer",
           "new_client_id"]

#: A handle of one of the runtime's actors (store, selector, placement): its methods are called with
#: ``.remote()``, which Ray's stubs do not type per method.
Actor = Any

def new_client_id() -> str:
    """The id a submitting process's messages carry: unique in the cluster (its pid, readable in logs, and a
    random part)."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


#: (task id, node id), or (task id, None): dropped at its deadline, never placed.
Decision = Tuple[str, Optional[str]]

#: (task id, run number): a run a policy's Preempt stops (asked of its process), or one stopped (its answer)
Stop = Tuple[str, int]


@dataclass
class Decisions:
    """The selector's answer to a client's exchange: decisions made for that client's tasks, and the runs
    of its tasks a preemption stops (``stop``: see :mod:`ray_adaptive.runtime.selector_preempt`)."""

    decisions: List[Decision]
    incarnation: str
    stop: List[Stop] = field(default_factory=list)

    def placed(self) -> List[Decision]:
        return [(t, n) for t, n in self.decisions if n is not None]


@dataclass
class Lease:
    """The selector hands its decisions to a lone client: its exact State, the nodes it saw die,
    and the client's tasks back, undecided (see :class:`~ray_adaptive.runtime.selector.Selector`)."""

    state: dict
    dead: List[str]
    tasks: List[TaskState]
    incarnation: str


@dataclass
class Recall:
    """The selector's answer to a lease holder's long poll: ``recalled`` -- hand the lease back now."""

    recalled: bool
    incarnation: str


#: What :meth:`~ray_adaptive.runtime.selector.Selector.exchange` returns.
Reply = Union[Decisions, Lease, Recall]


@dataclass
class Handback:
    """Running tasks decided elsewhere, whose finishes go to the selector from now on.

    A lease coming back carries the holder's ``state`` and the incarnation
    that granted it (``granted_by``); after a restart, a client's tasks come
    back as a ``rebuild``: their OnDispatch rebuilds their share of State.
    After a live switch the running tasks come without hooks (their
    OnDispatch is in the State handed over), and the tasks sent with it
    whose ids are in ``arrived`` had their OnArrival there too; ``finished``
    are finishes the process held meanwhile, applied once the running tasks
    are taken (their room is often what the tasks sent with it wait for).
    """

    running: List[TaskState]
    dead: List[str] = field(default_factory=list)
    state: Optional[dict] = None
    granted_by: Optional[str] = None
    rebuild: bool = False
    arrived: List[str] = field(default_factory=list)
    finished: List[str] = field(default_factory=list)


@dataclass
class Handover:
    """What a process's decider held when it froze for a live switch: its undecided tasks, those whose
    OnArrival is in the plan's State (``arrived``) and those it never passed on (``new``)."""

    arrived: List[TaskState] = field(default_factory=list)
    new: List[TaskState] = field(default_factory=list)
    # a replica's last State changes, for the ack to carry (see StoreClient.hand_off)
    pushes: Optional[tuple] = None


@dataclass
class SyncAnswer:
    """The state store's answer to a sync: the merged State, the *others'* outstanding tasks per node."""

    state: dict
    others: Dict[str, int]
    incarnation: str
    generation: int = 0  # of the plan in force at the store: a replica of another one takes nothing of it
