"""A selector that dies under a live switch's handover, in one process and free of Ray: every interleaving of
the calls, their failures, the selector's restarts and the tasks' finishes is chosen by the test (issue 35,
the chaos run's round 10: two selector kills and a node joining under the centralized plan; a submitter's
wave waited 600 s for a task no selector knew).

The selector's handle is a stand-in whose calls wait until the test delivers each one to an incarnation (a
:class:`Selector` made again from the same arguments: what ``max_restarts=-1`` brings back) or fails it.
What it models of Ray: a call is executed by one incarnation or by none; a call in flight when the actor
dies raises in its caller, whether or not it was executed; calls queued while it restarts reach the new
one; a threaded actor (the selector's ``max_concurrency``) runs a caller's calls in any order.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future
from typing import List, Optional

import numpy as np
import pytest
import ray

from ray_adaptive.compiler import analyze, enumerate_plans, lower
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import Role, lease_spec, role_specs
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.plan.scheduler import NodeState, TaskState
from ray_adaptive.runtime import background
from ray_adaptive.runtime.lease import LeaseDesk
from ray_adaptive.runtime.messages import Handback
from ray_adaptive.runtime.selector import Selector
from ray_adaptive.runtime.selector_client import SelectorClient

VEC = [0.1, 0.2, 0.1]
WAIT_S = 10.0  # (how long the test waits for the client's thread to make its next call: never reached)


class _Call:
    def __init__(self, method: str, args: tuple):
        self.method, self.args, self.done = method, args, Future()

    def result(self, timeout=None):
        return self.done.result(timeout)

    def future(self) -> Future:  # (as an ObjectRef's)
        return self.done


class _Handle:
    """The selector actor's handle: a method's ``.remote`` queues a call; the test delivers it (to
    ``self.selector``, the incarnation alive now) or fails it."""

    def __init__(self, selector: Selector):
        self.selector, self.calls = selector, []
        self._cond = threading.Condition()
        handle = self

        class _Method:
            def __init__(self, name: str):
                self.name = name

            def remote(self, *args):
                call = _Call(self.name, args)
                with handle._cond:
                    handle.calls.append(call)
                    handle._cond.notify_all()
                return call

        for name in ("exchange", "finished", "mark_dead", "forget", "wake"):
            setattr(self, name, _Method(name))

    def next(self, method: Optional[str] = None) -> _Call:
        """The oldest call not delivered yet (of ``method``), once the client has made it."""
        with self._cond:
            assert self._cond.wait_for(lambda: any(method in (None, c.method) for c in self.calls), WAIT_S), \
                f"no {method or ''} call came"
            return next(c for c in self.calls if method in (None, c.method))

    def deliver(self, call: _Call, answer_lost: bool = False) -> None:
        """The incarnation alive now executes ``call``; its answer reaches the caller, or (``answer_lost``)
        the incarnation dies before it does."""
        with self._cond:
            self.calls.remove(call)
        answer = getattr(self.selector, call.method)(*call.args)
        if answer_lost:
            call.done.set_exception(RuntimeError("the actor is unavailable: may or may not have been executed"))
        else:
            call.done.set_result(answer)

    def fail(self, call: _Call) -> None:
        """``call`` reaches no incarnation."""
        with self._cond:
            self.calls.remove(call)
        call.done.set_exception(RuntimeError("the actor died: the call was not executed"))

    def fail_all(self) -> None:
        with self._cond:
            calls, self.calls = self.calls, []
        for c in calls:
            c.done.set_exception(RuntimeError("the actor died"))


class _Context:
    def __init__(self, restarted: bool):
        self.was_current_actor_reconstructed = restarted


@pytest.fixture
def world(monkeypatch):
    """The centralized DRF-LB plan's selector on 2 nodes x 8 slots, behind a :class:`_Handle`; one client
    (``process``) whose decisions are recorded; ``restart()`` replaces the incarnation by a restarted one."""
    analysis = analyze(load_policy("drf_lb"))
    plan = lower(next(p for p in enumerate_plans(analysis, 4)[0] if p.name == "centralized"), analysis)
    spec = role_specs(plan)[Role.SELECTOR]
    nodes = [NodeState(f"n{i}", i, 8, 0, {}) for i in range(2)]  # (room for every task: none waits)
    restarted = [False]
    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Context(restarted[0]))
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # (the client's thread runs while it is)
    monkeypatch.setattr(SelectorClient, "IDLE_CHECK_S", 0.01)
    monkeypatch.setattr(background, "get", lambda ref, timeout=None: ref.result(WAIT_S * 3))

    def selector(lease: bool = False) -> Selector:
        return Selector(spec, nodes, (), 0.0, wait_s=0.0, lease=lease, awaiting_state=True)

    clients: List[SelectorClient] = []

    class World:
        handle = _Handle(selector())
        decided: List[str] = []  # every decision the client launched, in order
        running: List[str] = []  # launched, not finished

        def restart(self) -> None:
            restarted[0] = True
            self.handle.selector = selector()

        def leasing(self) -> None:
            """The selector in place leases to a lone client (as a centralized plan's does), and the
            clients made from now on can hold its lease."""
            self.handle.selector = selector(lease=True)
            self.lease_spec = lease_spec(plan)

        def state_with(self, running: List[TaskState]) -> dict:
            """The State a switch hands over: the initial one plus the OnDispatch of ``running``."""
            s = spec.scheduler(nodes)
            s.adopt(running, dispatch_hooks=True, now=0.0)
            return copy_state(s.interp.state)

        def process(self, name: str) -> SelectorClient:
            c = SelectorClient(name, self.handle, getattr(self, "lease_spec", None), nodes, 0.0)
            clients.append(c)

            def launched(tasks: List[TaskState]) -> None:
                for t in tasks:
                    if t.node is not None:
                        self.decided.append(t.id)
                        self.running.append(t.id)
            c.on_decided = launched
            return c

        def finish(self, c: SelectorClient, tid: str) -> None:
            self.running.remove(tid)
            c.finished([tid])

    w = World()
    yield w
    for c in clients:
        with c._cond:
            c._closed = True
            c._cond.notify_all()
    w.handle.fail_all()
    for c in clients:
        c._thread.join(WAIT_S)


def _task(tid: str, tenant: str = "a", node: Optional[str] = None) -> TaskState:
    t = TaskState(tid, 0.0, {"tenant": tenant, "resource_vec": VEC})
    t.node = node
    return t


def _alloc(world) -> dict:
    return {k: np.asarray(v, dtype=float) for k, v in world.handle.selector._s.interp.state["alloc"].items()}


def _assert_exact(world, running: List[str]) -> None:
    """The selector's allocation is the OnDispatch of the tasks running (all of tenant ``a``)."""
    got = _alloc(world).get("a", np.zeros(3))
    assert np.allclose(got, np.asarray(VEC) * len(running), atol=1e-9), \
        f"alloc['a'] {got.tolist()}, {len(running)} task(s) running: {sorted(running)}"


def _busy(c: SelectorClient) -> bool:
    """Whether the client has a reason to call (an idle one with nothing running makes no call)."""
    with c._cond:
        return bool(c._out or c._sent or c._running or c._handover is not None or c._resync or c._refinish)


def _next_if_busy(world, c: SelectorClient) -> Optional[_Call]:
    """The oldest call not delivered yet; None once the client is idle with none made (it makes none)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if world.handle.calls:
            return world.handle.calls[0]
        if not _busy(c):
            time.sleep(0.02)  # (an answer it was given may still make it call: look once more)
            return world.handle.calls[0] if world.handle.calls else None
        time.sleep(0.001)
    raise AssertionError("a busy client made no call")


def _drain(world) -> None:
    """Deliver every call made so far (the finishes a test just sent, an idle client's poll)."""
    while world.handle.calls:
        world.handle.deliver(world.handle.calls[0])


def _settle(world, c: SelectorClient, want_decided: int) -> None:
    """Serve the client's calls, oldest first, until ``want_decided`` decisions were launched and it holds
    nothing undecided and nothing to hand over, and has heard from the incarnation alive now."""
    for _ in range(200):
        with c._cond:
            idle = not (c._out or c._sent or c._handover is not None or c._resync or c._held_finishes is not None
                        or c._refinish)
            # (it heard of the last restart, if it has tasks running to hand back)
            idle = idle and (not c._running or c._incarnation == world.handle.selector.incarnation)
        if len(world.decided) >= want_decided and idle:
            _drain(world)
            # (a finish whose call failed is sent again by the client's thread: between taking it from
            # _refinish and making the call, the client looks idle -- look once more)
            time.sleep(0.02)
            if not any(call.method == "finished" for call in world.handle.calls):
                return
            continue
        call = _next_if_busy(world, c)
        if call is not None:
            world.handle.deliver(call)
    raise AssertionError(f"{len(world.decided)} of {want_decided} decision(s) launched after 200 calls; "
                         f"the client still holds undecided {sorted(c._sent)}")


def test_a_handover_to_a_selector_killed_before_answering_is_sent_to_its_restart(world):
    """Round 10: a live switch (a node joined) installs the State in the new selector; the client's first
    call to it -- the handover: its running task R, its undecided task T -- meets it killed. The client
    had no answer yet, so the restarted selector's first answer named no change: T was never sent again
    (the wave waited until the next switch handed it over) and R's room was never counted there."""
    r = _task("c-r", node="n0")
    world.running.append(r.id)
    world.handle.selector.install(world.state_with([r]))
    c = world.process("c")
    c.resume([r], [], [_task("c-t")], rebuild=False)
    first = world.handle.next("exchange")
    assert first.args[2] is not None  # (the handover)
    world.handle.fail(first)
    world.restart()
    _settle(world, c, want_decided=1)
    assert world.decided == ["c-t"]
    _assert_exact(world, ["c-r", "c-t"])
    for tid in ("c-r", "c-t"):
        world.finish(c, tid)
    _drain(world)
    _assert_exact(world, [])


def test_a_handover_that_reaches_a_restarted_selector_rebuilds_its_state(world):
    """The new selector is killed after the switch installed its State and before the handover reached
    it: its restart holds the initial State, and the handover said "counted, no hooks" (their OnDispatch
    was in the State installed). R's finish then drove the allocation below zero."""
    r = _task("c-r", node="n0")
    world.running.append(r.id)
    world.handle.selector.install(world.state_with([r]))
    world.restart()
    c = world.process("c")
    c.resume([r], [_task("c-t")], [], rebuild=False)
    _settle(world, c, want_decided=1)
    _assert_exact(world, ["c-r", "c-t"])
    world.finish(c, "c-r")
    _drain(world)
    _assert_exact(world, ["c-t"])


def test_a_handover_the_live_selector_never_executed_is_sent_again_before_its_finishes(world):
    """Ray cannot tell whether a call that raised was executed. A handover that raised and reached no
    incarnation -- the selector lives on -- was dropped, and R's finish, held for it, went out at once: R
    was not known there, its OnFinish never ran, and its OnDispatch (in the State installed) stayed: the
    allocation above the tasks' by one task's worth, the chaos run's audit failure."""
    r = _task("c-r", node="n0")
    world.running.append(r.id)
    world.handle.selector.install(world.state_with([r]))
    c = world.process("c")
    c.resume([r], [], [_task("c-t")], rebuild=False)
    first = world.handle.next("exchange")
    world.finish(c, "c-r")  # (held: the handover is on its way)
    world.handle.fail(first)
    _settle(world, c, want_decided=1)
    _assert_exact(world, ["c-t"])
    world.finish(c, "c-t")
    _drain(world)
    _assert_exact(world, [])


def test_the_finishes_held_while_frozen_ride_the_handover_and_free_the_room_its_tasks_wait_for(world):
    """Every slot was taken when the process froze, and every task finished while it was frozen: the handover
    carries those finishes, the selector applies them once it has taken the running tasks, and its answer
    to the handover itself decides the waiting task -- no second round trip (a finish call, then the next
    exchange) inside the switch's pause."""
    full = [_task(f"c-r{i}", node=f"n{i % 2}") for i in range(16)]  # (2 nodes x 8 slots)
    world.handle.selector.install(world.state_with(full))
    c = world.process("c")
    c.resume(full, [], [_task("c-t")], rebuild=False, finished=[t.id for t in full])
    first = world.handle.next("exchange")
    assert sorted(first.args[2].finished) == sorted(t.id for t in full)
    world.handle.deliver(first)
    deadline = time.monotonic() + WAIT_S
    while not world.decided and time.monotonic() < deadline:
        time.sleep(0.001)
    assert world.decided == ["c-t"]
    assert not any(call.method == "finished" for call in world.handle.calls)
    _assert_exact(world, ["c-t"])
    world.finish(c, "c-t")
    _drain(world)
    _assert_exact(world, [])


def test_new_tasks_of_a_call_that_reached_no_incarnation_are_sent_again(world):
    """A call carrying new tasks raises without having reached the selector, which lives on (Ray cannot
    tell): nothing changed incarnation, so nothing sent them again -- the tasks waited for ever."""
    world.handle.selector.install(world.state_with([]))
    c = world.process("c")
    c.resume([], [], [], rebuild=False)
    world.handle.deliver(world.handle.next("exchange"))  # (the empty handover lands)
    c.submit([_task("c-t")])
    call = world.handle.next("exchange")
    while not call.args[1]:  # (idle polls before the submission's call)
        world.handle.deliver(call)
        call = world.handle.next("exchange")
    world.handle.fail(call)
    _settle(world, c, want_decided=1)
    _assert_exact(world, ["c-t"])


@pytest.mark.parametrize("seed", range(40))
def test_random_interleavings_of_calls_failures_restarts_and_finishes(world, seed):
    """Seeded random interleavings: calls delivered in any order, failed (the selector dying, or living on),
    executed with their answer lost (the same), restarts, finishes and new submissions. After each settle: every task decided
    once, and the selector's allocation exactly the running tasks' OnDispatch."""
    rng = random.Random(seed)
    running0 = [_task(f"c-r{i}", node=f"n{i % 2}") for i in range(rng.randint(0, 3))]
    world.handle.selector.install(world.state_with(running0))
    gone = [t.id for t in running0 if rng.random() < 0.4]  # finished while the process was frozen
    world.running.extend(t.id for t in running0 if t.id not in gone)
    c = world.process("c")
    c.resume(running0, [], [_task(f"c-t{i}") for i in range(rng.randint(0, 2))], rebuild=False, finished=gone)
    submitted = len(c._sent)
    n = 100
    for _ in range(rng.randint(5, 25)):
        move = rng.random()
        call = _next_if_busy(world, c) if move < 0.58 else None
        if move < 0.58 and call is None:
            continue  # (an idle client makes no call)
        if move < 0.4:
            world.handle.deliver(rng.choice(world.handle.calls))  # (a threaded actor: in any order)
        elif move < 0.5:  # a call reaches no incarnation: the selector died -- or lives on
            world.handle.fail(call)
            if rng.random() < 0.7:
                world.restart()
        elif move < 0.58:  # executed, and the answer lost: the incarnation died -- or, mostly, lives on
            world.handle.deliver(call, answer_lost=True)
            if rng.random() < 0.3:
                world.restart()
        elif move < 0.65:  # killed with calls queued: those in flight fail, the rest reach the restart
            for call in list(world.handle.calls):
                if rng.random() < 0.5:
                    world.handle.fail(call)
            world.restart()
        elif move < 0.85 and world.running:
            world.finish(c, rng.choice(world.running))
        elif submitted < 6:
            c.submit([_task(f"c-t{n}")])
            n += 1
            submitted += 1
    _settle(world, c, want_decided=submitted)
    assert sorted(world.decided) == sorted(set(world.decided)), "a task launched twice"
    assert len(world.decided) == submitted
    _assert_exact(world, world.running)
    for tid in list(world.running):
        world.finish(c, tid)
    _drain(world)
    _assert_exact(world, [])


def test_a_freeze_right_after_a_resume_lets_the_handover_land_first(world):
    """A process that takes up a generation late -- taken for dead by its switch, e.g. not registered yet with
    a store restarted just before -- may be asked to freeze for the next switch before its client thread
    sent the handover. The thread parked at once and the handover never reached the selector: the next
    switch handed over a State without R's OnDispatch (rebuilt: its running tasks were not counted, the
    State was exact), and R's OnFinish under the next plan drove the allocation below zero (the CI run's
    audit of a switch right after a store restart, -4 tasks' worth; the chaos run's round 37). Made
    deterministic by holding the client's lock across the resume and the freeze: its thread can only look
    once the freeze waits."""
    r = _task("c-r", node="n0")
    world.running.append(r.id)
    world.handle.selector.install(world.state_with([]))  # (a rebuild: the selector starts from the initial State)
    c = world.process("c")
    frozen: Future = Future()

    def resume_then_freeze() -> None:
        with c._cond:
            c.resume([r], [], [_task("c-t")], rebuild=True)
            frozen.set_result(c.freeze(timeout_s=WAIT_S * 2))
    threading.Thread(target=resume_then_freeze, daemon=True).start()
    handover = world.handle.next("exchange")
    assert handover.args[2] is not None and [t.id for t in handover.args[2].running] == ["c-r"]
    world.handle.deliver(handover)
    held = frozen.result(WAIT_S * 3)
    _assert_exact(world, ["c-r"] + [t for t in world.decided if t == "c-t"])  # (the handover's OnDispatch)
    assert sorted(t.id for t in held.arrived) == ([] if "c-t" in world.decided else ["c-t"])


def test_a_lease_whose_grant_never_reached_its_client_is_taken_back_at_its_next_call(world):
    """A lone client's call is answered with the selector's lease, and the answer is lost (the call raises in
    the client; the selector lives on). The selector held the client for the holder and answered each of
    its next calls as the holder's long poll (a Recall, nothing decided): its tasks waited for ever --
    what a test of actors on a lost node saw once as a selector "leased to" a process that held no lease.
    A call made without the lease by the client the selector takes for the holder takes the lease back."""
    world.leasing()
    world.handle.selector.install(world.state_with([]))
    c = world.process("c")
    c.resume([], [], [], rebuild=False)
    world.handle.deliver(world.handle.next("exchange"))  # (the empty handover)
    time.sleep(LeaseDesk.QUIET_S)  # (a selector installed by a switch grants nothing for that long)
    c.submit([_task("c-t")])
    call = world.handle.next("exchange")
    while not call.args[1]:  # (idle polls before the submission's call)
        world.handle.deliver(call)
        call = world.handle.next("exchange")
    world.handle.deliver(call, answer_lost=True)
    assert world.handle.selector._desk.holder == "c"  # (granted: the answer was the lease)
    _settle(world, c, want_decided=1)
    assert world.decided == ["c-t"]


def test_decisions_whose_answer_was_lost_by_a_live_selector_are_sent_again(world):
    """A call's decisions are made and its answer lost -- the call raised in the client, the selector lives
    on (Ray cannot tell the client which). The client sends its undecided tasks again; the selector knew
    them as running and dropped them as "sent again after a restart": their decisions never came, and the
    tasks waited for ever. Sent again, they are launched once, and the State counts each once."""
    world.handle.selector.install(world.state_with([]))
    c = world.process("c")
    c.resume([], [], [], rebuild=False)
    world.handle.deliver(world.handle.next("exchange"))  # (the empty handover)
    c.submit([_task("c-t1"), _task("c-t2")])
    call = world.handle.next("exchange")
    while not call.args[1]:  # (idle polls before the submission's call)
        world.handle.deliver(call)
        call = world.handle.next("exchange")
    world.handle.deliver(call, answer_lost=True)  # (no restart: the same incarnation answers next)
    _settle(world, c, want_decided=2)
    assert sorted(world.decided) == ["c-t1", "c-t2"]
    _assert_exact(world, ["c-t1", "c-t2"])
    for tid in ("c-t1", "c-t2"):
        world.finish(c, tid)
    _drain(world)
    _assert_exact(world, [])


def test_a_finish_notification_that_raised_while_the_selector_lived_on_is_sent_again(world):
    """A finish notification that reached no incarnation, the selector living on: fire and forget, it was
    lost -- the task's room stayed taken and its OnFinish never ran (the allocation one task above for
    good). It is sent again (a selector applies a task's finish once)."""
    world.handle.selector.install(world.state_with([]))
    c = world.process("c")
    c.resume([], [], [_task("c-t")], rebuild=False)
    _settle(world, c, want_decided=1)
    _assert_exact(world, ["c-t"])
    world.finish(c, "c-t")
    world.handle.fail(world.handle.next("finished"))
    # (sent again by the client's thread, once its idle poll in flight, if any, is answered)
    deadline = time.monotonic() + WAIT_S
    while not any(call.method == "finished" for call in world.handle.calls) and time.monotonic() < deadline:
        if world.handle.calls:
            world.handle.deliver(world.handle.calls[0])
        time.sleep(0.001)
    world.handle.deliver(world.handle.next("finished"))
    _assert_exact(world, [])


def test_a_freezing_process_wakes_its_long_poll(world):
    """A process freezing for a live switch waits for its call in flight to land; that call may be the
    selector's long poll (its tasks wait for room, or it holds the lease and waits for a recall), up to
    ``wait_s``. ``wake`` answers it now -- or the call after it, if it lands first: a freeze costs the
    round trips, not the poll's wait."""
    analysis = analyze(load_policy("drf_lb"))
    plan = lower(next(p for p in enumerate_plans(analysis, 4)[0] if p.name == "centralized"), analysis)
    full = [NodeState(f"n{i}", i, 0, 0, {}) for i in range(2)]  # (no room: a task waits)
    sel = Selector(role_specs(plan)[Role.SELECTOR], full, (), 0.0, wait_s=WAIT_S)
    answered: Future = Future()
    threading.Thread(target=lambda: answered.set_result(sel.exchange("c", [_task("c-1")])), daemon=True).start()
    time.sleep(0.2)
    assert not answered.done()  # (in its long poll: no room)
    start = time.monotonic()
    sel.wake("c")
    assert answered.result(WAIT_S / 2).decisions == [] and time.monotonic() - start < WAIT_S / 2
    # a wake that lands before its call: that call does not wait either, and the next one does again
    sel.wake("c")
    start = time.monotonic()
    assert sel.exchange("c", []).decisions == [] and time.monotonic() - start < WAIT_S / 2
    again: Future = Future()
    threading.Thread(target=lambda: again.set_result(sel.exchange("c", [])), daemon=True).start()
    time.sleep(0.2)
    assert not again.done()
    sel.close()
    assert again.result(WAIT_S / 2).decisions == []


def test_a_handback_is_answered_at_once(world):
    """A process holds its finish notifications until its handback (a live switch's handover, a lease
    coming back) has landed, so that none overtakes it; those finishes may be the room its tasks wait for.
    So the handback's call is answered at once, not after a long poll of ``wait_s``: the switch measured
    ~40 ms of its 'after' part there (the selector's ``wait_s`` is 50 ms)."""
    analysis = analyze(load_policy("drf_lb"))
    plan = lower(next(p for p in enumerate_plans(analysis, 4)[0] if p.name == "centralized"), analysis)
    full = [NodeState(f"n{i}", i, 0, 0, {}) for i in range(2)]  # (no room: a task waits)
    sel = Selector(role_specs(plan)[Role.SELECTOR], full, (), 0.0, wait_s=WAIT_S)
    start = time.monotonic()
    reply = sel.exchange("c", [_task("c-2")], Handback([_task("c-1", node="n0")]))
    assert reply.decisions == [] and time.monotonic() - start < WAIT_S / 2
    assert sel.export()["pending"] and sel.stats()["pending"] == 1
    sel.close()
