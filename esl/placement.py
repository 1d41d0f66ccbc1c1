"""Placement ESLs: co-location, anti-affinity/spread, load balancing, bin packing,
soft constraints and data locality, each over ephemeral resources."""

from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional

from esl import _base
from ray_adaptive import resources as _res
from ray_adaptive.errors import ResourceError


class _Routed(_base.Owned):
    """Base for ESLs that route each task to a node they choose (via node markers).

    ``submit()`` also remembers the task, so the ESL knows each node's load
    (queued + running tasks it sent there) before the cluster state shows it.
    """

    def __init__(self, per_task, node_spec) -> None:
        super().__init__()
        self._demand = _base.check_demand("per_task", per_task if per_task is not None else {"CPU": 1})
        self._markers = _base.NodeMarkers(self._prefix, node_spec)
        self._outstanding: Dict[str, list] = {}

    def _load(self) -> Dict[str, int]:
        import ray

        out = {}
        for node, refs in self._outstanding.items():
            live = [r for r in refs if isinstance(r, ray.ObjectRef)]
            if live:
                _, pending = ray.wait(live, num_returns=len(live), timeout=0)
                self._outstanding[node] = pending
            out[node] = len(self._outstanding[node])
        return out

    def _choose(self, state) -> Optional[str]:
        raise NotImplementedError

    def node_for_next(self) -> Optional[str]:
        """The node the next task would be sent to (None: none fits now)."""
        with self._lock:
            self._check_open()
            markers = self._markers.ensure()
            state = _res.get_cluster_state(list(markers))
            return self._choose(state)

    def _fitting(self, state):
        """``(node, used)`` for each node where one more task fits beside the ones this
        policy already queued there (``used``: what those queued tasks will take)."""
        load = self._load()
        running = self._markers.in_use(state)
        for node in self._markers.names:
            if node not in state:
                continue
            queued = max(0, load.get(node, 0) - running.get(node, 0))
            used = {k: v * queued for k, v in self._demand.items()}
            if _base.fits(state, node, self._demand, used):
                yield node, used

    def _route(self, node: Optional[str]) -> Dict[str, object]:
        """Options sending one task to ``node`` (the fallback when None)."""
        if node is None:
            return self._fallback()
        return _base.combine(
            _base.demand_to_options(self._demand), {"resources": {self._markers.name(node): 1}}
        )

    def options(self) -> Dict[str, object]:
        """Options routing one task to the node this policy picks now."""
        return self._route(self.node_for_next())

    def _fallback(self) -> Dict[str, object]:
        return _base.demand_to_options(self._demand)

    def submit(self, remote, *args, **kwargs):
        """Launch ``remote`` with :meth:`options` and track it as load on its node."""
        with self._lock:
            node = self.node_for_next()
            ref = remote.options(**self._route(node)).remote(*args, **kwargs)
            self._outstanding.setdefault(node, []).append(ref)
            return ref


