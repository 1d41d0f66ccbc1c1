"""The policy service on the session's cluster: one runtime of a policy shared by every job, owned by none.

Jobs are driver processes of ``examples/jobs/team_job.py`` (each its own Ray job, its team in its job
metadata, as ``ray job submit --metadata-json`` sets it; release_tests/shared_service.py goes through
Ray's job API itself). Each task creates a marker file exclusively: a task run twice fails.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import ray

import ray_adaptive as ra
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "jobs" / "team_job.py"
NAMESPACE = "ray_adaptive"
ZERO = [0.0, 0.0, 0.0]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_adaptive", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


class Job:
    """A team's job: a driver process of team_job.py, its output lines read as they come."""

    def __init__(self, address: str, team: str, tasks: int, markers: Path, *extra: str):
        self.team = team
        self.proc = subprocess.Popen([sys.executable, str(JOB), "--address", address, "--team", team,
                                      "--tasks", str(tasks), "--markers", str(markers), "--every", "5", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.lines: list = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    @property
    def id(self) -> str:
        return next((x["job"] for x in self.lines if "job" in x), "")

    @property
    def finished(self) -> int:
        return max([0] + [x.get("finished", x.get("done", 0)) for x in self.lines])

    def wait(self, timeout: float = 240) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(30)

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None else ""


def _markers(folder: Path, job: str) -> list:
    return [p for p in folder.iterdir() if p.name.startswith(job + "-")]


def _service(policy: str):
    return ray.get_actor(f"ra-{policy}-service", namespace=NAMESPACE)


def _selector_state(policy: str) -> dict:
    return ray.get(_service(policy).export.remote(), timeout=60)["selector"]["state"]


def _alloc(state: dict, tenant: str) -> list:
    return [float(x) for x in state["alloc"].get(tenant, ZERO)]


def _left_on_cluster(policy: str) -> tuple:
    from ray_adaptive import resources

    actors = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
              if a.get("namespace") == NAMESPACE and a["name"].startswith(f"ra-{policy}-")]
    slots = {n: [k for k in names if k.startswith(f"ra-{policy}-slot-")]
             for n, names in resources.get_cluster_state().items()}
    return actors, {n: k for n, k in slots.items() if k}


def _stacks() -> str:
    import sys
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"{names.get(i)}:\n" + "".join(traceback.format_stack(f)[-6:])
                     for i, f in sys._current_frames().items() if str(names.get(i, "")).startswith("ra-"))


def _per_tenant(tasks: list) -> Counter:
    """Of a scheduler's exported tasks, how many each tenant has."""
    return Counter(t["fields"]["tenant"] for t in tasks)


def _jain(xs) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def test_bind_specs_are_checked_against_the_policy():
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.runtime.tenancy import parse_bind

    fields = load_policy("drf_lb").task_fields
    assert parse_bind(["tenant=job"], fields, "drf_lb") == {"tenant": "job"}
    assert parse_bind([" tenant = metadata:team "], fields, "drf_lb") == {"tenant": "metadata:team"}
    for bad, says in [("tenant", "expected FIELD=job"), ("team=job", "no string Task field 'team'"),
                      ("resource_vec=job", "no string Task field"), ("tenant=metadata:", "not 'metadata:'"),
                      ("tenant=user", "not 'user'")]:
        with pytest.raises(ValueError, match=says):
            parse_bind([bad], fields, "drf_lb")
    with pytest.raises(ValueError, match="bound twice"):
        parse_bind(["tenant=job", "tenant=metadata:team"], fields, "drf_lb")


def test_a_bound_field_takes_the_jobs_value_and_refuses_another():
    from ray_adaptive.runtime.tenancy import TenantBindingError, apply_bound

    bound = {"tenant": {"value": "a"}}
    assert apply_bound(bound, {"resource_vec": [1.0]}, "p") == {"resource_vec": [1.0], "tenant": "a"}
    assert apply_bound(bound, {"tenant": "a"}, "p") == {"tenant": "a"}
    with pytest.raises(TenantBindingError, match="tenant='b' is refused.*this job's tenant is 'a'"):
        apply_bound(bound, {"tenant": "b"}, "p")
    with pytest.raises(PermissionError, match="submitted without it"):
        apply_bound({"tenant": {"error": "job 02 was submitted without it"}}, {}, "p")


