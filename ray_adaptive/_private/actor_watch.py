"""How a process learns that an actor it created ended: a call that answers when the actor ends.

Ray has no public actor-death callback. The router learns that a task ended
by a ``ray.wait`` on its ObjectRef (``runtime/harvest.py``), so an actor
placed by a policy hands the router an ObjectRef that becomes ready when the
actor ends: a pending call to :class:`ActorWatch`, one small async actor per
submitting process, which asks the GCS where its actors are.

Why not a pending call to the actor itself (in a concurrency group of its
own, so that it blocks none of the user's calls)? Measured on Ray 2.60: a
thread blocked in an actor keeps it from exiting gracefully --
``ray.actor.exit_actor()`` and the last handle going out of scope both left
the actor ALIVE after 10 s -- and ``ray.kill`` was the only end it saw.

Every ``POLL_S`` the watch makes one GCS read for all its actors (this job's
ALIVE actors), and one read per actor that is not among them (being created,
restarting, or ended). An actor's call answers with

* ``{"end": "dead", ...}`` once the GCS has it DEAD: ``ray.kill``, its own
  exit, its last handle gone, its owner's end, its node's death with no
  restart left, a constructor that raised;
* ``{"end": "moved", ...}`` once it is RESTARTING and the node it was placed
  on is dead: Ray restarts it, and it must be placed again (its binding
  resource went with the node). An actor whose process died on a live node
  restarts there, keeping its place: its call does not answer;
* ``{"end": "released"}`` when :meth:`ActorWatch.release` lets it go (the
  process's runtime shuts down: the policy stops accounting for it).

The watch restarts if it dies (``max_restarts=-1``) and Ray retries its
pending calls on the new one (``max_task_retries=-1``), so its death ends no
actor in the policy's eyes. It is owned by the process that made it and
ends with it, as do that process's actors.

This module also reads an actor handle's id (a private attribute:
:func:`ray_adaptive._private.actors.actor_key`) and a ``@ray.remote`` class's
declared options.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["ActorWatch", "watch_of_process", "class_default_options", "actor_id_of"]


def class_default_options(actor_class: Any) -> Dict[str, Any]:
    """The options a ``@ray.remote(...)`` class was declared with (its ``num_cpus``, ``max_restarts``, ...)."""
    return dict(getattr(actor_class, "_default_options", None) or {})


def actor_id_of(handle: Any) -> str:
    """The actor's id, as hex (equal for every handle of one actor, across restarts)."""
    from ray_adaptive._private.actors import actor_key

    return actor_key(handle)


class ActorWatch:
    """The async actor behind :func:`watch_of_process` (see the module doc). Made with ``ray.remote``."""

    POLL_S = 0.1

    def __init__(self, job_hex: str):
        self._job_hex = job_hex
        # (actor id, the node it was placed on) -> the futures of the calls waiting for that placement's end
        self._waiting: Dict[Tuple[str, str], List[asyncio.Future]] = {}
        self._poller: Optional[asyncio.Task] = None
        self.polls = 0

    async def until_ended(self, actor_id: str, node_id: str) -> dict:
        """Answer when actor ``actor_id`` -- placed on ``node_id`` -- ends (see the module doc). Each placement
        has its own call: one for a node it was placed on before answers by that node alone."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault((actor_id, node_id), []).append(fut)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        return await fut

    async def release(self, actor_ids: Optional[List[str]] = None) -> int:
        """Answer the calls of ``actor_ids`` (None: all) with ``{"end": "released"}``; how many."""
        keys = [k for k in self._waiting if actor_ids is None or k[0] in actor_ids]
        for key in keys:
            self._answer(key, {"end": "released"})
        return len(keys)

    async def watched(self) -> int:
        return len(self._waiting)

    def _answer(self, key: Tuple[str, str], answer: dict) -> None:
        for f in self._waiting.pop(key, []):
            if not f.done():
                f.set_result(answer)

    async def _poll(self) -> None:
        while self._waiting:
            await asyncio.sleep(self.POLL_S)
            watched = list(self._waiting)
            if not watched:
                break
            ended = await asyncio.to_thread(self._ended, watched)
            self.polls += 1
            for key, answer in ended.items():
                self._answer(key, answer)

    def _ended(self, watched: List[Tuple[str, str]]) -> Dict[Tuple[str, str], dict]:
        """Of the ``watched`` placements (actor id, node), those that ended, with how (GCS reads)."""
        import ray
        import ray._private.state as state

        alive = state.actors(job_id=ray.JobID.from_hex(self._job_hex), actor_state_name="ALIVE")
        out: Dict[Tuple[str, str], dict] = {}
        live_nodes: Optional[set] = None
        for aid, node in watched:
            info = alive.get(aid)
            if info is not None and info["Address"]["NodeID"] == node:
                continue
            if info is None:
                info = state.actors(actor_id=aid)  # ({} while its creation is not registered yet)
            st = info.get("State")
            if st == "DEAD":
                out[(aid, node)] = {"end": "dead", "restarts": info.get("NumRestarts", 0)}
            elif st in ("RESTARTING", "ALIVE"):  # (ALIVE on another node: this placement's node is gone)
                if live_nodes is None:
                    live_nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
                if node not in live_nodes:
                    out[(aid, node)] = {"end": "moved", "restarts": info.get("NumRestarts", 0)}
        return out


_lock = threading.Lock()
_watch: Dict[Tuple[str, str], Any] = {}  # (job, worker) -> this process's ActorWatch handle


def watch_of_process() -> Any:
    """This process's :class:`ActorWatch` handle, made at the first call (on this process's node, 0 CPU)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ctx = ray.get_runtime_context()
    key = (ctx.get_job_id(), ctx.get_worker_id())
    with _lock:
        handle = _watch.get(key)
        if handle is None:
            cls = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=100_000)(ActorWatch)
            # (on this process's node, hard: a soft affinity let Ray put it on another node, and a process whose
            # node dies ends with its actors; measured here, a soft one landed on a worker node)
            handle = _watch[key] = cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(ctx.get_node_id(), soft=False),
            ).remote(ctx.get_job_id())
        return handle
