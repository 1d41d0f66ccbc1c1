"""The metrics an operator scrapes: a policy runtime on a cluster with metrics export on, its
node's Prometheus endpoint read over HTTP, and every metric the Grafana dashboard plots found there.

The session's shared cluster runs with metrics collection off, and a driver is connected to one
cluster at a time, so the runtime runs in a process of its own, on a two-node cluster of its own
(``local_cluster(metrics=True)``: collection on, reported every second, a Prometheus port per
node). It prints what it scraped as JSON; the checks are here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "examples" / "grafana" / "ray_adaptive.json"

_RUN = textwrap.dedent('''
    import json, time, urllib.request

    import ray
    import ray_adaptive as ra
    from ray_adaptive.compiler import Profile
    from ray_adaptive.local_multinode import local_cluster
    from tests.conftest import wait_for

    def scrape(url):
        samples = {}
        for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
            if line and not line.startswith("#"):
                head, value = line.rsplit(" ", 1)
                name, _, labels = head.partition("{")
                samples.setdefault(name, []).append((dict(kv.split("=", 1) for kv in
                                                         labels.rstrip("}").replace('"', "").split(",") if kv),
                                                    float(value)))
        return samples

    @ray.remote(num_cpus=0)
    class Replica:
        def ping(self):
            return 1

    @ray.remote(num_cpus=1)
    def gated(gate):  # (a low task runs until the gate opens: it is still running when its grace ends)
        import os
        while not os.path.exists(gate):
            time.sleep(0.05)
        return gate

    @ray.remote(num_cpus=1)
    def work(i):
        time.sleep(4 if i < 0 else 0.01)  # (the task's work: a long one holds its slot past a deadline)
        return i

    with local_cluster(num_nodes=2, num_cpus=2, metrics=True) as lc:
        # adaptive, so that the compiler's estimate is exported; it never switches by itself here
        # (dwell_s), the one switch is forced, so that switches_total has something to count
        rt = ra.start("drf_lb", plan="adaptive", initial="centralized", rate=20, metrics_every_s=0.5,
                      profile=Profile(message_s=6e-3), fractions=(0.05, 0.2), every_s=0.5, window_s=1.0,
                      dwell_s=3600)
        wait_for(lambda: rt.control_loop.controller is not None, timeout=120, period=0.1,
                 message="the estimate table")
        fn = ra.policy("drf_lb")(work)
        refs = [fn.options(task={"tenant": "ab"[i % 2], "resource_vec": [0.1, 0.2, 0.1]}).remote(i)
                for i in range(40)]
        ray.get(refs)
        rt.switch("decentralized")
        ray.get([fn.options(task={"tenant": "a", "resource_vec": [0.1, 0.2, 0.1]}).remote(i) for i in range(10)])
        # a task dropped at its deadline: every slot is held by a long task, so it cannot be placed
        slots = sum(n.executors + n.queue for n in rt.topology.nodes)
        slow = [fn.options(task={"tenant": "b", "resource_vec": [0.1, 0.2, 0.1]}, num_cpus=0).remote(-1)
                for _ in range(slots)]
        try:  # (.remote() waits for the decision: a dropped task raises there)
            fn.options(task={"tenant": "c", "resource_vec": [0.1, 0.2, 0.1]}, deadline_s=0.5).remote(0)
            dropped = False
        except ra.PlacementDeadlineExceeded:
            dropped = True
        ray.get(slow)
        # actors placed by the policy (issue 38): 3 created, 1 killed -- 2 alive, 1 ended "dead"
        replicas = ra.policy("drf_lb")(Replica).options(task={"tenant": "d", "resource_vec": [0.1, 0.2, 0.1]})
        actors = [replicas.remote() for _ in range(3)]
        ray.get([a.ping.remote() for a in actors])
        ray.kill(actors[0])
        # a preemption (issue 39): every executor runs a preemptible low task, a high task displaces one
        import os, tempfile
        gate = os.path.join(tempfile.mkdtemp(), "gate")
        pre = ra.start("priority_preemptive", plan="centralized", queue=0, hold="caller", metrics_every_s=0.5)
        urgent = ra.policy("priority_preemptive")(gated)
        lows = [urgent.options(task={"priority": 0}, preemptible=True).remote(gate)
                for _ in range(sum(n.executors for n in pre.topology.nodes if n.runs_tasks))]
        open(gate + ".high", "w").close()  # (the high task's gate is open: it ends at once)
        ray.get(urgent.options(task={"priority": 5}).remote(gate + ".high"), timeout=120)
        open(gate, "w").close()
        ray.get(lows, timeout=120)
        def exported(samples):  # the last export has reached the endpoint
            done = [v for labels, v in samples.get("ray_ray_adaptive_finishes_total", []) if labels.get("group") == "b"]
            alive = [v for _, v in samples.get("ray_ray_adaptive_actors_alive", [])]
            return samples.get("ray_ray_adaptive_drops_total") and sum(done) >= 20 + len(slow) \\
                and samples.get("ray_ray_adaptive_switches_total") \\
                and samples.get("ray_ray_adaptive_actor_ends_total") and alive and sum(alive) == 2 \\
                and samples.get("ray_ray_adaptive_preempted_wasted_seconds_total")

        samples = wait_for(lambda: scrape(lc.metrics_url()), timeout=60, period=0.5, until=exported,
                           message="the last export at the endpoint")
        print("RESULT " + json.dumps({"dropped": dropped, "slots": slots, "samples": samples}))
        ra.shutdown()
''')


@pytest.fixture(scope="module")
def scraped() -> dict:
    out = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, timeout=600, cwd=ROOT,
                         check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, f"the run failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _dashboard_metrics() -> set:
    """The metric names the dashboard's queries read (a histogram's as its ``_bucket`` series)."""
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return {m for e in exprs for m in re.findall(r"\b(ray_[a-z_]+)\b", e)}


def _total(samples: dict, name: str, **labels) -> float:
    return sum(v for tags, v in samples.get(name, []) if all(tags.get(k) == x for k, x in labels.items()))


def test_every_metric_the_dashboard_plots_is_scraped(scraped):
    wanted = _dashboard_metrics()
    assert {"ray_ray_adaptive_decisions_total", "ray_ray_adaptive_decision_latency_s_bucket",
            "ray_tasks"} <= wanted  # (the dashboard reads ours and Ray's own)
    missing = sorted(wanted - set(scraped["samples"]))
    assert not missing, f"the dashboard plots metrics the endpoint does not have: {missing}"


def test_the_counters_count_what_the_runtime_did(scraped):
    s = scraped["samples"]
    assert scraped["dropped"]
    assert _total(s, "ray_ray_adaptive_decisions_total", policy="drf_lb", group="a") == 30
    assert _total(s, "ray_ray_adaptive_finishes_total", policy="drf_lb", group="a") == 30
    assert _total(s, "ray_ray_adaptive_finishes_total", policy="drf_lb", group="b") == 20 + scraped["slots"]
    assert _total(s, "ray_ray_adaptive_drops_total", policy="drf_lb", group="c") == 1
    assert _total(s, "ray_ray_adaptive_switches_total", policy="drf_lb") == 1
    assert _total(s, "ray_ray_adaptive_decision_latency_s_count", policy="drf_lb") > 0
    in_force = {tags["plan"]: v for tags, v in s["ray_ray_adaptive_plan_in_force"] if tags.get("policy") == "drf_lb"}
    assert [p for p, v in in_force.items() if v == 1] == [p for p in in_force if p.startswith("decentralized")]
    # the last tasks finished a second or two ago: the 10 s window still counts them; the estimate
    # (at the measured load, idle by now) is there, whatever its value
    assert _total(s, "ray_ray_adaptive_goodput_measured", policy="drf_lb") > 0
    assert [tags for tags, _ in s["ray_ray_adaptive_goodput_estimated"] if tags.get("policy") == "drf_lb"]


def test_the_preemption_counters_count_the_runs_stopped(scraped):
    """Every executor ran a preemptible low task; one high task displaced one of them after its grace."""
    s = scraped["samples"]
    assert _total(s, "ray_ray_adaptive_preemptions_total", policy="priority_preemptive") == 1
    assert _total(s, "ray_ray_adaptive_preempted_wasted_seconds_total", policy="priority_preemptive") > 0
    assert _total(s, "ray_ray_adaptive_preemptions_total", policy="drf_lb") == 0


def test_the_actor_metrics_count_the_policys_actors(scraped):
    """3 actors placed by the policy, 1 of them killed: arrivals, placements and ends by kind counted, 2 alive;
    to the task counters each actor is a decision at its placement and a finish at its end."""
    s = scraped["samples"]
    assert _total(s, "ray_ray_adaptive_actor_arrivals_total", policy="drf_lb") == 3
    assert _total(s, "ray_ray_adaptive_actor_placements_total", policy="drf_lb") == 3
    assert _total(s, "ray_ray_adaptive_actor_ends_total", policy="drf_lb", kind="dead") == 1
    assert _total(s, "ray_ray_adaptive_actor_ends_total", policy="drf_lb") == 1
    assert _total(s, "ray_ray_adaptive_actors_alive", policy="drf_lb") == 2
    assert _total(s, "ray_ray_adaptive_decisions_total", policy="drf_lb", group="d") == 3
    assert _total(s, "ray_ray_adaptive_finishes_total", policy="drf_lb", group="d") == 1
