"""A submitting process that dies while the state store restarts is still evicted, in one process and free of
Ray (issue 35, the chaos run's three stretches of audits above the tasks: rounds 18 and 91 killed a driver
subprocess and the store in the same round, round 64 a submitter actor and the store).

A restarted store knew no process until each registered again. One that died first never did: the owner's
job watch, which reads the processes from the store, never saw its job end or its worker die, so it was
never evicted, and the OnDispatch of the tasks it had running stayed in the selector's State -- the
allocation above what the tasks in flight imply by their share, until some later rebuild.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ray_adaptive._private.jobs import JobRecord
from ray_adaptive.runtime import job_watch
from ray_adaptive.runtime import store as store_module
from ray_adaptive.runtime.job_watch import dead_clients, dead_processes
from ray_adaptive.runtime.store import StateStore

CONFIG = {"plan": SimpleNamespace(policy=SimpleNamespace(name="drf_lb")), "t0": 0.0, "generation": 0}


@pytest.fixture
def world(monkeypatch):
    kv: dict = {}
    monkeypatch.setattr(store_module.gcs_kv, "get", kv.get)
    monkeypatch.setattr(store_module.gcs_kv, "put", kv.__setitem__)
    monkeypatch.setattr(store_module.gcs_kv, "delete", lambda key: kv.pop(key, None))
    monkeypatch.setattr(store_module, "_reconstructed", lambda: True)
    dead_jobs: set = set()
    dead_workers: set = set()
    monkeypatch.setattr(job_watch.jobs, "job_table", lambda: {
        j: JobRecord(j, j in dead_jobs, {}, 0) for j in ("job-owner", "job-drv")})
    monkeypatch.setattr(job_watch.workers, "dead_workers", lambda ids: set(ids) & dead_workers)

    class World:
        store = StateStore(CONFIG, {}, None)
        evicted: list = []

        def restart(self) -> None:
            self.store = StateStore(CONFIG, {}, None)

        def look(self) -> list:
            """One look of the owner's job watch (what :meth:`JobWatch.check` reads of the store and of the
            GCS); the processes it finds dead are evicted (their eviction's first step, as
            :meth:`PolicyRuntime.evict` takes it: they leave the store). Returns them."""
            clients = {c: j for c, j in self.store.clients().items() if c != "owner"}
            dead = dead_clients(clients, job_watch.jobs.job_table(), "owner")
            watched = {c: w for c, w in self.store.workers().items() if c in clients}
            dead.update(dead_processes(clients, watched, job_watch.workers.dead_workers(watched.values()), "owner",
                                       dead))
            found = sorted(c for gone in dead.values() for c in gone)
            for c in found:
                self.store.leave(c)
            self.evicted.extend(found)
            return found

    w = World()
    w.dead_jobs, w.dead_workers = dead_jobs, dead_workers
    w.store.join("owner", 0.0, "job-owner", "w-owner")
    w.store.join("sub", 0.0, "job-owner", "w-sub")  # an actor of the owner's job, submitting
    w.store.join("drv", 0.0, "job-drv", "w-drv")  # a driver subprocess: a job of its own
    return w


def test_a_driver_killed_before_the_restarted_store_heard_from_it_is_evicted(world):
    """Round 18: the store and a driver subprocess killed in the same round; the driver's job ended
    before it could register again with the restarted store."""
    world.restart()
    world.store.join("owner", 0.0, "job-owner", "w-owner")
    world.store.join("sub", 0.0, "job-owner", "w-sub")
    world.dead_jobs.add("job-drv")
    assert world.look() == ["drv"]
    assert sorted(world.store.clients()) == ["owner", "sub"]


def test_an_actor_killed_as_the_store_restarts_is_evicted(world):
    """The submitter's worker died (its job lives on) and the store restarted before the owner's watch
    looked: nothing registers again for it."""
    world.dead_workers.add("w-sub")
    world.restart()
    assert world.look() == ["sub"]


def test_processes_that_registered_again_or_left_are_not_evicted_and_not_remembered(world):
    """A process that registers again is the restarted store's own; one that left (closed, or evicted) is
    forgotten for good -- across a second restart too -- so nothing is evicted twice."""
    world.store.leave("drv")  # (closed before the restart)
    world.restart()
    world.store.join("sub", 0.0, "job-owner", "w-sub")
    assert sorted(world.store.clients()) == ["owner", "sub"]
    assert world.look() == []
    world.dead_workers.add("w-sub")
    assert world.look() == ["sub"]
    world.dead_jobs.add("job-drv")
    world.restart()
    assert world.look() == []
    assert sorted(world.store.clients()) == ["owner"]
    assert world.evicted == ["sub"]


def test_a_switch_waits_for_the_processes_registered_before_the_restart_until_they_register_and_ack(world):
    """A process registered with an incarnation that died is announced to and waited for as any other (it
    registers again at its next watch, then acks): not waited for, it decided on under the plan it had and
    took up a later generation with its running tasks counted in a State that never held their OnDispatch
    (tests/test_audit.py). One that never comes back is taken for dead at the ack timeout -- or at once,
    its job or worker dead (switch._all_dead, from the same look as the job watch's) -- and stays silent
    for the owner's rebuild of late processes until it registers again."""
    world.restart()
    world.store.join("owner", 0.0, "job-owner", "w-owner")
    clients, _, _, _ = world.store.announce(1)
    assert clients == ["drv", "owner", "sub"]
    world.store.ack("owner", 1, {})
    assert world.store.wait_acks(1, clients, 0.0)[0] == ["drv", "sub"]
    quiet = world.store.quiet_for(["drv", "sub", "gone"])
    assert sorted(quiet) == ["drv", "sub"]  # (silent since the restart: not "left")
    world.store.join("sub", 0.0, "job-owner", "w-sub")  # (its watch saw the new incarnation)
    assert world.store.quiet_for(["sub"])["sub"] < quiet["sub"]
    world.store.ack("sub", 1, {})
    assert world.store.wait_acks(1, clients, 0.0)[0] == ["drv"]
    world.store.leave("drv")  # (evicted: no longer waited for)
    assert world.store.wait_acks(1, clients, 0.0)[0] == []
