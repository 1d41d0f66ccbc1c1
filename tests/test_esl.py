"""ESLs on a real 4-node Ray cluster: assert where tasks actually ran."""

from __future__ import annotations

import ast
import time
from collections import Counter
from pathlib import Path

import pytest
import ray

import esl
from ray_adaptive import resources
from ray_adaptive.resources import get_cluster_state

try:
    from tests.conftest import CPUS_PER_NODE, NUM_NODES, assert_no_leaks, wait_for
except ImportError:  # tests/ is not a package: conftest is a top-level module
    from conftest import CPUS_PER_NODE, NUM_NODES, assert_no_leaks, wait_for


@ray.remote(num_cpus=1)
def where(seconds: float = 0.0):
    started = time.time()
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id(), started


@ray.remote(num_cpus=0)
class Recorder:
    def __init__(self):
        self.events = []

    def record(self, what):
        self.events.append(what)

    def get(self):
        return list(self.events)


@ray.remote
def member(rank, recorder=None, seconds=0.0):
    if recorder is not None:
        ray.get(recorder.record.remote(rank))
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()


@ray.remote
class MemberActor:
    def node(self):
        return ray.get_runtime_context().get_node_id()


def nodes_of(refs):
    return [n for n, _ in ray.get(refs)]


def cpu_totals():
    return {n: r["CPU"]["total"] for n, r in get_cluster_state().items()}


# -- co-location -----------------------------------------------------------


def test_colocation_groups_share_a_node(ray_cluster):
    with esl.CoLocation() as colo:
        a = [where.options(**colo.group("a", res_req={"CPU": 1})).remote(0.2) for _ in range(3)]
        b = [where.options(**colo.group("b", res_req={"CPU": 1}, node=ray_cluster.node_ids[3])).remote() for _ in range(2)]
        assert len(set(nodes_of(a))) == 1
        assert set(nodes_of(b)) == {ray_cluster.node_ids[3]}
        assert colo.node_of("a") == nodes_of(a)[0]


@ray.remote(num_cpus=1)
def leader(token, seconds):
    node = esl.CoLocation.join_here(token)
    time.sleep(seconds)
    return node


def test_load_balanced_pairs_of_colocated_tasks(ray_cluster):
    """The slides' composition: leaders load-balanced, each follower with its leader."""
    pairs = NUM_NODES
    with esl.LoadBalance(num_tasks=pairs) as lb, esl.CoLocation() as colo:
        leaders = [
            leader.options(**lb.options()).remote(colo.token(f"pair{i}"), 1.0) for i in range(pairs)
        ]
        followers = [
            where.options(**colo.follow(f"pair{i}", {"CPU": 1})).remote() for i in range(pairs)
        ]
        lead_nodes = ray.get(leaders)
        follow_nodes = nodes_of(followers)
    assert lead_nodes == follow_nodes  # each pair co-located
    assert len(set(lead_nodes)) == pairs  # pairs spread one per node


# -- anti-affinity / spread --------------------------------------------------


def test_anti_affinity_never_shares_a_node(ray_cluster):
    with esl.AntiAffinity() as aa:
        refs = [where.options(**aa.options()).remote(0.5) for _ in range(NUM_NODES)]
        wait_for(lambda: len(aa.nodes_taken()) == NUM_NODES, message="all members running")
        extra = where.options(**aa.options()).remote()
        ready, _ = ray.wait([extra], timeout=0.2)
        assert not ready  # a 5th member must wait for a free node
        nodes = nodes_of(refs)
        assert len(set(nodes)) == NUM_NODES
        ray.get(extra)


def test_spread_evens_out(ray_cluster):
    with esl.Spread() as spread:
        refs = [spread.submit(where, 0.3) for _ in range(2 * NUM_NODES)]
        counts = Counter(nodes_of(refs))
    assert sorted(counts.values()) == [2] * NUM_NODES


# -- gang --------------------------------------------------------------------


