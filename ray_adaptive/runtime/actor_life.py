"""A policy actor's life in its submitting process: its binding resource, its end, its placements.

To a policy an actor is a task whose duration is its lifetime: it arrives at
its creation request, Score picks its node, OnDispatch runs when it is
placed, OnFinish when it ends. The router (``runtime/router.py``) runs that
cycle for it unchanged, given two things per placement (:meth:`ActorLives.place`):

* **the binding**: a resource of its own, ``ra-<policy>-actor-<client>-<uid>``
  (1 unit; ``client``: the submitting process's id at the store),
  created on the chosen node just before the actor is created with it (and
  a soft node affinity, so the creation goes there without waiting for the
  resource to be reported). Not the node's slot: when a node dies, Ray
  restarts an actor with ``max_restarts`` wherever its resources are, and the
  owner moves a dead node's slot to the least-loaded node -- the policy
  would not choose. A resource of its own is created where the policy
  places it again;
* **its end as an ObjectRef**: the pending call of the process's
  :class:`~ray_adaptive._private.actor_watch.ActorWatch` that answers when
  the actor ends -- what the router's harvest waits for, as for a task's
  result.

A thread of this module waits on the same calls (one ``ray.wait`` over all
of them, in short steps) and, for each answer: removes the binding resource
from its node; if the actor was **moved** (its node died and Ray restarts
it), submits it to the policy again -- a new arrival, placed by Score like
any, so OnArrival/OnDispatch/OnFinish run once per placement. The thread
runs while this process watches any actor.

A submitting process that dies -- a task or actor that created policy
actors, a driver killed -- takes its actors with it (Ray's fate-sharing) and
its thread with them: the owner's job watch evicts it (the State rebuilt
without its tasks and actors: their OnFinish, once), and
:func:`remove_bindings_of` removes the bindings it left (by their names'
``client``) where no actor holds them any more.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional

import ray

from ray_adaptive import resources
from ray_adaptive._private.actor_watch import actor_id_of, watch_of_process
from ray_adaptive._private.submit import RayGoneError
from ray_adaptive.errors import ResourceError
from ray_adaptive.runtime.binding import SlotBinding

__all__ = ["ActorPlacement", "ActorLives", "lives_of", "binding_prefix", "remove_bindings_of", "release_actors", "placed_actor_task_id", "actor_stats", "actor_report", "merge_actor_reports", "format_actor_reports"]

log = logging.getLogger(__name__)


@dataclass
class ActorPlacement:
    """One policy actor as its process tracks it across its placements."""

    policy: str
    resource: str  # its binding resource's name
    resubmit: Callable[["ActorPlacement"], Any]  # submit it to the policy again (its node died)
    actor_id: Optional[str] = None  # (hex) once created
    node: Optional[str] = None  # where it is placed now
    task_id: Optional[str] = None  # its task id under the policy, in its current placement
    placements: int = 0
    ended: Optional[dict] = None  # the watch's last answer
    history: List[str] = field(default_factory=list)  # the nodes it was placed on, in order

    @staticmethod
    def new(policy: str, client: str, resubmit: Callable[["ActorPlacement"], Any]) -> "ActorPlacement":
        """A new actor of ``policy`` submitted by process ``client`` (its id at the store)."""
        return ActorPlacement(policy, f"{binding_prefix(policy, client)}{uuid.uuid4().hex[:12]}", resubmit)


def binding_prefix(policy: str, client: str) -> str:
    """How the binding resources of the actors ``client`` submits to ``policy`` begin."""
    return f"ra-{SlotBinding.tag(policy)}-actor-{client}-"


def remove_bindings_of(policy: str, clients: Iterable[str], wait_s: float = 2.0) -> List[str]:
    """Remove the binding resources the actors of ``clients`` -- submitting processes that died (the owner's
    eviction) -- left on the nodes, where no actor holds them: those actors died with their process (Ray's
    fate-sharing), and nobody else would remove them. One still held is looked at again for up to
    ``wait_s`` (an actor whose death is not through yet), then left to its actor (a ``lifetime="detached"``
    one living on). Returns the names removed."""
    import time

    prefixes = tuple(binding_prefix(policy, c) for c in clients)
    if not prefixes:
        return []
    removed: List[str] = []
    deadline = time.monotonic() + wait_s
    while True:
        held_on = 0
        for node, held in resources.get_cluster_state().items():
            for name, r in held.items():
                if not name.startswith(prefixes) or r["total"] <= 0 or name in removed:
                    continue
                if r["available"] < r["total"]:
                    held_on += 1
                    continue
                try:
                    resources.set_resource(name, 0, node_spec=node)
                    removed.append(name)
                except (ResourceError, RayGoneError):
                    pass  # (the node went meanwhile, and its resources with it)
        if not held_on or time.monotonic() >= deadline:
            return removed
        time.sleep(0.2)


@dataclass
class ActorStats:
    """A process's actors of one policy: arrivals (creation requests), placements (restarts included),
    ends by kind, and the lifetimes of the placements that ended (seconds)."""

    arrivals: int = 0
    placed: int = 0
    ended: Dict[str, int] = field(default_factory=dict)  # "dead" / "moved" / "released" -> count
    lifetimes_s: List[float] = field(default_factory=list)


class ActorLives:
    """This process's policy actors (see the module doc): their watch calls and the thread that reads them."""

    STEP_S = 0.1  # the thread's ray.wait step: it notices ray.shutdown() within this

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watching: Dict[Any, ActorPlacement] = {}  # the watch call's ObjectRef -> its actor
        self._by_actor: Dict[str, ActorPlacement] = {}  # actor id -> its record, while watched
        self._placed_at: Dict[int, float] = {}  # id(record) -> when its current placement began (monotonic)
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self.stats: Dict[str, ActorStats] = {}

    # -- a placement ------------------------------------------------------------------------------------
    def bind(self, record: ActorPlacement, node_id: str) -> None:
        """Create ``record``'s binding resource on ``node_id`` (before the actor asks for it)."""
        resources.set_resource(record.resource, 1, node_spec=node_id)

    def unbind(self, record: ActorPlacement, node_id: str) -> None:
        """Remove its binding resource from ``node_id`` (a dead node took it with it)."""
        try:
            resources.set_resource(record.resource, 0, node_spec=node_id)
        except (ResourceError, RayGoneError):
            pass  # the node is gone, and its resources with it
        except Exception:  # noqa: BLE001  (Ray going away under us: nothing is left to remove)
            log.debug("removing %s from %s failed", record.resource, node_id, exc_info=True)

    def place(self, record: ActorPlacement, node_id: str) -> Any:
        """``record``'s actor (created) is placed on ``node_id``: the ObjectRef that becomes ready when it ends."""
        import time

        assert record.actor_id is not None
        ref = watch_of_process().until_ended.remote(record.actor_id, node_id)
        with self._lock:
            record.node = node_id
            record.placements += 1
            record.history.append(node_id)
            self._watching[ref] = record
            self._by_actor[record.actor_id] = record
            self._placed_at[id(record)] = time.monotonic()
            self._stats(record.policy).placed += 1
            if self._thread is None or not self._thread.is_alive():
                self._stop = False
                self._thread = threading.Thread(target=self._run, name="ra-actor-lives", daemon=True)
                self._thread.start()
        return ref

    def arrived(self, policy: str) -> None:
        with self._lock:
            self._stats(policy).arrivals += 1

    def _stats(self, policy: str) -> ActorStats:
        s = self.stats.get(policy)
        if s is None:
            s = self.stats[policy] = ActorStats()
        return s

    # -- what the thread does -----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                refs = list(self._watching)
                if not refs or self._stop:
                    self._thread = None
                    return
            if not ray.is_initialized():
                return
            try:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.STEP_S, fetch_local=True)
            except SystemExit:  # (Ray's core worker went under the call: see runtime.background)
                return
            except Exception:  # noqa: BLE001
                if not ray.is_initialized():
                    return
                raise
            for ref in ready:
                self._ended(ref)

    def _ended(self, ref: Any) -> None:
        import time

        try:
            answer = ray.get(ref, timeout=10)
        except Exception as err:  # noqa: BLE001  (the watch call failed for good: take the actor as ended)
            answer = {"end": "dead", "error": repr(err)}
        with self._lock:
            record = self._watching.pop(ref, None)
            if record is None:
                return
            began = self._placed_at.pop(id(record), None)
            stats = self._stats(record.policy)
            end = str(answer.get("end", "dead"))
            stats.ended[end] = stats.ended.get(end, 0) + 1
            if began is not None:
                stats.lifetimes_s.append(time.monotonic() - began)
                del stats.lifetimes_s[:-10_000]
            record.ended = answer
            if record.actor_id is not None and self._by_actor.get(record.actor_id) is record:
                del self._by_actor[record.actor_id]
        node = record.node
        if node is not None:
            self.unbind(record, node)
        if answer.get("end") == "moved":
            try:
                record.resubmit(record)
            except Exception:  # noqa: BLE001  (the runtime is gone: Ray keeps it waiting for a binding)
                log.warning("policy %r: actor %s lost its node and could not be placed again", record.policy,
                            record.actor_id, exc_info=True)

    # -- the process's runtime goes --------------------------------------------------------------------
    def release(self, policy: str, join: bool) -> int:
        """The policy lets this process's actors go (its runtime shuts down here): their watch calls answer
        ``released`` (their OnFinish applied by the router's harvest, as at any end). ``join``: Ray is
        about to go -- stop the thread first, so that none of it is inside a Ray call then."""
        with self._lock:
            ids = [r.actor_id for r in self._watching.values() if r.policy == policy and r.actor_id]
            thread = self._thread
            if join:
                self._stop = True
        if join and thread is not None:
            thread.join(timeout=2 * self.STEP_S + 1.0)
        if not ids or not ray.is_initialized():
            return 0
        try:
            return int(ray.get(watch_of_process().release.remote(ids), timeout=10))
        except Exception:  # noqa: BLE001  (the watch is gone: so are the actors it watched)
            log.debug("releasing the actors of policy %r failed", policy, exc_info=True)
            return 0

    def task_id(self, actor_id: str) -> Optional[str]:
        with self._lock:
            record = self._by_actor.get(actor_id)
            return record.task_id if record is not None else None