class CoLocation(_base.Owned):
    """Run groups of tasks/actors on one node each (ESCHER's ``CoLocationESL``).

    ``group(name, res_req)`` places the group on the node with the most free
    room for ``res_req`` (or on ``node``) by creating a resource only that
    node has, and returns the options every member must use. Alternatively
    let the group follow its first member: ``token = colo.token(name)``, pass
    the token to the leader, which calls ``esl.CoLocation.join_here(token)``
    where it runs; followers submitted with ``colo.follow(name)`` wait for it.

    Example::

        colo = esl.CoLocation()
        opts = colo.group("mygroup", res_req={"CPU": 1})
        refs = [f.options(**opts).remote() for _ in range(3)]   # same node
        colo.close()
    """

    _kind = "colo"

    def __init__(self, slots: int = _base.MARKER_CAPACITY) -> None:
        super().__init__()
        self._slots = _base.check_positive_int("slots", slots)
        self._groups: Dict[str, str] = {}
        self._nodes: Dict[str, str] = {}

    def token(self, name: str) -> str:
        """The resource that marks group ``name`` (created on first use)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"group name must be a non-empty str, got {name!r}")
        with self._lock:
            if name not in self._groups:
                self._groups[name] = f"{self._prefix}_g{len(self._groups)}"
            return self._groups[name]

    def group(self, name: str, res_req: Optional[Mapping[str, float]] = None, node: Optional[str] = None) -> Dict[str, object]:
        """Options placing a member of group ``name`` with the group.

        Args:
            name: the group; every call with the same name co-locates.
            res_req: each member's own demand, e.g. ``{"CPU": 1}`` (default none).
            node: put the group on this node (default: among nodes with room
                for ``res_req``, one holding fewest of this object's groups,
                then the one with most free CPU).
        """
        self._check_open()
        demand = _base.check_demand("res_req", res_req or {})
        token = self.token(name)
        with self._lock:
            if name not in self._nodes:
                if node is None:
                    state = _res.get_cluster_state()
                    candidates = [n for n in state if _base.fits(state, n, demand)] or list(state)
                    mine = list(self._nodes.values())
                    node = max(
                        candidates,
                        key=lambda n: (-mine.count(n), _base.free(state, n, "CPU"), n),
                    )
                _res.set_resource(token, self._slots, node)
                self._nodes[name] = node
        return _base.combine(_base.demand_to_options(demand), {"resources": {token: 1}})

    def follow(self, name: str, res_req: Optional[Mapping[str, float]] = None) -> Dict[str, object]:
        """Options for a member that runs wherever the group's leader called :meth:`join_here`."""
        self._check_open()
        demand = _base.check_demand("res_req", res_req or {})
        return _base.combine(_base.demand_to_options(demand), {"resources": {self.token(name): 1}})

    @staticmethod
    def join_here(token: str, slots: int = _base.MARKER_CAPACITY) -> str:
        """Inside a task/actor: make this node the home of the group ``token``; returns the node id."""
        return _res.set_resource(token, slots)[0]

    def node_of(self, name: str) -> Optional[str]:
        """The node of group ``name`` (if placed by :meth:`group`)."""
        return self._nodes.get(name)

    def release(self, name: str) -> None:
        """Remove group ``name`` (members still running keep their slot until they finish)."""
        token = self._groups.get(name)
        if token is not None:
            _base.release_prefix(token)
            self._nodes.pop(name, None)


class AntiAffinity(_base.Owned):
    """At most ``max_per_node`` members per node: creates ``{token: max_per_node}`` on every node.

    Members beyond what the nodes can take wait (that is anti-affinity, not
    spreading: see :class:`Spread` for the non-blocking variant). A
    :class:`esl.Gang` given ``anti_affinity=`` takes one unit per node it
    uses, so gangs (jobs) sharing one AntiAffinity never share a node.

    Example::

        aa = esl.AntiAffinity()
        refs = [f.options(**aa.options({"CPU": 1})).remote() for _ in range(4)]  # 4 nodes
        aa.close()
    """

    _kind = "aa"

    def __init__(self, max_per_node: int = 1, node_spec=None) -> None:
        super().__init__()
        self._max = _base.check_positive_int("max_per_node", max_per_node)
        if node_spec is not None and not isinstance(node_spec, (str, Mapping, list, tuple)):
            raise TypeError(f"node_spec must be a node id, list or dict, got {node_spec!r}")
        self._node_spec = {} if node_spec is None else node_spec
        self._token_name = self._prefix
        self._created = False

    def _ensure(self) -> None:
        with self._lock:
            self._check_open()
            if not self._created:
                _res.set_resource(self._token_name, self._max, self._node_spec)
                self._created = True

    def options(self, res_req: Optional[Mapping[str, float]] = None) -> Dict[str, object]:
        """Options for one member (plus its own demand ``res_req``)."""
        demand = _base.check_demand("res_req", res_req or {})
        self._ensure()
        return _base.combine(_base.demand_to_options(demand), {"resources": {self._token_name: 1}})

    def nodes_taken(self) -> List[str]:
        """Nodes where this AntiAffinity has no unit left."""
        self._ensure()
        state = _res.get_cluster_state()
        return [
            n
            for n, r in state.items()
            if self._token_name in r and r[self._token_name]["available"] < 1
        ]