def test_the_processes_of_dead_jobs_are_found_but_never_the_owners():
    from ray_adaptive._private.jobs import JobRecord
    from ray_adaptive.runtime.job_watch import dead_clients

    table = {j: JobRecord(j, dead, {}, 0) for j, dead in (("01", True), ("02", False), ("03", True))}
    clients = {"owner": "01", "p1": "02", "p2": "03", "p3": "03", "p4": "09"}  # (09: not in the table yet)
    assert dead_clients(clients, table, keep="owner") == {"03": ["p2", "p3"]}


@pytest.fixture
def markers(tmp_path):
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def test_a_served_policy_is_shared_fairly_by_jobs_and_outlives_a_killed_one(ray_cluster, markers):
    address = ray_cluster.cluster.address
    served = _cli("serve", "drf_lb", "--address", address, "--bind", "tenant=metadata:team")
    assert served.returncode == 0, served.stderr
    assert "policy drf_lb: served, plan centralized" in served.stdout and "why:" in served.stdout
    again = _cli("serve", "drf_lb", "--address", address)
    assert again.returncode == 1 and "already runs on this cluster" in again.stderr, again.stderr
    with pytest.raises(ValueError, match="owned by the policy service.*given here: plan"):
        ra.start("drf_lb", plan="hybrid")  # (one runtime per policy: a second State would split the tenants)
    attached = ra.start("drf_lb")  # no option: this process attaches
    assert attached.binding is None and attached.why.startswith("compiler's choice")
    ra.shutdown("drf_lb")  # detaches; the service runs on
    assert _service("drf_lb") is not None and ray.get(_service("drf_lb").ready.remote())["plan"] == attached.plan.name
    a = Job(address, "a", 100_000, markers, "--claim", "b")  # (runs until killed)
    b = Job(address, "b", 400, markers)
    try:
        wait_for(lambda: a.finished >= 20 and b.finished >= 20, timeout=90, message="both jobs under way")
        # both keep a backlog: DRF-LB gives the two teams alike (each task holds the same vector). What
        # it shares is the slots: the tasks each team holds, sampled at the selector while both wait.
        # The tasks each starts also count how fast its own process reports finishes, which frees its
        # slots: once 42 against 25 started in 3 s (two loaded cores); sampled in later runs, the slots
        # were 8 and 8 at every sample while the starts were 116:114 and 49:59.
        t0, held = time.time(), []
        while time.time() < t0 + 3.0:
            selector = ray.get(_service("drf_lb").export.remote(), timeout=60)["selector"]
            pending, running = (_per_tenant(selector[k]) for k in ("pending", "running"))
            if pending.get("a") and pending.get("b"):
                held.append([running.get("a", 0), running.get("b", 0)])
            time.sleep(0.2)
        t1 = time.time()
        started = [sum(1 for p in _markers(markers, j.id) if t0 <= p.stat().st_mtime <= t1) for j in (a, b)]
        assert min(started) > 0, started
        assert len(held) >= 5, f"both teams waited at the selector in {len(held)} samples of 3 s"
        assert _jain([sum(h[i] for h in held) for i in (0, 1)]) >= 0.99, held
        claim = next(x for x in a.lines if "claim" in x)
        assert claim["refused"] == "TenantBindingError" and "'a'" in claim["why"], claim
        status = json.loads(_cli("status", "drf_lb", "--address", address, "--json").stdout)
        teams = {j["job"]: j["tenants"] for j in status["jobs"]}
        assert teams.get(a.id) == ["a"] and teams.get(b.id) == ["b"], status["jobs"]
        assert status["service"] and status["bind"] == {"tenant": "metadata:team"}
        # asked of job a's process (a runs until killed below; b may have finished its 400 by now)
        a_client = next(j["clients"][0] for j in status["jobs"] if j["job"] == a.id)
        why = _cli("why", "drf_lb", f"{a_client}-000000000", "--address", address, "--json")
        assert why.returncode == 0 and json.loads(why.stdout)["state"] != "unknown", why.stdout + why.stderr

        a.kill(signal.SIGKILL)  # no ra.shutdown, no atexit: its tasks die with it, Ray says the job is dead
        killed = time.monotonic()
        history = wait_for(lambda: [h for h in ray.get(_service("drf_lb").history.remote()) if a.id in h["reason"]],
                           timeout=15, message="job a evicted")
        assert history[0]["from"] == history[0]["to"]  # the plan in force, its State rebuilt
        assert _alloc(_selector_state("drf_lb"), "a") == ZERO  # what a's tasks held left with it
        assert time.monotonic() - killed < 15
        assert b.wait() == 0, b.stderr()
        assert b.lines[-1] == {"job": b.id, "done": 400}
        assert len(_markers(markers, b.id)) == 400  # each ran once (a second run fails on its marker)
        # nothing of b's runs now: the State holds nothing at all
        wait_for(lambda: all(_alloc(_selector_state("drf_lb"), t) == ZERO for t in "abc"), timeout=15,
                 message="every allocation released")

        c = Job(address, "c", 40, markers)  # a job attaching later is served as well
        assert c.wait() == 0, c.stderr()
        assert len(_markers(markers, c.id)) == 40
        e = Job(address, "e", 100_000, markers)  # attached when the operator stops the service
        wait_for(lambda: e.finished >= 5, timeout=60, message="job e under way")
    finally:
        for j in (a, b):
            j.kill(signal.SIGKILL)
        stopped = _cli("stop", "drf_lb", "--address", address)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert e.wait(timeout=60) == 1  # its undecided tasks fail, saying why (or its next submission does)
    err = e.stderr()
    assert "was stopped on the cluster (ray-adaptive stop)" in err or "'drf_lb' is not running" in err, err
    assert _left_on_cluster("drf_lb") == ([], {})
    assert _cli("stop", "drf_lb", "--address", address).returncode == 1  # nothing runs any more


