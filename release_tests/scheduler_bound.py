"""The scheduler as the knee on Ray (issue 37): DRF-LB with short tasks from several submitting processes.

    python release_tests/scheduler_bound.py [--smoke-test] [--rates 200,400,800,1200] [--out sb.json]

On a local cluster of 4 nodes x 2 CPUs (one executor per CPU), three
tenants (``a``, ``b`` and ``greedy`` at 3x each other one: the paper's mix),
each submitting from its own process (a Ray actor with ``num_cpus=0``),
open-loop: Poisson arrivals at its share of the offered rate, each task
submitted at its arrival time (or at once when the process is behind) with
``ra.policy("drf_lb")(job).options(task={"tenant": t, "resource_vec": ...},
deadline_s=1).submit()``. A task sleeps ``--task-ms`` (2) on one CPU, so the
nodes' nominal execution bound (8 / 2 ms = 4,000 tasks/s) is far above the
selector's ceiling in the compiler's cost model (~440 decisions/s): the
scheduler, not the nodes, should be the knee. A task not placed within 1 s
of its arrival is dropped (the runtime's ``deadline_s``, as the compiler's
cluster model drops it); one placed in time that starts more than 1 s after
its arrival returns without running.

Per plan (centralized, decentralized, hybrid: fixed with ``ra.start(plan=)``)
and offered rate, over the steady window (from ``--warm-s`` after the first
arrival to the last arrival; each plan's first rate after an untimed run of
``--warm-run-s`` at that rate, as Ray starts the workers the load needs):

* ``goodput``: tasks that ran and ended in the window, per second; per tenant too;
* ``placed``: tasks placed within their deadline, by their start in the window, per second (per tenant
  ``placed_by_tenant``, fairness ``jfi_placed``): the compiler's and the cluster model's goodput, which
  counts a task placed in time as served. A task placed just in time can still start after its
  deadline (it then returns without running): ``goodput`` leaves it out, ``placed`` counts it;
* drops per tenant: ``dropped_unplaced`` (not placed in time; of them ``dropped_placed_late``, placed by
  the policy before the deadline but seen by their process after it -- decisions spent for nothing)
  and ``dropped_late`` (placed in time, started after the deadline);
* ``jfi``: Jain's index of the tenants' service ratios -- goodput over the
  max-min fair share of the goodput delivered in all (the tenants' offered
  rates as demands): 1 when what was delivered was shared fairly;
* the compiler's estimates for that plan at that rate (tasks of the nominal
  duration, one submitter per tenant, queue and timeout as run): throughput,
  competitive ratio, goodput ``min(rate, throughput, execution bound)``;
* decision latency p50 / p99 of the deciding schedulers (the selector's,
  read from the actor; decentralized: the submitting processes' own);
* where the time goes: CPU seconds of the runtime's actors (store, selector,
  placements; ``__ray_call__`` reading ``time.process_time()`` in each) and
  of the submitting processes over the run, per task that ran; the
  selector's decisions per second; how far behind its arrivals each
  submitting process fell (``submit_lag_s``: 0 when it kept the open loop).

Where a plan has a selector, where its slots go: its queues sampled every
0.25 s over the steady window -- ``slots_by_tenant`` (the mean number of
each tenant's tasks it counts running, the room it decides against: nodes x
(executors + queue)) and ``pending_by_tenant`` -- and each tenant's
``slot_cycle_ms`` (slots held / tasks placed per second: Little's law, the
time one placement holds its room, decision to finish notification), and
``oldest_running_s`` (the longest any task stayed counted running, across
samples: a task whose finish never came back would stay).

The reference ceiling of this machine, in the same run, from the same kind of
submitting processes: plain ``@ray.remote`` tasks (``plan`` = ``plain``) at
every offered rate, with the same job, arrivals and on-time rule; and a burst
of plain no-op tasks from the three processes at once (``plain_noop``: tasks/s).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from typing import Dict, List, Optional

POLICY = "drf_lb"
VEC = [0.1, 0.2, 0.1]
PLANS = ("centralized", "decentralized", "hybrid")
TIMEOUT_S = 1.0
HERE = os.path.dirname(os.path.abspath(__file__))


def _pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def _cpu_of(_actor) -> float:
    """(Run in an actor by ``__ray_call__``.) Its process's CPU seconds so far."""
    return time.process_time()


