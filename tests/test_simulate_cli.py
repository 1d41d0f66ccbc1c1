"""``ray-adaptive simulate``: any policy, any plan, tenants or a trace, fixed rates or a rate over time."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from ray_adaptive.cli import main
from ray_adaptive.dsl import shipped_policies
from ray_adaptive.workload.generate import Tenant, tenant_workload
from ray_adaptive.workload.tenants import parse_tenants, workload_spec_from_dict
from ray_adaptive.workload.trace import write_trace
from ray_adaptive.errors import ScenarioError

QUICK = ["--nodes", "4", "--warmup", "0.2", "--window", "60", "--no-progress"]
ONE_PLAN = {"drf_lb": "hybrid", "weighted_fair": "decentralized+store per decision", "locality": "centralized"}


def simulate(*args, tmp_path, seconds=("--seconds", "0.5")):
    return CliRunner().invoke(main, ["simulate", *args, *QUICK, *seconds, "--out", str(tmp_path)],
                              catch_exceptions=False)


@pytest.mark.parametrize("policy", shipped_policies())
def test_every_shipped_policy_simulates(policy, tmp_path):
    plan = ONE_PLAN.get(policy, "centralized+power-of-2")
    out = simulate(policy, "--plan", plan, "--rates", "60%", tmp_path=tmp_path)
    assert out.exit_code == 0, out.output
    df = pd.read_csv(tmp_path / "sweep.csv")
    assert plan in set(df["plan"]) and df["chosen"].any()  # the plan asked for, and the compiler's choice
    assert "The compiler's choice vs the simulator's best plan" in out.output


@pytest.mark.parametrize("policy", ["drf_lb", "weighted_fair", "round_robin"])
def test_every_plan_of_a_policy_simulates(policy, tmp_path):
    out = simulate(policy, "--plan", "all", "--rates", "50,250", tmp_path=tmp_path)
    assert out.exit_code == 0, out.output
    df = pd.read_csv(tmp_path / "sweep.csv")
    assert set(df["rate"]) == {50, 250} and len(df) >= 2 * 5
    for name in ("goodput_vs_rate", "jfi_vs_rate", "goodput_estimated_vs_simulated", "competitive_ratio_vs_rate"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def test_weighted_tenants_and_a_rate_over_time(tmp_path):
    spec = tmp_path / "w.json"
    spec.write_text(json.dumps({"tenants": [{"name": "a", "share": 1, "fields": {"weight": 1, "cost": 1.0}},
                                            {"name": "b", "share": 1, "fields": {"weight": 3, "cost": 1.0}}],
                                "rate": "steps:0=60,1=250", "seconds": 2}))
    out = simulate("weighted_fair", "--tenants", str(spec), "--plan", "centralized,hybrid", "--every", "0.5",
                   tmp_path=tmp_path / "out", seconds=())  # (the workload file's 2 s)
    assert out.exit_code == 0, out.output
    tl = pd.read_csv(tmp_path / "out" / "timeline.csv")
    assert set(tl["plan"]) == {"centralized", "hybrid"} and len(tl) == 2 * 4
    assert tl[tl["start"] >= 1.0]["offered"].mean() > 3 * tl[tl["start"] < 1.0]["offered"].mean()
    assert (tmp_path / "out" / "timeline.png").exists() and "steps:0=60,1=250" in out.output


def test_a_trace_at_its_own_rate(tmp_path):
    trace = tmp_path / "t.csv"
    write_trace(trace, tenant_workload([Tenant("a", 40), Tenant("b", 80)], 1.5, nodes=4, seed=2).tasks)
    out = simulate("drf_lb", "--workload", str(trace), "--plan", "centralized", tmp_path=tmp_path / "out")
    assert out.exit_code == 0, out.output
    df = pd.read_csv(tmp_path / "out" / "sweep.csv")
    assert len(set(df["rate"])) == 1 and 100 < df["rate"].iloc[0] < 140


@pytest.mark.parametrize("args, message", [
    (["drf_lb", "--plan", "nope"], "no plan 'nope' for policy 'drf_lb'; plans: centralized"),
    (["drf_lb", "--rates", "fast"], "--rates must be comma-separated numbers"),
    (["drf_lb", "--rates", "wave:1"], "KIND one of const, steps"),
    (["drf_lb", "--tenants", "a"], "each tenant is NAME:SHARE"),
    (["drf_lb", "--tenants", "a:1", "--workload", "x.csv"], "give --workload or --tenants, not both"),
    (["no_such_policy"], "shipped policies: "),
])
def test_errors_are_one_line(args, message, tmp_path):
    out = CliRunner().invoke(main, ["simulate", *args, "--out", str(tmp_path)])
    assert out.exit_code == 1 and message in out.output and "Traceback" not in out.output


def test_tenant_specs():
    s = parse_tenants("a:1,greedy:3:weight=2")
    assert [(t.name, t.share, t.fields) for t in s.tenants] == [("a", 1.0, ()), ("greedy", 3.0, (("weight", 2),))]
    with pytest.raises(ScenarioError, match="unknown key 'tenats'; expected keys"):
        workload_spec_from_dict({"tenants": [{"name": "a"}], "tenats": 1}, "w.json")
    with pytest.raises(ScenarioError, match="w.json: 'rate': a ramp profile needs"):
        workload_spec_from_dict({"tenants": [{"name": "a"}], "rate": {"kind": "ramp"}}, "w.json")
    with pytest.raises(ScenarioError, match="tenant names must be unique"):
        parse_tenants("a:1,a:2")
