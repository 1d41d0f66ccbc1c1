"""What each role of a lowered plan runs: the specs the simulator and the runtime build their schedulers from."""

import dataclasses

from ray_adaptive.compiler import analyze, lower, select_plan
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import NodeState, Role
from ray_adaptive.plan.roles import lease_spec, role_specs
from ray_adaptive.plan.scoring import SplitScoring


def _lowered(policy, arch):
    return lower(select_plan(policy, arch, nodes=4, executors=1, queue=0)[0], analyze(policy))


def test_which_plans_lease_their_selector_and_what_the_holder_runs():
    """The holder runs the whole policy; a hybrid whose placements keep State never leases."""

    policy = load_policy("drf_lb")
    plan = {a: _lowered(policy, a)
            for a in ("centralized", "decentralized", "hybrid")}
    assert lease_spec(plan["centralized"]) == role_specs(plan["centralized"])[Role.SELECTOR]
    assert lease_spec(plan["decentralized"]) is None  # no selector to lease
    hybrid = lease_spec(plan["hybrid"])
    assert not plan["hybrid"].local_state and hybrid.program is plan["hybrid"].policy
    assert hybrid.hooks and not hybrid.pool and not hybrid.fifo  # the whole policy over every node
    assert lease_spec(dataclasses.replace(plan["hybrid"], local_state=True)) is None


def test_every_role_scores_with_the_compilers_split():
    """Each role gets the split of the Score it runs, and its scheduler scores by parts."""

    policy = load_policy("drf_lb")
    nodes = [NodeState(f"n{i}", i, 1, 0, {}) for i in range(4)]
    for arch in ("centralized", "decentralized", "hybrid"):
        plan = _lowered(policy, arch)
        specs = role_specs(plan)
        expected = {"selector": plan.task_split if arch == "hybrid" else plan.split,
                    "schedulers": plan.node_split if arch == "hybrid" else plan.split}
        for role, spec in specs.items():
            assert spec.split is not None and spec.split == expected[role], (arch, role)
            assert isinstance(spec.scheduler(nodes).scoring, SplitScoring), (arch, role)
        if arch != "decentralized":
            assert lease_spec(plan).split == plan.split


def test_auto_without_a_rate_compiles_for_the_execution_bound_and_says_so():
    # ra.start(policy) with no rate= (a job's first line) once failed: "give an arrival rate"
    policy = load_policy("zone_affinity")
    plan, why = select_plan(policy, "auto", nodes=3, executors=2, queue=2)
    assert "(no rate given: the execution bound)" in why and f"at {3 * 2 * 510 / 12:.0f} tasks/s" in why
    given, why_given = select_plan(policy, "auto", nodes=3, executors=2, queue=2, rate=50)
    assert "at 50 tasks/s:" in why_given and "no rate given" not in why_given