def _submitter_cls():
    import ray

    @ray.remote(num_cpus=0)
    class Submitter:
        """One tenant's submitting process."""

        def __init__(self):
            @ray.remote(num_cpus=1)
            def job(deadline: float, ms: float):
                start = time.time()
                if start > deadline:  # too late: dropped, as the cluster model's timeout drops it
                    return start, start, False
                time.sleep(ms / 1000)
                return start, time.time(), True

            @ray.remote(num_cpus=1)
            def noop():
                return None

            self.job, self.noop = job, noop

        def _fn(self, tenant: str, plain: bool, deadline_s: float = TIMEOUT_S):
            if plain:
                return self.job
            import ray_adaptive as ra

            return ra.policy(POLICY)(self.job).options(task={"tenant": tenant, "resource_vec": VEC},
                                                       deadline_s=deadline_s)

        def warm(self, tenant: str, n: int, plain: bool) -> None:
            """Workers and leases started before the clock runs: no deadline (a plan's first decisions, its
            actors' first calls on a host still busy with the last plan's teardown, took over 1 s once:
            calibrate_host's hybrid sweep, 2026-11-29 07:29 UTC)."""
            fn = self._fn(tenant, plain, deadline_s=math.inf)
            if plain:
                ray.get([fn.remote(time.time() + 3600, 0.0) for _ in range(n)])
            else:
                ray.get([f.result() for f in [fn.submit(time.time() + 3600, 0.0) for _ in range(n)]])

        def burst(self, n: int, t0: float) -> tuple:
            """From ``t0``, ``n`` plain no-op tasks as fast as this process submits them: (end - t0, CPU s)."""
            time.sleep(max(0.0, t0 - time.time()))
            cpu = time.process_time()
            ray.get([self.noop.remote() for _ in range(n)])
            return time.time() - t0, time.process_time() - cpu

        def run(self, tenant: str, offsets: List[float], t0: float, ms: float, plain: bool) -> dict:
            """Submit at ``t0 + offsets``: each task's (offset, start - t0, end - t0, ran), this process's
            CPU seconds, its own decisions' latencies and count, how far behind its arrivals it fell."""
            import ray_adaptive as ra
            from ray_adaptive.runtime.selector_client import SelectorClient

            fn = self._fn(tenant, plain)
            rt = None if plain else ra.runtime_of(POLICY)

            def local_latencies() -> list:  # the decisions made in this process (a lease's, or its own)
                d = rt.router.decider
                return d.leased_decision_latencies() if isinstance(d, SelectorClient) else rt.router.decision_latencies()

            seen = len(local_latencies()) if rt is not None else 0
            dispatched = rt.stats()["dispatched"] if rt is not None else 0
            time.sleep(max(0.0, t0 - time.time()))
            cpu0 = time.process_time()
            sent, lag, submitted = [], 0.0, []
            for off in offsets:
                delay = t0 + off - time.time()
                if delay > 0:
                    time.sleep(delay)
                else:
                    lag = max(lag, -delay)
                submitted.append(time.time() - t0)
                sent.append((off, (fn.remote if plain else fn.submit)(t0 + off + TIMEOUT_S, ms)))
            submit_cpu = time.process_time() - cpu0
            refs, offs, out = [], [], []
            for off, f in sent:
                if plain:
                    refs.append(f)
                    offs.append(off)
                    continue
                try:
                    refs.append(f.result())
                    offs.append(off)
                except ra.PlacementDeadlineExceeded as err:  # (end: when a placement came, too late; else None)
                    out.append((off, None, err.placed_after_s, False))
            try:
                got = ray.get(refs)
            except Exception:  # (one task's error: the others one by one)
                got = []
                for r in refs:
                    try:
                        got.append(ray.get(r))
                    except Exception:
                        got.append((float("inf"), float("inf"), False))
            out += [(off, s - t0, e - t0, ok) for off, (s, e, ok) in zip(offs, got)]
            lat = local_latencies()[seen:] if rt is not None else []
            return {"tasks": out, "cpu_s": time.process_time() - cpu0, "submit_cpu_s": submit_cpu,
                    "submit_lag_s": lag, "submitted": submitted, "latencies": lat,
                    "dispatched": (rt.stats()["dispatched"] - dispatched) if rt is not None else len(offsets)}

    return Submitter


