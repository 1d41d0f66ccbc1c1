"""ray_adaptive.local_multinode: option checks (the cluster itself backs every Ray test module)."""

import pytest

from ray_adaptive.local_multinode import start_local_cluster


def test_bad_options_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="num_nodes must be >= 1, got 0"):
        start_local_cluster(num_nodes=0)
    with pytest.raises(ValueError, match="node_resources has 1 entries for 2 nodes"):
        start_local_cluster(num_nodes=2, node_resources=[{}])


def test_the_shared_test_cluster_is_a_local_cluster(ray_cluster):
    import ray

    assert len(ray_cluster.node_ids) == 4 and ray_cluster.head == ray_cluster.node_ids[0]
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert alive == set(ray_cluster.node_ids)
    assert ray_cluster.static_resources[ray_cluster.node_ids[-1]]["special"] == 2