class Spread(_Routed):
    """Spread tasks over nodes, each to the node with fewest of this Spread's tasks; never blocks.

    Example::

        spread = esl.Spread()
        refs = [spread.submit(f) for _ in range(8)]   # 2 per node on 4 nodes
    """

    _kind = "spread"

    def __init__(self, per_task: Optional[Mapping[str, float]] = None, node_spec=None) -> None:
        super().__init__(per_task, node_spec)

    def _choose(self, state):
        load = self._load()
        running = self._markers.in_use(state)
        nodes = [n for n in self._markers.names if n in state]
        return min(nodes, key=lambda n: (max(load.get(n, 0), running.get(n, 0)), n), default=None)


class LoadBalance(_Routed):
    """Balance tasks across nodes, statically (ESCHER) or dynamically.

    Static (``num_tasks`` given): creates a resource on every node with
    capacity ``floor`` or ``ceil(num_tasks / nodes)``, the capacities summing
    to ``num_tasks`` (the nodes with most free CPU get the ``ceil``s), so
    ``num_tasks`` concurrent tasks land within one task of even. Every task
    uses the same :meth:`options`.

    Dynamic (``dynamic=True``): each :meth:`options` / :meth:`submit` call
    sends the task to the least-loaded node right now (this ESL's queued and
    running tasks there, then free CPU).

    Example::

        lb = esl.LoadBalance(num_tasks=8)
        refs = [f.options(**lb.options()).remote() for _ in range(8)]  # 2 per node
        lb.close()
    """

    _kind = "lb"

    def __init__(
        self,
        num_tasks: Optional[int] = None,
        dynamic: bool = False,
        per_task: Optional[Mapping[str, float]] = None,
        node_spec=None,
    ) -> None:
        if not isinstance(dynamic, bool):
            raise TypeError(f"dynamic must be a bool, got {dynamic!r}")
        if dynamic == (num_tasks is not None):
            raise ValueError(
                "give either num_tasks (static balancing) or dynamic=True, got "
                f"num_tasks={num_tasks!r}, dynamic={dynamic!r}"
            )
        if num_tasks is not None:
            _base.check_positive_int("num_tasks", num_tasks)
        super().__init__(per_task, node_spec)
        self._num_tasks = num_tasks
        self._dynamic = dynamic
        self._node_spec = {} if node_spec is None else node_spec
        self._static_caps: Optional[Dict[str, int]] = None

    @property
    def capacities(self) -> Optional[Dict[str, int]]:
        """Static mode: node -> how many tasks it takes at once."""
        return None if self._static_caps is None else dict(self._static_caps)

    def _ensure_static(self) -> None:
        with self._lock:
            self._check_open()
            if self._static_caps is not None:
                return
            state = _res.get_cluster_state()
            nodes = _base._matching_nodes(self._node_spec)
            if not nodes:
                raise ResourceError(f"no alive node matches node_spec {self._node_spec!r}")
            nodes.sort(key=lambda n: (-_base.free(state, n, "CPU"), n))
            base, extra = divmod(self._num_tasks, len(nodes))
            caps = {n: base + (1 if i < extra else 0) for i, n in enumerate(nodes)}
            for node, cap in caps.items():
                if cap:
                    _res.set_resource(self._prefix, cap, node)
            self._static_caps = caps

    def options(self) -> Dict[str, object]:
        if not self._dynamic:
            self._ensure_static()
            return _base.combine(
                _base.demand_to_options(self._demand), {"resources": {self._prefix: 1}}
            )
        return super().options()

    def submit(self, remote, *args, **kwargs):
        if not self._dynamic:
            return remote.options(**self.options()).remote(*args, **kwargs)
        return super().submit(remote, *args, **kwargs)

    def _choose(self, state):
        load = self._load()
        running = self._markers.in_use(state)
        nodes = [n for n in self._markers.names if n in state]
        if not nodes:
            return None

        def key(n):
            used_cpu = state[n].get("CPU", {}).get("total", 0) - _base.free(state, n, "CPU")
            return (max(load.get(n, 0), running.get(n, 0)), used_cpu, n)

        return min(nodes, key=key)


