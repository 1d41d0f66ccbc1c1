"""Where the submitting process's CPU goes, per task and per phase: plain Ray, gated plain Ray, each plan.

    python release_tests/profile_runtime.py [--tasks 3000] [--rate 250] [--out profile.json]

For each loop (the loops of ``bench_runtime.py``: plain ``@ray.remote``, gated
plain, a policy-decorated ``.remote()`` loop under each plan), the CPU each
thread of this process used is read from ``/proc/self/task`` (exact, however
loaded the machine), and ``py-spy record --gil`` samples the Python thread
holding the GIL meanwhile. A Python thread's CPU is shared among phases as
its samples are, each sample put in a phase by its innermost recognisable
frame; Ray's C++ threads (its io service, gRPC) run no Python and are shown
by their thread names. (Sampling every running thread instead counts threads
waiting for a core on a loaded machine, and native stacks pause the process
at each sample: both were tried.)

Phases: Ray's ``.remote()`` (argument serialisation and the core worker's
submission, on the caller's thread), ``ray.wait`` / ``ray.get``, our router,
the decision (scheduler, queue, scoring), hooks, the API layer
(``PolicyFunction``), the monitor, the state store client.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# innermost frame first: the first rule matching a frame (scanned leaf -> root) names the phase
_RULES = [
    ("ray .remote()", ("remote_function.py", "_private/submit.py")),  # (a policy task's launch: Ray's call)
    ("ray.wait", ("worker.py:wait", "_raylet.pyx:wait", "wait (ray/_private/worker.py")),
    ("ray.get", ("worker.py:get", "get (ray/_private/worker.py", "get_objects")),
    ("hooks", ("<ray-adaptive", "codegen", "dsl/interp.py")),
    ("decision", ("plan/scheduler.py", "plan/queue.py", "plan/scoring.py", "plan/explain.py",
                  "plan/replicas.py", "runtime/local.py", "runtime/selector.py")),
    ("store sync", ("runtime/store.py",)),
    ("monitor", ("ray_adaptive/monitor",)),
    ("router", ("runtime/router.py", "runtime/fastpath", "runtime/harvest")),
    ("api", ("ray_adaptive/api.py",)),
    ("bench loop", ("profile_runtime.py", "bench_runtime.py")),
]


def _phase(frames: list) -> str:
    for frame in reversed(frames):
        for name, needles in _RULES:
            if any(n in frame for n in needles):
                return name
    if not any(".py" in f for f in frames):
        return "ray threads (native)"
    return "other python"


def _thread_cpu() -> dict:
    """Native thread id -> (name, CPU seconds so far), from /proc: exact, whatever the machine's load."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as fh:
                comm = fh.read().strip()
        except OSError:
            continue  # (it ended)
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / tick)
    return out


def _python_threads() -> dict:
    """py-spy's thread id (pthread ident) and native id -> the thread's name (``loop``: this one)."""
    import threading

    names = {}
    for t in threading.enumerate():
        name = "loop" if t is threading.main_thread() else t.name.split("-")[0] + "-" + t.name.split("-")[1] \
            if t.name.startswith("ra-") else t.name
        names[t.ident] = names[t.native_id] = name
    return names


def _tid(frame: str) -> int:
    """The thread id of a collapsed stack's first element, ``thread (2409): name``."""
    m = re.match(r"thread \((0x[0-9a-fA-F]+|\d+)\)", frame)
    return int(m.group(1), 0) if m else -1


def classify(raw: str) -> dict:
    """Collapsed py-spy stacks -> {thread name: {phase: samples}}."""
    out: dict = collections.defaultdict(collections.Counter)
    names = _python_threads()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        out[names.get(_tid(frames[0]), "other python")][_phase(frames[1:])] += int(count)
    return out


