"""The merged State across a state-store restart, in one process and free of Ray: every interleaving of
pushes, lost answers, store deaths and finishes is chosen by the test (issue 35's drift).

The store's handle is a stand-in whose calls wait until the test delivers each one to an incarnation (a
:class:`StateStore` made from the same config and base State: what ``max_restarts=-1`` brings back) or
fails it. What it models of Ray: a call is executed by one incarnation or by none; a call in flight when
the actor dies raises in its caller, whether or not it was executed (``ActorUnavailableError``: "the task
may or may not have been executed"); calls queued while it restarts reach the new one; a threaded actor
(the store's ``max_concurrency``) runs a caller's calls in any order.
"""

from __future__ import annotations

import math
import random
import threading
from concurrent.futures import Future
from typing import Iterable, List, Optional

import numpy as np
import pytest

from ray_adaptive.compiler import analyze, enumerate_plans, lower
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import Role, role_specs
from ray_adaptive.plan.scheduler import NodeState, TaskState
from ray_adaptive.runtime import store as store_module
from ray_adaptive.runtime.local import LocalDecider
from ray_adaptive.runtime.store import StateStore, StoreClient

VEC = [0.1, 0.2, 0.1]


class _Call:
    def __init__(self, args: tuple):
        self.args, self._future = args, Future()

    def future(self) -> Future:
        return self._future


class _Handle:
    """The store actor's handle: ``sync.remote`` queues a call; the test delivers it (to ``self.store``, the
    incarnation alive now) or fails it. ``auto``: each call is delivered as it is made."""

    def __init__(self, store: StateStore):
        self.store, self.calls, self.auto = store, [], False
        handle = self

        class _Method:
            def remote(self, *args):
                call = _Call(args)
                handle.calls.append(call)
                if handle.auto:
                    handle.deliver(call)
                return call

        self.sync = _Method()

    def deliver(self, call: _Call, answer_lost: bool = False) -> None:
        """The incarnation alive now executes ``call``; its answer reaches the caller, or (``answer_lost``)
        the incarnation dies before it does."""
        self.calls.remove(call)
        answer = self.store.sync(*call.args)
        if answer_lost:
            call.future().set_exception(RuntimeError("the actor is unavailable: may or may not have been executed"))
        else:
            call.future().set_result(answer)

    def fail(self, call: _Call) -> None:
        """``call`` reaches no incarnation."""
        self.calls.remove(call)
        call.future().set_exception(RuntimeError("the actor is unavailable: may or may not have been executed"))

    def deliver_all(self) -> None:
        while self.calls:
            self.deliver(self.calls[0])


class _Decider(LocalDecider):
    SYNC_FLOOR_S = 0.0  # (every refresh may push: the test, not the clock, orders the syncs)
    IDLE_SYNC_S = math.inf  # (a test that lets this much time pass sets it to 0)


@pytest.fixture
def world(monkeypatch):
    """A decentralized DRF-LB plan (alloc merged by adding deltas) on 2 nodes x 2 slots, its store behind a
    :class:`_Handle`; ``restart()`` replaces the incarnation by a new one from the same config and base."""
    kv: dict = {}
    monkeypatch.setattr(store_module.gcs_kv, "get", kv.get)
    monkeypatch.setattr(store_module.gcs_kv, "put", kv.__setitem__)
    monkeypatch.setattr(StoreClient, "RETRY_S", 0.0, raising=False)
    monkeypatch.setattr(store_module, "_reconstructed", lambda: False)  # (asking Ray would start it)
    analysis = analyze(load_policy("drf_lb"))
    plan = lower(next(p for p in enumerate_plans(analysis, 4)[0] if p.name == "decentralized+store per decision"),
                 analysis)
    spec = role_specs(plan)[Role.SCHEDULERS]
    assert spec.merge == {"alloc": "add"}
    nodes = [NodeState(f"n{i}", i, 2, 0, {}) for i in range(2)]
    config = {"plan": plan, "t0": 0.0, "generation": 0}
    base = spec.scheduler(nodes).interp.state

    class World:
        handle = _Handle(StateStore(config, base, spec.merge))

        def restart(self) -> None:
            self.handle.store = StateStore(config, base, spec.merge)

        def process(self, name: str) -> LocalDecider:
            return _Decider(name, spec, nodes, self.handle, 0.0)

    return World()


