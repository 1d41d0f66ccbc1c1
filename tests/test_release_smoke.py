"""Every benchmark of release_tests/release_tests.yaml still runs: its --smoke-test, checked for well-formed figures.

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
    assert combos == {(plan, "drf_lb", loop) for plan in ("centralized", "decentralized", "hybrid")
                      for loop in (".remote()", ".submit()")}  # (the smoke runs its last policy only)
    for r in d["runs"]:
        assert all(_positive(r[k]) for k in ("plain_tasks_per_s", "policy_tasks_per_s", "ratio_median",
                                             "decision_p50_us", "driver_cpu_us_per_task_policy")), r


def _switch(d):
    assert d["switches"] and all(v["samples"] >= 1 and _positive(v["pause_p99_ms"]) for v in d["switches"].values())
    for v in d["switches"].values():  # where each pause and freeze went
        assert set(v["freeze_steps_pct_ms"]) == {"acks", "collect", "publish"}, v
        assert {"idle", "frozen", "handing", "after"} <= set(v["parts_pct_ms"]), v
    assert _positive(d["adaptive"]["ratio_median"])
    # the store's round trips timed beside the switches (--probe): some between them, at least
    assert set(d["probe"]) == {"centralized-decentralized"}, d["probe"]  # (the smoke's one pair)
    for split in d["probe"].values():
        assert split["between"]["samples"] > 0 and _positive(split["between"]["p50_ms"]), split


def _join(d):
    assert {r["spare"] for r in d["runs"]} == {True, False}
    assert all(_positive(r["in_force_s"]) and _positive(r["first_task_s"]) for r in d["runs"])
    assert all(r["from_spare"] >= 1 for r in d["runs"] if r["spare"] and r["plan"] != "decentralized")


def _check_estimates(d):
    s = d["summary"]
    assert s["points"] == len(d["points"]) > 0 and 0 <= s["agree"] <= s["points"]
    for p in d["points"]:
        assert {r["role"] for r in p["plans"]} >= {"chosen"} and p["best"]


def _scale(d):
    assert d["compile"] and all(_positive(r["wall_s_median"]) and r["choice"] for r in d["compile"])
    assert d["ramp"]["plans"] and all(_positive(x["events_per_s"]) and x["phases"] for x in d["ramp"]["plans"].values())
    ad = d["adaptive_ramp"]
    assert _positive(ad["events_per_s"]) and _positive(ad["wall_s"]) and len(ad["phases"]) == 5
    assert ad["evaluations"] > 0 and all({"time", "from", "to", "reason", "rate"} <= set(x) for x in ad["switches"])


def _boot(d):
    assert d["job_status"] == "SUCCEEDED" and d["job_output"]["misplaced"] == 0
    # SIGTERM to each `ray start --block` stops its node's processes: none is left for a SIGKILL
    assert _positive(d["cluster_up_s"]) and d["sigkilled_after_stop"] == 0, d


def _fuzz(d):
    assert d["inputs"] > 0 and d["runs"] >= d["inputs"] and d["problems"] == 0, d
    assert _positive(d["peak_rss_mib"])


def _ray_range(d):
    assert d["ray_installed"] == d["ray_requested"] and d["pytest_exit"] == 0, d.get("pytest_tail", d)
    assert d["failed"] == 0 and d["passed"] > 0 and d["passed"] + d["skipped"] == len(d["tests"]), d
    assert all(_positive(d[k]) for k in ("venv_s", "install_s", "tests_s", "total_s"))


def _shared_service(d):
    assert d["jain"] >= 0.95 and min(d["window_tasks"]) > 0, d
    assert all(_positive(d[k]["evicted_s"]) and d[k]["settled_s"] >= d[k]["evicted_s"] for k in ("stop_job", "sigkill"))
    assert all(_positive(x) for x in d["first_placement_s"].values()) and d["ran"] == d["tasks"], d


def _chaos(d):
    assert d["ok"], {k: d[k] for k in ("lost", "run_twice", "audit_failures", "leaked_actors", "leaked_resources")}
    assert d["faults_injected"] >= 3 and d["finished"] > 0 and d["audits"] == d["audits_exact"] >= 2
    assert d["lost_count"] == d["run_twice_count"] == 0


def _actors(d):
    assert _positive(d["plain_create_to_ready_s_median"]) and _positive(d["policy_create_to_ready_s_median"])
    assert _positive(d["ratio_median"]) and d["policy_actors_ended"] == d["policy_actors"] > 0, d
    assert d["leaked_resources"] == {}, d["leaked_resources"]


def _preempt(d):
    assert d["low_results_ok"] and d["completed_once"] and d["audit_exact"], d
    assert d["selector"]["preemptions"] == 1 and sorted(d["runs_started_per_low_task"].values())[-1] == 2, d
    assert d["state_after"] == {"holding": 0} and d["high_started_after_s"] >= d["grace_s"] - 0.05, d


def _scheduler_bound(d):
    assert d["plain_noop"]["tasks"] > 0 and _positive(d["plain_noop"]["tasks_per_s"]), d["plain_noop"]
    policy = [r for r in d["rows"] if r["plan"] != "plain"]
    assert {r["architecture"] for r in policy} == {"centralized", "decentralized", "hybrid"}
    assert {r["rate"] for r in d["rows"] if r["plan"] == "plain"} == set(d["rates"])
    for r in d["rows"]:
        assert r["ran"] + r["dropped"] == r["arrived"] > 0 and r["goodput"] > 0 and 0 < r["jfi"] <= 1 + 1e-9, r
        assert r["placed"] > 0 and 0 < r["jfi_placed"] <= 1 + 1e-9, r
        assert all(0 <= r["dropped_placed_late"][t] <= n for t, n in r["dropped_unplaced"].items()), r
    for r in policy:
        assert r["decisions"] > 0 and _positive(r["decision_p50_ms"]), r
        assert _positive(r["est_throughput"]) and _positive(r["est_competitive_ratio"]) and r["compiler_choice"], r
    for r in (r for r in policy if r["architecture"] != "decentralized"):  # (the selector's slots, sampled)
        assert r["selector_samples"] > 0 and set(r["slots_by_tenant"]) == {"a", "b", "greedy"}, r
        assert r["oldest_running_s"] < 5.0, r  # (2 ms tasks: one counted running for longer lost its finish)
    for r in (r for r in policy if r["architecture"] == "hybrid"):  # (its forwarding rounds: one call or more)
        assert r["forward_rounds_per_s"] > 0 and r["forward_calls_per_round"] >= 1, r
        assert _positive(r["forward_round_ms"]) and r["forward_slack_ms"] >= 0, r


def _reclaim(d):
    assert d["reach_target_s"] == d["timeout_s"] + d["task_s"], d
    for r in (d["drf_lb"], d["drf_reclaim"]):
        assert r["results_ok"] and r["completed_once"] and r["audit_exact"], r
        assert 0 < r["jain"] <= 1 + 1e-9 and _positive(r["backlog_period_s"]), r
        assert r["b_reaches_fair_share_after_s"] is not None, r
    assert d["drf_lb"]["preemptions"] == 0 and d["drf_lb"]["stopped_runs"] == 0, d["drf_lb"]  # (no Preempt)
    assert d["drf_reclaim"]["grace_s"] == 2, d["drf_reclaim"]


def _aging(d):
    for v in ("aging", "none"):
        r = d[v]
        assert r["results_ok"] and r["completed_once"] and _positive(r["low_started_after_s"]), r
        assert r["high_tasks"] > 0 and 0 < r["high_busy_fraction_while_low_waited"] <= 1 + 1e-9, r
    assert d["aging"]["target_s"] == d["max_age_s"] + 1.0, d["aging"]


def _calibrate_host(d):
    """The calibrated model predicts the selector's multi-client ceiling, held out of the fit, within 25%."""
    p = d["profile"]
    assert 0 < p["host_cores"] <= d["saturated"]["cores"] and p["task_cpu_s"] > 0 and d["active_cores"] >= 0, d
    fitted = [r for r in d["rows"] if r["role"] == "fit"]
    assert {r["plan"] for r in fitted} >= {"plain", "centralized"}, d["rows"]
    held_out = [r for r in d["rows"] if r["role"] == "predicted"]
    assert held_out and all(r["rate"] in d["check_rates"] and r["plan"] == "centralized" for r in held_out), d
    assert all(r["error_calibrated"] is not None for r in fitted if r["plan"] != "plain"), d["rows"]
    assert all(r["runs"] == d["repeats"] == len(r["placed_runs"]) for r in d["rows"]), d["rows"]
    a = d["agreement"]  # (every plan's point is judged: within 15%, or straddled by its own runs)
    assert a["points"] == len([r for r in d["rows"] if r["plan"] != "plain"]) > 0, (a, d["rows"])
    assert a["within_15pct_or_runs"] == sum(abs(r["error_calibrated"]) <= 0.15 or r["within_runs"]
                                             for r in d["rows"] if r["plan"] != "plain"), a
    for r in held_out:
        assert r["placed"] < 0.8 * r["offered"], r  # (above the knee: it is the ceiling that is predicted)
        assert abs(r["error_calibrated"]) <= 0.25, r


