"""The hybrid's placement scheduler actor, and the selector's side of it (:class:`Forwarder`).

A hybrid plan's selector picks the *task*; k :class:`Placement` actors,
each pinned to a node, pick the *node* by the node part of Score. The
selector's :class:`Forwarder` sends them what it decided, in batches,
round-robin by batch (a call per task would cost each of k placements a call
per task; the simulator, which charges per task, deals single tasks), and relays their
node choices back to the submitting processes. A placement actor that dies
(its node, perhaps) loses nothing: its unplaced tasks go to the next live one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import ray

from ray_adaptive.plan import POOL, NodeState, RoleSpec, TaskState
from ray_adaptive.plan.explain import explain_pending, explain_placed
from ray_adaptive.runtime.delivery import Smoothed
from ray_adaptive.runtime.messages import Actor, Decision
from ray_adaptive.runtime.store import StoreClient

__all__ = ["Placement", "Forwarder"]


class Placement:
    """A hybrid's placement scheduler, pinned to a node: places forwarded tasks by the node part of Score.

    The loads it decides on come with each call: every placement's decision
    and every finish passes through the selector, so the selector counts
    what runs where, exactly, and sends that count with the batch (with a
    cached load view, taken only once per ``heartbeat_s``). No store round
    trip sits in the launch path; the store only merges State, for a plan
    whose placements keep a replica of it.
    """

    def __init__(self, index: Optional[int] = None, spec: Optional[RoleSpec] = None, nodes: Sequence[NodeState] = (),
                 store: Optional[Actor] = None, t0: float = 0.0, generation: int = 0, records: int = 0):
        self.node_id = ray.get_runtime_context().get_node_id()
        if index is not None:  # (else a spare, started before the switch that configures it: see runtime.spare)
            self.configure(index, spec, nodes, store, t0, generation, records)

    def configure(self, index: int, spec: Optional[RoleSpec], nodes: Sequence[NodeState], store: Optional[Actor],
                  t0: float, generation: int = 0, records: int = 0) -> None:
        """Take up place ``index`` of ``generation``. (Not restarted when its process dies: a spare is
        configured once, by its switch, before the selector it serves sends it anything.)"""
        assert spec is not None
        self._t0 = t0
        self._generation = generation
        self._records = records
        self._args = (index, spec, nodes, store)
        self.reset()

    def reset(self) -> None:
        """Forget every task (a restarted selector: its clients send theirs again)."""
        index, spec, nodes, store = self._args
        self._spec = spec
        self._s = spec.scheduler(nodes, seed=index, records=self._records)
        self._m = (StoreClient(f"placement-{index}", spec, self._s, store, generation=self._generation)
                   if spec.merge else None)
        self._next_loads = 0.0  # (cached view) when the next count of loads is taken

    def where(self) -> str:
        return self.node_id

    def place(self, forwarded: Sequence[TaskState], finished: Sequence[str], loads: Mapping[str, int]) -> List[Decision]:
        """Finish notifications, then new tasks, then decisions (also for tasks held from earlier calls).
        ``loads``: every task placed and not finished per node, as the selector counted them when it
        sent ``finished`` (so this scheduler's own tasks in it are exactly the ones it still counts)."""
        s, now = self._s, time.time() - self._t0
        s.finish_all(finished, now)
        for t in forwarded:
            s.add(t, now)
        if self._m is not None:
            self._m.refresh(want=bool(s.pending), wait=True)
        if time.monotonic() >= self._next_loads:
            own = s.outstanding()
            s.set_others({n: k - own.get(n, 0) for n, k in loads.items()})
            self._next_loads = time.monotonic() + self._spec.heartbeat_s
        decided = s.decide(now)
        if self._m is not None and (decided or finished):
            self._m.report()
        return [(t.id, t.node) for t in decided]

    def explain(self, task_id: str) -> Optional[dict]:
        """Why a task forwarded here waits, or its decision record (see :mod:`ray_adaptive.plan.explain`)."""
        now = time.time() - self._t0
        return explain_pending(self._s, task_id, now) or explain_placed(self._s.records or (), task_id)

    def freeze(self) -> None:
        """A live switch: push this replica's last changes (the switch takes the merged State next)."""
        if self._m is not None:
            self._m.flush()

    def mark_dead(self, node_id: str) -> None:
        n = self._s.by_id.get(node_id)
        if n is not None:
            n.alive = False

    def export(self) -> dict:
        return self._s.export()


class Forwarder:
    """The selector's side of its placement actors: forwards decided tasks, relays their placements.

    It counts what runs where (every placement and every finish passes
    through the selector), and sends that count with each batch, so the
    placements decide on exact loads with no store round trip. Runs a
    thread of its own; every other method is called with the selector's
    lock (``cond``) held. ``release(ids, now)``, ``deliver(client, task id,
    node, now)`` (False: the client is gone) and ``decide(now)`` are the
    selector's.

    A round calls only the placements that have something to decide: tasks
    sent or held. Finish notifications ride along with a placement's next
    call -- the loads that come with it are exact without them, so they
    only keep its count of its own tasks, which it reads when it decides --
    and go on their own after ``FIN_LAG_S`` at most (its ``running``, which
    status and explain show, is never staler). A placement that runs
    OnFinish on a State replica (``finishes_at_once``) gets them at once.
    A call per placement per round would be k calls where one has work: on
    this 2-core machine the hybrid's placements took more CPU than its
    selector, and its rounds took ~28 ms at 300 tasks/s (issue 37).

    ``slack()`` is the forwarding hop's smoothed delay, from a task's
    forwarding to its placement's answer: the selector adds it to a
    process's delivery slack (see :mod:`ray_adaptive.runtime.delivery`), so
    that it does not forward a task that would reach its placement, and its
    process, after its deadline.
    """

    FIN_LAG_S = 0.25  # how long a placement that keeps no State replica may go without its finishes
    IDLE_S = 0.5  # the longest the loop sleeps with nothing due

    def __init__(self, placements: Sequence, cond: threading.Condition, now: Callable[[], float],
                 release: Callable[[List[str], float], None], deliver: Callable[[str, str, Optional[str], float], bool],
                 decide: Callable[[float], None], finishes_at_once: bool = True):
        self._placements = list(placements)
        self._cond, self._now = cond, now
        self._release, self._deliver, self._decide = release, deliver, decide
        self._finishes_at_once = finishes_at_once
        self._adopted: Dict[str, str] = {}  # handed-back running task -> its node
        self._placed: Dict[str, str] = {}  # task a placement scheduler placed, not finished -> its node
        self.loads: Dict[str, int] = {}  # per node: the placed and the adopted tasks (see Placement)
        self._origin: Dict[str, str] = {}  # forwarded task -> client
        self._hop: Dict[str, int] = {}  # forwarded task -> placement index
        k = len(self._placements)
        self._out: List[List[TaskState]] = [[] for _ in range(k)]
        self._fin: List[List[str]] = [[] for _ in range(k)]
        self._out_since: List[Optional[float]] = [None] * k  # (monotonic) when _out[i]'s oldest task was forwarded
        self._fin_since: List[Optional[float]] = [None] * k  # ... and _fin[i]'s oldest finish came
        self._held = [0] * k  # tasks a placement scheduler holds (no room in its view)
        self._batch_to = 0  # the placement scheduler that gets the tasks decided until the next forwarding round
        self.live = set(range(k))  # placement schedulers not lost
        self._forwarded: Dict[str, TaskState] = {}  # forwarded, not placed yet (sent again if its placement dies)
        self._closed = False
        self._frozen = False  # a live switch: no new forwarding round
        self.in_flight = False  # a round's placements have not all answered yet
        self.rounds = self.held_rounds = 0  # forwarding rounds; of them, rounds that only asked about held tasks
        self.calls = 0  # placement calls the rounds made
        self.round_s = 0.0  # seconds the rounds took, send to the last answer
        self._delay = Smoothed()  # the forwarding hop: a task's forwarding to its placement's answer

    def start(self, restarted: bool) -> None:
        """Start forwarding; a restarted selector first empties its placements, which held tasks
        for the old one (the clients send theirs again)."""
        if restarted:
            refs = [p.reset.remote() for p in self._placements]
            for i, ref in enumerate(refs):
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError:  # (killed, or its node left, since it was looked up:
                    with self._cond:  # lost as if it died later -- a constructor that raised would leave
                        self._lose(i)  # the selector dead for good, never restarted again)
        threading.Thread(target=self._loop, name="ra-selector-forward", daemon=True).start()

    def close(self) -> None:
        self._closed = True

    def freeze(self) -> None:
        """No new forwarding round (a live switch); the selector waits for ``in_flight`` to clear."""
        self._frozen = True

    def unplaced(self) -> List[str]:
        """Tasks forwarded and not placed (held by a placement scheduler, or on their way)."""
        return list(self._forwarded)

    def slack(self) -> float:
        """Seconds a task takes, at most but rarely, from its forwarding to its placement's answer (0: none
        measured yet)."""
        return self._delay.bound()

    def forward(self, t: TaskState) -> None:
        """Send a task the selector decided to the placement scheduler whose batch is open."""
        i = self._batch_to
        self._hop[t.id] = i
        self._origin[t.id] = t.origin
        sent = self._forwarded[t.id] = TaskState(t.id, t.arrival, t.fields, t.origin, deadline=t.deadline,
                                                       demand=t.demand)
        if not self._out[i]:
            self._out_since[i] = time.monotonic()
        self._out[i].append(sent)

    def finished(self, tid: str) -> None:
        """A task the selector counted finished: its placement hears, its node's load drops."""
        self._forwarded.pop(tid, None)
        hop = self._hop.pop(tid, None)
        if hop is not None and hop in self.live:
            if not self._fin[hop]:
                self._fin_since[hop] = time.monotonic()
            self._fin[hop].append(tid)
        node = self._placed.pop(tid, None) or self._adopted.pop(tid, None)
        if node is not None:
            self.loads[node] -= 1

    def adopt(self, tid: str, node: str) -> str:
        """A running task handed back (placed by no placement scheduler): counted on its node until it
        finishes, so the placements see that room taken. Returns the selector's node for it, the pool."""
        self._adopted[tid] = node
        self.loads[node] = self.loads.get(node, 0) + 1
        return POOL

    def mark_dead(self, node_id: str) -> None:
        for p in self._placements:
            p.mark_dead.remote(node_id)

    def stats(self) -> dict:
        """Forwarding rounds so far: how many, how many only asked about held tasks, the placement calls
        they made, their mean (ms), and the hop's slack (ms)."""
        return {"rounds": self.rounds, "held_rounds": self.held_rounds, "calls": self.calls,
                "round_ms": round(1e3 * self.round_s / self.rounds, 3) if self.rounds else None,
                "slack_ms": round(1e3 * self.slack(), 3)}

    def placements(self) -> list:
        """The live placement actors."""
        return [self._placements[i] for i in sorted(self.live)]

    def _next_live(self, i: int) -> int:
        """The live placement scheduler after ``i`` (round-robin)."""
        n = len(self._placements)
        return next((j % n for j in range(i + 1, i + 1 + n) if j % n in self.live), i)

    def _lose(self, i: int) -> None:
        """Placement scheduler ``i`` died (holds the lock): the tasks it was sent and did not place
        go to the next live one, and none is sent to it again."""
        self.live.discard(i)
        self._held[i] = 0
        if not self.live:  # (the cluster lost every node a placement ran on)
            logging.getLogger(__name__).error("every placement scheduler of the hybrid is gone")
            return
        j = self._next_live(i)
        if self._batch_to == i:
            self._batch_to = j
        lost = [t for tid, t in self._forwarded.items() if self._hop.get(tid) == i]  # (those in _out[i] too)
        for t in lost:
            self._hop[t.id] = j
        if lost and not self._out[j]:
            self._out_since[j] = time.monotonic()
        self._out[j].extend(lost)
        self._out[i], self._fin[i] = [], []
        self._out_since[i] = self._fin_since[i] = None
        self._cond.notify_all()

    def _due(self) -> List[int]:
        """The placements this round calls: those with tasks to place (sent or held), or finishes due."""
        now = time.monotonic()
        return [i for i in sorted(self.live) if self._out[i] or self._held[i] or (
            self._fin[i] and (self._finishes_at_once or now - self._fin_since[i] >= self.FIN_LAG_S))]  # type: ignore[operator]

    def _idle_s(self) -> float:
        """How long the loop may sleep with nothing due: until the first finishes held back fall due, or
        ``IDLE_S`` (a safety net: whatever makes work notifies the lock)."""
        since = [t for i, t in enumerate(self._fin_since) if t is not None and i in self.live]
        if self._frozen or not since:
            return self.IDLE_S
        return max(0.0, min(self.IDLE_S, min(since) + self.FIN_LAG_S - time.monotonic()))

    def _loop(self) -> None:
        held = self._held
        while not self._closed:
            with self._cond:
                due = [] if self._frozen else self._due()
                if not due:  # (woken by what makes work: a task decided, a finish, a placement lost)
                    self._cond.wait(self._idle_s())
                    continue
                loads = dict(self.loads)  # as of the finishes these batches carry
                batches = [(i, self._out[i], self._fin[i], self._out_since[i]) for i in due]
                if self._out[self._batch_to]:  # the next tasks decided go to the next placement scheduler
                    self._batch_to = self._next_live(self._batch_to)
                for i in due:
                    held[i] += len(self._out[i])
                    self._out[i], self._fin[i] = [], []
                    self._out_since[i] = self._fin_since[i] = None
                self.in_flight = True
            started = time.perf_counter()
            only_held = not any(out or fin for _, out, fin, _ in batches)
            refs = [self._placements[i].place.remote(out, fin, loads) for i, out, fin, _ in batches]
            answers = []
            for (i, _, _, since), ref in zip(batches, refs):
                try:
                    answers.append((i, ray.get(ref), since))
                except Exception:  # the placement actor died (its node, perhaps): the others take its tasks
                    with self._cond:
                        self._lose(i)
            with self._cond:
                took = time.perf_counter() - started
                self.rounds += 1
                self.calls += len(batches)
                self.held_rounds += only_held
                self.round_s += took
                now, freed = self._now(), False
                for i, decided, since in answers:
                    held[i] -= len(decided)
                    if since is not None:
                        self._delay.add(time.monotonic() - since)
                    for tid, node in decided:
                        self._forwarded.pop(tid, None)
                        if node is None:  # the placement dropped it at its deadline: its room in the pool is free
                            self._release([tid], now)
                            freed = True
                        else:
                            self._placed[tid] = node
                            self.loads[node] = self.loads.get(node, 0) + 1
                        freed |= not self._deliver(self._origin.pop(tid), tid, node, now)
                if freed:  # a gone client's decisions made room
                    self._decide(now)
                self.in_flight = False
                self._cond.notify_all()
            if not any(self._out) and any(held):
                time.sleep(0.001)  # held tasks wait for finishes or a heartbeat: do not spin
