"""Every benchmark under release_tests/ still runs: its --smoke-test, checked for well-formed figures.

The figures themselves are measured by running the scripts in full (README,
"Benchmarks"); here only that each script ends cleanly and writes what it
says, so that a change breaking one is caught in CI, not at the next
release measurement. (agreement_compiler.py --smoke-test once failed on a
bursty workload with an arrival before 0, unnoticed.) The Ray benchmarks
start their own local clusters, next to the tests' shared one.
"""

import json
import pathlib
import subprocess
import sys

import pytest

RELEASE = pathlib.Path(__file__).resolve().parent.parent / "release_tests"


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and x > 0


def _replay(d):
    assert set(d) == {"drf_lb", "least_loaded", "fifo"}
    assert all(v["decisions"] == v["tasks"] > 0 and _positive(v["decisions_per_s_median"]) for v in d.values())


def _compiler(d):
    assert {"compile", "sweep", "simulator"} <= set(d)
    assert _positive(d["compile"]["compile_s_median"]) and d["compile"]["plans"] > 0 and d["compile"]["choice"]


def _agreement(d):
    assert d["total"] == sum(len(v) for v in d["workloads"].values()) > 0
    assert 0 <= d["agree"] <= d["total"]


def _resources(d):
    assert d["leaked_resources"] in ({}, [], 0, None), d["leaked_resources"]
    assert _positive(d["set_resource"]["resize_median_ms"])
    assert _positive(d["throughput"]["plain_tasks_per_s_median"])


def _runtime(d):
    combos = {(r["plan"].split("+")[0], r["policy"], r["loop"]) for r in d["runs"]}
    assert combos == {(plan, policy, loop) for plan in ("centralized", "decentralized", "hybrid")
                      for policy in ("least_loaded", "drf_lb") for loop in (".remote()", ".submit()")}
    for r in d["runs"]:
        assert all(_positive(r[k]) for k in ("plain_tasks_per_s", "policy_tasks_per_s", "ratio_median",
                                             "decision_p50_us", "driver_cpu_us_per_task_policy")), r


@pytest.mark.parametrize("script, check", [
    ("bench_replay.py", _replay),
    ("bench_compiler.py", _compiler),
    ("agreement_compiler.py", _agreement),
    ("bench_resources.py", _resources),
    ("bench_runtime.py", _runtime),
])
def test_release_benchmark_smoke_test_runs(script, check, tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(RELEASE / script), "--smoke-test", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    check(json.loads(out.read_text()))
