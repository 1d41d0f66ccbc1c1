"""The spare generation: the actors of the next live switch, started before the switch is asked for.

A live switch starts its generation's selector and placement actors beside
the plan in force. No task waits meanwhile, but the switch does: an actor is
a worker process, 1-3 s to start on a busy node -- and for a node that joins
the cluster, which the owner puts in force by a switch to the same plan
(:mod:`ray_adaptive.runtime.node_watch`), that wait is the time until the
node gets its first task. So the owner keeps the next generation's actors
ready: once a generation has been in force ``DELAY_S`` (a runtime that lives
a moment costs nothing), its node watch starts a *spare* of each actor the
plan in force has -- the selector, a placement actor on each node hosting
one -- unconfigured and named for the next generation. The next switch
configures those it can use and kills the others
(:meth:`~ray_adaptive.runtime.topology.Topology.start_actors`): a switch to
the same plan on one node more starts only the new node's placement actor,
if the plan has them.

A spare selector is restarted when its process dies, like any selector
(``max_restarts=-1``). A restart runs the constructor with the first
arguments, which name no generation's config, so a restarted spare takes its
config from the store, which has it from the moment the switch prepares it
(:meth:`~ray_adaptive.runtime.store.StateStore.config_of`). Placement actors
are never restarted.

The price: while a plan with actors is in force, one idle worker process
per actor (no CPU reserved).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Protocol, Tuple

import ray

from ray_adaptive._private.actors import wait_ready
from ray_adaptive.runtime.messages import Actor

__all__ = ["SpareGeneration", "Spares", "DELAY_S"]

log = logging.getLogger(__name__)

DELAY_S = 2.0


@dataclass
class SpareGeneration:
    """Unconfigured actors named for ``generation``: a selector, and placement actors by index, each with
    the node it runs on."""

    generation: int
    selector: Optional[Actor] = None
    placements: Dict[int, Tuple[Actor, str]] = field(default_factory=dict)

    def actors(self) -> List[Actor]:
        return [a for a in (self.selector, *(a for a, _ in self.placements.values())) if a is not None]

    def kill(self) -> None:
        for a in self.actors():
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass  # already gone


class InForce(Protocol):
    """The generation in force, as :class:`Spares` needs it (a :class:`~ray_adaptive.runtime.topology.Topology`)."""

    generation: int

    def start_spare(self) -> SpareGeneration: ...


class Spares:
    """The owner's spare generation (at most one). The owner calls :meth:`keep` from its node watch and
    :meth:`take` from a switch, both under its switching lock."""

    def __init__(self, delay_s: float = DELAY_S):
        self.delay_s = delay_s
        self._spare: Optional[SpareGeneration] = None
        self._seen: Tuple[int, float] = (-1, 0.0)  # (generation, when first seen in force)

    @property
    def generation(self) -> Optional[int]:
        """The generation the spare is for (None: none)."""
        return self._spare.generation if self._spare is not None else None

    def keep(self, topology: InForce) -> None:
        """Have a spare for the generation after ``topology`` (in force) once it has been for ``delay_s``."""
        g = topology.generation
        if self._seen[0] != g:
            self._seen = (g, time.monotonic())
        if self.generation == g + 1 or time.monotonic() - self._seen[1] < self.delay_s:
            return
        self.drop()
        try:
            self._spare = topology.start_spare()
        except Exception:  # (the switch then starts its actors itself)
            log.warning("ray-adaptive: starting the spare generation failed", exc_info=True)

    def take(self, generation: int) -> Optional[SpareGeneration]:
        """The spare, for the switch that makes ``generation`` (None if none, or one for another)."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.generation != generation:
            spare.kill()
            return None
        return spare

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Wait until the spare's actors are up; whether there is a spare (for a benchmark or a test that
        wants the switch a spare makes)."""
        spare = self._spare
        if spare is None:
            return False
        wait_ready(spare.actors(), timeout=timeout_s)
        return True

    def drop(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.kill()
