"""The scale-out experiment, scaled down (4 -> 24 -> 4 nodes, 4 s phases, seconds to run): the adaptive run is
within 5% of the best static plan within the limit in every phase, follows the cluster's size with its
switches' reasons listed, and loses no task; the command runs it."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from ray_adaptive.cli import main
from ray_adaptive.experiments.scale_out import reproduce_scale_out


def test_the_adaptive_run_keeps_up_with_the_best_static_plan_as_the_cluster_scales(tmp_path):
    lines = []
    r = reproduce_scale_out(tmp_path, quick=True, echo=lines.append)
    assert [s["nodes"] for s in r["summary"]] == [4, 24, 4]
    for s in r["summary"]:
        assert s["ratio"] >= 0.95, s
    assert r["unresolved"] == 0  # (every task finished or dropped: none lost with a node)
    assert any(x["nodes"] == 24 and x["reason"].startswith("cluster 4 -> 24 nodes") for x in r["switches"])
    text = "\n".join(lines)
    assert "phase 2 (24 nodes" in text and "adaptive: started with" in text
    df = pd.read_csv(tmp_path / "scale_out_phases.csv")
    assert {"adaptive", "centralized", "hybrid"} <= set(df["plan"])
    assert df[["goodput", "sched_ms_per_task"]].notna().all().all()


def test_the_command_refuses_scale_out_without_adaptive_or_on_ray():
    r = CliRunner().invoke(main, ["reproduce", "--scale-out"])
    assert r.exit_code != 0 and "--scale-out is for --adaptive" in r.output
    r = CliRunner().invoke(main, ["reproduce", "--adaptive", "--scale-out", "--ray"])
    assert r.exit_code != 0 and "--scale-out is simulated" in r.output
