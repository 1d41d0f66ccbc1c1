"""What a policy costs the caller: policy-decorated tasks vs plain Ray tasks, in one run.

    python release_tests/bench_runtime.py [--smoke-test] [--out runtime.json]
        [--conditions quiet,contended] [--task-ms 0,10] [--baseline DIR]

No-op tasks (``num_cpus=1``; ``--task-ms 10``: tasks that sleep 10 ms, where
scheduling overhead matters less) on a 4-node x 2-CPU local cluster. For each
plan (centralized: selector actor; decentralized: decisions in the submitting
process; hybrid: selector + placement actors) and policy, the driver submits
in a loop -- ``.remote()`` and ``.submit()`` (a Future of the ref, so a remote
plan batches) -- and the ratio is its tasks/s over plain ``@ray.remote``
tasks/s, the loops alternating sample by sample (median of 5). Also the
decision latency p50/p99 of the deciding scheduler, and the submitting
process's CPU per task (every thread of it, ``time.process_time()``): on a
machine the cluster saturates, the driver's CPU is taken from the workers,
and it varies far less between runs than the throughput ratio does.

A second baseline, *gated plain Ray*, is the cheapest dispatcher that keeps
the cluster model's bounded node queues: plain tasks bound to the nodes'
slots, at most ``executors + queue`` outstanding per node, the next one
launched as completions free room (one ``ray.wait`` over what runs), no
policy at all. Ray's owner returns a leased worker the moment its queue of
that task shape is empty (``NormalTaskSubmitter::OnWorkerIdle``), so shallow
node queues pay a new lease for many tasks whatever decides them: the
ceiling of a binding that holds tasks in the caller (``hold="caller"``), and
``ratio_to_gated`` is what the policy itself costs there.

``--conditions contended`` runs everything again with two processes burning
a core each beside the cluster (started, and stopped by their PIDs, by this
script), as on a shared node.

**A/B in one run** (``--baseline DIR``): DIR is a checkout of the code to
compare with (e.g. ``git worktree add ../before main``). Each side runs in
its own driver process, with ``PYTHONPATH`` set to its code, on its own
local cluster (so each side's workers import that side's code); the sides
take turns sample by sample, and each reports its ratio to plain Ray measured
on its own cluster in the same turn. The side idle meanwhile has a quiet
cluster beside the busy one, for both sides alike. Without ``--baseline``
there is one side, this checkout. ``--records-ab`` runs this checkout
against itself with ``decision_records=0`` (what the records explaining
``why`` cost): one driver and cluster, the runtime restarted with each
configuration in turn (two clusters differ by more than the records do).
``--service-ab`` likewise: the driver attached to a policy service
(``ra.start(detached=True)``: the runtime's owner is a detached actor) against
a runtime the driver owns. With two sides, ``ab`` holds the first side's ratio over the
second's, turn by turn (median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Optional

VEC = [0.1, 0.2, 0.1]
FIELDS = {"least_loaded": {}, "drf_lb": {"tenant": "a", "resource_vec": VEC}, "round_robin": {}, "fifo": {}}
HERE = os.path.dirname(os.path.abspath(__file__))


def plain_loop(fn, tasks: int) -> None:
    import ray

    ray.get([fn.remote(i) for i in range(tasks)])


def gated_loop(fn, slots: dict, depth: int, queue: int, tasks: int) -> None:
    """Plain tasks bound to slots, at most ``depth`` outstanding per node, no policy; with no
    room, one ``ray.wait`` over what runs waits for queue/2 of them to finish, as the router does."""
    import ray

    bound = [fn.options(resources={slot: 1}) for slot in slots.values()]
    room = [depth] * len(bound)
    running: dict = {}  # ObjectRef -> node index
    refs, k = [], 0
    for t in range(tasks):
        while not any(room):
            ready, _ = ray.wait(list(running), num_returns=min(max(1, queue // 2), len(running)),
                                timeout=0.005, fetch_local=False)
            for r in ready:
                room[running.pop(r)] += 1
        while not room[k % len(bound)]:
            k += 1
        i = k % len(bound)
        room[i] -= 1
        k += 1
        ref = bound[i].remote(t)
        running[ref] = i
        refs.append(ref)
    ray.get(refs)


def policy_loop(fn, policy: str, fields: dict, how: str, tasks: int):
    """A loop of ``tasks`` submissions of ``fn`` decorated with ``policy``: ``.remote()`` in a loop, as
    users write it, or ``.submit()`` then every Future's result; returns the refs."""
    import ray_adaptive as ra

    f = ra.policy(policy)(fn).options(task=fields) if fields else ra.policy(policy)(fn)
    if how == "remote":
        return lambda: [f.remote(i) for i in range(tasks)]
    return lambda: [x.result() for x in [f.submit(i) for i in range(tasks)]]