def _actor_sample(rt) -> dict:
    """The runtime's actors' CPU seconds by role, the selector's decisions and latencies so far."""
    import ray

    from ray_adaptive._private.actors import actor_key, call_in_actor

    if rt is None:
        return {"cpu": {}, "decisions": 0, "latencies": [], "machine": _machine_cpu()}
    topo = rt.topology
    roles = {actor_key(topo.store): "store"}
    if topo.selector is not None:
        roles[actor_key(topo.selector)] = "selector"
    cpu: Dict[str, float] = {}
    for a in topo.actors():
        role = roles.get(actor_key(a), "placements")
        cpu[role] = cpu.get(role, 0.0) + ray.get(call_in_actor(a, _cpu_of), timeout=30)
    out = {"cpu": cpu, "decisions": 0, "latencies": [], "machine": _machine_cpu()}
    if topo.selector is not None:
        stats = ray.get(topo.selector.stats.remote(), timeout=30)
        out["decisions"] = stats["decisions"]
        out["forward"] = stats.get("forward")  # (the hybrid's forwarding rounds)
        out["latencies"] = ray.get(topo.selector.decision_latencies.remote(), timeout=30)
    return out


class _SelectorSampler:
    """The selector's queues every ``every_s`` from a thread, over one run (see the module doc)."""

    def __init__(self, rt, every_s: float = 0.25):
        import threading

        self._selector = rt.topology.selector if rt is not None else None
        self.every_s = every_s
        self.samples: List[tuple] = []  # (time, {tenant: running}, {tenant: pending}, running ids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if self._selector is not None else None

    def __enter__(self) -> "_SelectorSampler":
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        import collections

        import ray

        selector = self._selector
        assert selector is not None  # (the thread runs only with a selector)
        while not self._stop.is_set():
            try:
                ex: dict = ray.get(selector.export.remote(), timeout=10)
            except Exception:  # (a slow answer under overload: that sample is missing)
                continue
            tenant = lambda tasks: collections.Counter(t["fields"]["tenant"] for t in tasks)  # noqa: E731
            self.samples.append((time.time(), tenant(ex["running"]), tenant(ex["pending"]),
                                 {t["id"] for t in ex["running"]}))
            self._stop.wait(self.every_s)

    def figures(self, t0: float, window: tuple, placed_per_s: Dict[str, float]) -> dict:
        """Mean slots and pending per tenant over ``window`` (s after ``t0``), slot cycle per tenant (ms)."""
        inside = [x for x in self.samples if window[0] <= x[0] - t0 < window[1]]
        if not inside:
            return {}
        tenants = sorted(placed_per_s)
        slots = {t: sum(x[1].get(t, 0) for x in inside) / len(inside) for t in tenants}
        first: Dict[str, float] = {}
        last: Dict[str, float] = {}
        for when, _, _, ids in self.samples:
            for i in ids:
                first.setdefault(i, when)
                last[i] = when
        return {"slots_by_tenant": {t: round(slots[t], 2) for t in tenants},
                "pending_by_tenant": {t: round(sum(x[2].get(t, 0) for x in inside) / len(inside), 1) for t in tenants},
                "slot_cycle_ms": {t: round(1e3 * slots[t] / placed_per_s[t], 1) if placed_per_s[t] else None
                                  for t in tenants},
                "oldest_running_s": round(max((last[i] - first[i] for i in first), default=0.0), 2),
                "selector_samples": len(inside)}


