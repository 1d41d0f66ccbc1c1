"""Ordering ESLs: priorities, DRF across tenants with least-loaded nodes (DRF-LB),
and hierarchical fair share.

Ordering needs a backlog: once a task is handed to Ray, Ray's own queues
decide. So these ESLs keep submitted tasks in a small admission queue in the
calling process and hand one to Ray only when the cluster has room for it
(by their own accounting of what they started), choosing *which* task by
their policy and *where* by least load, bound through a per-node ephemeral
marker resource. ``submit`` returns a ``concurrent.futures.Future`` that
resolves to the task's ObjectRef when it is dispatched.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from esl import _base
from ray_adaptive import resources as _res


@dataclass
class _Item:
    key: Any
    seq: int
    remote: Any
    args: tuple
    kwargs: dict
    demand: Dict[str, float]
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class _Dispatcher(_base.Owned):
    """Admission queue + dispatcher thread; subclasses choose the next item."""

    _kind = "q"

    def __init__(self, per_task: Optional[Mapping[str, float]], node_spec) -> None:
        super().__init__()
        self._demand = _base.check_demand(
            "per_task", per_task if per_task is not None else {"CPU": 1}
        )
        if not any(v > 0 for v in self._demand.values()):
            raise ValueError(f"per_task must ask for something, got {per_task!r}")
        self._markers = _base.NodeMarkers(self._prefix, node_spec)
        self._cond = threading.Condition(self._lock)
        self._queue: List[_Item] = []
        self._running: Dict[Any, Tuple[_Item, str]] = {}  # ObjectRef -> (item, node)
        self._node_used: Dict[str, Dict[str, float]] = {}
        self._capacity: Dict[str, Dict[str, float]] = {}
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._log: List[Tuple[float, Any, str]] = []  # (time, key, node) per dispatch

    # -- public ----------------------------------------------------------
    def _enqueue(self, key, remote, args, kwargs, demand) -> concurrent.futures.Future:
        self._check_open()
        demand = self._demand if demand is None else _base.check_demand("resources", demand)
        item = _Item(key, next(self._seq), remote, args, kwargs, demand)
        with self._cond:
            self._queue.append(item)
            self._start()
            self._cond.notify_all()
        return item.future

    @property
    def dispatch_log(self) -> List[Tuple[float, Any, str]]:
        """``(time, key, node)`` of every dispatch so far, in order."""
        with self._lock:
            return list(self._log)

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def close(self) -> None:
        """Stop dispatching, cancel queued tasks and remove the markers."""
        with self._cond:
            self._closed_flag = True
            for item in self._queue:
                item.future.cancel()
            self._queue.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        super().close()

    # -- subclass hooks --------------------------------------------------
    def _pick(self) -> Optional[_Item]:
        raise NotImplementedError

    def _on_start(self, item: _Item) -> None:
        pass

    def _on_finish(self, item: _Item) -> None:
        pass

    # -- machinery -------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            state = _res.get_cluster_state()
            markers = self._markers.ensure()
            for node in markers:
                self._capacity[node] = {k: v["total"] for k, v in state.get(node, {}).items()}
                self._node_used[node] = {}
            self._thread = threading.Thread(
                target=self._loop, name=f"esl-{type(self).__name__}", daemon=True
            )
            self._thread.start()

    def _choose_node(self, demand) -> Optional[str]:
        """Least-loaded node (by this ESL's running tasks per capacity) that fits ``demand``."""
        best = None
        for node, cap in self._capacity.items():
            used = self._node_used[node]
            if all(used.get(k, 0) + v <= cap.get(k, 0) + 1e-9 for k, v in demand.items()):
                load = max(
                    (used.get(k, 0) / cap[k] for k in demand if cap.get(k)), default=0.0
                )
                if best is None or (load, node) < best[0]:
                    best = ((load, node), node)
        return None if best is None else best[1]

    def _loop(self) -> None:
        import ray

        while True:
            with self._cond:
                if getattr(self, "_closed_flag", False):
                    return
                self._dispatch_ready()
                refs = list(self._running)
                if not refs:
                    self._cond.wait(timeout=0.5)
                    continue
            done, _ = ray.wait(refs, num_returns=1, timeout=0.02)
            if done:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            with self._cond:
                for ref in done:
                    item, node = self._running.pop(ref)
                    used = self._node_used[node]
                    for k, v in item.demand.items():
                        used[k] = used.get(k, 0) - v
                    self._on_finish(item)

    def _dispatch_ready(self) -> None:
        while self._queue:
            item = self._pick()
            if item is None:
                return
            node = self._choose_node(item.demand)
            if node is None:
                return  # the chosen task waits for room (no overtaking)
            self._queue.remove(item)
            opts = _base.combine(
                _base.demand_to_options(item.demand),
                {"resources": {self._markers.name(node): 1}},
            )
            try:
                ref = item.remote.options(**opts).remote(*item.args, **item.kwargs)
            except Exception as err:  # bad arguments: report on the future
                item.future.set_exception(err)
                continue
            used = self._node_used[node]
            for k, v in item.demand.items():
                used[k] = used.get(k, 0) + v
            self._running[ref] = (item, node)
            self._log.append((time.time(), item.key, node))
            self._on_start(item)
            item.future.set_result(ref)


class Priority(_Dispatcher):
    """Strict priorities: under contention, a higher ``priority`` always starts first.

    Tasks of equal priority start in submission order; each goes to the
    least-loaded node that fits it.

    Example::

        prio = esl.Priority(per_task={"CPU": 1})
        low = prio.submit(f, priority=0)
        high = prio.submit(f, priority=10)
        ray.get([low.result(), high.result()])
        prio.close()
    """

    _kind = "prio"

    def __init__(self, per_task: Optional[Mapping[str, float]] = None, node_spec=None) -> None:
        super().__init__(per_task, node_spec)

    def submit(self, remote, *args, priority: int = 0, resources: Optional[Mapping[str, float]] = None, **kwargs):
        """Queue ``remote.remote(*args, **kwargs)`` at ``priority`` (higher first)."""
        if isinstance(priority, bool) or not isinstance(priority, (int, float)):
            raise TypeError(f"priority must be a number, got {priority!r}")
        return self._enqueue(priority, remote, args, kwargs, resources)

    def _pick(self):
        return min(self._queue, key=lambda it: (-it.key, it.seq))


class DRFLB(_Dispatcher):
    """Dominant resource fairness across tenants, then the least-loaded node (DRF-LB).

    The next task comes from the tenant whose dominant share (max over
    resources of its running demand / cluster capacity, divided by its
    weight) is lowest; it goes to the least-loaded node that fits it. Under
    contention the tenants' shares converge to equal (weighted) shares,
    however fast each submits.

    Example::

        drf = esl.DRFLB(weights={"a": 1, "b": 1})
        futs = [drf.submit("a", f) for _ in range(30)] + [drf.submit("b", f) for _ in range(10)]
        ray.get([x.result() for x in futs])
        drf.close()
    """

    _kind = "drf"

    def __init__(
        self,
        weights: Optional[Mapping[str, float]] = None,
        per_task: Optional[Mapping[str, float]] = None,
        node_spec=None,
    ) -> None:
        super().__init__(per_task, node_spec)
        self._weights: Dict[str, float] = {}
        for tenant, w in (weights or {}).items():
            if not isinstance(tenant, str):
                raise TypeError(f"tenant names must be str, got {tenant!r}")
            self._weights[tenant] = _base.check_positive_number(f"weights[{tenant!r}]", w)
        self._usage: Dict[str, Dict[str, float]] = {}
        # Tasks dispatched so far per tenant: breaks ties between equal shares
        # (e.g. 8 slots over 3 tenants), so the odd slot rotates among them.
        self._served: Dict[str, int] = {}

    def submit(self, tenant: str, remote, *args, resources: Optional[Mapping[str, float]] = None, **kwargs):
        """Queue ``remote.remote(*args, **kwargs)`` for ``tenant`` (demand ``resources`` or per_task)."""
        if not isinstance(tenant, str) or not tenant:
            raise TypeError(f"tenant must be a non-empty str, got {tenant!r}")
        return self._enqueue(tenant, remote, args, kwargs, resources)

    def dominant_share(self, tenant: str) -> float:
        """The tenant's current dominant share (running demand over cluster capacity)."""
        with self._lock:
            return self._share(tenant)

    def _share(self, tenant: str) -> float:
        usage = self._usage.get(tenant, {})
        total: Dict[str, float] = {}
        for cap in self._capacity.values():
            for k, v in cap.items():
                total[k] = total.get(k, 0) + v
        share = max((v / total[k] for k, v in usage.items() if total.get(k)), default=0.0)
        return share / self._weights.get(tenant, 1.0)

    def _pick(self):
        heads: Dict[str, _Item] = {}
        for item in self._queue:
            if item.key not in heads or item.seq < heads[item.key].seq:
                heads[item.key] = item
        return min(
            heads.values(),
            key=lambda it: (
                round(self._share(it.key), 9),
                self._served.get(it.key, 0) / self._weights.get(it.key, 1.0),
                it.seq,
            ),
        )

    def _on_start(self, item):
        self._served[item.key] = self._served.get(item.key, 0) + 1
        u = self._usage.setdefault(item.key, {})
        for k, v in item.demand.items():
            u[k] = u.get(k, 0) + v

    def _on_finish(self, item):
        u = self._usage[item.key]
        for k, v in item.demand.items():
            u[k] = u.get(k, 0) - v


class HierarchicalFairShare(_Dispatcher):
    """Weighted fair share on a tree of tenants (queues), e.g. org -> team -> user.

    ``tree`` maps a name to either a weight (a leaf tenant) or a dict
    ``{"weight": w, "children": {...}}``. The next task is found by walking
    down from the root, at each level taking the child with the lowest
    running-usage / weight among those with queued work, and then the
    oldest task of the leaf reached.

    Example::

        hfs = esl.HierarchicalFairShare({
            "research": {"weight": 2, "children": {"alice": 1, "bob": 1}},
            "prod": 1,
        })
        fut = hfs.submit("alice", f)
    """

    _kind = "hfs"

    def __init__(self, tree: Mapping[str, Any], per_task: Optional[Mapping[str, float]] = None, node_spec=None) -> None:
        super().__init__(per_task, node_spec)
        self._tree = self._parse(tree, "tree")
        self._parent: Dict[str, Optional[str]] = {}
        self._children: Dict[Optional[str], List[str]] = {}
        self._weight: Dict[str, float] = {}
        self._index(self._tree, None)
        self._leaves = {n for n in self._weight if not self._children.get(n)}
        self._usage: Dict[str, float] = {n: 0.0 for n in self._weight}

    @staticmethod
    def _parse(tree, where):
        if not isinstance(tree, Mapping) or not tree:
            raise TypeError(f"{where} must be a non-empty dict of name -> weight or subtree, got {tree!r}")
        out = {}
        for name, spec in tree.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"{where}: names must be non-empty str, got {name!r}")
            if isinstance(spec, Mapping):
                unknown = set(spec) - {"weight", "children"}
                if unknown:
                    raise ValueError(f"{where}[{name!r}] has unknown keys {sorted(unknown)}; use 'weight' and 'children'")
                weight = _base.check_positive_number(f"{where}[{name!r}]['weight']", spec.get("weight", 1))
                children = HierarchicalFairShare._parse(spec["children"], f"{where}[{name!r}]['children']") if "children" in spec else {}
                out[name] = (weight, children)
            else:
                out[name] = (_base.check_positive_number(f"{where}[{name!r}]", spec), {})
        return out

    def _index(self, tree, parent):
        for name, (weight, children) in tree.items():
            if name in self._weight:
                raise ValueError(f"tenant name {name!r} appears twice in the tree")
            self._weight[name] = weight
            self._parent[name] = parent
            self._children.setdefault(parent, []).append(name)
            self._index(children, name)

    def submit(self, tenant: str, remote, *args, resources: Optional[Mapping[str, float]] = None, **kwargs):
        """Queue a task for leaf ``tenant``."""
        if tenant not in self._leaves:
            raise ValueError(f"tenant {tenant!r} is not a leaf of the tree; leaves: {sorted(self._leaves)}")
        return self._enqueue(tenant, remote, args, kwargs, resources)

    def _path(self, leaf):
        while leaf is not None:
            yield leaf
            leaf = self._parent[leaf]

    def _pick(self):
        waiting = set()
        for item in self._queue:
            waiting.update(self._path(item.key))
        node = None
        while self._children.get(node):
            options = [c for c in self._children[node] if c in waiting]
            if not options:
                return None
            node = min(options, key=lambda c: (self._usage[c] / self._weight[c], c))
        return min((it for it in self._queue if it.key == node), key=lambda it: it.seq)

    def _cost(self, item) -> float:
        return sum(item.demand.values())

    def _on_start(self, item):
        for n in self._path(item.key):
            self._usage[n] += self._cost(item)

    def _on_finish(self, item):
        for n in self._path(item.key):
            self._usage[n] -= self._cost(item)
