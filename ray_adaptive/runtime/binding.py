"""Binding decisions to nodes through ephemeral per-node slot resources.

Each node gets one resource ``ra-<policy>-slot-<index>`` for the lifetime of a
policy's runtime. A decision (task, node) is realised by submitting the task
with ``{slot: 1}``: Ray's own resource matching then places it on that node.
The slot exists before any task asks for it, so every task to a node has the
same resource shape: Ray's owner reuses worker leases across them, so the
binding costs little, where a resource per task would make each task its own
scheduling class (no lease reuse) and wait for a resource report.

The slot's capacity is the node's ``executors + queue`` of the cluster model:
the router never has more than that outstanding on a node, so the capacity
never binds in normal operation and only guards against accounting bugs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Mapping

from ray_adaptive import resources

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class NodeSlot:
    node_id: str
    index: int
    resource: str
    capacity: int


class SlotBinding:
    """Creates, names and removes the per-node slot resources of one policy runtime."""

    def __init__(self, policy_name: str, capacities: Mapping[str, int]):
        """``capacities``: node id -> slot capacity (executors + queue), in node order. A node of capacity 0
        (no CPU: it runs no task) gets no resource."""
        self._tag = self.tag(policy_name)
        self.slots: Dict[str, NodeSlot] = {}
        self._scope = resources.ResourceScope()
        self.add(capacities)

    def add(self, capacities: Mapping[str, int]) -> None:
        """Slots for nodes that joined (numbered after the others): ``capacities`` as for the constructor."""
        for node, cap in capacities.items():
            slot = self.slots[node] = NodeSlot(node, len(self.slots), f"ra-{self._tag}-slot-{len(self.slots)}",
                                               int(cap))
            if slot.capacity > 0:
                self._scope.set_resource(slot.resource, slot.capacity, node_spec=slot.node_id)

    @staticmethod
    def tag(policy_name: str) -> str:
        """How ``policy_name`` is spelled in its slot resources' names (``ra-<tag>-slot-<index>``)."""
        return _SAFE.sub("_", policy_name)

    def rehome(self, node_id: str, host_id: str) -> None:
        """Move ``node_id``'s slot to ``host_id`` (after ``node_id`` died): tasks bound to
        the dead node -- Ray's retries of those that were running, those still queued --
        then run on the host instead of waiting forever for a resource that is gone."""
        slot = self.slots[node_id]
        if slot.capacity > 0:
            self._scope.set_resource(slot.resource, slot.capacity, node_spec=host_id)

    def close(self) -> None:
        """Remove every slot resource (idempotent)."""
        self._scope.close()
