"""Overlapping faults under load: nothing lost, nothing run twice, the State exact, nothing leaked.

    python release_tests/chaos.py [--minutes N] [--faults K] [--seed S] [--smoke-test] [--out chaos.json]

On a local ``ray.cluster_utils.Cluster`` (3 fixed nodes x 2 CPUs, plus up to 2
nodes that leave and come back), ``drf_lb`` runs with this driver as its
owner. Submitting processes -- actors of this job (worker processes) and a
driver subprocess (a job of its own) -- keep a mixed DRF-LB load in waves;
every task body creates a marker file exclusively (``O_EXCL``), named by its
task and the node it ran on, so that a second run is seen. Each round, a
seeded schedule injects 1-3 faults at random offsets into the wave, so they
overlap each other and the load. The run ends after ``--minutes``, or, with
``--faults K``, at the end of the round that brought the faults injected to K
(the minutes then bound it); the smoke run stops at 3 faults, within 3 min,
so a slower machine makes it longer, not weaker:

* ``kill_selector``, ``kill_placement``, ``kill_store``: the actor's process
  dies (``ray.kill(..., no_restart=False)``: Ray restarts it);
* ``remove_node`` (a node with tasks and placement actors on it), ``add_node``;
* ``kill_submitter``: a submitting process dies with tasks in flight -- an
  actor (its job lives on: the owner's job watch evicts the process) or the
  driver subprocess (its job ends);
* ``switch``: a live switch to another plan (centralized, decentralized, hybrid).

After each wave, with the load stopped: every task of a surviving submitter
resolved once, and the State audit (:mod:`ray_adaptive.runtime.audit`) exact
-- the State in force equal to the initial State, nothing being in flight.
At the end, ``ra.shutdown()`` leaves no actor of the policy and no slot
resource. A task that ran twice because its node left under it and Ray
retried it (one of the two markers on the removed node) is Ray's
at-least-once, counted apart; so are the tasks of the submitters killed
(what happened to each: ran once, never ran). Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
VEC = {"t0": [0.4, 0.8, 0.4], "t1": [0.2, 0.2, 0.6], "t2": [1.0, 0.5, 0.0]}
PLANS = ("centralized", "decentralized", "hybrid")
KINDS = ("kill_selector", "kill_placement", "kill_store", "remove_node", "add_node", "kill_submitter", "switch")

SUBPROCESS = r'''
import os, sys, time, ray, ray_adaptive as ra
folder, prefix, n, address, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
ray.init(address=address, logging_level="ERROR", log_to_driver=False)

@ray.remote(num_cpus=1, max_retries=3)
def marked(folder, key, duration):
    node = ray.get_runtime_context().get_node_id()
    os.close(os.open(os.path.join(folder, f"{key}@{node}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    time.sleep(duration)
    return key

fn = ra.policy("drf_lb")(marked).options(task={"tenant": "t2", "resource_vec": [1.0, 0.5, 0.0]})
i = 0
while True:
    while os.path.exists(pause):  # the chaos driver audits: this wave ended, the next waits
        open(pause + "." + prefix, "w").close()
        time.sleep(0.05)
    refs = [fn.remote(folder, f"{prefix}-{i + k}", 0.05) for k in range(n)]
    i += n
    ray.get(refs)
    print("wave", i, flush=True)
'''


def _marked(folder: str, key: str, duration: float) -> str:
    """The task body: a marker created exclusively (a second run on the same node fails on it; one on
    another node leaves a second marker), then a little work."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    os.close(os.open(os.path.join(folder, f"{key}@{node}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    time.sleep(duration)
    return key


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to inject faults (default 30)")
    ap.add_argument("--faults", type=int, default=None,
                    help="stop after the round that brings the faults to this many (--minutes bounds it)")
    ap.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    ap.add_argument("--smoke-test", action="store_true",
                    help="fewer tasks; stop at 3 faults, within 3 min (about a minute)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    if args.minutes <= 0:
        ap.error(f"--minutes must be > 0, found {args.minutes}")
    if args.faults is not None and args.faults < 1:
        ap.error(f"--faults must be >= 1, found {args.faults}")
    minutes, faults = args.minutes, args.faults
    if args.smoke_test:
        minutes, faults = min(minutes, 3.0), faults or 3
    figures = run(minutes, faults, args.seed, args.smoke_test)
    print(table(figures))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2, default=str))
    return 0 if figures["ok"] else 1


