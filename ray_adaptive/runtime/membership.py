"""Which nodes a submitting process still decides for: dead nodes are noticed and left.

Ray has no public subscription to node events, so the dispatcher thread asks
every ``CHECK_S`` which nodes are alive (``alive_nodes``). A node newly seen
dead is handed to ``on_dead`` once: the process that started the runtime
moves its slot resource to a live node there, so Ray's retries of the tasks
that ran on it, and of those queued for it, run on that host.
"""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional, Set

__all__ = ["NodeMembership"]


class NodeMembership:
    """The nodes seen dead so far, and who to tell of a new one."""

    CHECK_S = 1.0

    def __init__(self, alive_nodes: Optional[Callable[[], Set[str]]] = None,
                 on_dead: Optional[Callable[[str], None]] = None):
        self._alive_nodes = alive_nodes
        self._on_dead = on_dead
        self.dead: Set[str] = set()

    def newly_dead(self, node_ids: Iterable[str]) -> List[str]:
        """The nodes of ``node_ids`` that died since the last look (remembered from now on)."""
        if self._alive_nodes is None:
            return []
        alive = self._alive_nodes()
        dead = [n for n in node_ids if n not in alive and n not in self.dead]
        self.dead.update(dead)
        return dead

    def left(self, node_id: str) -> None:
        """Tell ``on_dead`` (the deciders were told first)."""
        if self._on_dead is not None:
            self._on_dead(node_id)