CHECKS = {"bench_replay": _replay, "bench_compiler": _compiler, "agreement_compiler": _agreement,
          "bench_resources": _resources, "bench_runtime": _runtime, "bench_switch": _switch, "bench_join": _join,
          "check_estimates": _check_estimates, "bench_scale": _scale, "boot_local": _boot,
          "fuzz_inputs": _fuzz, "ray_range": _ray_range, "shared_service": _shared_service,
          "chaos": _chaos, "bench_actors": _actors, "preempt_ray": _preempt,
          "reclaim_ray": _reclaim, "aging_ray": _aging,
          "scheduler_bound": _scheduler_bound, "calibrate_host": _calibrate_host}


def _release_tests() -> list:
    import yaml  # (a dependency of Ray's)

    return yaml.safe_load((RELEASE / "release_tests.yaml").read_text())


def test_every_release_test_has_a_smoke_check():
    assert {e["name"] for e in _release_tests()} == set(CHECKS)


def _params():
    """Each release test's smoke run; those the yaml marks ``ci_smoke: false`` are ``slow`` (kept out of CI
    for its time limit: ``pytest -m slow tests/test_release_smoke.py`` runs them)."""
    return [pytest.param(e, id=e["name"], marks=() if e.get("ci_smoke", True) else pytest.mark.slow)
            for e in _release_tests()]


@pytest.mark.parametrize("entry", _params())
def test_release_benchmark_smoke_test_runs(entry, tmp_path):
    out = tmp_path / "figures.json"
    script = RELEASE.parent / entry["script"].split()[1]  # "python release_tests/<name>.py --out ..."
    proc = subprocess.run([sys.executable, str(script), entry["smoke_test"], "--out", str(out)],
                          capture_output=True, text=True, timeout=entry["timeout_s"])
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    CHECKS[entry["name"]](json.loads(out.read_text()))
