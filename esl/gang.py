"""Gang scheduling (all-or-none) over ephemeral resources."""

from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional, Sequence

from esl import _base
from ray_adaptive import resources as _res
from ray_adaptive.errors import ResourceError
from ray_adaptive.resources import checks, primitives

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class GangTimeoutError(ResourceError):
    """A gang could not be reserved within its timeout; nothing was started or kept."""


class Gang:
    """All-or-none placement of a group of tasks or actors (one bundle each).

    ``reserve()`` picks a node for every bundle from the live cluster state,
    then converts the bundles' resources on those nodes into private gang
    resources in one RPC per node: e.g. ``CPU: 2 -> CPU: 1 + esl_gang_..._b0_CPU: 1``.
    The raylet applies each conversion atomically and clamps it to what is
    free, so a short node is detected from the reply and every node is rolled
    back; the gang retries until ``timeout_s`` and then raises
    :class:`GangTimeoutError` having released everything and cancelled any
    member submitted through :meth:`submit`. A member asks for its gang
    resource instead of CPU (``num_cpus=0``), so no member can start before all
    bundles are held, and none can lose its CPUs to another task afterwards.
    ``release()`` deletes the gang resources and hands the units back (units
    still held by running members come back when they finish).

    Members may be submitted before ``reserve()`` (they wait, then start
    together) or after it. Works for tasks and actors. Bundles may ask for
    ``CPU`` and custom resources; ``GPU`` cannot be resized by the raylet
    and is refused (use a placement group for GPU gangs).

    Args:
        bundles: one resource dict per member, e.g. ``[{"CPU": 1}] * 4``.
        strategy: ``"PACK"`` (fewest nodes), ``"SPREAD"`` (most nodes),
            ``"STRICT_PACK"`` (one node: co-location) or ``"STRICT_SPREAD"``
            (distinct nodes: anti-affinity), as for placement groups.
        timeout_s: how long :meth:`reserve` keeps trying.
        anti_affinity: an :class:`esl.AntiAffinity`; the gang takes one of its
            units on every node it uses, so gangs sharing it never share a node.

    Example::

        import ray, esl

        @ray.remote
        def worker(rank):
            return rank, ray.get_runtime_context().get_node_id()

        with esl.Gang([{"CPU": 1}] * 4, strategy="STRICT_SPREAD", timeout_s=10) as gang:
            print(ray.get([gang.submit(i, worker, i) for i in range(4)]))
    """

    def __init__(
        self,
        bundles: Sequence[Mapping[str, float]],
        strategy: str = "PACK",
        timeout_s: float = 30.0,
        anti_affinity=None,
    ) -> None:
        if isinstance(bundles, Mapping) or not isinstance(bundles, Sequence) or not bundles:
            raise TypeError(
                f"bundles must be a non-empty list of resource dicts, e.g. "
                f"[{{'CPU': 1}}] * 4, got {bundles!r}"
            )
        self._bundles: List[Dict[str, float]] = []
        for i, bundle in enumerate(bundles):
            demand = _base.check_demand(f"bundles[{i}]", bundle, allow_gpu=False)
            demand = {k: v for k, v in demand.items() if v > 0}
            if not demand:
                raise ValueError(f"bundles[{i}] asks for nothing: {bundle!r}")
            for key in demand:
                if key != "CPU" and checks.is_reserved_name(key):
                    raise ValueError(
                        f"bundles[{i}] asks for {key!r}; a gang can reserve CPU and custom "
                        "resources only"
                    )
            self._bundles.append(demand)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        self._strategy = strategy
        self._timeout_s = _base.check_positive_number("timeout_s", timeout_s)
        if anti_affinity is not None and not hasattr(anti_affinity, "_token_name"):
            raise TypeError(f"anti_affinity must be an esl.AntiAffinity, got {anti_affinity!r}")
        self._aa = anti_affinity
        self._prefix = _base.new_prefix("gang")
        for i, demand in enumerate(self._bundles):
            # the gang resources' names and amounts as set_resource checks them (a 10,000-character name,
            # CPU: 1e300, 1e-9 below Ray's granularity): here, before any cluster is asked anything
            try:
                checks.check_capacities(self.resources(i))
            except ValueError as err:
                raise ValueError(f"bundles[{i}] = {self._bundles[i]!r}: {err}") from None
        self._placement: Optional[List[str]] = None
        self._taken: Dict[str, Dict[str, float]] = {}
        self._names: Dict[str, Dict[str, float]] = {}
        self._members: list = []
        self._released = False

    # -- what members ask for --------------------------------------------
    def _name(self, i: int, resource: str) -> str:
        return f"{self._prefix}_b{i}_{resource}"

    def resources(self, i: int) -> Dict[str, float]:
        """The gang resources bundle ``i``'s member must request."""
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self._bundles):
            raise ValueError(f"bundle index must be in [0, {len(self._bundles)}), got {i!r}")
        return {self._name(i, r): amount for r, amount in self._bundles[i].items()}

    def options(self, i: int) -> Dict[str, object]:
        """``.options(**gang.options(i))`` for the member of bundle ``i``.

        Once the gang is reserved this also pins the member to its node
        (``NodeAffinitySchedulingStrategy``), so its lease goes straight to
        that raylet instead of waiting for the next resource report to show
        the gang resource to the submitting raylet.
        """
        opts: Dict[str, object] = {"num_cpus": 0, "resources": self.resources(i)}
        if self._placement is not None and not self._released:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                self._placement[i], soft=False
            )
        return opts

    def submit(self, i: int, remote, *args, **kwargs):
        """Launch ``remote`` (a remote function or actor class) as member ``i``.

        Returns its ObjectRef (or ActorHandle). Members submitted this way are
        cancelled (or killed) if the reservation times out.
        """
        handle = remote.options(**self.options(i)).remote(*args, **kwargs)
        self._members.append(handle)
        return handle

    @property
    def nodes(self) -> Optional[List[str]]:
        """The node of each bundle once reserved, else None."""
        return None if self._placement is None else list(self._placement)

    # -- reservation -----------------------------------------------------
    def reserve(self, timeout_s: Optional[float] = None) -> "Gang":
        """Hold every bundle, or raise :class:`GangTimeoutError` holding none."""
        if self._placement is not None:
            return self
        if self._released:
            raise ResourceError("this gang was released; create a new Gang")
        timeout = self._timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        if self._aa is not None:
            self._aa._ensure()
        backoff = 0.005
        last_state = {}
        while True:
            state = _res.get_cluster_state()
            last_state = state
            plan = self._plan(state)
            if plan is not None and self._take(plan):
                self._placement = plan
                return self
            if time.monotonic() + backoff > deadline:
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.2)
        self._abort()
        free = {
            n[:8]: {k: v["available"] for k, v in r.items() if k == "CPU" or k in self._keys()}
            for n, r in last_state.items()
        }
        raise GangTimeoutError(
            f"gang of {len(self._bundles)} bundles {self._bundles} ({self._strategy}) "
            f"could not be placed within {timeout}s; free per node: {free}. "
            "Nothing was started; all reservations were released."
        )

    def _keys(self):
        keys = {k for b in self._bundles for k in b}
        if self._aa is not None:
            keys.add(self._aa._token_name)
        return keys

    def _plan(self, state) -> Optional[List[str]]:
        """A node for each bundle from the available resources, or None."""
        nodes = sorted(state, key=lambda n: (-_base.free(state, n, "CPU"), n))
        if self._aa is not None:
            token = self._aa._token_name
            nodes = [n for n in nodes if _base.free(state, n, token) >= 1]
        order = sorted(range(len(self._bundles)), key=lambda i: -sum(self._bundles[i].values()))
        used: Dict[str, Dict[str, float]] = {}
        plan: Dict[int, str] = {}

        def add(node, demand):
            u = used.setdefault(node, {})
            for k, v in demand.items():
                u[k] = u.get(k, 0.0) + v

        if self._strategy == "STRICT_PACK":
            total: Dict[str, float] = {}
            for b in self._bundles:
                for k, v in b.items():
                    total[k] = total.get(k, 0.0) + v
            for node in nodes:
                if _base.fits(state, node, total):
                    return [node] * len(self._bundles)
            return None
        for i in order:
            demand = self._bundles[i]
            if self._strategy == "PACK":
                candidates = sorted(nodes, key=lambda n: (n not in used, nodes.index(n)))
            elif self._strategy == "SPREAD":
                candidates = sorted(nodes, key=lambda n: (len([1 for v in plan.values() if v == n]), nodes.index(n)))
            else:  # STRICT_SPREAD
                candidates = [n for n in nodes if n not in used]
            for node in candidates:
                if _base.fits(state, node, demand, used.get(node)):
                    plan[i] = node
                    add(node, demand)
                    break
            else:
                return None
        return [plan[i] for i in range(len(self._bundles))]

    def _take(self, plan: List[str]) -> bool:
        """Convert the planned units into gang resources on every node, or roll back."""
        take: Dict[str, Dict[str, float]] = {}
        names: Dict[str, Dict[str, float]] = {}
        for i, node in enumerate(plan):
            t = take.setdefault(node, {})
            for r, amount in self._bundles[i].items():
                t[r] = t.get(r, 0.0) + amount
                names.setdefault(node, {})[self._name(i, r)] = amount
        if self._aa is not None:
            for node in take:
                take[node][self._aa._token_name] = 1.0
        with primitives.cluster_lock("convert") as lock:
            state = _res.get_cluster_state(list(take))
            if set(state) != set(take):
                return False
            request, read = {}, {}
            for node, t in take.items():
                read[node] = {r: state[node].get(r, {}).get("total", 0.0) for r in t}
                request[node] = {r: read[node][r] - v for r, v in t.items()}
                request[node].update(names[node])
            replies = primitives.compare_and_resize(read, request, convert_from=_sources(take), lock=lock)
            if replies is None:  # another process changed a total meanwhile: plan again from fresh state
                return False
            short = False
            for node, t in take.items():
                for r, v in t.items():
                    before = state[node].get(r, {}).get("total", 0.0)
                    if abs((before - replies[node].get(r, 0.0)) - v) > 1e-6:
                        short = True
            if short:
                rollback = {}
                for node, t in take.items():
                    back = {}
                    for r in t:
                        before = state[node].get(r, {}).get("total", 0.0)
                        back[r] = before  # after == before - actually taken
                    back.update({name: 0 for name in names[node]})
                    rollback[node] = back
                primitives.resize_many(rollback, convert_from=_sources(take))
                return False
        self._taken = take
        self._names = names
        return True

    # -- release ---------------------------------------------------------
    def release(self) -> None:
        """Delete the gang resources and give the units back (idempotent).

        Units of members still running come back when they finish (the
        library finishes the hand-back in the background; see
        :func:`ray_adaptive.resources.wait_for_pending`).
        """
        if self._released:
            return
        self._released = True
        taken, names = self._taken, self._names
        self._taken, self._names = {}, {}
        placement = self._placement or []
        jobs = {}
        for node in taken:
            of = {
                self._name(i, r): r
                for i, n in enumerate(placement)
                if n == node
                for r in self._bundles[i]
            }
            jobs[node] = (taken[node], {r: 0.0 for r in taken[node]}, dict(names[node]), of)
        # First pass for all nodes at once (one lock, two RPC rounds); nodes
        # with members still running finish in the background.
        unfinished = _hand_back_many(jobs)
        for node in unfinished:
            t, r, l, o = jobs[node]
            primitives.retry_until_done(lambda n=node, t=t, r=r, l=l, o=o: not _hand_back_many({n: (t, r, l, o)}))

    def _abort(self) -> None:
        import ray

        for handle in self._members:
            try:
                if isinstance(handle, ray.ObjectRef):
                    ray.cancel(handle, force=True)
                else:
                    ray.kill(handle)
            except Exception:
                pass
        self._members = []

    def __enter__(self) -> "Gang":
        return self.reserve()

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else ("reserved" if self._placement else "pending")
        return f"Gang({len(self._bundles)} bundles, {self._strategy}, {state})"


