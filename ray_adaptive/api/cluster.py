"""The connected Ray cluster as a policy sees it: its live nodes, each with its executors, resources and fields."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Set

import ray

from ray_adaptive.api.fields import check_fields, label_fields
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.plan import NodeState

__all__ = ["alive_node_ids", "check_node_ids", "policy_nodes"]


def _alive_nodes() -> List[dict]:
    if not ray.is_initialized():
        raise RuntimeError("ray-adaptive needs a connected Ray cluster: call ray.init(...) before ra.start(...)")
    return [n for n in ray.nodes() if n["Alive"]]


def alive_node_ids() -> Set[str]:
    """The ids of the cluster's live nodes (asked of the GCS: Ray has no node-event subscription)."""
    return {n["NodeID"] for n in _alive_nodes()}


def policy_nodes(policy: Policy, executors: Optional[int], queue: int,
                 node_fields: Mapping[str, Mapping[str, Any]]) -> List[NodeState]:
    """The live nodes, in Ray's order, as ``policy`` sees them: ``executors`` each (None: the node's CPUs,
    at least 1), ``queue``, Ray's resources, and the policy's ``Node:`` fields -- from ``node_fields``
    (node id -> values) or else the node's Ray labels of the same names."""
    alive = _alive_nodes()
    check_node_ids(node_fields, [info["NodeID"] for info in alive])
    lengths = vec_lengths(policy)
    nodes = []
    for i, info in enumerate(alive):
        what = f"node {info['NodeID'][:12]}"
        given: Dict[str, Any] = dict(node_fields.get(info["NodeID"], {}))
        fields = {**label_fields(policy.node_fields, info.get("Labels") or {}, set(given), what), **given}
        check_fields(policy.node_fields, fields, what, "node_fields", lengths)
        ex = executors if executors is not None else max(1, int(info["Resources"].get("CPU", 1)))
        nodes.append(NodeState(info["NodeID"], i, ex, queue, dict(info["Resources"]), fields))
    return nodes


def check_node_ids(node_fields: Any, alive: List[str]) -> None:
    """Refuse ``node_fields=`` that is not node id -> {field: value}, or names a node that is not alive
    (its values would be ignored without a word: a typo, or a node that left)."""
    if not isinstance(node_fields, Mapping):
        raise TypeError(f"node_fields= must be a dict of node id -> {{Node field: value}}, got {node_fields!r}")
    for node_id, values in node_fields.items():
        if not isinstance(node_id, str):
            raise TypeError(f"node_fields=: a node id is a string (ray.nodes()[i]['NodeID']), got {node_id!r}")
        if node_id not in alive:
            shown = ", ".join(alive[:4]) + (", ..." if len(alive) > 4 else "")
            raise ValueError(f"node_fields=: no live node has id {node_id!r} (the live nodes: {shown})")
        if not isinstance(values, Mapping):
            raise TypeError(f"node_fields[{node_id!r}] must be a dict of the policy's Node fields, got {values!r}")
