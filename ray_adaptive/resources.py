"""ESCHER ephemeral resources on Ray: create, resize and delete custom resources at runtime.

ESCHER (Mehta et al.) showed that a plain resource-matching scheduler plus one
call, *create a resource on some nodes now*, expresses gang scheduling,
co-location, anti-affinity, load balancing, priorities and more: a task that
requires ``{"my-res": 1}`` can only run where ``my-res`` exists. Ray removed
``ray.experimental.set_resource``; this module brings it back on Ray 2.60
through the raylet's ``ResizeLocalResourceInstances`` RPC.

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

Semantics, measured on Ray 2.60 (see tests/test_resources.py):

* A change is effective on its raylet when the call returns. Other raylets
  (which route tasks submitted on their nodes) learn it with the node's next
  resource report (``raylet_report_resources_period_milliseconds``, 100 ms by
  default).
* Shrinking a resource below what running tasks hold: the raylet clamps the
  new total to the amount in use and never lowers it on its own after the
  tasks finish. This module remembers the target and re-applies it as units
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

import math
import threading
import time
import unicodedata
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from ray_adaptive._private import raylet
from ray_adaptive.errors import ResourceError

__all__ = [
    "set_resource",
    "set_resources",
    "get_cluster_state",
    "created_resources",
    "pending_resizes",
    "wait_for_pending",
    "ResourceScope",
    "cleanup",
    "is_reserved_name",
    "RESERVED_NAMES",
    "resize_many",
    "check_capacities",
    "cluster_lock",
    "compare_and_resize",
    "retry_until_done",
]

NodeSpec = Union[None, str, Mapping[str, float], Iterable[str]]

#: Names with a meaning to Ray itself; refused by :func:`set_resource`.
RESERVED_NAMES = frozenset(
    {"CPU", "GPU", "TPU", "NPU", "HPU", "memory", "object_store_memory", "neuron_cores"}
)
_RESERVED_PREFIXES = ("node:", "accelerator_type:", "TPU-", "bundle_group_", "ray.io/")
# Placement-group bundle resources: CPU_group_<pg>, CPU_group_<i>_<pg>, bundle_group_...
_RESERVED_INFIX = "_group_"
_MAX_NAME_LEN = 256
# Ray stores resource quantities as fixed point with this granularity.
_GRANULARITY = 1e-4
_MAX_CAPACITY = 1e14
_RECONCILE_PERIOD_S = 0.02


def is_reserved_name(name: str) -> bool:
    """True if Ray gives ``name`` a meaning of its own (see :data:`RESERVED_NAMES`)."""
    return (
        name in RESERVED_NAMES
        or name.startswith(_RESERVED_PREFIXES)
        or _RESERVED_INFIX in name
    )


def _unprintable(name: str) -> Optional[str]:
    """The first character of ``name`` that has no place in a resource name: a control character (NUL,
    newline, escape, ...), a format character (e.g. a bidirectional override) or a line separator."""
    for ch in name:
        category = unicodedata.category(ch)
        if category[0] == "C" or category in ("Zl", "Zp"):
            return ch
    return None


def _check_spelling(name) -> str:
    """What every name sent to the raylet must be, Ray's own (CPU, ...) included."""
    if not isinstance(name, str):
        raise TypeError(
            f"resource name must be a str, got {type(name).__name__} {name!r}"
        )
    if not name or name.strip() != name or len(name) > _MAX_NAME_LEN:
        shown = repr(name) if len(name) <= 80 else f"{name[:40]!r}... ({len(name):,} characters)"
        raise ValueError(
            f"resource name {shown} must be 1-{_MAX_NAME_LEN} characters without "
            "leading or trailing whitespace"
        )
    bad = _unprintable(name)
    if bad is not None:
        raise ValueError(
            f"resource name {name!r} holds the control character {bad!r} (U+{ord(bad):04X}); "
            "use printable characters only"
        )
    return name


def _check_name(name) -> str:
    """A name :func:`set_resource` may set: well spelt and not one of Ray's own."""
    _check_spelling(name)
    if is_reserved_name(name):
        raise ResourceError(
            f"resource name {name!r} is reserved by Ray (CPU, GPU, TPU, memory, "
            "object_store_memory, node:*, accelerator_type:*, *_group_* placement-group "
            "names); choose a name of your own"
        )
    return name


def _check_capacity(name: str, capacity) -> float:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
        raise TypeError(
            f"capacity of {name!r} must be a number, got {type(capacity).__name__} "
            f"{capacity!r}"
        )
    value = float(capacity)
    if not math.isfinite(value) or value < 0 or value > _MAX_CAPACITY:
        raise ValueError(
            f"capacity of {name!r} must be a finite number in [0, {_MAX_CAPACITY:g}] "
            f"(0 deletes the resource), got {capacity!r}"
        )
    rounded = round(value / _GRANULARITY) * _GRANULARITY
    if value > 0 and rounded == 0:
        raise ValueError(
            f"capacity of {name!r} is {capacity!r}, below Ray's resource granularity "
            f"{_GRANULARITY}"
        )
    return round(rounded, 4)