def _sources(per_node) -> set:
    """The resources a gang converts units from (CPU, custom ones): resized as they are, not as new names."""
    return {r for amounts in per_node.values() for r in amounts}


def _hand_back_many(jobs) -> List[str]:
    """Delete what is left of a gang's resources and return the freed units.

    ``jobs``: node -> (taken, returned, left, resource_of) where ``taken`` is
    what the gang converted per resource, ``returned`` what was given back so
    far, ``left`` the gang names still present -> their amount and
    ``resource_of`` gang name -> the resource it was converted from. Updates
    ``returned``/``left`` in place; returns the nodes where members still hold
    units. Safe to call repeatedly (the reconciler does, until it returns []).
    """
    alive = set(_res.get_cluster_state())
    jobs = {n: j for n, j in jobs.items() if n in alive}  # dead node: nothing to give back
    if not jobs:
        return []
    with primitives.cluster_lock("convert") as lock:
        replies = primitives.resize_many({n: {name: 0 for name in j[2]} for n, j in jobs.items()})
        gives, read, dues = {}, {}, {}
        unfinished = []
        for node, (taken, returned, left, resource_of) in jobs.items():
            reply = replies[node]
            still = {name: reply.get(name, 0.0) for name in left if reply.get(name, 0.0) > 0}
            for r, amount in taken.items():
                held = sum(v for name, v in still.items() if resource_of.get(name) == r)
                due = amount - held - returned[r]
                if due > 1e-9:
                    read.setdefault(node, {})[r] = reply.get(r, 0.0)
                    gives.setdefault(node, {})[r] = reply.get(r, 0.0) + due
                    dues.setdefault(node, {})[r] = due
            left.clear()
            left.update(still)
            if still:
                unfinished.append(node)
        if gives:
            if primitives.compare_and_resize(read, gives, convert_from=_sources(gives), lock=lock) is None:
                # another process changed a total since the read: give the units back on the next call
                return sorted(set(unfinished) | set(gives))
            for node, d in dues.items():
                for r, due in d.items():
                    jobs[node][1][r] += due
    return unfinished
