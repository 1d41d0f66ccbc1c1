"""The compiler's choice vs the simulator's best plan (every plan simulated), on four workloads.

Rates: well below saturation, in the band where only decentralized plans
carry the load, and well above saturation. (release_tests/agreement_compiler.py
runs 7 rates per workload, 3 s each, on five workloads, and reports where
they differ.)
"""

import pytest

from ray_adaptive.compiler import Profile
from ray_adaptive.experiments.reproduce import WORKLOADS, agreement

FIXED = Profile(default_unit_s=10e-6)
BY_NAME = {w.name: w for w in WORKLOADS}


@pytest.mark.parametrize("name", ["paper", "four-tenants-8-nodes", "lognormal-24-nodes", "six-tenants-16-nodes"])
def test_the_choice_is_the_simulators_best(name):
    exp = BY_NAME[name]
    rates = [round(f * exp.capacity) for f in (0.4, 0.9, 1.6)]
    rows, per_rate = agreement(exp, rates, seconds=1.1, warmup=0.3, profile=FIXED, window=360)
    for a in per_rate:
        assert a["agrees"], a
    chosen = [next(r for r in rows if r["rate"] == rate and r["chosen"]) for rate in rates]
    assert chosen[0]["architecture"] == "centralized"  # far below capacity: the simplest plan
    assert chosen[-1]["architecture"] == "hybrid" or exp.capacity < chosen[-1]["throughput_est"]