class _WindowCpu:
    """The host's busy cores over the steady window only (``/proc/stat`` read at its start and end, from a
    thread): the whole run's average also holds the lead-in and the drain, idle or nearly."""

    def __init__(self, t0: float, window: tuple):
        import threading

        self.t0, self.window, self.reads = t0, window, []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "_WindowCpu":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._thread.join(self.t0 + self.window[1] - time.time() + 5)

    def _run(self) -> None:
        for at in self.window:
            time.sleep(max(0.0, self.t0 + at - time.time()))
            self.reads.append(_machine_cpu())

    def busy_cores(self) -> Optional[float]:
        return busy_cores(*self.reads) if len(self.reads) == 2 else None


def busy_cores(before: tuple, after: tuple) -> Optional[float]:
    """The cores busy between two :func:`_machine_cpu` reads (None if no time passed between them)."""
    jiffies = after[1] - before[1]
    return round((os.cpu_count() or 1) * (after[0] - before[0]) / jiffies, 3) if jiffies > 0 else None


def _machine_cpu() -> tuple:
    """(busy, total) jiffies of every CPU of this machine so far (/proc/stat; (0, 0) elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            x = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = x[3] + (x[4] if len(x) > 4 else 0)
    return sum(x) - idle, sum(x)


def _tenants_arrivals(rate: float, seconds: float, seed: int) -> dict:
    from ray_adaptive.experiments.on_ray import phase_arrivals

    return phase_arrivals([rate], seconds, seed)


def _row(plan: str, arch: str, rate: float, arrivals: dict, outs: dict, before: dict, after: dict,
         seconds: float, warm_s: float) -> dict:
    from ray_adaptive.sim.metrics import jain_index, service_ratios

    span = seconds - warm_s
    offered = {t: sum(warm_s <= x < seconds for x in arrivals[t]) / span for t in arrivals}
    # (what the submitters sent in the window: less than offered when a CPU-starved one falls behind)
    submitted = sum(warm_s <= x < seconds for t in arrivals for x in outs[t]["submitted"]) / span
    goodput = {t: sum(ok and warm_s <= e < seconds for _, _, e, ok in outs[t]["tasks"]) / span for t in arrivals}
    placed = {t: sum(s is not None and warm_s <= s < seconds for _, s, _, _ in outs[t]["tasks"]) / span for t in arrivals}
    ran = sum(ok for t in arrivals for *_, ok in outs[t]["tasks"])
    total, total_placed = sum(goodput.values()), sum(placed.values())
    ratios = service_ratios(goodput, offered, total) if total > 0 else {t: 0.0 for t in arrivals}
    ratios_placed = (service_ratios(placed, offered, total_placed) if total_placed > 0 else {t: 0.0 for t in arrivals})
    lat = [x for t in arrivals for x in outs[t]["latencies"]] + after["latencies"][len(before["latencies"]):]
    actors = {k: round(after["cpu"].get(k, 0.0) - before["cpu"].get(k, 0.0), 3) for k in after["cpu"]}
    sub_cpu = sum(o["cpu_s"] for o in outs.values())
    row = {
        "plan": plan, "architecture": arch, "rate": rate,
        "offered": round(sum(offered.values()), 1), "submitted": round(submitted, 1), "goodput": round(total, 1),
        **{f"goodput_{t}": round(goodput[t], 1) for t in sorted(goodput)},
        "jfi": round(jain_index(list(ratios.values())), 4),
        "placed": round(total_placed, 1), "placed_by_tenant": {t: round(placed[t], 1) for t in sorted(placed)},
        "jfi_placed": round(jain_index(list(ratios_placed.values())), 4),
        "ran": ran, "arrived": sum(len(a) for a in arrivals.values()),
        "dropped": sum(not ok for o in outs.values() for *_, ok in o["tasks"]),
        # not placed within the timeout (the runtime's deadline_s) / placed, but started after it
        "dropped_unplaced": {t: sum(s is None for _, s, _, _ in outs[t]["tasks"]) for t in sorted(outs)},
        # of them, placed by the policy before their deadline but seen by their process after it: decisions
        # spent on tasks too old to use them (PlacementDeadlineExceeded.placed_after_s)
        "dropped_placed_late": {t: sum(s is None and e is not None for _, s, e, _ in outs[t]["tasks"]) for t in sorted(outs)},
        "dropped_late": {t: sum(s is not None and not ok for _, s, _, ok in outs[t]["tasks"]) for t in sorted(outs)},
        "decisions": len(lat),
        "decision_p50_ms": round(1e3 * _pct(lat, 0.5), 3) if lat else None,
        "decision_p99_ms": round(1e3 * _pct(lat, 0.99), 3) if lat else None,
        "selector_decisions_per_s": round((after["decisions"] - before["decisions"]) / seconds, 1),
        "actor_cpu_s": actors,
        "submitter_cpu_s": round(sub_cpu, 3),
        "submitter_cpu_s_by_tenant": {t: round(outs[t]["cpu_s"], 3) for t in sorted(outs)},
        "machine_busy_cores": busy_cores(before["machine"], after["machine"]),
        "submitter_submit_cpu_s": round(sum(o["submit_cpu_s"] for o in outs.values()), 3),
        "cpu_us_per_task_submitters": round(1e6 * sub_cpu / max(1, ran)),
        "cpu_us_per_task_actors": round(1e6 * sum(actors.values()) / max(1, ran)),
        "submit_lag_s": round(max(o["submit_lag_s"] for o in outs.values()), 3),
    }
    fb, fa = before.get("forward"), after.get("forward")
    if fb and fa:  # the hybrid: forwarding rounds per s, of them those that only asked about held tasks
        rounds = fa["rounds"] - fb["rounds"]
        row["forward_rounds_per_s"] = round(rounds / seconds, 1)
        row["forward_held_rounds_per_s"] = round((fa["held_rounds"] - fb["held_rounds"]) / seconds, 1)
        if "calls" in fa:  # (the round's placement calls, its mean time and the hop's slack at the end)
            row["forward_calls_per_round"] = round((fa["calls"] - fb["calls"]) / max(1, rounds), 2)
            spent = fa["round_ms"] * fa["rounds"] - (fb["round_ms"] or 0) * fb["rounds"]
            row["forward_round_ms"] = round(spent / max(1, rounds), 2)
            row["forward_slack_ms"] = fa["slack_ms"]
    return row


def _sweep(Submitter, plan: Optional[str], rates, args, nodes: int) -> List[dict]:
    """Every rate under one plan (None: plain Ray), one runtime and one set of submitting processes."""
    import ray

    import ray_adaptive as ra

    plain = plan is None
    rt = None if plain else ra.start(POLICY, plan=plan, queue=args.queue, metrics_every_s=None)
    subs: Dict[str, object] = {}
    rows = []
    try:
        arrivals0 = _tenants_arrivals(rates[0], args.seconds, args.seed)
        subs = {t: Submitter.remote() for t in arrivals0}
        ray.get([s.warm.remote(t, 4 * nodes, plain) for t, s in subs.items()])
        # The first run after the runtime starts placed far less (hybrid at 600/s: 63 tasks/s, against
        # 160-172 in the next two; centralized 191 against 229-242): Ray starts the worker processes its
        # load needs, each a Python start-up on these two cores. An untimed run at the first rate first.
        if getattr(args, "warm_run_s", 0) > 0:
            warm = _tenants_arrivals(rates[0], args.warm_run_s, args.seed + 1)
            t0 = time.time() + 0.3
            ray.get([subs[t].run.remote(t, warm[t], t0, args.task_ms, plain) for t in warm])
        name = "plain" if plain else rt.plan.name
        arch = "plain" if plain else str(getattr(rt.plan.architecture, "value", rt.plan.architecture))
        for rate in rates:
            arrivals = _tenants_arrivals(rate, args.seconds, args.seed)
            before = _actor_sample(rt)
            t0 = time.time() + 0.5
            refs = {t: subs[t].run.remote(t, arrivals[t], t0, args.task_ms, plain) for t in arrivals}
            with _SelectorSampler(rt) as sampler, _WindowCpu(t0, (args.warm_s, args.seconds)) as window_cpu:
                outs = dict(zip(refs, ray.get(list(refs.values()))))
            after = _actor_sample(rt)
            row = _row(name, arch, rate, arrivals, outs, before, after, args.seconds, args.warm_s)
            row["window_busy_cores"] = window_cpu.busy_cores()
            row.update(sampler.figures(t0, (args.warm_s, args.seconds), row["placed_by_tenant"]))
            if rt is not None:
                row["leases"] = ray.get(rt.topology.selector.stats.remote())["leases"] if rt.topology.selector else 0
            rows.append(row)
            print(f"[{name} @ {rate:g}/s] offered {row['offered']}, goodput {row['goodput']} tasks/s, JFI {row['jfi']}, "
                  f"placed in time {row['placed']}/s {row['placed_by_tenant']}, JFI {row['jfi_placed']}, "
                  f"dropped {row['dropped']}, decision p50/p99 {row['decision_p50_ms']}/{row['decision_p99_ms']} ms, "
                  f"selector {row['selector_decisions_per_s']}/s, actor CPU {row['actor_cpu_s']} s, submitters "
                  f"{row['submitter_cpu_s']} s ({row['cpu_us_per_task_submitters']} us/task), lag "
                  f"{row['submit_lag_s']} s; by tenant CPU {row['submitter_cpu_s_by_tenant']}, unplaced "
                  f"{row['dropped_unplaced']} (placed, seen late {row['dropped_placed_late']}), late {row['dropped_late']}; machine {row['machine_busy_cores']} cores busy"
                  + (f"; selector slots {row['slots_by_tenant']}, slot cycle ms {row['slot_cycle_ms']}, pending "
                     f"{row['pending_by_tenant']}, oldest running {row['oldest_running_s']} s" if "slots_by_tenant" in row else "")
                  + (f"; forwarding rounds {row['forward_rounds_per_s']}/s, of them held only "
                     f"{row['forward_held_rounds_per_s']}/s" if "forward_rounds_per_s" in row else "")
                  + (f", {row['forward_calls_per_round']} calls per round, {row['forward_round_ms']} ms each, hop slack "
                     f"{row['forward_slack_ms']} ms" if "forward_round_ms" in row else ""),
                  flush=True)
    finally:
        for s in subs.values():
            ray.kill(s)
        if rt is not None:
            ra.shutdown()
    return rows


def _plain_noop(Submitter, n: int) -> dict:
    """Plain no-op tasks from three submitting processes at once: the machine's dispatch ceiling."""
    import ray

    subs = [Submitter.remote() for _ in range(3)]
    try:
        ray.get([s.warm.remote("a", 100, True) for s in subs])
        t0 = time.time() + 0.3
        got = ray.get([s.burst.remote(n, t0) for s in subs])
    finally:
        for s in subs:
            ray.kill(s)
    wall = max(w for w, _ in got)
    out = {"processes": 3, "tasks": 3 * n, "tasks_per_s": round(3 * n / wall),
           "cpu_us_per_task_submitters": round(1e6 * sum(c for _, c in got) / (3 * n))}
    print(f"plain Ray no-op, 3 processes x {n}: {out['tasks_per_s']} tasks/s "
          f"({out['cpu_us_per_task_submitters']} us of submitter CPU per task)", flush=True)
    return out