def test_gang_spread_members_submitted_first(ray_cluster):
    gang = esl.Gang([{"CPU": 1}] * NUM_NODES, strategy="STRICT_SPREAD", timeout_s=20)
    refs = [gang.submit(i, member, i) for i in range(NUM_NODES)]
    ready, _ = ray.wait(refs, timeout=0.2)
    assert not ready  # nothing starts before the whole gang is held
    with gang:
        assert len(set(gang.nodes)) == NUM_NODES
        assert sorted(ray.get(refs)) == sorted(gang.nodes)
    assert resources.wait_for_pending(10)
    assert cpu_totals() == {n: ray_cluster.static_resources[n]["CPU"] for n in ray_cluster.node_ids}


def test_gang_of_actors_strict_pack(ray_cluster):
    with esl.Gang([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK", timeout_s=20) as gang:
        actors = [gang.submit(i, MemberActor) for i in range(2)]
        nodes = ray.get([a.node.remote() for a in actors])
        assert nodes[0] == nodes[1] == gang.nodes[0]
        for a in actors:
            ray.kill(a)


def test_gang_that_cannot_fit_starts_nothing_and_releases(ray_cluster):
    recorder = Recorder.remote()
    before = cpu_totals()
    # 5 members of 2 CPUs on distinct nodes: only 4 nodes exist.
    gang = esl.Gang([{"CPU": CPUS_PER_NODE}] * (NUM_NODES + 1), strategy="STRICT_SPREAD", timeout_s=1.0)
    refs = [gang.submit(i, member, i, recorder) for i in range(NUM_NODES + 1)]
    with pytest.raises(esl.GangTimeoutError, match="could not be placed"):
        gang.reserve()
    for ref in refs:
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.RayTaskError)):
            ray.get(ref, timeout=10)
    assert ray.get(recorder.get.remote()) == []
    assert cpu_totals() == before
    assert not any(n.startswith("esl_gang") for r in get_cluster_state().values() for n in r)
    ray.kill(recorder)


def test_gang_partial_reservation_is_rolled_back(ray_cluster):
    """A node that became busy after planning: the conversion is short, all nodes roll back."""
    busy = ray_cluster.node_ids[1]
    blocker = where.options(resources={"rack_1": 1}, scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(busy, soft=False)).remote(1.5)
    wait_for(lambda: get_cluster_state([busy])[busy]["CPU"]["available"] < CPUS_PER_NODE)
    before = cpu_totals()
    gang = esl.Gang([{"CPU": CPUS_PER_NODE}] * 2, strategy="STRICT_SPREAD", timeout_s=1.0)
    assert gang._take([ray_cluster.node_ids[0], busy]) is False
    assert cpu_totals() == before
    assert not any(n.startswith("esl_gang") for r in get_cluster_state().values() for n in r)
    ray.get(blocker)


def test_gangs_with_anti_affinity_between_jobs(ray_cluster):
    """Distributed training: each job a co-located gang; the two jobs on different nodes."""
    with esl.AntiAffinity() as aa:
        job1 = esl.Gang([{"CPU": 1}] * 2, strategy="STRICT_PACK", anti_affinity=aa, timeout_s=20)
        job2 = esl.Gang([{"CPU": 1}] * 2, strategy="STRICT_PACK", anti_affinity=aa, timeout_s=20)
        with job1, job2:
            n1 = ray.get([job1.submit(i, member, i) for i in range(2)])
            n2 = ray.get([job2.submit(i, member, i) for i in range(2)])
            assert n1[0] == n1[1] and n2[0] == n2[1]
            assert n1[0] != n2[0]


# -- load balancing / bin packing ----------------------------------------------


@pytest.mark.parametrize("num_tasks", [2 * NUM_NODES, 6])
def test_static_load_balance_within_one_of_even(ray_cluster, num_tasks):
    with esl.LoadBalance(num_tasks=num_tasks) as lb:
        refs = [where.options(**lb.options()).remote(0.5) for _ in range(num_tasks)]
        counts = Counter(nodes_of(refs))
    assert sum(counts.values()) == num_tasks
    spread = [counts.get(n, 0) for n in ray_cluster.node_ids]
    assert max(spread) - min(spread) <= 1, spread


def test_dynamic_load_balance_within_one_of_even(ray_cluster):
    with esl.LoadBalance(dynamic=True) as lb:
        refs = [lb.submit(where, 0.3) for _ in range(2 * NUM_NODES - 1)]
        counts = Counter(nodes_of(refs))
    spread = [counts.get(n, 0) for n in ray_cluster.node_ids]
    assert max(spread) - min(spread) <= 1, spread


