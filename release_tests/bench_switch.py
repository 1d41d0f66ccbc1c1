"""Live plan switches on a local cluster: the pause callers see, and what an adaptive runtime costs.

    python release_tests/bench_switch.py [--smoke-test] [--switches 20] [--out switch.json]

On a 4-node x 2-CPU local cluster, DRF-LB with three submitting processes
(the driver and two actors, each a tenant, each submitting short tasks in a
loop), the plan is switched back and forth between two architectures
``--switches`` times per direction, for each pair of the three. For every
switch and every process, the *pause*: from the process's last decision
under the old plan to its first under the new one, as its callers see it
(``PolicyRuntime.pauses``: the router's clock). Reported per direction:
p50 / p99 over every (switch, process), and the coordinator's freeze (announce
to publish). The target is p99 < 250 ms. Plans change every ``--interval``
seconds (2): a generation with actors starts a Ray worker process per
actor (a hybrid: five), each taking a second of CPU to start, and the
replaced one's exit; on this 2-core machine switches 0.5 s apart land in
the previous one's churn (the controller's dwell is 10 s by default).

Then the adaptive runtime's dispatch throughput while it does not switch, as
a ratio to the same plan started statically, alternated in the same run
(median of 5): no-op tasks from the driver; the adaptive runtime's controller
evaluates every second and its processes report their load (target >= 0.98x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

VEC = [0.1, 0.2, 0.1]
PAIRS = (("centralized", "decentralized"), ("centralized", "hybrid"), ("decentralized", "hybrid"))


def _pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def _p50_p99(rows) -> dict:
    """Per key of ``rows`` (dicts of seconds): [p50, p99] in ms."""
    keys = sorted({k for r in rows for k in r})
    return {k: [round(1e3 * _pct([r[k] for r in rows if k in r], q), 1) for q in (0.5, 0.99)] for k in keys}


class _GcTrace:
    """This process's garbage collections (``--gc-trace``): (generation, monotonic start, seconds). The
    monotonic clock is the machine's, so a process's collections line up with the coordinator's switches."""

    def __init__(self):
        import gc

        self.events, self._start = [], None
        gc.callbacks.append(self._seen)

    def _seen(self, phase, info):
        if phase == "start":
            self._start = time.monotonic()
        elif self._start is not None:
            self.events.append((info["generation"], self._start, time.monotonic() - self._start))
            self._start = None


def _gc_in(events, start: float, end: float) -> dict:
    """Of ``events`` (a _GcTrace's), the seconds collected between ``start`` and ``end``, and the longest."""
    inside = [d for _, t, d in events if t < end and t + d > start]
    return {"gc_s": sum(inside), "gc_max_s": max(inside, default=0.0), "collections": len(inside)}


class _Probe:
    """``--probe``: a round trip to the state store (an empty call) every ``every_s`` from the driver, the
    coordinator's process, while it switches: (monotonic start, seconds). A switch's pause is made of such
    hops -- the announce reaching each process, its ack, the publish -- so their tail under the same load
    is what any protocol of round trips pays."""

    def __init__(self, store, every_s: float = 0.02):
        self.samples, self._store, self._every = [], store, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import ray

        while not self._stop.wait(self._every):
            t = time.monotonic()
            ray.get(self._store.ping.remote(), timeout=30)  # (a store that stopped answering ends the probe)
            self.samples.append((t, time.monotonic() - t))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def split(self, spans) -> dict:
        """p50 / p99 / max (ms) of the round trips that began inside a switch's call (``during``: its build
        too), inside its freeze (``freeze``: the last ``freeze_s`` of the call, announce to publish), and of
        the others (``between``). ``spans``: (start, end, freeze_s) of each switch's call."""
        inside = lambda t: any(a <= t <= b for a, b, _ in spans)  # noqa: E731
        frozen = lambda t: any(b - f <= t <= b for _, b, f in spans)  # noqa: E731
        parts = {"during": [d for t, d in self.samples if inside(t)],
                 "freeze": [d for t, d in self.samples if frozen(t)],
                 "between": [d for t, d in self.samples if not inside(t)]}
        return {k: {"samples": len(v), "p50_ms": round(1e3 * _pct(v, 0.5), 2), "p99_ms": round(1e3 * _pct(v, 0.99), 2),
                    "max_ms": round(1e3 * max(v), 2)} for k, v in parts.items() if v}