def run(minutes: float, faults: Optional[int], seed: int, smoke: bool) -> dict:
    import ray

    import ray_adaptive as ra
    from ray_adaptive import resources
    from ray_adaptive.local_multinode import start_local_cluster
    from ray_adaptive.runtime.topology import NAMESPACE, actor_name

    rng = random.Random(seed)
    folder = tempfile.mkdtemp(prefix="ra-chaos-")
    lc = start_local_cluster(3, 2, node_resources=[{"fixed": 10}] * 3)
    cluster = lc.cluster
    extra = {}  # node id -> the cluster's node handle (the nodes that leave and come back)
    removed: set = set()
    for _ in range(2):
        n = cluster.add_node(num_cpus=2)
        extra[n.node_id] = n
    cluster.wait_for_nodes()
    marked = ray.remote(num_cpus=1, max_retries=3)(_marked)

    @ray.remote(num_cpus=0, resources={"fixed": 0.01}, max_restarts=0)
    class Submitter:
        """A submitting worker process: waves of tasks of its tenant, their outcomes kept."""

        def __init__(self, name: str, tenant: str):
            self.name, self.tenant = name, tenant
            self.i = 0

        def wave(self, n: int) -> Dict[str, str]:
            fn = ra.policy("drf_lb")(marked).options(task={"tenant": self.tenant, "resource_vec": VEC[self.tenant]})
            keys = [f"{self.name}-{self.i + k}" for k in range(n)]
            self.i += n
            refs = [fn.remote(folder, key, random.uniform(0.02, 0.15)) for key in keys]
            out: Dict[str, str] = {}
            for key, ref in zip(keys, refs):
                try:
                    out[key] = "ok" if ray.get(ref, timeout=300) == key else "wrong result"
                except Exception as err:  # (a loss: counted)
                    out[key] = f"{type(err).__name__}: {str(err)[:200]}"
            return out

    figures: dict = {"seed": seed, "minutes": minutes, "faults_wanted": faults, "smoke_test": smoke,
                     "cluster": "3 fixed nodes x 2 CPUs + 2 that leave and come back (local)",
                     "faults": Counter(), "fault_errors": [], "rounds": 0, "audits": 0, "audits_exact": 0,
                     "audit_failures": [], "submitted": 0, "finished": 0, "lost": [], "run_twice": [],
                     "rerun_after_node_loss": 0, "killed_submitters": {}, "resume_s": []}
    fault_times: List[float] = []
    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=2)
    plan_now = "centralized"
    subs: Dict[str, object] = {}
    counter = [0]

    def new_submitter() -> None:
        counter[0] += 1
        name = f"s{counter[0]}"
        subs[name] = Submitter.remote(name, f"t{counter[0] % 2}")

    for _ in range(3):
        new_submitter()
    driver: Dict[str, Optional[subprocess.Popen]] = {"proc": None, "name": None}
    pause = os.path.join(tempfile.mkdtemp(prefix="ra-chaos-pause-"), "pause")

    def start_driver() -> None:
        counter[0] += 1
        name = f"d{counter[0]}"
        driver["proc"] = subprocess.Popen([sys.executable, "-c", SUBPROCESS, folder, name, "6" if smoke else "10",
                                           cluster.address, pause], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        driver["name"] = name

    def pause_driver() -> None:
        """The driver subprocess ends its wave and waits (its process must answer the audit: no SIGSTOP)."""
        proc, ack = driver["proc"], f"{pause}.{driver['name']}"
        if os.path.exists(ack):
            os.unlink(ack)
        open(pause, "w").close()
        deadline = time.monotonic() + 120
        while proc is not None and proc.poll() is None and not os.path.exists(ack) and time.monotonic() < deadline:
            time.sleep(0.05)

    start_driver()
    wave_n = 8 if smoke else 14

    def fault(kind: str) -> None:
        nonlocal plan_now
        fault_times.append(time.time())
        try:
            if kind == "kill_selector":
                cfg = ray.get(rt.topology.store.config.remote(), timeout=30)
                if not cfg.get("selector"):
                    kind = "kill_store"  # (a decentralized plan has none: its store instead)
                else:
                    ray.kill(ray.get_actor(cfg["selector"], namespace=NAMESPACE), no_restart=False)
            if kind == "kill_placement":
                cfg = ray.get(rt.topology.store.config.remote(), timeout=30)
                names = list(cfg.get("placements") or [])
                live = []
                for name in names:
                    try:
                        live.append(ray.get_actor(name, namespace=NAMESPACE))
                    except ValueError:
                        pass
                if live:
                    ray.kill(rng.choice(live), no_restart=False)
                else:
                    kind = "kill_store"  # (no placement actor in this plan: the store instead)
            if kind == "kill_store":
                ray.kill(ray.get_actor(actor_name("drf_lb", "store"), namespace=NAMESPACE), no_restart=False)
            elif kind == "remove_node":
                present = sorted(n for n in extra if n not in removed)
                if present:
                    node = rng.choice(present)
                    removed.add(node)
                    cluster.remove_node(extra.pop(node))
                else:
                    kind = "add_node"
            if kind == "add_node":
                if len(extra) < 2:
                    n = cluster.add_node(num_cpus=2)
                    extra[n.node_id] = n
                else:
                    kind = "add_node (full)"
            elif kind == "kill_submitter":
                if driver["proc"] is not None and rng.random() < 0.3:
                    driver["proc"].kill()
                    driver["proc"].wait()
                    figures["killed_submitters"][driver["name"]] = "driver subprocess (its job ends)"
                    driver["proc"] = None
                elif subs:
                    name = rng.choice(sorted(subs))
                    ray.kill(subs.pop(name))
                    figures["killed_submitters"][name] = "actor (its job lives on)"
            elif kind == "switch":
                to = rng.choice([p for p in PLANS if p != plan_now])
                entry = rt.switch(to, reason="chaos")
                if "rolled_back" in entry:
                    kind = "switch (rolled back)"
                else:
                    plan_now = to
        except Exception as err:  # noqa: BLE001 -- a fault the runtime raised on: counted, and shown
            figures["fault_errors"].append(f"{kind}: {type(err).__name__}: {str(err)[:300]}")
        figures["faults"][kind] += 1

    start = time.monotonic()
    try:
        while (time.monotonic() - start < minutes * 60
               and (faults is None or _injected(figures["faults"]) < faults)):
            figures["rounds"] += 1
            waves = {name: s.wave.remote(wave_n) for name, s in subs.items()}
            kinds = [rng.choice(KINDS) for _ in range(rng.randint(1, 3))]
            offsets = sorted(rng.uniform(0.0, 1.5) for _ in kinds)
            t0 = time.monotonic()
            threads = []
            for kind, at in zip(kinds, offsets):
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                if kind in ("remove_node", "add_node"):  # (Ray's Cluster starts raylets from the main thread only)
                    fault(kind)
                    continue
                th = threading.Thread(target=fault, args=(kind,), daemon=True)
                th.start()
                threads.append(th)
            for th in threads:
                th.join(300)
            for name, ref in waves.items():
                try:
                    out = ray.get(ref, timeout=600)
                except Exception as err:  # noqa: BLE001 -- the submitter was killed in this round
                    if name not in figures["killed_submitters"]:
                        figures["lost"].append(f"submitter {name} failed: {type(err).__name__}: {str(err)[:200]}")
                    continue
                figures["submitted"] += len(out)
                for key, what in out.items():
                    if what == "ok":
                        figures["finished"] += 1
                    else:
                        figures["lost"].append(f"{key}: {what}")
            # quiet: the load stops (the driver subprocess ends its wave and waits), then the audit
            pause_driver()
            report = wait_exact(rt, 60 if not smoke else 30)
            figures["audits"] += 1
            if report.exact:
                figures["audits_exact"] += 1
            else:
                figures["audit_failures"].append(report.format())
            os.unlink(pause)
            while len(subs) < 3:
                new_submitter()
            if driver["proc"] is None and rng.random() < 0.5:
                start_driver()
            print(f"round {figures['rounds']}: {kinds} plan={plan_now} finished={figures['finished']} "
                  f"lost={len(figures['lost'])} audit={'exact' if report.exact else 'NOT EXACT'}", flush=True)
        figures["seconds"] = round(time.monotonic() - start, 1)
    finally:
        if driver["proc"] is not None:
            driver["proc"].kill()
            driver["proc"].wait()
            figures["killed_submitters"][driver["name"]] = "driver subprocess (stopped at the end)"
        for s in subs.values():
            ray.kill(s)
        report = wait_exact(rt, 60)
        figures["audits"] += 1
        figures["audits_exact"] += int(report.exact)
        if not report.exact:
            figures["audit_failures"].append(report.format())
        ra.shutdown()
        time.sleep(1.0)
        left = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a.get("namespace") == NAMESPACE and a["name"].startswith("ra-drf_lb-")]
        figures["leaked_actors"] = left
        figures["leaked_resources"] = resources.created_resources()
        lc.shutdown()
    tally(figures, folder, removed, fault_times)
    return figures


