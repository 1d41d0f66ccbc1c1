"""The long fuzz run: check, replay, compile, simulate, status and why on generated bad input, counted.

    python release_tests/fuzz_inputs.py [--smoke-test] [--inputs 100000] [--budget-s 7200] [--out fuzz.json]
    python release_tests/fuzz_inputs.py --mix simulate=1,addresses=1 --inputs 2000   # the newer surfaces only

The generators and the property are the CI fuzz tests' (``tests/_fuzz.py``):
every run ends with exit 0 or 1, no traceback, one error line per file,
within a time bound -- and a policy that passes ``check`` is replayed (run
time: its hooks and Score execute), one in ten also compiled. Inputs are
split among the kinds (policies, scenarios, traces, command lines;
``simulate``'s flags and rate profiles; ``status``/``why`` addresses) by
``--mix``; each kind runs until its share of ``--inputs`` or of
``--budget-s`` is spent. Unlike the CI tests, a problem does not stop the
run: every one is counted and the first few of each kind are kept (the
input's arguments and the tail of its error). Peak memory (the process's
maximum RSS) is reported beside the counts.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import sys
import tempfile
import time

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from _fuzz import (Workspace, address_args, base_scenario, cli_args, policy_input, run_cli, scenario_input,  # noqa: E402
                   simulate_args, trace_input)

from ray_adaptive.dsl import load_policy  # noqa: E402

CHECK_S, REPLAY_S, COMPILE_S = 10.0, 20.0, 60.0
SIMULATE_S, ADDRESS_S = 120.0, 20.0  # (an address is given 5 s of wall time to answer: the bound is CPU, x10 in wall)
MIX = {"policies": 0.65, "scenarios": 0.18, "traces": 0.01, "command_lines": 0.09, "simulate": 0.05, "addresses": 0.02}
KEPT = 5  # problems kept per kind


class _Budget(Exception):
    """The kind's time is spent: end its run (raised through hypothesis, which stops on it)."""


class Tally:
    def __init__(self, deadline: float):
        self.deadline = deadline
        self.inputs = self.runs = 0
        self.problems: dict[str, int] = {}
        self.kept: list = []

    def record(self, outcome) -> bool:
        """Count one run; False if it had a problem."""
        self.runs += 1
        p = outcome.problem()
        if p is None:
            return True
        self.problems[p] = self.problems.get(p, 0) + 1
        if len(self.kept) < KEPT:
            self.kept.append(outcome.as_dict())
        return False

    def next_input(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Budget
        self.inputs += 1


def _run(kind: str, n: int, seconds: float, ws: Workspace) -> dict:
    tally = Tally(time.monotonic() + seconds)
    root = ws.root
    config = settings(max_examples=n, deadline=None, database=None, derandomize=False,
                      suppress_health_check=list(HealthCheck), phases=[Phase.generate])

    if kind == "policies":
        @config
        @given(data=policy_input(), compile_it=st.integers(0, 9))
        def prop(data, compile_it):
            tally.next_input()
            path = root / "p.policy"
            path.write_bytes(data)
            out = run_cli(["check", path], CHECK_S)
            if not tally.record(out) or out.exit_code != 0:
                return
            policy = load_policy(path)
            (root / "p.json").write_text(json.dumps(base_scenario(policy)))
            tally.record(run_cli(["replay", path, root / "p.json", "--quiet"], REPLAY_S))
            if compile_it == 0:
                tally.record(run_cli(["compile", path, "--rate", "200", "--window", "12", "--nodes", "3",
                                      "--no-measure"], COMPILE_S))
    elif kind == "scenarios":
        @config
        @given(data=st.sampled_from(["drf_lb", "fifo", "zone_affinity", "weighted_fair", "bin_pack"]).flatmap(
            lambda name: st.tuples(st.just(name), scenario_input(base_scenario(load_policy(name))))))
        def prop(data):
            tally.next_input()
            name, doc = data
            (root / "s.json").write_bytes(doc)
            tally.record(run_cli(["replay", name, root / "s.json", "--quiet"], REPLAY_S))
    elif kind == "traces":
        @config
        @given(doc=trace_input(base_scenario(load_policy("drf_lb"), tasks=15)), resources=st.booleans())
        def prop(doc, resources):
            tally.next_input()
            (root / "t.csv").write_bytes(doc)
            extra = ["--node-resources", '{"CPU": 2}'] if resources else []
            tally.record(run_cli(["compile", "drf_lb", "--trace", root / "t.csv", "--window", "10", "--nodes", "3",
                                  "--no-measure", *extra], COMPILE_S))
    elif kind == "simulate":  # (drawn before next_input: the budget's end must not stop a draw midway)
        @config
        @given(args=simulate_args(ws))
        def prop(args):
            tally.next_input()
            tally.record(run_cli(args, SIMULATE_S))
    elif kind == "addresses":
        @config
        @given(args=address_args())
        def prop(args):
            tally.next_input()
            tally.record(run_cli(args, ADDRESS_S))
    else:
        @config
        @given(data=st.data())
        def prop(data):
            tally.next_input()
            args = data.draw(cli_args(ws))
            tally.record(run_cli(args, COMPILE_S if args[:1] == ["compile"] else REPLAY_S))

    t0 = time.monotonic()
    try:
        prop()
    except _Budget:
        pass
    return {"inputs": tally.inputs, "runs": tally.runs, "problems": tally.problems, "first_problems": tally.kept,
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100_000, help="inputs in all, split by --mix")
    ap.add_argument("--budget-s", type=float, default=4 * 3600, help="seconds in all, split by --mix")
    ap.add_argument("--mix", default=",".join(f"{k}={v}" for k, v in MIX.items()))
    ap.add_argument("--smoke-test", action="store_true", help="12 inputs, 20 s (of the --mix given)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    mix = {k: float(v) for k, v in (part.split("=") for part in args.mix.split(","))}
    inputs, budget = (12, 20.0) if args.smoke_test else (args.inputs, args.budget_s)
    total = sum(mix.values())
    out = {"inputs_asked": inputs, "budget_s": budget, "kinds": {}}
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        ws = Workspace.make(pathlib.Path(tmp))
        for kind, share in mix.items():
            n = max(1, round(inputs * share / total))
            out["kinds"][kind] = _run(kind, n, budget * share / total, ws)
            k = out["kinds"][kind]
            print(f"{kind}: {k['inputs']} inputs, {k['runs']} runs, problems {k['problems'] or 'none'} "
                  f"({k['seconds']} s)", flush=True)
    out["inputs"] = sum(k["inputs"] for k in out["kinds"].values())
    out["runs"] = sum(k["runs"] for k in out["kinds"].values())
    out["problems"] = sum(sum(k["problems"].values()) for k in out["kinds"].values())
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(f"in all: {out['inputs']} inputs, {out['runs']} runs, {out['problems']} problems, "
          f"peak RSS {out['peak_rss_mib']} MiB")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 1 if out["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