def _same(a: float, b: float) -> bool:
    return abs(a - b) < _GRANULARITY / 2


class _Session:
    """What this process created on one cluster, and what is still converging."""

    def __init__(self, key: str) -> None:
        self.key = key
        # node -> {name: target} for every name this process set (> 0).
        self.created: Dict[str, Dict[str, float]] = {}
        # node -> {name: target} the raylet clamped; re-applied until reached.
        self.pending: Dict[str, Dict[str, float]] = {}
        # Extra convergence work (e.g. a gang handing CPUs back): callables
        # returning True when done; run by the reconciler under the lock.
        self.jobs: List = []


_lock = threading.RLock()
_wakeup = threading.Condition(_lock)
_session: Optional[_Session] = None
_reconciler: Optional[threading.Thread] = None


def _current() -> Tuple[raylet.RayletClient, _Session]:
    """The raylet client and bookkeeping of the cluster we are connected to."""
    global _session
    client = raylet.client()
    key = raylet.cluster_key()
    with _lock:
        if _session is None or _session.key != key:
            _session = _Session(key)
        return client, _session


def _ensure_reconciler() -> None:
    global _reconciler
    if _reconciler is None or not _reconciler.is_alive():
        _reconciler = threading.Thread(
            target=_reconcile_loop, name="ray_adaptive-resource-reconciler", daemon=True
        )
        _reconciler.start()


def _reconcile_loop() -> None:
    while True:
        with _wakeup:
            while _session is None or not (_session.pending or _session.jobs):
                _wakeup.wait()
        try:
            _reconcile_once()
        except Exception:  # Ray shut down or reconnected: forget what we cannot reach.
            with _lock:
                if _session is not None:
                    _session.pending.clear()
                    _session.jobs.clear()
        time.sleep(_RECONCILE_PERIOD_S)


def _reconcile_once() -> None:
    import ray

    if not ray.is_initialized():
        raise ResourceError("Ray is not initialized")
    client, session = _current()
    with _lock:
        alive = client.alive_nodes()
        for node in [n for n in session.pending if n not in alive]:
            del session.pending[node]
        for node, targets in list(session.pending.items()):
            try:
                totals = client.resize(node, targets)
            except ResourceError:
                session.pending.pop(node, None)
                continue
            for name, target in list(targets.items()):
                if _same(totals.get(name, 0.0), target):
                    del targets[name]
            if not targets:
                del session.pending[node]
        session.jobs = [job for job in session.jobs if not job()]


def _apply(client: raylet.RayletClient, session: _Session, per_node: Mapping[str, Mapping[str, float]]) -> Dict[str, Dict[str, float]]:
    """Send the targets (one RPC per node), update bookkeeping; caller holds _lock."""
    totals = client.resize_many(per_node)
    for node, targets in per_node.items():
        created = session.created.setdefault(node, {})
        reply = totals[node]
        for name, target in targets.items():
            if target > 0:
                created[name] = target
            else:
                created.pop(name, None)
            pending = session.pending.get(node)
            if _same(reply.get(name, 0.0), target):
                if pending is not None:
                    pending.pop(name, None)
                    if not pending:
                        del session.pending[node]
            else:
                session.pending.setdefault(node, {})[name] = target
        if not created:
            session.created.pop(node, None)
    if session.pending:
        _ensure_reconciler()
        _wakeup.notify_all()
    return totals


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
    client, session = _current()  # (only once every name and capacity passed: bad input needs no cluster)
    nodes = _resolve_nodes(client, node_spec)
    if not targets or not nodes:
        return nodes
    with _lock:
        _apply(client, session, {node: targets for node in nodes})
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
    client, _ = _current()
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
    client, _ = _current()
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
    if _session is None:
        return {}
    with _lock:
        return {node: dict(t) for node, t in _session.pending.items()}