def test_bin_pack_fills_nodes_first(ray_cluster):
    with esl.BinPack(per_task={"CPU": 1}) as bp:
        refs = [bp.submit(where, 0.5) for _ in range(CPUS_PER_NODE * 2)]
        counts = Counter(nodes_of(refs))
    assert sorted(counts.values()) == [CPUS_PER_NODE, CPUS_PER_NODE]


# -- soft constraints / data locality ---------------------------------------------


def test_soft_constraint_prefers_then_falls_back(ray_cluster):
    special = ray_cluster.node_ids[-1]
    with esl.SoftConstraint(prefer={"special": 1}) as soft:
        assert nodes_of([where.options(**soft.options()).remote()]) == [special]
        blockers = [soft.submit(where, 1.0) for _ in range(CPUS_PER_NODE)]
        wait_for(lambda: get_cluster_state([special])[special]["CPU"]["available"] == 0)
        fallback = soft.submit(where)
        assert nodes_of([fallback])[0] != special
        assert set(nodes_of(blockers)) == {special}


@ray.remote(num_cpus=1)
def produce():
    import numpy as np

    return np.ones(500_000)  # 4 MB: stored in this node's object store


def test_data_locality_follows_the_object(ray_cluster):
    home = ray_cluster.node_ids[2]
    data = produce.options(scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(home, soft=False)).remote()
    ray.wait([data], fetch_local=False)
    with esl.DataLocality() as dl:
        assert dl.node_of(data) == home
        assert nodes_of([where.options(**dl.options(data)).remote()]) == [home]


# -- ordering: priority, DRF-LB, hierarchical fair share ------------------------------


def test_priority_order_under_contention(ray_cluster):
    slots = NUM_NODES * CPUS_PER_NODE
    with esl.Priority(per_task={"CPU": 1}) as prio:
        blockers = [prio.submit(where, 0.8, priority=0) for _ in range(slots)]
        wait_for(lambda: prio.pending() == 0)
        # A full cluster's worth of each, lows first: when the blockers end,
        # every high-priority task goes before any low one.
        low = [prio.submit(where, 0.2, priority=0) for _ in range(slots)]
        high = [prio.submit(where, 0.2, priority=5) for _ in range(slots)]
        ray.get([f.result() for f in blockers])
        low_starts = [s for _, s in ray.get([f.result(timeout=30) for f in low])]
        high_starts = [s for _, s in ray.get([f.result(timeout=30) for f in high])]
        order = [key for _, key, _ in prio.dispatch_log][slots:]
    assert order == [5] * slots + [0] * slots
    assert max(high_starts) <= min(low_starts)


def test_drf_lb_shares_converge_under_contention(ray_cluster):
    slots = NUM_NODES * CPUS_PER_NODE
    with esl.DRFLB(per_task={"CPU": 1}) as drf:
        # Fill the cluster first, so every tenant's backlog is queued before
        # anything frees up: from then on, DRF alone decides who goes next.
        blockers = [drf.submit("warmup", where, 0.8) for _ in range(slots)]
        wait_for(lambda: drf.pending() == 0)
        futures = [drf.submit("greedy", where, 0.2) for _ in range(30)]
        futures += [drf.submit(t, where, 0.2) for t in ("b", "c") for _ in range(10)]
        nodes = nodes_of([f.result(timeout=30) for f in futures])
        ray.get([f.result() for f in blockers])
        log = drf.dispatch_log
    # Least-loaded placement: the first wave fills every node evenly.
    wave = Counter(node for _, _, node in log[:slots])
    assert sorted(wave.values()) == [CPUS_PER_NODE] * NUM_NODES
    # The greedy tenant submits 3x as much, yet while all three are backlogged
    # each gets a third of the dispatches.
    first = Counter(key for _, key, _ in log[slots : slots + 24])
    assert all(7 <= first[t] <= 9 for t in ("greedy", "b", "c")), first
    assert len(nodes) == 50


