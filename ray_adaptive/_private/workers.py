"""The GCS worker table: which worker processes died (private Ray API, kept here alone).

A process that submits to a runtime may die while its Ray job lives on: an
actor or a task that submitted policy tasks (a worker process), killed or
lost with its node. Its job's driver is fine, so the job table says nothing;
the worker table does: the raylet reports each worker's death to the GCS,
which marks its record not alive. There is no public API for it without the
dashboard (``ray.util.state``); the GCS accessor every connected process
holds answers for every worker at once.
"""

from __future__ import annotations

from typing import Iterable, Set

__all__ = ["dead_workers"]


def dead_workers(worker_ids: Iterable[str]) -> Set[str]:
    """Of ``worker_ids`` (hex, as ``ray.get_runtime_context().get_worker_id()`` gives them), those the GCS
    marks dead, or whose node it marks dead. A worker the table does not know is not reported (nothing is
    known of it)."""
    wanted = set(worker_ids)
    if not wanted:
        return set()
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    connect = getattr(state, "_connect_and_get_accessor", None)
    if connect is not None:  # Ray 2.60
        accessor = connect()
    else:  # older releases (2.50): the accessor made on first use, kept on the object
        state._check_connected()
        accessor = state.global_state_accessor
    dead: Set[str] = set()
    alive: dict = {}  # worker -> its node, for those the table still marks alive
    for raw in accessor.get_worker_table():
        entry = gcs_pb2.WorkerTableData.FromString(raw)
        worker = entry.worker_address.worker_id.hex()
        if worker in wanted:
            if entry.is_alive:
                alive[worker] = entry.worker_address.node_id.hex()
            else:
                dead.add(worker)
    if alive:  # a worker lost with its node stays "alive" in the table for good: its raylet never reports it
        import ray

        gone = {n["NodeID"] for n in ray.nodes() if not n["Alive"]}
        dead.update(w for w, node in alive.items() if node in gone)
    return dead