def _submitter_cls():
    import ray

    import ray_adaptive as ra

    @ray.remote(num_cpus=0, max_concurrency=2)
    class Submitter:
        def __init__(self, gc_trace=False):
            self.stopped = threading.Event()
            self.gc = _GcTrace() if gc_trace else None

        def run(self, tenant):
            @ray.remote(num_cpus=1)
            def short():
                time.sleep(0.005)

            f = ra.policy("drf_lb")(short).options(task={"tenant": tenant, "resource_vec": VEC})
            refs = []
            while not self.stopped.is_set():
                refs.append(f.remote())
                if len(refs) > 200:
                    ray.get(refs[:100])
                    refs = refs[100:]
            ray.get(refs)
            return True

        def stop(self):
            self.stopped.set()

        def pauses(self):
            rt = ra.runtime_of("drf_lb")
            return rt.pauses(), rt.pause_parts()

        def dispatched(self):
            return ra.runtime_of("drf_lb").stats()["dispatched"]

        def gc_events(self):
            return self.gc.events if self.gc else []

    return Submitter


def _warm_up(rt, subs, decisions: int = 300, timeout_s: float = 120.0) -> None:
    """Wait until every process decides steadily: on this 2-core machine the cluster's workers take
    seconds to start, and until they have, a process may see no room for seconds -- a pause that is
    the cluster's warm-up, not a switch's (measured: 6.8 s without a decision in the driver after its
    first 16, plan never switched)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = [rt.stats()["dispatched"], *ray.get([s.dispatched.remote() for s in subs])]
        if min(done) >= decisions:
            return
        time.sleep(0.2)
    raise RuntimeError(f"warm-up: the processes dispatched {done} tasks in {timeout_s:g} s")


def switches(pairs, n: int, interval_s: float = 2.0, gc_trace: bool = False, probes: dict | None = None) -> dict:
    """Per direction, the pauses (see the module doc). ``probes``: filled per pair with the store's round
    trips from the driver meanwhile (see :class:`_Probe`)."""
    import ray

    import ray_adaptive as ra

    Submitter = _submitter_cls()

    @ray.remote(num_cpus=1)
    def short():
        time.sleep(0.005)

    out = {}
    driver_gc = _GcTrace() if gc_trace else None
    for a, b in pairs:
        rt = ra.start("drf_lb", plan=a, executors=2, queue=2)
        subs = [Submitter.remote(gc_trace) for _ in range(2)]
        runs = [s.run.remote(t) for s, t in zip(subs, "bc")]
        fn = ra.policy("drf_lb")(short).options(task={"tenant": "a", "resource_vec": VEC})
        stop = threading.Event()

        def load():
            refs = []
            while not stop.is_set():
                refs.append(fn.remote())
                if len(refs) > 200:
                    ray.get(refs[:100])
                    refs = refs[100:]
            ray.get(refs)

        loader = threading.Thread(target=load)
        loader.start()
        _warm_up(rt, subs)
        probe = _Probe(rt.topology.store) if probes is not None else None
        gens = {f"{a}->{b}": [], f"{b}->{a}": []}
        freeze = {k: [] for k in gens}
        steps = {k: [] for k in gens}
        spans = {}  # generation -> (monotonic) the switch's call, start and end
        for i in range(2 * n):
            frm, to = (a, b) if i % 2 == 0 else (b, a)
            began = time.monotonic()
            entry = rt.switch(to)
            spans[entry["generation"]] = (began, time.monotonic())
            gens[f"{frm}->{to}"].append(entry["generation"])
            freeze[f"{frm}->{to}"].append(entry["freeze_s"])
            steps[f"{frm}->{to}"].append(entry["freeze_steps_s"])
            time.sleep(interval_s)  # decisions under the new plan before the next switch
        if probe is not None:
            probe.stop()
            probes[f"{a}-{b}"] = probe.split([(*spans[g], f) for k in gens for g, f in zip(gens[k], freeze[k])])
            print(f"{'':>28}  the store's round trip from the driver, p50/p99 ms: "
                  f"{ {k: (v['p50_ms'], v['p99_ms']) for k, v in probes[f'{a}-{b}'].items()} }", flush=True)
        stop.set()
        loader.join()
        got = [(rt.pauses(), rt.pause_parts()), *ray.get([s.pauses.remote() for s in subs])]
        pauses, parts = [p for p, _ in got], [q for _, q in got]
        gc_events = [driver_gc.events, *ray.get([s.gc_events.remote() for s in subs])] if gc_trace else None
        for s in subs:
            s.stop.remote()
        ray.get(runs)
        for key, generations in gens.items():
            seen = [p[g] for p in pauses for g in generations if g in p]
            split = [{**q[g], "generation": g, "process": i} for i, q in enumerate(parts) for g in generations if g in q]
            if gc_events is not None:  # each pause's process: what it collected from its idle start to 0.3 s on
                for x in split:
                    began, ended = spans[x["generation"]]
                    x.update(_gc_in(gc_events[x["process"]], began - x["idle"], ended + x["after"] + 0.3))
            own = [x["frozen"] + x["after"] for x in split]  # the switch's own part: from the freeze on
            out[key] = {"switches": len(generations), "samples": len(seen),
                        "own_p50_ms": round(1e3 * _pct(own, 0.5), 1), "own_p99_ms": round(1e3 * _pct(own, 0.99), 1),
                        "pauses_ms": sorted(round(1e3 * x, 1) for x in seen),
                        "parts_ms": [{k: v if k in ("generation", "process", "collections") else round(1e3 * v, 1)
                                      for k, v in x.items()} for x in split],
                        "pause_p50_ms": round(1e3 * _pct(seen, 0.5), 1), "pause_p99_ms": round(1e3 * _pct(seen, 0.99), 1),
                        "pause_max_ms": round(1e3 * max(seen), 1),
                        "freeze_p50_ms": round(1e3 * statistics.median(freeze[key]), 1),
                        # where the pauses and the freezes went, part by part: p50 / p99 (ms)
                        "parts_pct_ms": _p50_p99([{k: v for k, v in x.items() if k not in ("generation", "process", "collections")}
                                                  for x in split]),
                        "freeze_steps_pct_ms": _p50_p99(steps[key])}
            print(f"{key:>28}: pause p50 {out[key]['pause_p50_ms']} ms, p99 {out[key]['pause_p99_ms']} ms "
                  f"({len(seen)} samples; from the freeze on p50 {out[key]['own_p50_ms']}, p99 "
                  f"{out[key]['own_p99_ms']} ms); freeze p50 {out[key]['freeze_p50_ms']} ms", flush=True)
            print(f"{'':>28}  parts p50/p99 ms {out[key]['parts_pct_ms']}; freeze steps {out[key]['freeze_steps_pct_ms']}",
                  flush=True)
        ra.shutdown()
        for s in subs:
            ray.kill(s)
    return out


def adaptive_overhead(tasks: int, repeats: int, plan: str = "decentralized") -> dict:
    """Tasks/s of no-op tasks under ``plan`` started statically and the same plan in an adaptive runtime."""
    import ray

    import ray_adaptive as ra

    @ray.remote(num_cpus=1)
    def noop():
        return None

    def run(**kw) -> float:
        rt = ra.start("least_loaded", queue=30, **kw)
        while rt.control_loop is not None and rt.control_loop.controller is None:
            time.sleep(0.1)  # its estimate table computed: the controller evaluates from now on
        fn = ra.policy("least_loaded")(noop)
        ray.get([fn.remote() for _ in range(200)])  # warm
        start = time.perf_counter()
        ray.get([fn.remote() for _ in range(tasks)])
        rate = tasks / (time.perf_counter() - start)
        assert not rt.history, rt.history
        ra.shutdown()
        return rate

    static, adaptive = [], []
    for _ in range(repeats):  # alternated: a drift of the machine hits both
        static.append(run(plan=plan))
        adaptive.append(run(plan="adaptive", initial=plan, every_s=1.0, dwell_s=3600.0, fractions=(0.5, 1.0)))
    ratios = [x / y for x, y in zip(adaptive, static)]
    out = {"plan": plan, "tasks": tasks, "static_tasks_per_s": [round(x) for x in static],
           "adaptive_tasks_per_s": [round(x) for x in adaptive], "ratio_median": round(statistics.median(ratios), 3)}
    print(f"adaptive vs static {plan}: {out['ratio_median']}x (static {out['static_tasks_per_s']}, "
          f"adaptive {out['adaptive_tasks_per_s']})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true")
    ap.add_argument("--switches", type=int, default=20, help="switches per direction")
    ap.add_argument("--interval", type=float, default=2.0,
                    help="seconds under each plan before the next switch (see the module doc)")
    ap.add_argument("--pairs", default=None, help="only these pairs, e.g. centralized-decentralized,decentralized-hybrid (none: the adaptive figure only)")
    ap.add_argument("--no-adaptive", action="store_true", help="switch pauses only")
    ap.add_argument("--gc-trace", action="store_true",
                    help="record each submitting process's garbage collections beside its pauses (parts_ms: gc_s)")
    ap.add_argument("--probe", action="store_true",
                    help="time a round trip to the state store every 20 ms from the driver meanwhile (\"probe\")")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = PAIRS if not args.pairs else [] if args.pairs == "none" else [tuple(p.split("-")) for p in args.pairs.split(",")]
    if not set(pairs) <= set(PAIRS):
        ap.error(f"--pairs: each of {['-'.join(p) for p in PAIRS]}")
    from ray_adaptive.local_multinode import local_cluster

    with local_cluster(num_nodes=4, num_cpus=2):
        if args.smoke_test:
            probes: dict = {}
            result = {"switches": switches(PAIRS[:1], 1, probes=probes), "probe": probes,
                      "adaptive": adaptive_overhead(300, 1)}
        else:
            probes = {} if args.probe else None
            result = {"switches": switches(pairs, args.switches, args.interval, args.gc_trace, probes)}
            if probes is not None:
                result["probe"] = probes
            if not args.no_adaptive:
                result["adaptive"] = adaptive_overhead(3000, 5)
    result["date"] = time.strftime("%Y-%m-%d")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