def test_hierarchical_fair_share_follows_weights(ray_cluster):
    tree = {"x": {"weight": 3, "children": {"x1": 1, "x2": 1}}, "y": 1}
    slots = NUM_NODES * CPUS_PER_NODE
    tree = {**tree, "warmup": 1}
    with esl.HierarchicalFairShare(tree, per_task={"CPU": 1}) as hfs:
        blockers = [hfs.submit("warmup", where, 0.8) for _ in range(slots)]
        wait_for(lambda: hfs.pending() == 0)
        futures = [hfs.submit(t, where, 0.2) for t in ("x1", "x2", "y") for _ in range(12)]
        ray.get([f.result(timeout=30) for f in futures + blockers])
        log = [key for _, key, _ in hfs.dispatch_log][slots:]
    first = Counter(log[:16])
    assert 3 <= first["y"] <= 5, first
    assert abs(first["x1"] - first["x2"]) <= 1, first


# -- validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, exc, fragment",
    [
        (lambda: esl.Gang([]), TypeError, "non-empty list"),
        (lambda: esl.Gang([{"GPU": 1}]), ValueError, "GPU"),
        (lambda: esl.Gang([{"CPU": 1}], strategy="TIGHT"), ValueError, "'TIGHT'"),
        (lambda: esl.Gang([{"CPU": -1}]), ValueError, "-1"),
        (lambda: esl.Gang([{"CPU": 1}], timeout_s=0), ValueError, "timeout_s"),
        (lambda: esl.LoadBalance(), ValueError, "num_tasks"),
        (lambda: esl.LoadBalance(num_tasks=0), ValueError, "num_tasks"),
        (lambda: esl.LoadBalance(num_tasks=2.5), TypeError, "2.5"),
        (lambda: esl.AntiAffinity(max_per_node=0), ValueError, "max_per_node"),
        (lambda: esl.DRFLB(weights={"a": 0}), ValueError, "weights\\['a'\\]"),
        (lambda: esl.HierarchicalFairShare({"a": {"wieght": 1}}), ValueError, "wieght"),
        (lambda: esl.SoftConstraint(prefer=3), TypeError, "prefer"),
        (lambda: esl.combine({"num_cpus": 1}, {"num_cpus": 0}), ValueError, "num_cpus"),
    ],
)
def test_options_are_validated_early(make, exc, fragment):
    with pytest.raises(exc, match=fragment):
        make()


def test_combine_sums_resources():
    merged = esl.combine({"num_cpus": 1, "resources": {"a": 1}}, {"resources": {"a": 1, "b": 2}})
    assert merged == {"num_cpus": 1, "resources": {"a": 2.0, "b": 2.0}}


def test_public_api_is_listed():
    assert sorted(esl.__all__) == sorted(
        name for name in dir(esl) if not name.startswith("_") and name[0].isupper() or name == "combine"
    )


# -- what esl stands on -------------------------------------------------------------


def _private_reaches(source: str) -> list:
    """Lines where ``source`` reaches a private name of ray_adaptive: a ``_name`` imported from it or
    read as an attribute of what was imported from it (``_res._current``). Private modules are fenced
    by import-linter; private attributes are not, hence this walk."""
    tree = ast.parse(source)
    imported, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            for alias in node.names:
                path = f"{module}.{alias.name}" if module else alias.name
                if path.split(".")[0] == "ray_adaptive":
                    imported.add(alias.asname or alias.name.split(".")[0])
                    if any(p.startswith("_") for p in path.split(".")[1:]):
                        out.append(node.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in imported:
                out.append(node.lineno)
    return sorted(out)


def test_esl_uses_only_public_names_of_ray_adaptive():
    root = Path(esl.__file__).parent
    reaches = {p.name: _private_reaches(p.read_text()) for p in sorted(root.glob("*.py"))}
    assert not {k: v for k, v in reaches.items() if v}, (
        "esl reaches private names of ray_adaptive (give them a public name in ray_adaptive.resources): "
        f"{reaches}")


def test_the_walk_sees_private_reaches():
    bad = ("from ray_adaptive import resources as _res\nfrom ray_adaptive.resources import _session\n"
           "import ray_adaptive._private.raylet\n_res._current()\n_res.primitives._x\n"
           "from ray_adaptive.resources import primitives\nprimitives.resize_many({})\n_res.__doc__\n")
    assert _private_reaches(bad) == [2, 3, 4, 5]


def test_zz_no_leaks(ray_cluster):
    resources.wait_for_pending(10)
    assert_no_leaks(ray_cluster)