def _task(tid: str, tenant: str) -> TaskState:
    return TaskState(tid, 0.0, {"tenant": tenant, "resource_vec": VEC})


def _settle(world, processes: List[LocalDecider]) -> None:
    """Every process syncs until the store has all its changes (the merged State is then exact)."""
    for _ in range(5):
        for p in processes:
            p._m.refresh(want=True)
        world.handle.deliver_all()
    for p in processes:
        p._m.refresh(want=False)  # (the last answers applied)


def _quiet(world, processes: List[LocalDecider], rounds: int = 4) -> None:
    """What the processes do on their own with nothing forced: the dispatcher thread ticks each, and the
    store answers every call (a process pushes only when it has something to tell)."""
    for _ in range(rounds):
        for p in processes:
            p.tick()
        world.handle.deliver_all()


def _assert_exact(world, processes: List[LocalDecider], tenants: Optional[Iterable[str]] = None) -> None:
    """The merged State is the one rebuilt from the tasks: the initial State plus the OnDispatch of every
    running task; nothing of the finished ones (``tenants``: of these only)."""
    running: dict = {}
    for p in processes:
        for t in p.sched.running.values():
            running[t.fields["tenant"]] = running.get(t.fields["tenant"], 0) + 1
    alloc = world.handle.store.state()["alloc"]
    for tenant in set(tenants) if tenants is not None else set(alloc) | set(running):
        got = np.asarray(alloc.get(tenant, [0.0] * 3), dtype=float)
        assert np.allclose(got, np.asarray(VEC) * running.get(tenant, 0), atol=1e-9), \
            f"tenant {tenant}: {got.tolist()} merged, {running.get(tenant, 0)} tasks running"


def _fill(p: LocalDecider, tenant: str, n: int = 5) -> None:
    """``n`` tasks: 4 dispatched (every slot) without a sync -- nothing waited yet -- and the 5th pending, so
    the next tick pushes the 4 OnDispatch in this process's first push."""
    for i in range(n):
        p.submit([_task(f"{p.client}-{i}", tenant)])
    p.tick()


def test_a_first_push_the_dying_store_merged_but_never_answered_is_pushed_to_the_restarted_one(world):
    """The drift of test_a_state_store_that_dies_is_restarted_...: a process's first push carries the
    OnDispatch of the tasks it launched; the store merges it and dies before answering. The process knew
    no incarnation yet, so the restarted store's first answer looked like no restart: the 4 OnDispatch
    were never pushed again, and the finishes that followed drove the allocation to -4 tasks' worth."""
    p = world.process("p")
    _fill(p, "a")
    (first,) = world.handle.calls
    world.handle.deliver(first, answer_lost=True)
    world.restart()
    p.finished(["p-0"])  # (p-4 takes its slot)
    _settle(world, [p])
    _assert_exact(world, [p])
    p.finished([t for t in list(p.sched.running)])
    _settle(world, [p])
    _assert_exact(world, [p])


def test_a_first_push_the_dying_store_never_executed_is_pushed_to_the_restarted_one(world):
    p = world.process("p")
    _fill(p, "a")
    world.handle.fail(world.handle.calls[0])
    world.restart()
    p.finished(["p-0", "p-1"])
    _settle(world, [p])
    _assert_exact(world, [p])


def test_a_push_the_live_store_never_executed_is_carried_by_the_next(world):
    """Ray cannot tell whether a call that raised was executed; the store did not restart: pushed again,
    merged once."""
    p, q = world.process("p"), world.process("q")
    _fill(p, "a")
    world.handle.deliver_all()
    p.finished(["p-0"])
    world.handle.fail(world.handle.calls[0])  # p's finish of p-0 (and OnDispatch of p-4): executed by none
    _fill(q, "b", 2)
    _settle(world, [p, q])
    _assert_exact(world, [p, q])
    p.finished(["p-1"])
    world.handle.deliver(world.handle.calls[0], answer_lost=True)  # executed, its answer lost: not twice
    _settle(world, [p, q])
    _assert_exact(world, [p, q])