def _estimates(rows: List[dict], args, nodes: int, per_node: int) -> None:
    """The compiler's estimates for each row's plan at its rate (one compile per rate)."""
    from ray_adaptive.compiler import compile_policy
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.experiments.on_ray import RayExperiment, estimate_trace

    exp = RayExperiment(duration_s=args.task_ms / 1000, timeout_s=TIMEOUT_S, queue=args.queue, seed=args.seed)
    bound = nodes * per_node / exp.duration_s
    for rate in sorted({r["rate"] for r in rows}):
        trace = estimate_trace(rate, nodes, exp, per_node)
        c = compile_policy(load_policy(POLICY), trace=trace, nodes=nodes, executors=per_node, queue=exp.queue,
                           workers=1, replay="all")
        for r in rows:
            if r["rate"] != rate or r["plan"] == "plain":
                continue
            e = c.estimate(r["plan"])
            est = min(r["offered"], e.throughput, bound)
            r.update(est_throughput=round(e.throughput, 1), est_competitive_ratio=round(e.competitive_ratio, 4),
                     est_goodput=round(est, 1), est_error=round(est / r["goodput"] - 1, 3) if r["goodput"] else None,
                     est_error_placed=round(est / r["placed"] - 1, 3) if r["placed"] else None,
                     compiler_choice=c.choice.estimate.plan.name)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="one rate, 2 s of arrivals, every plan")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    ap.add_argument("--rates", default="200,400,800,1200", help="offered rates (tasks/s, all tenants)")
    ap.add_argument("--plans", default=",".join(PLANS))
    ap.add_argument("--task-ms", type=float, default=2.0, help="each task sleeps this long (1-5 ms)")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of arrivals per plan and rate")
    ap.add_argument("--warm-run-s", type=float, default=3.0,
                    help="an untimed run at the first rate before the timed ones, seconds (0: none)")
    ap.add_argument("--warm-s", type=float, default=1.5, help="left out of the steady window at the start")
    ap.add_argument("--queue", type=int, default=2, help="per-node queue of the cluster model (slots = CPUs + queue)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=2, help="CPUs (executors) per node")
    ap.add_argument("--no-plain", action="store_true", help="skip plain Ray at each rate")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    noop_tasks = 1000
    if args.smoke_test:
        rates, args.seconds, args.warm_s, args.warm_run_s, noop_tasks = [300.0], 2.0, 0.5, 1.0, 200
    plans = [p for p in args.plans.split(",") if p]
    from ray_adaptive.local_multinode import start_local_cluster

    figures: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": _commit(),
                     "cluster": f"{args.nodes} nodes x {args.cpus} CPUs (local), one executor per CPU",
                     "policy": POLICY, "task_ms": args.task_ms, "queue": args.queue, "timeout_s": TIMEOUT_S,
                     "seconds": args.seconds, "window_s": [args.warm_s, args.seconds], "rates": rates,
                     "execution_bound": args.nodes * args.cpus * 1000 / args.task_ms, "rows": []}
    started = time.monotonic()
    lc = start_local_cluster(num_nodes=args.nodes, num_cpus=args.cpus)
    try:
        Submitter = _submitter_cls()
        figures["plain_noop"] = _plain_noop(Submitter, noop_tasks)
        if not args.no_plain:
            figures["rows"] += _sweep(Submitter, None, rates, args, args.nodes)
        for plan in plans:
            figures["rows"] += _sweep(Submitter, plan, rates, args, args.nodes)
    finally:
        lc.shutdown()
    figures["ray_s"] = round(time.monotonic() - started, 1)
    _estimates(figures["rows"], args, args.nodes, args.cpus)
    figures["wall_s"] = round(time.monotonic() - started, 1)
    print(format_table(figures["rows"]))
    print(f"wall {figures['wall_s']} s (Ray {figures['ray_s']} s)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(figures, fh, indent=2)


def format_table(rows: List[dict]) -> str:
    head = ("| rate | plan | offered | goodput (est, error) | JFI | placed in time (error) | JFI placed | est CR "
            "| decision p50 / p99 ms | selector dec/s | CPU us/task: submitters / actors | lag s |")
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        est = (f" ({r['est_goodput']}, {100 * r['est_error']:+.0f}%)" if r.get("est_error") is not None else "")
        est_placed = (f" ({100 * r['est_error_placed']:+.0f}%)" if r.get("est_error_placed") is not None else "")
        out.append(f"| {r['rate']:g} | {r['plan']} | {r['offered']} | {r['goodput']}{est} | {r['jfi']} | "
                   f"{r['placed']}{est_placed} | {r['jfi_placed']} | "
                   f"{r.get('est_competitive_ratio', '')} | {r['decision_p50_ms']} / {r['decision_p99_ms']} | "
                   f"{r['selector_decisions_per_s']} | {r['cpu_us_per_task_submitters']} / {r['cpu_us_per_task_actors']} | "
                   f"{r['submit_lag_s']} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
