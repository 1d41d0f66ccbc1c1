"""Live switches on the 4-node cluster: every direction between the three architectures, under load from
three submitting processes, and a crash of each role in the middle of one.

What must hold after each: every task's body ran exactly once (a marker file per task, created
exclusively), every result reached its caller, the policy's State is the one rebuilt from the tasks
still running (and zero once they finished), the old plan's actors are gone and the slot resources
are the ones there were (no churn).
"""

import os
import tempfile
import threading
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive import resources
from ray_adaptive.runtime.topology import NAMESPACE, actor_name
from tests.conftest import RaisingThread, wait_for

VEC = [0.1, 0.2, 0.1]
# about 100 submissions/s per process, 300/s in all: near the 8 CPUs' 400/s of 20 ms tasks, so the
# switch happens under load but no backlog builds that a round must then wait out
GAP_S = 0.01
# the tasks the cluster holds at once (4 nodes x (1 executor + 2 queued), as ra.start below): a
# process that had more than these run loaded it, its slots taken and given back
SLOTS = 4 * (1 + 2)
DIRECTIONS = [("centralized", "decentralized"), ("decentralized", "centralized"), ("centralized", "hybrid"),
              ("hybrid", "centralized"), ("decentralized", "hybrid"), ("hybrid", "decentralized")]