def test_a_process_that_leaves_as_the_store_restarts_takes_its_share_with_it(world):
    """A process leaves (``close``: a flush) after its tasks finished; its last push is the first the
    restarted store answers. It owed that store everything pushed before -- the flush stopped there, and
    the store kept the finishes without their OnDispatch."""
    p, q = world.process("p"), world.process("q")
    _fill(p, "a", 2)
    p._m.refresh(want=True)
    _fill(q, "b", 2)
    _settle(world, [p, q])
    p._m.refresh(want=True)  # a push in flight while p's tasks finish
    p.finished(["p-0", "p-1"])
    world.handle.deliver_all()
    world.restart()
    world.handle.auto = True
    p.close()
    world.handle.auto = False
    assert not p.sched.running
    _settle(world, [q])
    _assert_exact(world, [p, q])


def test_the_last_tasks_a_process_dispatches_reach_the_store_before_they_finish(world):
    """The flake of test_a_state_store_that_dies_... (b at +1 task right after both tenants read 0): a
    process pushes while tasks wait here or after finishes, and decides after its push. Its last waiting
    tasks, dispatched together once its running ones finished, were pushed with nothing else: the
    store kept this process at 0 for as long as they ran -- the others saw those slots free -- and the
    first of their finishes pushed their OnDispatch with it, taking the merged State from 0 to +1 task."""
    q = world.process("q")
    for i in range(6):
        q.submit([_task(f"q-{i}", "b")])
    _quiet(world, [q])
    assert sorted(q.sched.running) == ["q-0", "q-1", "q-2", "q-3"] and q.sched.pending == 2
    _assert_exact(world, [q])
    q.finished(["q-0", "q-1", "q-2", "q-3"])  # pushed (nothing of b left), then q-4 and q-5 dispatched
    assert sorted(q.sched.running) == ["q-4", "q-5"] and q.sched.pending == 0
    _quiet(world, [q])
    _assert_exact(world, [q])  # (was: 0 merged, 2 tasks running)
    alloc = []
    for tid in ("q-4", "q-5"):  # the finishes: the merged allocation only goes down
        q.finished([tid])
        _quiet(world, [q])
        _assert_exact(world, [q])
        alloc.append(float(world.handle.store.state()["alloc"]["b"][0]))
    assert alloc == pytest.approx([0.1, 0.0])


def test_a_process_quiet_through_a_store_restart_gives_its_share_back(world, monkeypatch):
    """A process with tasks running and nothing to tell makes no call: it learns of a restart -- the store
    lost its share of State and its loads -- at its next sync, every ``IDLE_SYNC_S`` at the latest."""
    p, q = world.process("p"), world.process("q")
    p.submit([_task("p-0", "a")])
    p.submit([_task("p-1", "a")])
    _quiet(world, [p])
    _assert_exact(world, [p])
    world.restart()  # (nothing in flight)
    q.submit([_task("q-0", "b")])
    _quiet(world, [p, q])  # within IDLE_SYNC_S: p's share is not back yet
    monkeypatch.setattr(_Decider, "IDLE_SYNC_S", 0.0)  # ... and once it has passed
    _quiet(world, [p, q])
    _assert_exact(world, [p, q])
    assert sum(world.handle.store.stats()["outstanding"].values()) == 3  # (the others see p's tasks again)


@pytest.mark.parametrize("seed", range(300))
def test_any_interleaving_of_pushes_deaths_and_finishes_ends_with_the_exact_state(world, seed, monkeypatch):
    """Three processes submit and finish; the store's calls are delivered in any order (a threaded actor),
    their answers lost, or never executed; the store dies and restarts, with calls in flight (each raises
    or, queued during the restart, reaches the new incarnation). Once every process has synced, the merged
    State is exact."""
    rng = random.Random(seed)
    handle = world.handle
    ps = [world.process(f"p{i}") for i in range(3)]
    count = [0, 0, 0]
    for _ in range(80):
        i = rng.randrange(3)
        p = ps[i]
        event = rng.random()
        if event < 0.25:
            p.submit([_task(f"p{i}-{count[i]}", "abc"[i])])
            count[i] += 1
        elif event < 0.4 and p.sched.running:
            p.finished([rng.choice(sorted(p.sched.running))])
        elif event < 0.5:
            p.tick()
        elif event < 0.8 and handle.calls:
            handle.deliver(rng.choice(handle.calls), answer_lost=rng.random() < 0.15)
        elif event < 0.85 and handle.calls:
            handle.fail(rng.choice(handle.calls))
        elif event < 0.9:
            for call in list(handle.calls):  # in flight at the death: raised, executed or not; or queued
                if rng.random() < 0.5:
                    handle.deliver(call, answer_lost=True) if rng.random() < 0.5 else handle.fail(call)
            world.restart()
    # on their own (no push forced), once IDLE_SYNC_S has passed: exact for every process with nothing
    # waiting (one with tasks waiting may have dispatched some at its last tick)
    _quiet(world, ps)
    monkeypatch.setattr(_Decider, "IDLE_SYNC_S", 0.0)
    _quiet(world, ps)
    idle = [p for p in ps if not p.sched.pending]
    _quiet(world, ps, rounds=1)
    _assert_exact(world, ps, tenants=["abc"[ps.index(p)] for p in idle])
    _settle(world, ps)
    _assert_exact(world, ps)
    for p in ps:  # and once every task finished: nothing allocated
        p.finished(sorted(p.sched.running))
    _settle(world, ps)
    _assert_exact(world, ps)


