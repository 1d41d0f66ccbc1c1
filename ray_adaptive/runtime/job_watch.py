"""The owner's watch over the jobs attached to a runtime: a job that ends leaves the policy.

Every process that submits to a runtime is registered at its store with
its Ray job. A job that ends -- its driver returns, ``ray job stop``, a
SIGKILL -- leaves no process to finish its side: its undecided tasks would
wait in a scheduler's queue for a caller that is gone, and its running
tasks' share of State (their OnDispatch: a DRF allocation, a node's load)
would stay for good -- Ray kills those tasks' workers when their owner
dies, and no OnFinish would ever come. :class:`JobWatch`, a thread in the
runtime's owner (the process that started it, or the policy service),
looks at the GCS job table every ``PERIOD_S`` and hands the processes of
jobs marked dead to ``evict``, which takes them out of the runtime (see
:meth:`ray_adaptive.api.PolicyRuntime.evict`).

Ray has no subscription to job events; the job table is one GCS read for
every job at once, and a driver's death shows there within ~0.1 s here.

A submitting *process* can die while its job lives on: an actor or a task
that submitted policy tasks (a worker process, killed or lost with its
node). Its share is as stranded as a dead job's -- Ray kills the tasks it
owned -- but the job table says nothing. Each process registers its Ray
worker id with the store (a driver's too), and the watch also reads the GCS
worker table: the processes whose worker died are evicted the same way,
under their job's name with the dead process said.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from ray_adaptive._private import jobs, workers
from ray_adaptive.runtime import background
from ray_adaptive.runtime.background import Periodic
from ray_adaptive.runtime.messages import Actor

__all__ = ["JobWatch", "dead_clients", "dead_processes", "find_dead"]


def dead_clients(clients: Dict[str, str], table: Dict[str, jobs.JobRecord], keep: str) -> Dict[str, List[str]]:
    """Job -> its registered processes, for each job the table marks dead (never ``keep``: the owner's
    own client, whose job -- the one that created a detached service -- may well have ended)."""
    out: Dict[str, List[str]] = {}
    for client, job in sorted(clients.items()):
        record = table.get(job)
        if client != keep and record is not None and record.dead:
            out.setdefault(job, []).append(client)
    return out


def dead_processes(clients: Dict[str, str], worker_of: Dict[str, str], dead: set, keep: str,
                   already: Dict[str, List[str]]) -> Dict[str, List[str]]:
    """Label -> registered processes, for each process whose Ray worker died while its job lives (never
    ``keep``; never one of ``already``: its job ended, evicted as such). The label names the job and the
    process (what the eviction's entry in the history says)."""
    gone = {c for lst in already.values() for c in lst}
    out: Dict[str, List[str]] = {}
    for client, worker in sorted(worker_of.items()):
        if client != keep and client in clients and client not in gone and worker in dead:
            out.setdefault(f"{clients[client]} (its process {client} died, the job lives on)", []).append(client)
    return out


def find_dead(store: Actor, keep: str) -> Dict[str, List[str]]:
    """The processes registered at ``store`` (never ``keep``) whose job ended or whose Ray worker died, by
    job (see :func:`dead_clients`, :func:`dead_processes`): one read of the GCS job table, one of its
    worker table."""
    clients = background.get(store.clients.remote(), timeout=30)
    others = {c: j for c, j in clients.items() if c != keep}
    if not others:
        return {}
    dead = dead_clients(others, jobs.job_table(), keep)  # (the table holds every job ever)
    worker_of = background.get(store.workers.remote(), timeout=30)
    watched = {c: w for c, w in worker_of.items() if c in others}
    dead.update(dead_processes(others, watched, workers.dead_workers(watched.values()), keep, dead))
    return dead


class JobWatch:
    """The thread (see the module doc); ``evict(job, clients)`` is called for each job found dead."""

    PERIOD_S = 0.5

    def __init__(self, store: Actor, own_client: str, evict: Callable[[str, List[str]], Any], name: str,
                 late: Optional[Callable[[], Any]] = None):
        """``late``: called at each look too (the owner's rebuild for processes a switch took for dead that
        live on: :meth:`ray_adaptive.api.PolicyRuntime.rebuild_late`)."""
        self._store, self._own, self._evict, self._late = store, own_client, evict, late
        self._owed: Dict[str, List[str]] = {}  # job -> its processes, whose eviction is still to (re)do
        self._thread = Periodic(self.check, f"ra-jobs-{name}", self.PERIOD_S,
                                "taking the jobs that ended out of the runtime")

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop(timeout)

    def check(self) -> Dict[str, List[str]]:
        """Evict the processes of every job that ended; return them (by job). A job whose eviction fails
        is evicted again at the next check (its processes are unregistered by then: it is remembered)."""
        dead = find_dead(self._store, self._own)
        for job, gone in dead.items():
            self._owed[job] = sorted(set(self._owed.get(job, [])) | set(gone))
        for job, gone in list(self._owed.items()):
            if self._thread.stopping:
                break
            self._evict(job, gone)
            del self._owed[job]
        if self._late is not None and not self._thread.stopping:
            self._late()
        return dead