@ray.remote(num_cpus=1)
def marked(marks: str, key: str, sleep: float):
    """Leave a marker only this run of this task may create (a second run of it fails), then work;
    ``sleep`` < 0: until the test releases it (a file ``release`` in ``marks``; fails after 120 s)."""
    os.close(os.open(os.path.join(marks, key), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    if sleep >= 0:
        time.sleep(sleep)  # (the task's work)
    else:
        wait_for(lambda: os.path.exists(os.path.join(marks, "release")), timeout=120, message="the release")
    return key


def _release(marks: str) -> None:
    open(os.path.join(marks, "release"), "w").close()


@ray.remote(num_cpus=0, max_concurrency=2)
class Submitter:
    """Another process submitting DRF-LB tasks of one tenant until stopped."""

    def __init__(self):
        # the rounds stopped: a threaded actor may run a round's stop before its run (a process
        # slow to start has both queued), and that round must then stop at once, not run on
        self.stopped: set = set()
        self.count: dict = {}  # round -> tasks submitted so far

    def run(self, tenant: str, marks: str, sleep: float, tag: str = ""):
        """Submit until round ``tag`` is stopped; marker files ``<tenant><tag>-<i>``."""
        f = ra.policy("drf_lb")(marked).options(task={"tenant": tenant, "resource_vec": VEC})
        futures, i = [], 0
        while tag not in self.stopped:
            futures.append(f.submit(marks, f"{tenant}{tag}-{i}", sleep))
            i = self.count[tag] = i + 1
            time.sleep(GAP_S)  # (pacing: the load's rate)
        return i, ray.get([fut.result(timeout=120) for fut in futures], timeout=120)

    def submitted(self, tag: str = "") -> int:
        return self.count.get(tag, 0)

    def stop(self, tag: str = ""):
        self.stopped.add(tag)


def _alive(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=NAMESPACE)
        return True
    except ValueError:
        return False


def _actors_of(generation: int, placements: int = 4) -> list:
    return [actor_name("drf_lb", role, generation) for role in ("selector", *(f"placement-{i}" for i in range(placements)))]


def _state(rt) -> dict:
    """The policy's State under the plan in force: the selector's, or the store's merged replicas'."""
    topo = rt.topology
    if topo.selector is not None:
        return ray.get(topo.selector.export.remote(), timeout=30)["state"]
    return ray.get(topo.store.state.remote(), timeout=30)


def _alloc_is(rt, expected: dict) -> bool:
    alloc = _state(rt)["alloc"]
    return all(abs(alloc.get(t, [0.0] * 3)[i] - want * VEC[i]) < 1e-9 for t, want in expected.items() for i in range(3)) \
        and all(t in expected or max(abs(x) for x in v) < 1e-9 for t, v in alloc.items())


@pytest.fixture
def drf(ray_cluster):
    yield lambda plan: ra.start("drf_lb", plan=plan, executors=1, queue=2)
    ra.shutdown()
    names = [actor_name("drf_lb", "store")] + [n for g in range(7) for n in _actors_of(g)]
    wait_for(lambda: not any(_alive(n) for n in names) and not resources.created_resources(), timeout=15,
             message=lambda: f"the runtime's actors and resources gone: {[n for n in names if _alive(n)]} {resources.created_resources()}")


class _Load:
    """Three processes submitting short DRF-LB tasks -- this one (tenant a) and two actors (b, c) --
    each task leaving a marker file; started and stopped around switches, as often as needed."""

    def __init__(self, marks: str):
        self.marks, self.rounds, self.submitted = marks, 0, 0
        self.subs = [Submitter.remote() for _ in range(2)]
        self.fn = ra.policy("drf_lb")(marked).options(task={"tenant": "a", "resource_vec": VEC})

    def start(self) -> None:
        tag, self.rounds = str(self.rounds), self.rounds + 1
        self._runs = [s.run.remote(t, self.marks, 0.02, tag) for s, t in zip(self.subs, "bc")]
        self._mine, self._held, self._stop, self._tag = [], [], threading.Event(), tag

        def load():
            while not self._stop.is_set():
                self._mine.append(self.fn.remote(self.marks, f"a{tag}-{len(self._mine)}", 0.02))
                time.sleep(GAP_S)  # (pacing: the load's rate)

        self._loader = RaisingThread(target=load)  # (a submission that fails fails the test, at stop)
        self._loader.start()

    def submit_frozen(self, phase: str, _topology) -> None:
        """A live switch's ``_on_phase``: once every process froze, one more task of this one -- it
        waits for the next plan."""
        if phase == "frozen":
            self._held.append(self.fn.submit(self.marks, f"a{self._tag}-frozen", 0.02))

    def submitted_so_far(self) -> dict:
        """Per process (its tenant): how many tasks it submitted so far this round (at least)."""
        theirs = ray.get([s.submitted.remote(self._tag) for s in self.subs], timeout=60)
        return {"a": len(self._mine), **dict(zip("bc", theirs))}

    def wait_running(self, after: dict = None, what: str = "") -> None:
        """Until each process's task SLOTS + 1 of this round -- counted from the first it submitted
        after ``after`` (a :meth:`submitted_so_far`), if given -- has run: all three load the cluster, more
        tasks each than it holds at once, under the plan in force."""
        # (with n submitted, task n may be under way already: the first surely after is n + 1)
        keys = [f"{t}{self._tag}-{SLOTS + (after[t] + 1 if after else 0)}" for t in "abc"]

        def not_run() -> list:
            return [k for k in keys if not os.path.exists(os.path.join(self.marks, k))]

        wait_for(lambda: not not_run(), timeout=60, period=0.05,
                 message=lambda: f"{what}: tasks {not_run()} to run (submitted: {self.submitted_so_far()})")

    def stop(self) -> None:
        """Stop; every result reached its caller, in order."""
        self._stop.set()
        self._loader.join()
        for s in self.subs:
            s.stop.remote(self._tag)
        results = ray.get(self._runs, timeout=120)
        assert ray.get(self._mine, timeout=120) == [f"a{self._tag}-{i}" for i in range(len(self._mine))]
        held = ray.get([f.result(timeout=120) for f in self._held], timeout=120)
        assert held == [f"a{self._tag}-frozen"] * len(self._held)
        for (n, got), t in zip(results, "bc"):
            assert got == [f"{t}{self._tag}-{i}" for i in range(n)]
        self.submitted += len(self._mine) + len(self._held) + sum(n for n, _ in results)


def _longs(load: _Load, n: int = 2) -> list:
    """``n`` tasks of tenant a that run until released (no CPU: a node running two of them must not
    hold the short tasks the policy sends it, as the cluster model would have them run beside)."""
    return [load.fn.options(num_cpus=0).remote(load.marks, f"long-{i}", -1) for i in range(n)]


def _check_switch(rt, entry, to: str, generation: int) -> None:
    assert entry["exact"] and not entry["unacked"], entry
    assert rt.plan.architecture == to and rt.topology.generation == generation
    # a task of this process waited through the switch (_Load.submit_frozen), so the pause its
    # callers saw is measured, from the replaced plan's last decision -- one decided before the freeze
    # may launch after it -- to the next plan's first (maybe after the switch returned); its parts
    # follow one another: none negative, together the pause (handing over is a part of the frozen one)
    parts = wait_for(lambda: rt.pause_parts().get(generation), timeout=30,
                     message=lambda: f"the pause of the switch to generation {generation} (pauses: {rt.pause_parts()})")
    assert min(parts.values()) >= 0 and parts["handing"] <= parts["frozen"], parts
    assert parts["idle"] + parts["frozen"] + parts["after"] == pytest.approx(rt.pauses()[generation]), \
        (parts, rt.pauses())
    # the coordinator's freeze is reported step by step (they add up to freeze_s by construction: not asserted)
    assert set(entry["freeze_steps_s"]) == {"acks", "collect", "publish"} and "install_s" in entry, entry


def _switch_under_load(rt, to: str, on_phase=None, long_tasks: int = 2):
    """Three processes submit; two long tasks of tenant a run through the switch. Returns what to check."""
    load = _Load(tempfile.mkdtemp(prefix="ra-marks-", dir="/tmp"))
    load.start()
    load.wait_running(what="the load before the switch")
    longs = _longs(load, long_tasks)
    slots_before = resources.created_resources()
    entry = rt.switch(to, _on_phase=on_phase)
    load.wait_running(load.submitted_so_far(), what=f"the load under {to}")
    load.stop()
    submitted = load.submitted + long_tasks + 1  # (+ the release file)
    return load.marks, longs, submitted, slots_before, entry


# The six directions as two cycles from the centralized plan, each through all three architectures: CI runs
# the first (every plan switched from and to, every generation's actors built and retired), `pytest -m slow`
# both -- a chain through all six is a minute of CI's 20 on this machine.
CYCLES = [pytest.param(["decentralized", "hybrid", "centralized"], id="c-d-h-c"),
          pytest.param(["hybrid", "decentralized", "centralized"], id="c-h-d-c", marks=pytest.mark.slow)]


def test_the_two_cycles_take_every_direction_once():
    steps = {(a, b) for c in CYCLES for a, b in zip(["centralized", *c.values[0]], c.values[0])}
    assert steps == set(DIRECTIONS)


@pytest.mark.parametrize("chain", CYCLES)
def test_live_switches_in_every_direction_lose_and_repeat_nothing(drf, chain):
    """One cycle through three directions between the three architectures, under load from three
    processes, two long tasks running through all of it. After each switch: the State is the one
    rebuilt from the tasks still running, the replaced generation's actors are gone, the slot
    resources the same; at the end every body ran once and the State is back to zero."""
    rt = drf("centralized")
    load = _Load(tempfile.mkdtemp(prefix="ra-marks-", dir="/tmp"))
    load.start()
    load.wait_running(what="the load before the first switch")
    longs = _longs(load)
    slots = resources.created_resources()
    for generation, to in enumerate(chain, start=1):
        if generation > 1:
            load.start()
            load.wait_running(what=f"the load before the switch to {to}")
        _check_switch(rt, rt.switch(to, _on_phase=load.submit_frozen), to, generation)
        load.wait_running(load.submitted_so_far(), what=f"the load under {to}")
        load.stop()
        wait_for(lambda: _alloc_is(rt, {"a": len(longs)}), timeout=30,
                 message=f"State of the running tasks after the switch to {to}")
        assert not ray.wait(longs, timeout=0)[0]
        assert resources.created_resources() == slots  # the slot resources stayed: no churn
        wait_for(lambda: not any(_alive(n) for n in _actors_of(generation - 1)), timeout=15,
                 message=f"generation {generation - 1}'s actors gone")
    if rt.topology.selector is not None:
        assert _alive(actor_name("drf_lb", "selector", len(chain)))
    _release(load.marks)
    assert ray.get(longs, timeout=60) == [f"long-{i}" for i in range(len(longs))]
    wait_for(lambda: _alloc_is(rt, {}), timeout=30, message="State back to zero: each OnDispatch one OnFinish")
    assert len(os.listdir(load.marks)) == load.submitted + len(longs) + 1  # every body ran, and (O_EXCL) none twice
    assert [e["to"].split("+")[0] for e in rt.history] == chain


def test_a_process_that_joins_during_a_switch_takes_up_the_new_plan(drf):
    rt = drf("centralized")
    late = []

    def join_now(phase, _topology):
        if phase == "frozen":  # the switch is under way: a new process comes
            s = Submitter.remote()
            late.append((s, s.run.remote("d", marks, 0.01)))

    marks = tempfile.mkdtemp(prefix="ra-marks-", dir="/tmp")
    rt.switch("decentralized", _on_phase=join_now)
    # (not a fixed second: a process start alone can take longer on a loaded machine, and one
    # stopped before it submits has nothing to show)
    wait_for(lambda: os.path.exists(os.path.join(marks, "d-0")), timeout=60, message="the late process's first task ran")
    (s, run), = late
    s.stop.remote()
    n, got = ray.get(run, timeout=60)
    assert n > 0 and got == [f"d-{i}" for i in range(n)] and len(os.listdir(marks)) == n
    wait_for(lambda: _alloc_is(rt, {}), timeout=30, message="State back to zero")


@pytest.mark.parametrize("role, phase, old, new", [
    ("selector", "frozen", "centralized", "decentralized"),  # the old plan's authority, before it yields its State
    ("placement", "built", "decentralized", "hybrid"),  # a new placement actor, before anything is routed to it
    ("store", "frozen", "decentralized", "centralized"),  # the registry, in the middle of the freeze
])
def test_a_crash_during_a_switch_ends_with_one_topology_and_no_task_lost(drf, role, phase, old, new):
    rt = drf(old)

    def crash(at, topology):
        if at != phase:
            return
        if role == "selector":
            ray.kill(rt.topology.selector, no_restart=False)
        elif role == "placement":
            ray.kill(topology.placements[0], no_restart=True)
        else:
            ray.kill(rt.topology.store, no_restart=False)

    marks, longs, submitted, slots, entry = _switch_under_load(rt, new, on_phase=crash)
    assert rt.plan.architecture == new and rt.topology.generation == 1
    _release(marks)
    ray.get(longs, timeout=60)
    wait_for(lambda: _alloc_is(rt, {}), timeout=30,
             message=lambda: f"State back to zero after the crash (alloc: {_state(rt)['alloc']}, history: {rt.history})")
    assert len(os.listdir(marks)) == submitted
    assert resources.created_resources() == slots
    wait_for(lambda: not any(_alive(n) for n in _actors_of(0)), timeout=15, message="the old plan's actors gone")


def test_the_store_hands_a_process_what_it_needs_with_the_news_of_a_switch(ray_cluster):
    """One reply each: the next config (to prepare while still deciding), then, once published,
    the config with the State and the others' loads, as each process acked its running tasks."""
    from ray_adaptive._private import gcs_kv
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.plan import LoweredPlan, Plan
    from ray_adaptive.runtime.store import StateStore

    policy = load_policy("drf_lb")
    plans = [LoweredPlan(Plan(arch, arch), policy) for arch in ("centralized", "decentralized")]
    merge = {"alloc": "add"}  # (the replicas' rule for DRF-LB's allocations)
    configs = [{"plan": p, "t0": time.time(), "generation": g, "handles": object() if g else None}
               for g, p in enumerate(plans)]
    store = StateStore(configs[0], {"alloc": {}}, None)  # (the actor's class, in this process)
    try:
        for client in ("a", "b"):
            store.join(client)
        incarnation = store.incarnation
        assert store.prepare(1, configs[1]) == ["a", "b"]
        *status, news = store.watch(0, "running", incarnation, 0.0, "a")
        assert status == [0, "preparing", incarnation, []] and news == {"next": configs[1]}
        store.prepared("a", 1)
        assert store.wait_prepared(1, ["a", "b"], 0.0) == ["b"]  # (the switch goes on without b's)
        clients, _, _, _ = store.announce(1)
        assert clients == ["a", "b"]
        assert store.watch(0, "preparing", incarnation, 0.0, "a")[1:] == ("freezing", incarnation, [], None)
        store.ack("a", 1, {"outstanding": {"n1": 2}})
        store.ack("b", 1, {"outstanding": {"n1": 1, "n2": 3}})
        assert store.wait_acks(1, clients, 0.0) == ([], incarnation, None)
        alloc = {"alloc": {"a": [0.2, 0.4, 0.2]}}
        store.publish(configs[1], alloc, merge)
        *status, news = store.watch(0, "freezing", incarnation, 0.0, "a")
        assert status == [1, "running", incarnation, []] and news["config"] is configs[1]
        seen = news["seen"]
        assert (seen.state, seen.others, seen.generation) == (alloc, {"n1": 1, "n2": 3}, 1)  # b's: a knows its own
        assert "handles" not in gcs_kv.get(store.durable_key(configs[1]))[0]  # (a restarted store: names)
    finally:
        store.forget_durable()


def test_a_replica_s_ack_carries_its_last_changes_and_each_is_merged_once(ray_cluster):
    """A decentralized process's freeze costs no round trip of its own: its ack brings the deltas no
    answer counted yet, and the store merges each number once -- its sync in flight may land before the
    ack, after it, or never. A replaced plan's replica merges nothing."""
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.plan import LoweredPlan, Plan
    from ray_adaptive.runtime.store import StateStore

    plan = LoweredPlan(Plan("decentralized", "decentralized"), load_policy("drf_lb"))
    merge = {"alloc": "add"}
    configs = [{"plan": plan, "t0": time.time(), "generation": g, "handles": None} for g in range(2)]
    store = StateStore(configs[0], {"alloc": {}}, merge)

    def delta(x: float) -> dict:
        return {"alloc": {"t": x}}

    try:
        for client in ("a", "b", "c"):
            store.join(client)
        store.sync("a", {}, {}, 0, ("A", [(1, delta(1.0))]))  # (answered before the switch)
        store.prepare(1, configs[1])
        store.announce(1)
        store.sync("a", {}, {}, 0, ("A", [(2, delta(2.0))]))  # a's sync in flight lands first...
        a_acks = {"outstanding": {"n1": 1}, "pushes": ("a", 0, ("A", [(2, delta(2.0)), (3, delta(4.0))]))}
        assert store.ack("a", 1, a_acks)
        assert store.ack("b", 1, {"pushes": ("b", 0, ("B", [(1, delta(8.0))]))})
        store.sync("b", {}, {}, 0, ("B", [(1, delta(8.0))]))  # ... b's after its ack
        assert store.ack("c", 1, {"pushes": ("c", -1, ("C", [(1, delta(16.0))]))})  # (a replaced plan's replica)
        assert store.ack("a", 1, a_acks)  # (again: a process acks at each watch that finds the switch freezing)
        assert store.state() == {"alloc": {"t": 15.0}}
        missing, _, _ = store.wait_acks(1, ["a", "b", "c"], 0.0)
        assert missing == []
        store.publish(configs[1], store.state(), merge)
        seen = store.watch(0, "freezing", store.incarnation, 0.0, "b")[4]["seen"]
        assert seen.others == {"n1": 1}  # (a's ack counted as its outstanding tasks; no pushes kept)
    finally:
        store.forget_durable()


def test_the_store_hands_the_state_over_in_the_call_that_sees_the_last_ack(ray_cluster):
    """The store collects, installs and publishes itself once every process acked (no round trip through the
    switching process); a call made again after its answer was lost learns what was published; a store
    restarted since the acks publishes the next generation to be rebuilt from the processes' tasks."""
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.plan import LoweredPlan, Plan
    from ray_adaptive.runtime.handover import Handover
    from ray_adaptive.runtime.store import StateStore

    plan = LoweredPlan(Plan("decentralized", "decentralized"), load_policy("drf_lb"))  # (no selector to call)
    merge = {"alloc": "add"}
    configs = [{"plan": plan, "t0": time.time(), "generation": g, "handles": None} for g in range(3)]
    replicas = {"alloc": {"a": [0.2, 0.4, 0.2]}}  # (the replicas' merged State: the authority here)
    store = StateStore(configs[0], replicas, merge)

    def handover(g: int) -> Handover:
        return Handover(config=configs[g], base={"alloc": {}, "since": g}, merge=merge, rebuild=False,
                        old_selector=None, old_placements=[])

    try:
        for client in ("a", "b"):
            store.join(client)
        store.prepare(1, configs[1])
        clients, incarnation, missing, done = store.announce(1, 0.0, handover(1))
        assert missing == ["a", "b"] and done is None and store.config()["generation"] == 0  # (none acked yet)
        store.ack("a", 1, {})
        assert store.wait_acks(1, clients, 0.0, handover(1))[::2] == (["b"], None)
        store.ack("b", 1, {})
        missing, _, done = store.wait_acks(1, clients, 0.0, handover(1))
        assert missing == [] and done["exact"] and done["acks_s"] >= 0 and done["install_s"] is None, done
        assert (store.config()["generation"], store.config()["rebuild"]) == (1, False)
        assert store.state() == {**replicas, "since": 1}  # the replicas' State, on the next plan's base
        again = {"exact": True, "again": True}  # (its answer lost: the switch's call made again)
        assert store.complete(1, incarnation, handover(1)) == again and store.announce(1, 0.0, handover(1))[3] == again
        store.prepare(2, configs[2])
        store.announce(2)
        done = store.complete(2, "an incarnation that died", handover(2))  # (acked to a store that restarted)
        assert not done["exact"] and store.config()["rebuild"] and store.state() == {"alloc": {}, "since": 2}
    finally:
        store.forget_durable()
