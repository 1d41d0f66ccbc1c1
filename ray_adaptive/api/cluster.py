"""The connected Ray cluster as a policy sees it: its live nodes, each with its executors, resources and fields."""

from __future__ import annotations

import logging
from typing import Any, List, Mapping, Optional, Set

import ray

from ray_adaptive.api.fields import check_fields, label_fields
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.plan import NodeState

__all__ = ["alive_node_ids", "check_node_ids", "policy_nodes", "joined_nodes", "node_state"]

log = logging.getLogger("ray_adaptive")


def _alive_nodes() -> List[dict]:
    if not ray.is_initialized():
        raise RuntimeError("ray-adaptive needs a connected Ray cluster: call ray.init(...) before ra.start(...)")
    return [n for n in ray.nodes() if n["Alive"]]


def alive_node_ids() -> Set[str]:
    """The ids of the cluster's live nodes (asked of the GCS: Ray has no node-event subscription)."""
    return {n["NodeID"] for n in _alive_nodes()}


def policy_nodes(policy: Policy, executors: Optional[int], queue: int,
                 node_fields: Mapping[str, Mapping[str, Any]]) -> List[NodeState]:
    """The live nodes, in Ray's order, as ``policy`` sees them (see :func:`node_state`); ``node_fields``: node
    id -> values of the policy's ``Node:`` fields (else read from the node's Ray labels)."""
    alive = _alive_nodes()
    check_node_ids(node_fields, [info["NodeID"] for info in alive])
    lengths = vec_lengths(policy)
    return [node_state(policy, info, i, executors, queue, node_fields.get(info["NodeID"], {}), lengths)
            for i, info in enumerate(alive)]


def joined_nodes(policy: Policy, known: List[NodeState], executors: Optional[int], queue: int) -> List[NodeState]:
    """The live nodes not in ``known`` (nodes that joined since), numbered after it; their ``Node:`` fields
    from their Ray labels. A node whose labels do not give the policy's fields is left out, with a warning
    once (it would fail every decision that reads them)."""
    seen = {n.id for n in known}
    out: List[NodeState] = []
    lengths = vec_lengths(policy)
    for info in _alive_nodes():
        if info["NodeID"] in seen or info["NodeID"] in _unusable:
            continue
        try:
            out.append(node_state(policy, info, len(known) + len(out), executors, queue, {}, lengths))
        except (TypeError, ValueError) as err:
            _unusable.add(info["NodeID"])
            log.warning("ray-adaptive: node %s joined but policy %r cannot use it: %s", info["NodeID"][:12],
                        policy.name, err)
    return out


_unusable: Set[str] = set()  # nodes whose labels lack the policy's Node fields (warned about once)


def node_state(policy: Policy, info: Mapping[str, Any], index: int, executors: Optional[int], queue: int,
               given: Mapping[str, Any], lengths: Any) -> NodeState:
    """One node of ``ray.nodes()`` as ``policy`` sees it: Ray's resources (the policy's own slot resources
    left out), its ``Node:`` fields (``given``, else its Ray labels), and its executors -- ``executors``,
    or else its CPU count. A node with no CPU runs no task: 0 executors and no queue (Ray advises
    ``--num-cpus=0`` on the head of a large cluster; a task placed there would wait forever)."""
    what = f"node {info['NodeID'][:12]}"
    fields = {**label_fields(policy.node_fields, info.get("Labels") or {}, set(given), what), **dict(given)}
    check_fields(policy.node_fields, fields, what, "node_fields", lengths)
    resources = {k: float(v) for k, v in info["Resources"].items() if not k.startswith("ra-")}
    cpus = int(resources.get("CPU", 0))
    ex = 0 if cpus == 0 else (executors if executors is not None else cpus)
    return NodeState(info["NodeID"], index, ex, queue if ex else 0, resources, fields)


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
