"""ESCHER ephemeral resources on Ray: create, resize and delete custom resources at runtime.

ESCHER (Mehta et al.) showed that a plain resource-matching scheduler plus one
call, *create a resource on some nodes now*, expresses gang scheduling,
co-location, anti-affinity, load balancing, priorities and more: a task that
requires ``{"my-res": 1}`` can only run where ``my-res`` exists. Ray removed
``ray.experimental.set_resource``; this package brings it back on Ray 2.60
through the raylet's ``ResizeLocalResourceInstances`` RPC.

This module is the user API. The rest of the package: ``checks`` (what a
name and a capacity must be), ``primitives`` (what scheduling libraries such
as ``esl`` build on: batched resizes of Ray's own units, compare-and-resize,
a cluster-wide lock; re-exported here) and ``_session`` (this process's
record of what it set, and the thread that makes clamped shrinks hold).

Example (a Ray cluster is running and this process is connected)::

    import ray
    from ray_adaptive.resources import set_resource, get_cluster_state, ResourceScope

    @ray.remote(num_cpus=1)
    def where():
        return ray.get_runtime_context().get_node_id()

    node = set_resource("colo", 2)[0]           # on this process's node
    assert ray.get(where.options(resources={"colo": 1}).remote()) == node
    assert get_cluster_state()[node]["colo"]["total"] == 2
    set_resource("colo", 0)                      # delete it

    with ResourceScope() as scope:               # removed when the block ends
        scope.set_resource("lb", 1, node_spec={})   # on every alive node

Semantics on Ray 2.60 (see tests/test_resources.py):

* A change is effective on its raylet when the call returns. Other raylets
  (which route tasks submitted on their nodes) learn it with the node's next
  resource report (``raylet_report_resources_period_milliseconds``, 100 ms by
  default).
* Shrinking a resource below what running tasks hold: the raylet clamps the
  new total to the amount in use and never lowers it on its own after the
  tasks finish. This package remembers the target and re-applies it as units
  are released (a background thread, every ~20 ms), so the resource converges
  to the requested capacity; :func:`pending_resizes` shows what is still
  converging and :func:`wait_for_pending` waits for it. Deleting (capacity 0)
  a resource in use behaves the same way: running tasks keep their units, no
  new task gets one, and the name disappears once the last holder finishes.
* Deleting a resource that queued tasks wait on leaves them queued (Ray treats
  them as infeasible); they start as soon as the name is created again.
* ``GPU`` and other unit-instance resources cannot be resized by the raylet;
  every name Ray gives a meaning to (``CPU``, ``GPU``, ``memory``,
  ``object_store_memory``, ``node:*``, ``accelerator_type:*``, placement-group
  names ``*_group_*``, ...) is refused here with a :class:`ResourceError`.
* One RPC carries any number of names: :func:`set_resources` sets many names
  on a node at once (far cheaper than one call per name).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Set, Union

from ray_adaptive._private import raylet
from ray_adaptive.errors import ResourceError
from ray_adaptive.resources import _session, checks, primitives
# re-exported (see __all__), so `ray_adaptive.resources.<name>` is the one path users need
from ray_adaptive.resources.checks import RESERVED_NAMES, check_capacities, is_reserved_name  # noqa: F401
from ray_adaptive.resources.primitives import (  # noqa: F401
    cluster_lock, compare_and_resize, resize_many, retry_until_done,
)

# The user API defined here, then the checks' and the primitives' (one import path for all of them).
__all__ = [
    "set_resource", "set_resources", "get_cluster_state", "created_resources",
    "pending_resizes", "wait_for_pending", "ResourceScope", "cleanup",
    *checks.__all__,
    *primitives.__all__,
]

NodeSpec = Union[None, str, Mapping[str, float], Iterable[str]]


def _resolve_nodes(client: raylet.RayletClient, node_spec: NodeSpec) -> List[str]:
    if node_spec is None:
        return [raylet.current_node_id()]
    if isinstance(node_spec, str):
        client.alive_node(node_spec)  # raises ResourceError if unknown or dead
        return [node_spec]
    if isinstance(node_spec, Mapping):
        for key, value in node_spec.items():
            if not isinstance(key, str):
                raise TypeError(f"node_spec keys must be resource names, got {key!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(
                    f"node_spec[{key!r}] must be a number (the minimum total), got {value!r}"
                )
        alive = client.alive_nodes(refresh=True)
        loads = client.load(alive)
        return [
            node
            for node in alive
            if node in loads
            and all(loads[node][0].get(k, 0.0) >= float(v) for k, v in node_spec.items())
        ]
    if isinstance(node_spec, Iterable):
        nodes = list(node_spec)
        for node in nodes:
            if not isinstance(node, str):
                raise TypeError(f"node_spec must list node id strings, got {node!r}")
            client.alive_node(node)
        return nodes
    raise TypeError(
        "node_spec must be None (this node), a node id, a list of node ids or a dict "
        f"of minimum resources (e.g. {{'GPU': 4}}, {{}} for every node), got {node_spec!r}"
    )


def set_resources(capacities: Mapping[str, float], node_spec: NodeSpec = None) -> List[str]:
    """Set several resources at once: one RPC per node carries all the names.

    Same rules as :func:`set_resource`; use it to create or delete many names
    (1,000 names on a node in one call) without one round trip per name.

    Example::

        set_resources({f"slot_{i}": 1 for i in range(1000)}, node_spec={})
    """
    targets = check_capacities(capacities)
    client, session = _session.current()  # (only once every name and capacity passed: bad input needs no cluster)
    nodes = _resolve_nodes(client, node_spec)
    if not targets or not nodes:
        return nodes
    _session.apply(client, session, {node: targets for node in nodes})
    return nodes


def set_resource(name: str, capacity: float, node_spec: NodeSpec = None) -> List[str]:
    """Create, resize or delete the custom resource ``name`` on some nodes.

    Args:
        name: the resource name. Names Ray uses itself (``CPU``, ``GPU``,
            ``memory``, ``node:*``, ``*_group_*``, ...) raise ``ResourceError``.
        capacity: the new total on each chosen node; ``0`` deletes it. Units
            currently held by running tasks are not taken away: a smaller
            total converges once they are released (see the module docs).
        node_spec: where. ``None``: the node of the calling process (driver,
            task or actor). A node id (hex string): that node. A list of node
            ids. A dict of minimum totals, e.g. ``{"GPU": 4}``: every alive
            node whose resources satisfy all of them; ``{}``: every alive node.

    Returns:
        The ids of the nodes the resource was set on (possibly empty when a
        dict matches no node).

    Raises:
        ResourceError: reserved name, unknown or dead node, or the raylet refused.
        TypeError, ValueError: malformed arguments (the message names them).

    Example::

        node = set_resource("colo", 1)[0]
        f.options(resources={"colo": 1}).remote()   # runs on `node`
        set_resource("colo", 0)
    """
    return set_resources({name: capacity}, node_spec)


def get_cluster_state(node_ids: Optional[Iterable[str]] = None) -> Dict[str, Dict[str, Dict[str, float]]]:
    """``{node_id: {resource: {"total": x, "available": y}}}`` for every alive node.

    Freshness: each raylet is asked directly and concurrently
    (``GetResourceLoad``), so the figures are exact as of the call (a few
    milliseconds for a handful of nodes), not the GCS view that lags by a
    resource-report period. A resource fully in use has ``available == 0``.

    Example::

        state = get_cluster_state()
        free_cpus = {n: r["CPU"]["available"] for n, r in state.items()}
    """
    client, _ = _session.current()
    nodes = list(client.alive_nodes(refresh=True)) if node_ids is None else list(node_ids)
    out = {}
    for node, (total, available) in client.load(nodes).items():
        out[node] = {
            name: {"total": value, "available": available.get(name, 0.0)}
            for name, value in total.items()
        }
    return out


def created_resources() -> Dict[str, Dict[str, float]]:
    """Resources created at runtime on each alive node (by any process): ``{node: {name: total}}``.

    A node's resources at registration come from the GCS node table; any other
    name not reserved by Ray was made through this library. Used by
    :func:`cleanup` and by leak checks.
    """
    client, _ = _session.current()
    alive = client.alive_nodes(refresh=True)
    out = {}
    for node, (total, _avail) in client.load(alive).items():
        static = alive[node].resources
        extra = {
            name: value
            for name, value in total.items()
            if name not in static and not is_reserved_name(name)
        }
        if extra:
            out[node] = extra
    return out


def pending_resizes() -> Dict[str, Dict[str, float]]:
    """``{node: {name: target}}``: shrinks and deletions still waiting for units in use."""
    return _session.pending_targets()


def wait_for_pending(timeout_s: float = 10.0) -> bool:
    """Wait until every shrink/delete of this process has converged; True if so."""
    return _session.wait_until_settled(timeout_s)


def cleanup(wait_s: float = 5.0, everywhere: bool = True) -> Dict[str, List[str]]:
    """Remove every resource this library created; returns ``{node: [names]}``.

    With ``everywhere=True`` (default) this includes names created by other
    processes (tasks, actors, other drivers) on this cluster, found by
    :func:`created_resources`; with ``False`` only what this process created.
    Names still held by running tasks are deleted once released; the call
    waits up to ``wait_s`` seconds for that.

    Example::

        ray_adaptive.resources.cleanup()
        assert not ray_adaptive.resources.created_resources()
    """
    client, session = _session.current()
    with _session.lock:
        names: Dict[str, Set[str]] = {n: set(t) for n, t in session.created.items()}
        for node, targets in session.pending.items():
            names.setdefault(node, set()).update(targets)
    if everywhere:
        for node, extra in created_resources().items():
            names.setdefault(node, set()).update(extra)
    alive = client.alive_nodes(refresh=True)
    per_node = {n: {name: 0.0 for name in s} for n, s in names.items() if s and n in alive}
    with _session.lock:
        for node in [n for n in session.created if n not in alive]:
            del session.created[node]
        if per_node:
            _session.apply(client, session, per_node)
    wait_for_pending(wait_s)
    return {n: sorted(t) for n, t in per_node.items()}


class ResourceScope:
    """Owns ephemeral resources and removes them when it ends.

    Use it as a context manager, or keep it as an owner object and call
    :meth:`close`. Every name set through the scope (on whichever nodes) is
    deleted at the end, including ones still held by running tasks (they go
    once released).

    Example::

        with ResourceScope() as scope:
            nodes = scope.set_resource("lb", 2, node_spec={})
            refs = [f.options(resources={"lb": 1}).remote() for _ in range(8)]
            ray.get(refs)
        # "lb" is gone from every node
    """

    def __init__(self) -> None:
        self._owned: Dict[str, Set[str]] = {}
        self._closed = False

    def set_resource(self, name: str, capacity: float, node_spec: NodeSpec = None) -> List[str]:
        """:func:`set_resource`, remembering the name for :meth:`close`."""
        return self.set_resources({name: capacity}, node_spec)

    def set_resources(self, capacities: Mapping[str, float], node_spec: NodeSpec = None) -> List[str]:
        """:func:`set_resources`, remembering the names for :meth:`close`."""
        if self._closed:
            raise ResourceError("this ResourceScope is closed; open a new one")
        nodes = set_resources(capacities, node_spec)
        for node in nodes:
            self._owned.setdefault(node, set()).update(capacities)
        return nodes

    @property
    def owned(self) -> Dict[str, List[str]]:
        """``{node: [names]}`` set through this scope and not yet removed."""
        return {n: sorted(s) for n, s in self._owned.items()}

    def close(self) -> None:
        """Delete everything set through this scope (idempotent)."""
        if self._closed:
            return
        self._closed = True
        owned, self._owned = self._owned, {}
        if not owned:
            return
        client, session = _session.current()
        alive = client.alive_nodes(refresh=True)
        per_node = {n: {name: 0.0 for name in s} for n, s in owned.items() if n in alive}
        if per_node:
            _session.apply(client, session, per_node)

    def __enter__(self) -> "ResourceScope":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
