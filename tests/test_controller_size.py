"""The adaptive controller follows the cluster's size (issue 34): a measurement carries the node count and
executors; the controller keeps the plan in force until it has the table for the new size, then applies its
usual rules to it; the control loop computes one table per size (once) and hands it over; the simulated
adaptive run does the same when nodes join and leave."""

from __future__ import annotations

import math
from types import SimpleNamespace

from ray_adaptive.control import Controller, EstimateTable, Measurement, PlanEstimate, Settings
from ray_adaptive.control_loop import ControlLoop
from ray_adaptive.plan import Plan

C, D = Plan("centralized", "centralized"), Plan("decentralized", "decentralized")


def _table(nodes: int, best: str) -> EstimateTable:
    """One rate; ``best`` carries the load (the other saturates), both within the limit."""
    cap = 50.0 * nodes
    tp = {"centralized": 450.0 if best == "centralized" else 100.0, "decentralized": 10.0 * cap}
    cell = {name: PlanEstimate(tp[name], 1.0, 1.05, 1e-3) for name in tp}
    if best == "centralized":
        cell["decentralized"] = PlanEstimate(10 * cap, 1.0, 1.05, 2e-3)
    return EstimateTable("p", 1.2, nodes, cap, (0.4 * cap,), (1.0,), (C, D), {(0, 0): cell}, {(0, 0): best},
                         {"nodes": nodes, "executors": 1, "total_executors": nodes, "duration_mean_s": 0.02})


def test_the_controller_waits_for_the_new_size_s_table_then_switches_by_its_rules():
    small, big = _table(12, "centralized"), _table(200, "decentralized")
    ctl = Controller(small, Settings(consecutive=2, dwell_s=5.0), "centralized", now=0.0)
    assert ctl.evaluate(Measurement(10.0, 240.0, nodes=12, executors=12)).reason.startswith("the compiler's choice")
    v = ctl.evaluate(Measurement(12.0, 4000.0, nodes=200, executors=200))
    assert v.switch_to is None and "estimates in use are for 12" in v.reason
    ctl.use(big)  # (the first evaluation on a new size's table needs no agreement: the size is a fact)
    v = ctl.evaluate(Measurement(14.0, 4000.0, nodes=200, executors=200))
    assert v.switch_to == D and v.reason.startswith("cluster 12 -> 200 nodes; goodput:")
    assert v.measured["nodes"] == 200


def test_after_the_first_evaluation_at_a_new_size_agreement_and_dwell_stand_again():
    # (urgent off: at 4,000 tasks/s the decentralized plan brings several times the selector's goodput, a switch that
    # needs no agreement anyway; this is about agreement)
    ctl = Controller(_table(12, "centralized"), Settings(consecutive=2, dwell_s=5.0, urgent=math.inf), "centralized",
                     now=0.0)
    ctl.use(_table(200, "centralized"))
    assert ctl.evaluate(Measurement(10.0, 4000.0, nodes=200, executors=200)).switch_to is None  # (its choice)
    ctl.use(_table(200, "decentralized"))  # (a refresh at the same size: no waiver)
    verdicts = [ctl.evaluate(Measurement(t, 4000.0, nodes=200, executors=200)) for t in (12.0, 14.0)]
    assert verdicts[0].switch_to is None and "1 of 2 evaluations agree" in verdicts[0].reason
    assert verdicts[1].switch_to == D
    ctl.switched("decentralized", 14.0)
    ctl.use(_table(12, "centralized"))
    v = ctl.evaluate(Measurement(16.0, 240.0, nodes=12, executors=12))
    assert v.switch_to is None and "dwelling" in v.reason


def test_a_switch_to_the_plan_in_force_on_new_nodes_restarts_no_dwell():
    ctl = Controller(_table(12, "centralized"), Settings(consecutive=1, dwell_s=100.0), "centralized", now=-math.inf)
    ctl.switched("centralized", 50.0, pause_s=0.1)  # (nodes joined: the same plan on the new node list)
    ctl.use(_table(200, "decentralized"))
    assert ctl.evaluate(Measurement(51.0, 4000.0, nodes=200, executors=200)).switch_to == D
    ctl.switched("decentralized", 52.0)
    assert ctl.evaluate(Measurement(53.0, 4000.0, nodes=200, executors=200)).switch_to is None


def test_a_measurement_without_a_size_reads_as_before():
    m = Measurement(1.0, 10.0)
    assert "nodes" not in m.as_dict() and _table(3, "centralized").fits(m.nodes, m.executors)


class _Runtime:
    """What the control loop reads of a runtime, for its size logic (no Ray: its thread ends at once)."""

    name = "p"
    plan = C

    def cluster_loads(self):
        return {}

    def recorded_tasks(self, since):
        return []

    def clock(self):
        return 0.0


def test_the_control_loop_computes_a_table_per_size_once_and_hands_it_to_the_controller():
    nodes = [SimpleNamespace(executors=1, queue=2) for _ in range(12)]
    asked = []

    def table_for(trace, cluster=None):
        asked.append((trace, len(cluster)))
        return _table(len(cluster), "centralized" if len(cluster) < 100 else "decentralized")

    loop = ControlLoop(_Runtime(), Settings(), table_for, cluster=lambda: list(nodes))
    loop._thread.join(10)
    assert loop.controller is not None and loop.table.nodes == 12 and asked == [(None, 12)]
    m = loop._follow_size(Measurement(1.0, 240.0))
    assert (m.nodes, m.executors) == (12, 12) and len(asked) == 1
    nodes += [SimpleNamespace(executors=1, queue=2) for _ in range(188)]
    m = loop._follow_size(Measurement(2.0, 4000.0))
    assert (m.nodes, loop.table.nodes, loop.controller.table.nodes) == (200, 200, 200) and asked[-1] == (None, 200)
    del nodes[12:]
    loop._follow_size(Measurement(3.0, 240.0))
    assert loop.controller.table.nodes == 12 and len(asked) == 2  # (12 nodes' table kept: not computed again)