def test_a_dead_job_leaves_a_decentralized_service_too(ray_cluster, markers):
    """Under a decentralized plan each process decides on a replica of State merged by the store: a job killed
    leaves its replicas' pushes behind, and the rebuild takes them out of the merged State."""
    address = ray_cluster.cluster.address
    served = _cli("serve", "drf_lb", "--address", address, "--plan", "decentralized", "--bind", "tenant=job")
    assert served.returncode == 0 and "plan decentralized" in served.stdout, served.stderr
    store = ray.get_actor("ra-drf_lb-store", namespace=NAMESPACE)
    a, b = Job(address, "a", 100_000, markers), Job(address, "b", 200, markers)
    try:
        wait_for(lambda: a.finished >= 20 and b.finished >= 5, timeout=90, message="both jobs under way")
        assert _alloc(ray.get(store.state.remote()), a.id) != ZERO  # (a's tasks hold their share now)
        a.kill(signal.SIGKILL)
        wait_for(lambda: [h for h in ray.get(_service("drf_lb").history.remote()) if a.id in h["reason"]],
                 timeout=15, message="job a evicted")
        wait_for(lambda: _alloc(ray.get(store.state.remote()), a.id) == ZERO, timeout=5,
                 message=lambda: f"a's share out of the merged State: {ray.get(store.state.remote())}")
        assert b.wait() == 0, b.stderr()
        assert len(_markers(markers, b.id)) == 200
        wait_for(lambda: _alloc(ray.get(store.state.remote()), b.id) == ZERO, timeout=15, message="b's share released")
    finally:
        for j in (a, b):
            j.kill(signal.SIGKILL)
        ra.stop("drf_lb")
    assert _left_on_cluster("drf_lb") == ([], {})


def _table(policy: str, nodes: int, executors: int, queue: int):
    """Estimates that call for the hybrid above ~32 tasks/s (the log-midpoint of the grid), centralized below."""
    from ray_adaptive.compiler import select_plan
    from ray_adaptive.control import EstimateTable, PlanEstimate
    from ray_adaptive.dsl import load_policy

    p = load_policy(policy)
    plans = tuple(select_plan(p, name, nodes=nodes, executors=executors, queue=queue)[0]
                  for name in ("centralized", "hybrid"))
    c, h = (pl.name for pl in plans)
    low = {c: PlanEstimate(300.0, 1.0, 1.0, 2e-3), h: PlanEstimate(300.0, 1.0, 1.0, 3e-3)}
    high = {c: PlanEstimate(10.0, 1.0, 1.0, 2e-3), h: PlanEstimate(300.0, 1.0, 1.0, 3e-3)}
    return EstimateTable(policy, p.score.limit, nodes, 4.0 * nodes * executors, (1.0, 1000.0), (1.0,), plans,
                         {(0, 0): low, (1, 0): high}, {(0, 0): c, (1, 0): h}), c, h