@pytest.mark.parametrize("in_flight", ["lands before the ack", "lands after it", "is lost"])
def test_a_frozen_replica_s_ack_brings_what_the_store_lacks_of_it(world, monkeypatch, in_flight):
    """A live switch freezes each process: its ack carries the deltas no answer counted yet (``hand_off``,
    no round trip), whatever becomes of its sync in flight -- the merged State the switch takes is exact,
    each delta merged once. A process that leaves while frozen (``close``) pushes nothing, at once."""
    monkeypatch.setattr(StoreClient, "FLUSH_S", 30.0, raising=False)
    ps = [world.process(name) for name in ("p", "q")]
    for p, tenant in zip(ps, "ab"):
        _fill(p, tenant)
    _settle(world, ps)
    for p in ps:
        p.finished(sorted(p.sched.running)[:1])
        p.tick()  # (a sync in flight: that finish's OnFinish, the pending task's OnDispatch)
        p.finished(sorted(p.sched.running)[:1])  # (a change after it: pushed by no call yet)
    assert len(world.handle.calls) == 2
    store = world.handle.store
    store.prepare(1, {**store.config(), "generation": 1})
    store.announce(1)
    in_flight_calls = list(world.handle.calls)
    if in_flight == "lands before the ack":
        world.handle.deliver_all()
    handed = [p.freeze() for p in ps]
    for p, h in zip(ps, handed):
        assert store.ack(p.client, 1, {"pushes": h.pushes})
    if in_flight == "lands after it":
        world.handle.deliver_all()
    elif in_flight == "is lost":
        for call in in_flight_calls:
            world.handle.fail(call)
    _assert_exact(world, ps)
    done = threading.Event()
    threading.Thread(target=lambda: (ps[0].close(), done.set()), daemon=True).start()
    assert done.wait(10) and not world.handle.calls  # (no push, and no FLUSH_S of retries)


def test_a_flush_that_finds_the_store_gone_for_good_gives_up(world, monkeypatch):
    """A runtime shut down: its store answers nothing again; a process leaving does not wait ``FLUSH_S``."""
    import ray

    p = world.process("p")
    _fill(p, "a", 2)
    monkeypatch.setattr(StoreClient, "FLUSH_S", 30.0, raising=False)

    def dead(call) -> None:
        world.handle.calls.remove(call)
        call.future().set_exception(ray.exceptions.ActorDiedError())

    done = threading.Event()
    thread = threading.Thread(target=lambda: (p.close(), done.set()), daemon=True)
    thread.start()
    while not done.wait(0.01):
        for call in list(world.handle.calls):
            dead(call)
    assert done.is_set()


def test_a_submission_its_caller_does_not_wait_for_is_queued_for_the_dispatcher_tick(world):
    """(This file's world is a LocalDecider without Ray.) ``submit(wait=False)`` -- a ``.submit()`` -- only
    queues: the caller is not held up by the decision (issue 37: above the host bound an open-loop caller
    that decided fell behind its arrivals). The dispatcher's tick decides the queue; a caller that waits
    (a ``.remote()``) decides in its call, the tasks queued before it too."""
    p = world.process("p")
    assert p.submit([_task("a-0", "a")], wait=False) == [] and p.queued and p.pending == 1
    decided = p.tick()
    assert [(t.id, t.node is not None) for t in decided] == [("a-0", True)] and not p.queued
    p.submit([_task("a-1", "a")], wait=False)
    decided = p.submit([_task("a-2", "a")], wait=True)
    assert sorted(t.id for t in decided if t.node is not None) == ["a-1", "a-2"] and not p.queued
