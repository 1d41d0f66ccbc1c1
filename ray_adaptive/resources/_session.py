"""This process's record of the resources it set on its cluster, and the reconciler that makes shrinks hold.

The raylet clamps a total set below what running tasks hold to the amount in
use, and never lowers it on its own once they finish. So every target the
raylet did not reach is remembered here, and a background thread re-applies
it every :data:`RECONCILE_PERIOD_S` until the reply shows it reached; the same
thread runs the convergence jobs libraries add (``primitives.retry_until_done``).
The record is per cluster: reconnecting to another cluster starts a new one.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ray_adaptive._private import raylet
from ray_adaptive.errors import ResourceError
from ray_adaptive.resources.checks import same_amount

# How soon a clamped shrink takes hold once its units are released, against one resize RPC per
# clamped node every period for as long as tasks hold the units.
RECONCILE_PERIOD_S = 0.02

#: Serializes every change of the record with the RPC that caused it, so the reconciler never
#: re-applies a target a caller has just replaced. Re-entrant: a background job runs under it and
#: resizes through the same functions as any caller.
lock = threading.RLock()
_wakeup = threading.Condition(lock)
_session: Optional["Session"] = None
_reconciler: Optional[threading.Thread] = None


class Session:
    """What this process created on one cluster, and what is still converging."""

    def __init__(self, key: str) -> None:
        self.key = key
        # node -> {name: target} for every name this process set (> 0).
        self.created: Dict[str, Dict[str, float]] = {}
        # node -> {name: target} the raylet clamped; re-applied until reached.
        self.pending: Dict[str, Dict[str, float]] = {}
        # Extra convergence work (e.g. a gang handing CPUs back): callables
        # returning True when done; run by the reconciler under the lock.
        self.jobs: List[Callable[[], bool]] = []


def current() -> Tuple[raylet.RayletClient, Session]:
    """The raylet client and the record of the cluster this process is connected to.

    The one place that connects: raises ``ResourceError`` when Ray is not initialized.
    """
    global _session
    client = raylet.client()
    key = raylet.cluster_key()
    with lock:
        if _session is None or _session.key != key:
            _session = Session(key)
        return client, _session


def note_set(session: Session, per_node: Mapping[str, Mapping[str, float]], ray_own=frozenset()) -> None:
    """Record the totals just set: a name set above 0 was created by this process, one set to 0
    is no longer ours. Names in ``ray_own`` (Ray's resources a library resized) were never ours."""
    with lock:
        for node, targets in per_node.items():
            created = session.created.setdefault(node, {})
            for name, target in targets.items():
                if name in ray_own:
                    continue
                if target > 0:
                    created[name] = target
                else:
                    created.pop(name, None)
            if not created:
                session.created.pop(node, None)


def apply(client: raylet.RayletClient, session: Session,
          per_node: Mapping[str, Mapping[str, float]]) -> Dict[str, Dict[str, float]]:
    """Set the targets (one RPC per node) and have the reconciler re-apply each one the raylet clamped;
    returns the totals the raylets replied."""
    with lock:
        totals = client.resize_many(per_node)
        note_set(session, per_node)
        for node, targets in per_node.items():
            reply = totals[node]
            for name, target in targets.items():
                pending = session.pending.get(node)
                if same_amount(reply.get(name, 0.0), target):
                    if pending is not None:
                        pending.pop(name, None)
                        if not pending:
                            del session.pending[node]
                else:
                    session.pending.setdefault(node, {})[name] = target
        if session.pending:
            _wake_reconciler()
        return totals


def add_job(job: Callable[[], bool]) -> None:
    """Have the reconciler run ``job()`` (under :data:`lock`) every period until it returns True."""
    _, session = current()
    with lock:
        session.jobs.append(job)
        _wake_reconciler()


def pending_targets() -> Dict[str, Dict[str, float]]:
    """``{node: {name: target}}`` the raylets clamped and the reconciler is still re-applying."""
    with lock:
        if _session is None:
            return {}
        return {node: dict(t) for node, t in _session.pending.items()}


def wait_until_settled(timeout_s: float) -> bool:
    """Wait until no clamped target and no job is left; True if so within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with lock:
            if _session is None or not (_session.pending or _session.jobs):
                return True
        time.sleep(RECONCILE_PERIOD_S / 2)
    return False


def _wake_reconciler() -> None:
    """Start the reconciler if it is not running and wake it; caller holds :data:`lock`."""
    global _reconciler
    if _reconciler is None or not _reconciler.is_alive():
        _reconciler = threading.Thread(
            target=_reconcile_loop, name="ray_adaptive-resource-reconciler", daemon=True
        )
        _reconciler.start()
    _wakeup.notify_all()


def _reconcile_loop() -> None:
    while True:
        with _wakeup:
            while _session is None or not (_session.pending or _session.jobs):
                _wakeup.wait()
        try:
            _reconcile_once()
        except Exception:  # Ray shut down or reconnected: forget what we cannot reach.
            with lock:
                if _session is not None:
                    _session.pending.clear()
                    _session.jobs.clear()
        time.sleep(RECONCILE_PERIOD_S)


def _reconcile_once() -> None:
    import ray

    if not ray.is_initialized():
        raise ResourceError("Ray is not initialized")
    client, session = current()
    with lock:
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
                if same_amount(totals.get(name, 0.0), target):
                    del targets[name]
            if not targets:
                del session.pending[node]
        session.jobs = [job for job in session.jobs if not job()]
