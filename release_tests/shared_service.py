"""One DRF-LB for every job of a cluster, through Ray's own job API: fairness across jobs, jobs that die, figures.

    python release_tests/shared_service.py [--smoke-test] [--out shared_service.json]

On a local 4-node x 2-CPU cluster with Ray's dashboard (its job API):
``ray-adaptive serve drf_lb --bind tenant=metadata:team``, then jobs of
``examples/jobs/team_job.py`` submitted with ``JobSubmissionClient`` and
``metadata={"team": ...}``, as ``ray job submit --metadata-json`` does. Each
task creates a marker file exclusively (a second run fails on it).

1. Jobs ``a`` and ``b`` keep a backlog each: Jain's index over the teams'
   tasks started in a window while both are backlogged (each task holds the
   same vector, so tasks are the service ratio); job ``a`` first tries a task
   naming team ``b``, which must be refused.
2. ``stop_job`` of ``a`` (what ``ray job stop`` does): the time until the
   service has evicted it and until its allocation is back to zero; ``b``
   finishes with every task once.
3. Job ``c`` attaches later; its driver is killed (SIGKILL) mid-run: the same
   two times; then job ``d`` runs to its end, every task once.
4. ``ray-adaptive stop drf_lb``: no actor of the policy, no slot resource left.

Figures: each job's time from its first submission to its first placement
(attaching included), Jain's index, the eviction and settling times, the
tasks each job ran. Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "examples" / "jobs"
ZERO = [0.0, 0.0, 0.0]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_adaptive", *args], capture_output=True, text=True, timeout=300)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="fewer tasks")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import ray
    from ray.job_submission import JobStatus, JobSubmissionClient

    from ray_adaptive.local_multinode import local_cluster

    n_b, n_d = (400, 40) if args.smoke_test else (800, 200)  # (b outlasts the fairness window: ~40 tasks/s)
    figures: dict = {"cluster": "4 nodes x 2 CPUs (local), Ray's dashboard on", "tasks": {"b": n_b, "d": n_d}}
    markers = Path(tempfile.mkdtemp(prefix="ra-markers-"))
    with local_cluster(num_nodes=4, num_cpus=2, dashboard=True) as lc:
        address = lc.cluster.address
        client = JobSubmissionClient(lc.dashboard_url)
        served = _cli("serve", "drf_lb", "--address", address, "--bind", "tenant=metadata:team")
        assert served.returncode == 0, served.stderr
        print(served.stdout, flush=True)
        service = ray.get_actor("ra-drf_lb-service", namespace="ray_adaptive")

        def alloc(team: str) -> list:
            state = ray.get(service.export.remote(), timeout=60)["selector"]["state"]
            return [float(x) for x in state["alloc"].get(team, ZERO)]

        def submit(team: str, tasks: int, *extra: str) -> str:
            for _ in range(120):  # (the head's job agent comes up a few seconds after the cluster)
                try:
                    return submit_once(team, tasks, *extra)
                except RuntimeError as err:
                    if "No available agent" not in str(err):
                        raise
                    time.sleep(0.5)
            return submit_once(team, tasks, *extra)

        def submit_once(team: str, tasks: int, *extra: str) -> str:
            # (this interpreter and the script by its path: the job server's PATH need not lead to the venv
            # ray-adaptive is in, and jobs sharing one uploaded working_dir lost it under each other here --
            # their cwd gone, ray.init failed -- which this one-host cluster does not need)
            return client.submit_job(
                entrypoint=f"{sys.executable} {JOBS / 'team_job.py'} --tasks {tasks} --markers {markers} --every 5 "
                           + " ".join(extra), metadata={"team": team})

        def lines(sid: str) -> list:
            return [json.loads(x) for x in client.get_job_logs(sid).splitlines() if x.startswith("{")]

        def job_id(sid: str) -> str:
            try:
                return _wait(lambda: next((x["job"] for x in lines(sid) if "job" in x), ""), 120, f"job {sid} to start")
            except AssertionError:
                print(client.get_job_status(sid), client.get_job_logs(sid)[-3000:], file=sys.stderr, flush=True)
                raise

        def started(job: str, t0: float, t1: float) -> int:
            return sum(1 for p in markers.iterdir() if p.name.startswith(job + "-") and t0 <= p.stat().st_mtime <= t1)

        def evicted(job: str, since: float) -> dict:
            entry = _wait(lambda: [h for h in ray.get(service.history.remote()) if job in h["reason"]], 30,
                          f"job {job} evicted")[0]
            out = {"evicted_s": round(time.monotonic() - since, 3)}
            _wait(lambda: alloc(entry_team[job]) == ZERO, 30, f"job {job}'s allocation released")
            out["settled_s"] = round(time.monotonic() - since, 3)
            out["switch_freeze_s"] = round(entry["freeze_s"], 4)
            return out

        entry_team = {}
        a = submit("a", 100_000, "--claim", "b")
        b = submit("b", n_b)
        ja, jb = job_id(a), job_id(b)
        entry_team.update({ja: "a", jb: "b"})
        _wait(lambda: started(ja, 0, 1e12) >= 20 and started(jb, 0, 1e12) >= 20, 120, "both jobs under way")
        time.sleep(1.0)  # (the job that came second catches up first: DRF serves it alone until the shares meet)
        t0 = time.time()
        time.sleep(4.0)
        counts = [started(j, t0, time.time()) for j in (ja, jb)]
        assert client.get_job_status(b) == JobStatus.RUNNING, "job b ended within the window: the figure is void"
        jain = sum(counts) ** 2 / (2 * sum(c * c for c in counts))
        figures["window_tasks"], figures["jain"] = counts, round(jain, 4)
        claim = next(x for x in lines(a) if "claim" in x)
        assert claim["refused"] == "TenantBindingError", claim
        stopped_at = time.monotonic()
        client.stop_job(a)
        figures["stop_job"] = evicted(ja, stopped_at)
        _wait(lambda: client.get_job_status(b) in (JobStatus.SUCCEEDED, JobStatus.FAILED), 600, "job b to end")
        assert client.get_job_status(b) == JobStatus.SUCCEEDED, client.get_job_logs(b)[-3000:]
        ran_b = sum(1 for p in markers.iterdir() if p.name.startswith(jb + "-"))
        assert ran_b == n_b, (ran_b, n_b)

        c = submit("c", 100_000)
        jc = job_id(c)
        entry_team[jc] = "c"
        _wait(lambda: started(jc, 0, 1e12) >= 20, 120, "job c under way")
        pid = client.get_job_info(c).driver_info.pid
        killed_at = time.monotonic()
        os.kill(int(pid), signal.SIGKILL)  # (the driver of a job on this script's own cluster)
        figures["sigkill"] = evicted(jc, killed_at)
        d = submit("d", n_d)
        jd = job_id(d)
        _wait(lambda: client.get_job_status(d) in (JobStatus.SUCCEEDED, JobStatus.FAILED), 600, "job d to end")
        assert client.get_job_status(d) == JobStatus.SUCCEEDED, client.get_job_logs(d)[-3000:]
        assert sum(1 for p in markers.iterdir() if p.name.startswith(jd + "-")) == n_d
        firsts = {team: next(x["first_placement_s"] for x in lines(sid) if "first_placement_s" in x)
                  for team, sid in (("a", a), ("b", b), ("c", c), ("d", d))}
        figures["first_placement_s"] = firsts
        figures["first_placement_median_s"] = round(statistics.median(firsts.values()), 4)
        figures["ran"] = {"b": ran_b, "d": n_d}
        stop = _cli("stop", "drf_lb", "--address", address)
        assert stop.returncode == 0, stop.stderr
        from ray_adaptive import resources

        left = [x["name"] for x in ray.util.list_named_actors(all_namespaces=True) if x["name"].startswith("ra-drf_lb-")]
        slots = [k for names in resources.get_cluster_state().values() for k in names if k.startswith("ra-drf_lb-")]
        assert not left and not slots, (left, slots)
    assert jain >= 0.95, figures
    print(json.dumps(figures), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
