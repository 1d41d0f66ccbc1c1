"""Primitives for scheduling libraries built on ephemeral resources (``esl/``), beyond the user API.

A library such as ``esl.Gang`` converts a node's own units (``CPU``) into
resources only its members may use, and hands them back later. The raylet
sets totals, it cannot add to them, so that is a read-modify-write of a total
other processes change too. This module gives the pieces for doing it safely:
a batched resize that may touch Ray's own names (:func:`resize_many`), a
mutex shared by the cluster's processes (:func:`cluster_lock`), a write that
happens only if what was read still holds (:func:`compare_and_resize`), and a
background retry for what can only finish once tasks release their units
(:func:`retry_until_done`).
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Mapping, Optional

from ray_adaptive._private import raylet
from ray_adaptive.resources import _session
from ray_adaptive.resources.checks import check_capacities, check_spelling, same_amount

__all__ = ["resize_many", "compare_and_resize", "cluster_lock", "retry_until_done"]


def resize_many(per_node: Mapping[str, Mapping[str, float]], *, convert_from: Iterable[str] = ()) -> Dict[str, Dict[str, float]]:
    """Set many totals on many nodes, one RPC per node, and return the new totals per node.

    Unlike ``set_resources``, a total is set as given -- no convergence
    (a total below what tasks hold stays clamped; read the returned totals)
    -- and the Ray resources named in ``convert_from`` (``CPU``, say) may be
    resized too: what ``esl.Gang`` does to convert a node's CPU units into
    gang resources in one step, under :func:`cluster_lock`. Every other name
    and every capacity is checked as ``set_resource`` checks them.

    Example::

        with cluster_lock("convert"):
            cpu = get_cluster_state([node])[node]["CPU"]["total"]
            resize_many({node: {"CPU": cpu - 1, "my-gang-0": 1}}, convert_from=["CPU"])
    """
    allowed = {check_spelling(name) for name in convert_from}
    checked = {node: check_capacities(targets, convert_from=allowed) for node, targets in per_node.items()}
    client, session = _session.current()  # (only once every name and capacity passed: bad input needs no cluster)
    with _session.lock:
        totals = client.resize_many(checked)
        _session.note_set(session, checked, ray_own=allowed)
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
    client, _ = _session.current()
    now = client.load(list(expected))  # node -> (totals, available); a node that did not answer is left out
    for node, totals in expected.items():
        for name, total in totals.items():
            if node not in now or not same_amount(now[node][0].get(name, 0.0), total):
                return None
    return resize_many(targets, convert_from=convert_from)


def cluster_lock(name: str) -> raylet.ClusterLock:
    """A mutex shared by every process of the cluster (a context manager), for read-modify-write
    sequences of totals that other processes may run too (see :func:`resize_many`)."""
    return raylet.ClusterLock(f"ray_adaptive.{name}")


def retry_until_done(job: Callable[[], bool]) -> None:
    """Run ``job()`` every ~20 ms, under this process's resource lock, until it returns True (in the
    background: e.g. giving units back once the tasks holding them finish)."""
    _session.add_job(job)
