"""Fuzzing, bounded for CI: every run of check, replay and compile on generated bad input ends cleanly.

The generators and the property are in ``tests/_fuzz.py`` (shared with the long
release run, ``release_tests/fuzz_inputs.py``): exit code 0 or 1, no traceback,
one error line, nothing on stderr after success, and within a time bound.
Examples are derandomized (the same inputs on every run) and few; the release
run tries 100,000. Nothing here starts Ray.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from _fuzz import (Workspace, address_args, base_scenario, cli_args, policy_input, run_cli, scenario_input,
                   simulate_args, trace_input)
from ray_adaptive.dsl import load_policy

CHECK_S, REPLAY_S, COMPILE_S = 10.0, 20.0, 60.0  # time bounds of one run (far above what any takes here)
SIMULATE_S, ADDRESS_S = 120.0, 20.0


def fuzz(n: int):
    # (no explain phase: it traces every line run, which makes a replay a hundred times slower than its bound)
    return settings(max_examples=n, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[p for p in Phase if p is not Phase.explain])


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return Workspace.make(tmp_path_factory.mktemp("fuzz"))


def clean(outcome):
    assert outcome.problem() is None, outcome.as_dict()
    return outcome


@fuzz(100)
@given(data=policy_input(), compile_it=st.integers(0, 9))
def test_policies_check_then_replay_and_compile_cleanly(ws, data, compile_it):
    path = ws.root / "p.policy"
    path.write_bytes(data)
    if clean(run_cli(["check", path], CHECK_S)).exit_code != 0:
        return
    policy = load_policy(path)  # it passed check: it runs, and the run is bounded
    (ws.root / "p.json").write_text(__import__("json").dumps(base_scenario(policy)))
    clean(run_cli(["replay", path, ws.root / "p.json", "--quiet"], REPLAY_S))
    if compile_it == 0:
        clean(run_cli(["compile", path, "--rate", "200", "--window", "12", "--nodes", "3", "--no-measure"], COMPILE_S))


@fuzz(60)
@given(data=st.sampled_from(["drf_lb", "fifo", "zone_affinity"]).flatmap(
    lambda name: st.tuples(st.just(name), scenario_input(base_scenario(load_policy(name))))))
def test_scenarios_replay_cleanly(ws, data):
    name, doc = data
    (ws.root / "s.json").write_bytes(doc)
    clean(run_cli(["replay", name, ws.root / "s.json", "--quiet"], REPLAY_S))


@fuzz(25)
@given(doc=trace_input(base_scenario(load_policy("drf_lb"), tasks=15)), resources=st.booleans())
def test_traces_compile_cleanly(ws, doc, resources):
    (ws.root / "t.csv").write_bytes(doc)
    extra = ["--node-resources", '{"CPU": 2}'] if resources else []
    clean(run_cli(["compile", "drf_lb", "--trace", ws.root / "t.csv", "--window", "10", "--nodes", "3",
                   "--no-measure", *extra], COMPILE_S))


@fuzz(60)
@given(data=st.data())
def test_command_lines_end_cleanly(ws, data):
    args = data.draw(cli_args(ws))
    clean(run_cli(args, COMPILE_S if args[:1] == ["compile"] else REPLAY_S))


@fuzz(10)
@given(data=st.data())
def test_simulate_flags_and_rate_profiles_end_cleanly(ws, data):
    """(issue 36: NaN times, all-zero profiles with --adaptive, runs over the task cap, rates out of range)"""
    clean(run_cli(data.draw(simulate_args(ws)), SIMULATE_S))


@pytest.fixture
def no_driver(monkeypatch):
    """As a fresh process: not connected (the session's cluster may be), and never connecting -- no
    address drawn is a cluster's."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail(f"ray.init reached: {a} {k}"))


@fuzz(40)
@given(args=address_args())
def test_status_and_why_addresses_end_cleanly_in_seconds(no_driver, args):
    """(issue 36: [::1]:6379 and 127.0.0.1:-1 hung for over 80 s; local started a throwaway cluster)"""
    clean(run_cli(args, ADDRESS_S))


def test_a_long_simulation_of_a_rate_over_time_ends_in_seconds(ws):
    """Found by the long run (issue 36): each epoch of a rate over time scanned every task of the run,
    so 3,600 s at 40 tasks/s (7,200 epochs x 144,000 tasks) ran for hours; it takes seconds now."""
    out = clean(run_cli(["simulate", "fifo", "--nodes", "3", "--window", "10", "--warmup", "0.05", "--plan",
                         "centralized", "--no-progress", "--out", str(ws.root / "folder" / "sim"), "--rates",
                         "const:40", "--seconds", "3600"], 60.0))
    assert out.exit_code == 0 and "goodput" in out.stdout


def test_found_by_the_long_run(ws):
    """Two findings of release_tests/fuzz_inputs.py, kept: Python's SyntaxWarning for `1if` printed a
    second, unlocated line under the policy's error; `check -- a b` prints a line per file."""
    path = ws.root / "w.policy"
    path.write_text("Task:\n  x: int\n\nScore(task, node):\n  return 1if 1 else 2 2\n")
    with warnings.catch_warnings(record=True) as seen:  # (a process prints them on stderr; pytest records them)
        out = clean(run_cli(["check", path], CHECK_S))
    assert not [w for w in seen if issubclass(w.category, SyntaxWarning)], [str(w.message) for w in seen]
    assert out.exit_code == 1 and out.stderr.strip().startswith(f"{path}:5:") and out.stderr.count("\n") == 1
    assert clean(run_cli(["--", "check", "--", "--rate", "x"], CHECK_S)).stderr.count("\n") == 2
