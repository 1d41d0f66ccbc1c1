"""Discrete-event simulation of the cluster model, and the ideal scheduler's replay."""

from ray_adaptive.sim.events import EventLoop
from ray_adaptive.sim.ideal import Decision, IdealScheduler
from ray_adaptive.sim.model import NodeSpec, TaskSpec
from ray_adaptive.sim.replay import Replay, ReplayResult, replay
from ray_adaptive.sim.scenario import Scenario, check_fields, load_scenario, scenario_from_dict

__all__ = [
    "EventLoop", "Decision", "IdealScheduler", "NodeSpec", "TaskSpec", "Replay", "ReplayResult",
    "replay", "Scenario", "check_fields", "load_scenario", "scenario_from_dict",
]