_lives = ActorLives()


def lives_of() -> ActorLives:
    """This process's :class:`ActorLives`."""
    return _lives


def release_actors(policy: str, join: bool = False) -> int:
    """See :meth:`ActorLives.release`."""
    return _lives.release(policy, join)


def placed_actor_task_id(handle: Any) -> Optional[str]:
    """The task id under which ``handle``'s actor -- a policy actor of this process -- is placed now (None:
    not one, or not an actor handle)."""
    if not isinstance(handle, ray.actor.ActorHandle):
        return None
    return _lives.task_id(actor_id_of(handle))


def actor_stats(policy: str) -> ActorStats:
    """This process's actor figures for ``policy`` (see :class:`ActorStats`)."""
    with _lives._lock:
        s = _lives.stats.get(policy) or ActorStats()
        return ActorStats(s.arrivals, s.placed, dict(s.ended), list(s.lifetimes_s))


def actor_report(policy: str, since: Optional[ActorStats] = None) -> Dict[str, dict]:
    """What this process adds to its load report (``ray-adaptive status``, the ``ray_adaptive_actor*``
    metrics): its actors of ``policy``, if any. ``since``: the counts when the runtime began in this process
    (:func:`actor_stats` then): arrivals, placements and ends are counted from there -- an earlier runtime
    of the policy here had its own --; ``alive`` and the lifetimes are this process's."""
    s, base = actor_stats(policy), since or ActorStats()
    alive = s.placed - sum(s.ended.values())
    if s.arrivals == base.arrivals and not alive:
        return {}
    ended = {k: v - base.ended.get(k, 0) for k, v in s.ended.items() if v > base.ended.get(k, 0)}
    life = sorted(s.lifetimes_s)
    return {"policy_actors": {"arrivals": s.arrivals - base.arrivals, "placements": s.placed - base.placed,
                              "alive": alive, "ended": ended, "lifetime_p50_s": life[len(life) // 2] if life else None}}


def merge_actor_reports(reports: Any) -> Optional[dict]:
    """Every process's ``policy_actors`` report summed (None: no process reported actors)."""
    out: Optional[dict] = None
    for r in reports:
        a = r.get("policy_actors")
        if not a:
            continue
        if out is None:
            out = {"arrivals": 0, "placements": 0, "alive": 0, "ended": {}, "lifetime_p50_s": []}
        for k in ("arrivals", "placements", "alive"):
            out[k] += a.get(k, 0)
        for k, v in a.get("ended", {}).items():
            out["ended"][k] = out["ended"].get(k, 0) + v
        if a.get("lifetime_p50_s") is not None:
            out["lifetime_p50_s"].append(a["lifetime_p50_s"])
    if out is not None:
        p50s = sorted(out["lifetime_p50_s"])
        out["lifetime_p50_s"] = p50s[len(p50s) // 2] if p50s else None
    return out


def format_actor_reports(a: Optional[dict]) -> List[str]:
    """``status``'s line for the policy's actors (none: no line)."""
    if not a:
        return []
    ended = ", ".join(f"{k} {v}" for k, v in sorted(a["ended"].items())) or "none"
    life = f"{a['lifetime_p50_s']:.1f} s" if a.get("lifetime_p50_s") is not None else "-"
    return [f"  actors placed by the policy: {a['alive']} alive; {a['arrivals']} arrivals, {a['placements']} "
            f"placements; ended: {ended}; lifetime p50 {life}"]
