"""The command line as a user runs it: exit codes, stdout/stderr, no tracebacks."""

import json
import subprocess
import sys

import pytest

from ray_adaptive.workload import scenario_to_dict
from ray_adaptive.workload.generate import multi_tenant


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ray_adaptive", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_replay_prints_one_json_line_per_decision_then_a_summary(tmp_path):
    sc = multi_tenant({"a": 20, "b": 20}, seconds=1.0, nodes=2, seed=1)
    path = tmp_path / "sc.json"
    path.write_text(json.dumps(scenario_to_dict(sc)))
    out = cli("replay", "drf_lb", str(path))
    assert out.returncode == 0, out.stderr
    lines = [json.loads(l) for l in out.stdout.splitlines()]
    decisions, summary = lines[:-1], lines[-1]["summary"]
    assert all(set(d) == {"t", "task", "node", "score"} for d in decisions)
    assert len(decisions) == summary["decisions"] == len(sc.tasks)
    assert sorted(d["task"] for d in decisions) == sorted(t.id for t in sc.tasks)


def test_replay_of_the_shipped_scenario_by_name():
    out = cli("replay", "drf_lb", "drf_3tenants", "--quiet")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["summary"]["tasks"] == 596


@pytest.mark.parametrize("scenario, message", [
    ({"nodes": [{"id": "n0"}], "tasks": [{"id": "t0", "fields": {"tenant": "a", "resource_vec": [1]}}]},
     "tasks[0] (id \"t0\"): missing key 'arrival'"),
    ({"nodes": [{"id": "n0"}], "tasks": [{"id": "t0", "arrival": 0, "fields": {"tenant": "a"}}]},
     "missing field 'resource_vec'"),
    ({"nodes": [{"id": "n0"}], "tasks": [{"id": "t0", "arrival": 0, "fields": {"tenant": 1, "resource_vec": [1]}}]},
     "field 'tenant' must be string"),
])
def test_malformed_scenario_is_one_clear_error(tmp_path, scenario, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(scenario))
    out = cli("replay", "drf_lb", str(path))
    assert out.returncode == 1
    assert message in out.stderr and "Traceback" not in out.stderr + out.stdout


def test_invalid_json_and_missing_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [}')
    out = cli("replay", "drf_lb", str(bad))
    assert out.returncode == 1 and "bad.json:1:" in out.stderr and "Traceback" not in out.stderr
    out = cli("replay", "no_such_policy", str(bad))
    assert out.returncode == 1 and "shipped policies: " in out.stderr and "Traceback" not in out.stderr


def test_demo_prints_shares_over_time_and_fairness():
    out = cli("demo", "--replay")
    assert out.returncode == 0, out.stderr
    assert "dominant share" in out.stdout and "Jain's index" in out.stdout
    rows = {l.split()[0]: l for l in out.stdout.splitlines() if l.split() and l.split()[0] in ("drf_lb", "fifo")}
    jfi = {k: float(v.split()[-1]) for k, v in rows.items()}
    assert jfi["drf_lb"] > jfi["fifo"] + 0.03  # DRF-LB is visibly fairer than FIFO on this scenario