def profile(loop, tasks_per_loop: int, loops: int, rate: int) -> dict:
    """Run ``loop`` ``loops`` times; this process's CPU per task by thread (from /proc, exact) and, for
    its Python threads, by phase: a thread's CPU shared among phases as py-spy's samples of it
    holding the GIL are (``--gil``: a sample is taken only while some thread runs Python)."""
    fd, path = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    cmd = [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--pid", str(os.getpid()),
           "--rate", str(rate), "--format", "raw", "--output", path, "--threads", "--nonblocking", "--gil"]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # (py-spy attaches; this process is idle meanwhile: no samples)
        before = _thread_cpu()
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(loops):
            loop()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - start
        after = _thread_cpu()
    finally:
        spy.send_signal(signal.SIGINT)  # (py-spy writes what it has on SIGINT)
        spy.wait(timeout=60)
    with open(path) as fh:
        samples = classify(fh.read())
    os.unlink(path)
    tasks = tasks_per_loop * loops
    names = _python_threads()
    threads: collections.Counter = collections.Counter()
    for tid, (comm, s) in after.items():
        used = s - before.get(tid, (comm, 0.0))[1]
        threads[names.get(tid, f"ray C++: {comm}")] += 1e6 * used / tasks
    phases: collections.Counter = collections.Counter()
    for name, us in threads.items():
        counts = samples.get(name)
        if not counts:
            phases[name if name.startswith("ray C++") else f"{name}: unsampled"] += us
            continue
        total = sum(counts.values())
        for phase, n in counts.items():
            phases[f"{name}: {phase}"] += us * n / total

    def rounded(c: collections.Counter) -> dict:
        return {k: round(v, 1) for k, v in c.most_common() if v >= 0.05}

    return {"tasks_per_s": round(tasks / wall), "cpu_us_per_task": round(1e6 * cpu / tasks),
            "threads_us_per_task": rounded(threads), "phases_us_per_task": rounded(phases)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--loops", type=int, default=3)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--queue", type=int, default=30)
    ap.add_argument("--plans", default="decentralized,centralized,hybrid")
    ap.add_argument("--policies", default="least_loaded,drf_lb")
    ap.add_argument("--start-options", default="{}", help="JSON of extra ra.start() keyword arguments")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import ray

    import ray_adaptive as ra
    from bench_runtime import FIELDS, gated_loop, plain_loop, policy_loop
    from ray_adaptive.local_multinode import local_cluster

    @ray.remote(num_cpus=1)
    def noop(i):
        return i

    out = {"tasks": args.tasks, "loops": args.loops, "rate": args.rate, "queue": args.queue,
           "profiles": {}}
    with local_cluster(num_nodes=4, num_cpus=2):
        ray.get([noop.remote(i) for i in range(200)])

        def show(name, p):
            out["profiles"][name] = p
            print(f"{name}: {p['tasks_per_s']} tasks/s, {p['cpu_us_per_task']} us of CPU per task", flush=True)
            for k, v in p["phases_us_per_task"].items():
                print(f"    {v:8.1f}  {k}", flush=True)

        show("plain", profile(lambda: plain_loop(noop, args.tasks), args.tasks, args.loops, args.rate))
        for plan in args.plans.split(","):
            for policy in args.policies.split(","):
                rt = ra.start(policy, plan=plan, queue=args.queue, **json.loads(args.start_options))
                depth = 2 + args.queue
                gated = lambda: gated_loop(noop, rt.slots, depth, args.queue, args.tasks)  # noqa: E731
                submit = policy_loop(noop, policy, FIELDS[policy], "remote", args.tasks)
                loop = lambda: ray.get(submit())  # noqa: E731
                loop()  # (warm)
                if plan == args.plans.split(",")[0] and policy == args.policies.split(",")[0]:
                    show("gated plain", profile(gated, args.tasks, args.loops, args.rate))
                show(f"{rt.plan.name} {policy} .remote()", profile(loop, args.tasks, args.loops, args.rate))
                ra.shutdown()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