def _injected(faults: Counter) -> int:
    """The faults injected: an ``add_node`` with every extra node present changes nothing."""
    return sum(n for kind, n in faults.items() if kind != "add_node (full)")


def wait_exact(rt, timeout_s: float):
    """The audit, read again until exact (the job watch evicts the processes killed; replicas push their
    last finishes) or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        report = rt.audit(timeout_s=5.0)
        if report.exact or time.monotonic() > deadline:
            return report


def tally(figures: dict, folder: str, removed: set, fault_times: List[float]) -> None:
    """Markers -> run twice (and rerun by Ray after node loss), the killed submitters' tasks, resume times."""
    runs: Dict[str, List[str]] = {}
    made: List[float] = []
    for name in os.listdir(folder):
        key, node = name.rsplit("@", 1)
        runs.setdefault(key, []).append(node)
        made.append(os.stat(os.path.join(folder, name)).st_mtime)
    killed = set(figures["killed_submitters"])
    for key, nodes in sorted(runs.items()):
        owner = key.rsplit("-", 1)[0]
        if len(nodes) > 1:
            if len(nodes) == 2 and any(n in removed for n in nodes):
                figures["rerun_after_node_loss"] += 1
            elif owner not in killed:
                figures["run_twice"].append(f"{key}: {len(nodes)} runs on {sorted(n[:8] for n in nodes)}")
    killed_tasks = Counter()
    for key, nodes in runs.items():
        owner = key.rsplit("-", 1)[0]
        if owner in killed:
            killed_tasks["ran once" if len(nodes) == 1 else "ran twice"] += 1
    figures["killed_submitters_tasks"] = dict(killed_tasks)
    figures["markers"] = sum(len(v) for v in runs.values())
    made.sort()
    resume = []
    for tf in fault_times:
        i = bisect.bisect_right(made, tf)
        if i < len(made):
            resume.append(made[i] - tf)
    resume.sort()
    figures["resume_p50_s"] = round(resume[len(resume) // 2], 3) if resume else None
    figures["resume_p99_s"] = round(resume[min(len(resume) - 1, int(0.99 * len(resume)))], 3) if resume else None
    figures["resume_max_s"] = round(resume[-1], 3) if resume else None
    figures["faults"] = dict(figures["faults"])
    figures["faults_total"] = sum(figures["faults"].values())
    figures["faults_injected"] = _injected(figures["faults"])
    figures["lost_count"] = len(figures["lost"])
    figures["run_twice_count"] = len(figures["run_twice"])
    figures["ok"] = (not figures["lost"] and not figures["run_twice"] and figures["audits"] == figures["audits_exact"]
                     and not figures["leaked_actors"] and not figures["leaked_resources"])
    del figures["resume_s"]


def table(f: dict) -> str:
    rows = [("seed", f["seed"]), ("minutes (bound)", f["minutes"]), ("faults wanted", f["faults_wanted"]),
            ("rounds", f["rounds"]), ("seconds of rounds", f.get("seconds")),
            ("faults (total)", f["faults_total"]), ("faults injected (not a no-op)", f["faults_injected"])]
    rows += [(f"  {k}", v) for k, v in sorted(f["faults"].items())]
    rows += [("fault errors (raised by the runtime)", len(f["fault_errors"])),
             ("tasks submitted by surviving submitters' waves", f["submitted"]), ("finished", f["finished"]),
             ("lost", f["lost_count"]), ("run twice", f["run_twice_count"]),
             ("rerun by Ray after their node left (at-least-once)", f["rerun_after_node_loss"]),
             ("submitters killed", len(f["killed_submitters"])),
             ("  their tasks", f["killed_submitters_tasks"]),
             ("audits exact / run", f"{f['audits_exact']} / {f['audits']}"),
             ("fault -> next task started, p50 / p99 / max (s)",
              f"{f['resume_p50_s']} / {f['resume_p99_s']} / {f['resume_max_s']}"),
             ("leaked actors", f["leaked_actors"] or 0), ("leaked slot resources", f["leaked_resources"] or 0),
             ("verdict", "PASS" if f["ok"] else "FAIL")]
    width = max(len(r[0]) for r in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    for what in ("lost", "run_twice", "audit_failures", "fault_errors"):
        for x in f[what][:10]:
            lines.append(f"{what}: {x}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