class BinPack(_Routed):
    """Fill the fullest node that still fits each task, keeping other nodes free.

    Example::

        bp = esl.BinPack(per_task={"CPU": 1})
        refs = [bp.submit(f) for _ in range(4)]   # 2 nodes x 2 CPUs, not 4 nodes
    """

    _kind = "bp"

    def __init__(self, per_task: Optional[Mapping[str, float]] = None, node_spec=None) -> None:
        super().__init__(per_task, node_spec)

    def _choose(self, state):
        # the fullest node that still fits: least room left over the demanded resources
        room = {
            n: sum(_base.free(state, n, k) - used.get(k, 0) for k in self._demand)
            for n, used in self._fitting(state)
        }
        return min(room, key=lambda n: (room[n], n), default=None)

    def _fallback(self):
        # Nothing fits now: queue on the fullest node (still packing).
        markers = self._markers.names
        node = sorted(markers)[0] if markers else None
        opts = _base.demand_to_options(self._demand)
        if node is not None:
            opts = _base.combine(opts, {"resources": {markers[node]: 1}})
        return opts


class SoftConstraint(_Routed):
    """Prefer nodes matching ``prefer``; fall back to any node when none has room.

    ``prefer`` is a node_spec: a node id, a list of ids, or minimum resources
    (``{"special": 1}``). With ``wait_s > 0`` a task waits up to that long
    for room on a preferred node before falling back.

    Example::

        soft = esl.SoftConstraint(prefer={"special": 1})
        f.options(**soft.options()).remote()
    """

    _kind = "soft"

    def __init__(self, prefer, per_task: Optional[Mapping[str, float]] = None, wait_s: float = 0.0) -> None:
        if not isinstance(prefer, (str, Mapping, list, tuple)):
            raise TypeError(f"prefer must be a node id, list of ids or dict, got {prefer!r}")
        super().__init__(per_task, prefer)
        self._wait_s = _base.check_positive_number("wait_s", wait_s, allow_zero=True)

    def node_for_next(self):
        deadline = time.monotonic() + self._wait_s
        while True:
            node = super().node_for_next()
            if node is not None or time.monotonic() >= deadline:
                return node
            time.sleep(0.01)

    def _choose(self, state):
        # the preferred node with most free CPU left (ties: the first in node order)
        room = {n: _base.free(state, n, "CPU") - used.get("CPU", 0) for n, used in self._fitting(state)}
        return max(room, key=room.get, default=None)


class DataLocality(_base.Owned):
    """Run a task on the node that holds (most bytes of) its input objects.

    Falls back to any node when the objects' locations are unknown, or, with
    ``strict=False``, when that node has no room for ``per_task`` now.

    Example::

        data = ray.put(big_array)
        dl = esl.DataLocality()
        f.options(**dl.options(data)).remote(data)
    """

    _kind = "data"

    def __init__(self, per_task: Optional[Mapping[str, float]] = None, strict: bool = True) -> None:
        super().__init__()
        self._demand = _base.check_demand("per_task", per_task if per_task is not None else {"CPU": 1})
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be a bool, got {strict!r}")
        self._strict = strict
        self._markers = _base.NodeMarkers(self._prefix)

    def node_of(self, *refs) -> Optional[str]:
        """The node holding most bytes of ``refs`` (None if unknown)."""
        import ray

        if not refs or not all(isinstance(r, ray.ObjectRef) for r in refs):
            raise TypeError(f"DataLocality needs ObjectRefs, got {refs!r}")
        locations = ray.experimental.get_object_locations(list(refs))
        weight: Dict[str, float] = {}
        for info in locations.values():
            for node in info.get("node_ids", []):
                weight[node] = weight.get(node, 0) + (info.get("object_size") or 1)
        return max(weight, key=lambda n: (weight[n], n)) if weight else None

    def options(self, *refs) -> Dict[str, object]:
        """Options placing a task on the node of ``refs``."""
        self._check_open()
        node = self.node_of(*refs)
        opts = _base.demand_to_options(self._demand)
        if node is None:
            return opts
        if not self._strict:
            state = _res.get_cluster_state([node])
            if not _base.fits(state, node, self._demand):
                return opts
        return _base.combine(opts, {"resources": {self._markers.name(node): 1}})