def wait_for_pending(timeout_s: float = 10.0) -> bool:
    """Wait until every shrink/delete of this process has converged; True if so."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with _lock:
            if _session is None or not (_session.pending or _session.jobs):
                return True
        time.sleep(_RECONCILE_PERIOD_S / 2)
    return False


def _add_job(job) -> None:
    """Run ``job()`` (under the resource lock) every ~20 ms until it returns True."""
    _, session = _current()
    with _lock:
        session.jobs.append(job)
        _ensure_reconciler()
        _wakeup.notify_all()


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
    client, session = _current()
    with _lock:
        names: Dict[str, Set[str]] = {n: set(t) for n, t in session.created.items()}
        for node, targets in session.pending.items():
            names.setdefault(node, set()).update(targets)
    if everywhere:
        for node, extra in created_resources().items():
            names.setdefault(node, set()).update(extra)
    alive = client.alive_nodes(refresh=True)
    per_node = {n: {name: 0.0 for name in s} for n, s in names.items() if s and n in alive}
    with _lock:
        for node in [n for n in session.created if n not in alive]:
            del session.created[node]
        if per_node:
            _apply(client, session, per_node)
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
        client, session = _current()
        alive = client.alive_nodes(refresh=True)
        per_node = {n: {name: 0.0 for name in s} for n, s in owned.items() if n in alive}
        if per_node:
            with _lock:
                _apply(client, session, per_node)

    def __enter__(self) -> "ResourceScope":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- batches for libraries built on ephemeral resources (esl/) -----------------


def resize_many(per_node: Mapping[str, Mapping[str, float]], *, convert_from: Iterable[str] = ()) -> Dict[str, Dict[str, float]]:
    """Set many totals on many nodes, one RPC per node, and return the new totals per node.

    Unlike :func:`set_resources`, a total is set as given -- no convergence
    (a total below what tasks hold stays clamped; read the returned totals)
    -- and the Ray resources named in ``convert_from`` (``CPU``, say) may be
    resized too: what ``esl.Gang`` does to convert a node's CPU units into
    gang resources in one step, under :func:`cluster_lock`. Every other name
    and every capacity is checked as :func:`set_resource` checks them.

    Example::

        with cluster_lock("convert"):
            cpu = get_cluster_state([node])[node]["CPU"]["total"]
            resize_many({node: {"CPU": cpu - 1, "my-gang-0": 1}}, convert_from=["CPU"])
    """
    allowed = {_check_spelling(name) for name in convert_from}
    checked = {node: check_capacities(targets, convert_from=allowed) for node, targets in per_node.items()}
    client, session = _current()  # (only once every name and capacity passed: bad input needs no cluster)
    with _lock:
        totals = client.resize_many(checked)
        for node, targets in checked.items():
            created = session.created.setdefault(node, {})
            for name, target in targets.items():
                if name in allowed:
                    continue
                if target > 0:
                    created[name] = target
                else:
                    created.pop(name, None)
            if not created:
                session.created.pop(node, None)
        return totals


def compare_and_resize(expected: Mapping[str, Mapping[str, float]], targets: Mapping[str, Mapping[str, float]], *,
                       convert_from: Iterable[str] = (), lock: Optional[raylet.ClusterLock] = None
                       ) -> Optional[Dict[str, Dict[str, float]]]:
    """:func:`resize_many` ``targets`` only if every total in ``expected`` (node -> name -> total, as
    read before) is still what it was and ``lock`` (if given) is still held; None, and nothing
    written, otherwise -- the caller reads again and retries.

    The raylet sets totals, it cannot add to them, so a read-modify-write of a shared total (a
    node's ``CPU``) loses another process's update if that process wrote in between: possible when
    a holder of :func:`cluster_lock` stalls past its staleness and another takes the lock over. The
    comparison leaves one RPC's time for that instead of the whole stall.

    Example::

        with cluster_lock("convert") as lock:
            cpu = get_cluster_state([node])[node]["CPU"]["total"]
            done = compare_and_resize({node: {"CPU": cpu}}, {node: {"CPU": cpu - 1, "my-gang-0": 1}},
                                      convert_from=["CPU"], lock=lock)
    """
    if lock is not None and not lock.held():
        return None
    now = get_cluster_state(list(expected))
    for node, totals in expected.items():
        for name, total in totals.items():
            if node not in now or not _same(now[node].get(name, {}).get("total", 0.0), total):
                return None
    return resize_many(targets, convert_from=convert_from)


def check_capacities(capacities: Mapping[str, float], *, convert_from: Iterable[str] = ()) -> Dict[str, float]:
    """``capacities`` checked as :func:`set_resource` and :func:`resize_many` check them -- names
    (1-256 printable characters, not Ray's own unless in ``convert_from``) and capacities (finite,
    in [0, 1e14], not below Ray's granularity of 1e-4 unless 0) -- without touching the cluster; returns
    them rounded as they would be set. Libraries that derive names (``esl.Gang``) check them up front.

    Example:
        >>> check_capacities({"my-slot": 2})
        {'my-slot': 2.0}
        >>> check_capacities({"bad\\nname": 1})
        Traceback (most recent call last):
        ...
        ValueError: resource name 'bad\\nname' holds the control character '\\n' (U+000A); use printable characters only
    """
    if not isinstance(capacities, Mapping):
        raise TypeError(f"capacities must be a dict of name -> capacity, got {capacities!r}")
    allowed = set(convert_from)
    return {(_check_spelling(name) if name in allowed else _check_name(name)): _check_capacity(name, capacity)
            for name, capacity in capacities.items()}


def cluster_lock(name: str) -> raylet.ClusterLock:
    """A mutex shared by every process of the cluster (a context manager), for read-modify-write
    sequences of totals that other processes may run too (see :func:`resize_many`)."""
    return raylet.ClusterLock(f"ray_adaptive.{name}")


def retry_until_done(job: Callable[[], bool]) -> None:
    """Run ``job()`` every ~20 ms, under this module's lock, until it returns True (in the background:
    e.g. giving units back once the tasks holding them finish)."""
    _add_job(job)