def _within(seconds: float, loop, runtime):
    """``loop()``'s result; if it is still running after ``seconds``, print what a hang needs
    (every thread's stack, the runtime's counts and queues) and exit 3 instead of hanging."""
    import faulthandler
    import threading

    box = []
    thread = threading.Thread(target=lambda: box.append(loop()), daemon=True)
    thread.start()
    thread.join(seconds)
    if not thread.is_alive():
        return box[0]
    print(f"HUNG: a submission loop ran over {seconds:g} s; every thread's stack:", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)  # first: it takes no lock
    router = runtime().router  # (read without its locks: one of them may be what hangs)
    print(f"runtime: {router.stats}; tasks in the router {len(router.book.tasks)}, undecided "
          f"{sum(t.node is None for t in list(router.book.tasks.values()))}, launched, not harvested {len(router.harvester.launched)}",
          file=sys.stderr, flush=True)
    os._exit(3)


def _sleeper(ms: int):
    def work_ms(i):
        time.sleep(ms / 1000)
        return i

    return work_ms


# ------------------------------------------------------------------ one side: a driver and its cluster
def serve(hang_after_s: float) -> None:
    """One side of the benchmark: its own cluster; reads a JSON command per line on stdin, runs one
    sample of each loop (plain, gated, policy) and answers a JSON line on stdout."""
    import ray

    import ray_adaptive as ra
    try:
        from ray_adaptive.local_multinode import local_cluster
    except ImportError:  # a baseline from before the house's restructuring (2b6097e and older)
        from ray_adaptive.local_cluster import local_cluster

    out = sys.stdout
    sys.stdout = sys.stderr  # (anything printed by Ray or the runtime stays off the answers)

    @ray.remote(num_cpus=1)
    def work(i, ms=0):
        if ms:
            time.sleep(ms / 1000)
        return i

    def timed(loop, tasks: int) -> tuple:
        cpu, start = time.process_time(), time.perf_counter()
        loop()
        return tasks / (time.perf_counter() - start), 1e6 * (time.process_time() - cpu) / tasks

    current = None  # (plan, policy, queue, hold) of the runtime running now
    fns = {0: work}
    with local_cluster(num_nodes=4, num_cpus=2):
        ray.get([work.remote(i) for i in range(200)])  # warm the workers
        print(json.dumps({"ready": True}), file=out, flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("stop"):
                break
            key = (cmd["plan"], cmd["policy"], cmd["queue"], cmd.get("hold"), json.dumps(cmd.get("start", {})))
            if key != current:
                ra.shutdown()
                if current is not None and json.loads(current[4]).get("detached"):
                    ra.stop(current[1])  # (a service outlives this process's shutdown: --service-ab)
                extra = {"hold": cmd["hold"]} if cmd.get("hold") else {}
                extra.update(cmd.get("start", {}))
                watch = extra.pop("node_watch", True)
                rt = ra.start(cmd["policy"], plan=cmd["plan"], queue=cmd["queue"], **extra)
                if not watch and rt.nodes is not None:  # (--membership-ab: the owner's node watch off)
                    rt.nodes.stop()
                current = key
            tasks, ms = cmd["tasks"], cmd["task_ms"]
            if ms not in fns:  # a function of its own per duration (each is its own Ray queue), made once
                fns[ms] = ray.remote(num_cpus=1)(_sleeper(ms))
            fn = noop = fns[ms]
            policy = cmd["policy"]
            submit = policy_loop(fn, policy, FIELDS[policy], cmd["how"], tasks)
            if cmd.get("warm"):
                ray.get(_within(hang_after_s, submit, lambda: ra.runtime_of(policy)))
            depth = 2 + cmd["queue"]
            answer = {}
            for name, loop in (("plain", lambda: plain_loop(noop, tasks)),
                               ("gated", lambda: gated_loop(noop, rt.slots, depth, cmd["queue"], tasks)),
                               ("policy", lambda: ray.get(_within(hang_after_s, submit,
                                                                  lambda: ra.runtime_of(policy))))):
                answer[name] = timed(loop, tasks)
            stats = rt.stats()
            answer.update(plan=rt.plan.name, held_by=stats.get("held_by", "caller"),
                          decision_p50_us=round((stats["decision_p50_s"] or 0) * 1e6, 1),
                          decision_p99_us=round((stats["decision_p99_s"] or 0) * 1e6, 1))
            print(json.dumps(answer), file=out, flush=True)
        ra.shutdown()


class Side:
    """A side's driver process (see :func:`serve`), with ``code`` first on its PYTHONPATH."""

    def __init__(self, name: str, code: str, hang_after_s: float, start: Optional[dict] = None):
        self.name = name
        self.start = start or {}  # extra ra.start options of this side
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([code, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve",
                                      "--hang-after-s", str(hang_after_s)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=code)
        self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"side {self.name!r} exited ({self.proc.wait()})")
        return json.loads(line)

    def sample(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps({**cmd, "start": self.start}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except Exception:
            self.proc.kill()  # (by its handle: this process started it)


class Variant:
    """Another configuration of a side's driver process (its own ``ra.start`` options), on the same
    cluster: A/B of two configurations of one checkout, with no difference of cluster between them."""

    def __init__(self, name: str, side: Side, start: dict):
        self.name, self.side, self.start = name, side, start

    def sample(self, **cmd) -> dict:
        saved, self.side.start = self.side.start, self.start
        try:
            return self.side.sample(**cmd)
        finally:
            self.side.start = saved

    def close(self) -> None:
        pass  # (the side closes its process)


class Burners:
    """Processes burning a core each beside the cluster, started and stopped (by PID) here."""

    def __init__(self, n: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def close(self) -> None:
        for p in self.procs:
            os.kill(p.pid, 15)
        for p in self.procs:
            p.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="150 tasks, 1 repeat, the last policy only")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    ap.add_argument("--queue", type=int, default=30, help="per-node queue of the cluster model (slots = CPUs + queue)")
    ap.add_argument("--policies", default="least_loaded,drf_lb")
    ap.add_argument("--plans", default="decentralized,centralized,hybrid")
    ap.add_argument("--loops", default="remote,submit")
    ap.add_argument("--hold", default=None, help="ra.start(hold=...) (default: the runtime's own, 'auto')")
    ap.add_argument("--conditions", default="quiet", help="quiet, contended (two CPU burners beside), or both")
    ap.add_argument("--task-ms", default="0", help="task durations in ms, e.g. 0,10")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=2000, help="tasks per loop (10 ms tasks: half)")
    ap.add_argument("--baseline", default=None, help="a checkout of the code to compare with, run alternately")
    ap.add_argument("--baseline-first", action="store_true", help="the baseline side first in each turn")
    ap.add_argument("--records-ab", action="store_true",
                    help="instead of a baseline checkout: this checkout with decision records on (the default "
                         "1,000) against decision_records=0, run alternately")
    ap.add_argument("--service-ab", action="store_true",
                    help="instead of a baseline checkout: this process attached to a policy service "
                         "(ra.start(detached=True)) against a runtime it owns, run alternately")
    ap.add_argument("--membership-ab", action="store_true",
                    help="instead of a baseline checkout: this checkout with the owner's node watch (nodes "
                         "joining and leaving live) on against off, run alternately")
    ap.add_argument("--hang-after-s", type=float, default=120.0,
                    help="a submission loop still running after this long is reported (every thread's stack, "
                         "the runtime's counts and queues) and the benchmark exits with status 3")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.hang_after_s)
    tasks, repeats = (150, 1) if args.smoke_test else (args.tasks, args.repeats)
    if args.smoke_test:  # every plan and loop still runs; one policy (the tests cover the others)
        args.policies = args.policies.split(",")[-1]
    here = os.path.dirname(HERE)
    if sum(map(bool, (args.records_ab, args.service_ab, args.membership_ab, args.baseline))) > 1:
        ap.error("--records-ab, --service-ab, --membership-ab and --baseline each choose the A/B: give one")
    sides = [("this", here, {})] + ([("baseline", os.path.abspath(args.baseline), {})] if args.baseline else [])
    if args.baseline_first:  # (run both orders: two clusters on one machine need not be alike)
        sides.reverse()
    figures = {"tasks": tasks, "repeats": repeats, "queue": args.queue, "executors": 2,
               "cluster": "4 nodes x 2 CPUs (local), one per side", "sides": {n: c for n, c, _ in sides},
               "runs": [], "ab": []}
    running = [Side(n, c, args.hang_after_s, start) for n, c, start in sides]
    if args.records_ab:  # one driver and cluster, the runtime restarted with each configuration in turn
        figures["cluster"] = "4 nodes x 2 CPUs (local), both configurations on it"
        running = [Variant("records", running[0], {}), Variant("no-records", running[0], {"decision_records": 0})]
        figures["sides"] = {"records": here, "no-records": here}
        closing = [running[0].side]
    elif args.service_ab:  # the same, a policy service against a runtime this driver owns
        figures["cluster"] = "4 nodes x 2 CPUs (local), both configurations on it"
        running = [Variant("service", running[0], {"detached": True}), Variant("own", running[0], {})]
        figures["sides"] = {"service": here, "own": here}
        closing = [running[0].side]
    elif args.membership_ab:  # the same, the owner's node watch on and off
        figures["cluster"] = "4 nodes x 2 CPUs (local), both configurations on it"
        running = [Variant("watch", running[0], {}), Variant("no-watch", running[0], {"node_watch": False})]
        figures["sides"] = {"watch": here, "no-watch": here}
        closing = [running[0].side]
    else:
        closing = running
    try:
        for condition in args.conditions.split(","):
            burners = Burners(2) if condition == "contended" else None
            try:
                for ms in [int(x) for x in args.task_ms.split(",")]:
                    n = tasks if not ms else max(1, tasks // 2)
                    for plan in args.plans.split(","):
                        for policy in args.policies.split(","):
                            for how in args.loops.split(","):
                                _measure(running, figures, condition, ms, n, plan, policy, how, repeats, args)
            finally:
                if burners is not None:
                    burners.close()
    finally:
        for side in closing:
            side.close()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(figures, fh, indent=2)


def _measure(sides, figures, condition, ms, tasks, plan, policy, how, repeats, args) -> None:
    cmd = dict(plan=plan, policy=policy, how=how, queue=args.queue, hold=args.hold, tasks=tasks, task_ms=ms)
    samples = {s.name: [] for s in sides}
    for side in sides:
        side.sample(**cmd, warm=True)  # (this shape's leases; a runtime of this plan and policy)
    for _ in range(repeats):
        for side in sides:  # in turns: both sides see the same moments of a noisy machine
            samples[side.name].append(side.sample(**cmd))
    if len(sides) == 2:  # the first side against the second, turn by turn, each by its own plain Ray
        a, b = (samples[s.name] for s in sides)
        ab = [(x["policy"][0] / x["plain"][0]) / (y["policy"][0] / y["plain"][0]) for x, y in zip(a, b)]
        figures["ab"].append({"condition": condition, "task_ms": ms, "plan": plan, "policy": policy, "loop": f".{how}()",
                              "first": sides[0].name, "second": sides[1].name,
                              "ratio_of_ratios_median": round(statistics.median(ab), 3),
                              "ratios_of_ratios": [round(r, 3) for r in ab]})
        print(f"[A/B {condition} {ms} ms] {plan} {policy} .{how}(): {sides[0].name} / {sides[1].name} = "
              f"{figures['ab'][-1]['ratio_of_ratios_median']}x (median of {len(ab)})", flush=True)
    for name, got in samples.items():
        rate = {k: [g[k][0] for g in got] for k in ("plain", "gated", "policy")}
        cpu = {k: [g[k][1] for g in got] for k in ("plain", "gated", "policy")}
        last = got[-1]
        f = {
            "side": name, "condition": condition, "task_ms": ms, "plan": last["plan"], "policy": policy,
            "loop": f".{how}()", "held_by": last["held_by"],
            "plain_tasks_per_s": round(statistics.median(rate["plain"])),
            "policy_tasks_per_s": round(statistics.median(rate["policy"])),
            "gated_plain_tasks_per_s": round(statistics.median(rate["gated"])),
            "ratio_median": round(statistics.median([p / b for p, b in zip(rate["policy"], rate["plain"])]), 3),
            "ratios": [round(p / b, 3) for p, b in zip(rate["policy"], rate["plain"])],
            "gated_plain_ratio_median": round(statistics.median(
                [g / b for g, b in zip(rate["gated"], rate["plain"])]), 3),
            "ratio_to_gated_median": round(statistics.median(
                [p / g for p, g in zip(rate["policy"], rate["gated"])]), 3),
            "decision_p50_us": last["decision_p50_us"], "decision_p99_us": last["decision_p99_us"],
            **{f"driver_cpu_us_per_task_{k}": round(statistics.median(v)) for k, v in cpu.items()},
        }
        f["cpu_ratio_to_plain"] = round(f["driver_cpu_us_per_task_policy"] / f["driver_cpu_us_per_task_plain"], 3)
        figures["runs"].append(f)
        print(f"[{name} {condition} {ms} ms] {f['plan']:>26} {policy:>13} {f['loop']:>9} ({f['held_by']} holds): "
              f"{f['policy_tasks_per_s']} tasks/s vs plain {f['plain_tasks_per_s']} -> {f['ratio_median']}x "
              f"(gated plain {f['gated_plain_ratio_median']}x; policy/gated {f['ratio_to_gated_median']}x); "
              f"driver CPU per task {f['driver_cpu_us_per_task_policy']} us (plain "
              f"{f['driver_cpu_us_per_task_plain']}, gated {f['driver_cpu_us_per_task_gated']}: "
              f"{f['cpu_ratio_to_plain']}x); decision p50 {f['decision_p50_us']} us, p99 {f['decision_p99_us']} us",
              flush=True)


if __name__ == "__main__":
    main()