def test_an_adaptive_service_switches_live_under_two_jobs_and_each_task_runs_once(ray_cluster, markers):
    table, central, hybrid = _table("drf_lb", 4, 2, 2)
    rt = ra.start("drf_lb", plan="adaptive", detached=True, bind={"tenant": "job"}, table=table, initial="centralized",
                  every_s=0.5, window_s=1.0, consecutive=1, dwell_s=0.0, margin=0.0)
    address = ray_cluster.cluster.address
    a, b = Job(address, "a", 300, markers), Job(address, "b", 100_000, markers)  # (b runs until stopped)
    try:
        assert rt.binding is None and rt.plan.name == central  # this process attached; the service owns it
        wait_for(lambda: a.finished >= 10 and b.finished >= 10, timeout=90, message="both jobs under way")
        controlled = wait_for(lambda: [h for h in ray.get(_service("drf_lb").history.remote())
                                       if h["reason"] != "forced" and h["to"] == hybrid], timeout=60,
                              message="the controller's switch to the hybrid")
        assert controlled[0]["measured"]["rate"] > 31.6  # the load of both jobs, measured by the service
        entry = rt.switch("centralized")  # forced, from an attached process: the service makes it
        assert entry["to"] == central and entry["reason"] == "forced"
        wait_for(lambda: rt.topology.generation >= entry["generation"], timeout=30,
                 message="this process follows the switch")
        assert b.proc.poll() is None
        b.kill(signal.SIGTERM)  # what `ray job stop` sends first
        wait_for(lambda: [h for h in ray.get(_service("drf_lb").history.remote()) if b.id in h["reason"]],
                 timeout=15, message="job b evicted")
        assert a.wait() == 0, a.stderr()
        assert a.lines[-1] == {"job": a.id, "done": 300}
        assert len(_markers(markers, a.id)) == 300  # each ran once, across three switches and an eviction
    finally:
        for j in (a, b):
            j.kill(signal.SIGKILL)
        ra.stop("drf_lb")
    assert ra.runtime_of.__name__  # (the module stays importable after a stop)
    assert _left_on_cluster("drf_lb") == ([], {})


SHUTDOWN_DRIVER = r"""
import sys, threading, time
import ray
import ray_adaptive as ra

@ra.policy("least_loaded")
@ray.remote(num_cpus=1)
def noop(i):
    return i

def ours():
    return [t.name for t in threading.enumerate() if t.name.startswith("ra-") and t.is_alive()]

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
rt = ra.start("least_loaded", plan="adaptive", initial="centralized")  # (the controller's default period: 2 s)
assert ray.get([noop.remote(i) for i in range(20)]) == list(range(20)) and ours()
time.sleep(1.0)  # (idle)
ray.shutdown()
t = time.monotonic()
while ours() and time.monotonic() - t < 1.0:
    time.sleep(0.02)
print("threads left after 1 s:", ours(), flush=True)
time.sleep(0.5)
print("initialized:", ray.is_initialized(), flush=True)
try:
    noop.remote(1)
except RuntimeError as err:
    print("remote refused:", type(err).__name__, flush=True)
print("initialized:", ray.is_initialized(), flush=True)
t = time.monotonic()
ra.shutdown()
print("ra.shutdown s:", round(time.monotonic() - t, 2), "initialized:", ray.is_initialized(), flush=True)
for call in (lambda: rt.switch("centralized"), rt.export, lambda: rt.why_pending("x-1"), rt.cluster_loads):
    try:
        call()
    except RuntimeError as err:
        print("refused:", "Ray was shut down under it" in str(err), flush=True)
"""


def test_ray_shut_down_under_a_runtime_stops_its_threads_and_never_starts_ray_again(ray_cluster):
    """``ray.shutdown()`` without ``ra.shutdown()``, in a driver of its own: every library thread stops within a
    second, quietly, and nothing starts Ray again; a later ``ra.shutdown()`` returns at once; the runtime's
    calls raise. (Its own process: a thread of the library inside a Ray call as ``ray.shutdown()`` completes
    can make Ray's core worker end the process -- see docs/operations.md; that would fail this test, not
    the whole run.)"""
    address = ray_cluster.cluster.address
    run = subprocess.run([sys.executable, "-c", SHUTDOWN_DRIVER, address], capture_output=True, text=True,
                         timeout=180, cwd=ROOT)
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert lines[0] == "threads left after 1 s: []", run.stdout + run.stderr[-3000:]
    assert lines[1:4] == ["initialized: False", "remote refused: RuntimeError", "initialized: False"], run.stdout
    seconds, initialized = lines[4].split()[2], lines[4].split()[-1]
    assert float(seconds) < 2.0 and initialized == "False", lines[4]
    assert lines[5:] == ["refused: True"] * 4, run.stdout
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    ra.stop("least_loaded")  # (the slots its driver could not remove without Ray)
    assert _left_on_cluster("least_loaded") == ([], {})
