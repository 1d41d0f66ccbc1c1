"""A multi-node Ray cluster on this machine, for examples, tests and benchmarks.

Wraps ``ray.cluster_utils.Cluster`` with the settings this project learned it
needs: its own temp dir (so a stale ``/tmp/ray/ray_current_cluster`` from
another cluster never matters, and nothing else on the machine is touched),
no dashboard unless asked for (its job API), metrics collection off unless asked for (clean worker shutdown), and a shutdown
that removes what it started, ephemeral resources included.

Example::

    from ray_adaptive.local_multinode import local_cluster

    with local_cluster(num_nodes=4, num_cpus=2) as lc:
        print(lc.node_ids)          # the head first, then the workers
        ...                         # ray is initialised and connected here
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence

__all__ = ["LocalCluster", "local_cluster", "start_local_cluster"]


@dataclass
class LocalCluster:
    """A running local cluster: ``node_ids[0]`` is the head (the driver's node)."""

    cluster: object
    node_ids: list
    temp_dir: str
    static_resources: dict = field(default_factory=dict)  # node id -> resources it registered with
    metrics_ports: dict = field(default_factory=dict)  # node id -> its Prometheus port (metrics=True)
    dashboard_url: Optional[str] = None  # Ray's dashboard and job API (dashboard=True)

    def metrics_url(self, node_id: Optional[str] = None) -> str:
        """The Prometheus endpoint of ``node_id`` (default: the head), with ``metrics=True``."""
        port = self.metrics_ports.get(node_id or self.head)
        if port is None:
            raise ValueError("this cluster exports no metrics: start it with metrics=True")
        return f"http://127.0.0.1:{port}/metrics"

    @property
    def head(self) -> str:
        return self.node_ids[0]

    def shutdown(self, keep_temp_dir: bool = False) -> None:
        """Remove ray-adaptive's resources, disconnect, stop every process, delete the temp dir
        (``keep_temp_dir=True`` keeps it, with the Ray logs)."""
        import ray

        from ray_adaptive import resources
        from ray_adaptive._private import raylet

        try:
            if ray.is_initialized():
                resources.cleanup()
        finally:
            raylet.close_client()  # close our gRPC channels before the raylets stop
            ray.shutdown()
            self.cluster.shutdown()
            if not keep_temp_dir:
                shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_local_cluster(
    num_nodes: int = 4,
    num_cpus: int = 2,
    node_resources: Optional[Sequence[Mapping[str, float]]] = None,
    node_labels: Optional[Sequence[Mapping[str, str]]] = None,
    system_config: Optional[Mapping] = None,
    connect: bool = True,
    quiet: bool = True,
    metrics: bool = False,
    dashboard: bool = False,
) -> LocalCluster:
    """Start ``num_nodes`` raylets with ``num_cpus`` each; connect this process unless ``connect=False``.

    ``node_resources[i]`` adds custom resources to node ``i`` and
    ``node_labels[i]`` Ray node labels (what ``ray start --labels`` sets);
    ``system_config`` is merged over ``{"enable_metrics_collection": False}``.
    ``metrics=True`` turns collection on instead, reported every second, and
    gives each node a Prometheus endpoint of its own (``lc.metrics_url()``).
    ``dashboard=True`` runs Ray's dashboard on the head (its job API: ``lc.dashboard_url``).
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    if node_resources is not None and len(node_resources) != num_nodes:
        raise ValueError(f"node_resources has {len(node_resources)} entries for {num_nodes} nodes")
    if node_labels is not None and len(node_labels) != num_nodes:
        raise ValueError(f"node_labels has {len(node_labels)} entries for {num_nodes} nodes")
    import ray
    from ray.cluster_utils import Cluster

    root = tempfile.mkdtemp(prefix="ray-adaptive-", dir="/tmp")
    ray_dir = os.path.join(root, "ray")
    os.makedirs(ray_dir)
    os.environ["RAY_TMPDIR"] = root  # where ray_current_cluster is written
    extra = [dict(r) for r in node_resources] if node_resources else [{} for _ in range(num_nodes)]
    labels = [dict(x) for x in node_labels] if node_labels else [{} for _ in range(num_nodes)]
    config = {"enable_metrics_collection": metrics, **(system_config or {})}
    if metrics:
        config.setdefault("metrics_report_interval_ms", 1000)
    ports = [_free_port() if metrics else None for _ in range(num_nodes)]
    dashboard_port = _free_port() if dashboard else None
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=num_cpus, temp_dir=ray_dir, resources=extra[0], labels=labels[0],
                            include_dashboard=dashboard, metrics_export_port=ports[0], _system_config=config,
                            # (the job agent's default port, 52365, is taken by any other cluster's on this host)
                            **({"dashboard_port": dashboard_port, "dashboard_host": "127.0.0.1",
                                "dashboard_agent_listen_port": _free_port()} if dashboard else {})),
    )
    try:
        if connect:
            # the driver connects while the head is the only raylet: before Ray 2.54 a driver on a host
            # with several raylets attaches to any one of them (since 2.54, to the head)
            kwargs = dict(logging_level="ERROR", log_to_driver=False) if quiet else {}
            ray.init(address=cluster.address, **kwargs)
        node_ids = [cluster.head_node.node_id]
        for i in range(1, num_nodes):
            node_ids.append(cluster.add_node(num_cpus=num_cpus, temp_dir=ray_dir, resources=extra[i],
                                             labels=labels[i], metrics_export_port=ports[i]).node_id)
        cluster.wait_for_nodes()
        static = {n["NodeID"]: dict(n["Resources"]) for n in ray.nodes() if n["Alive"]} if connect else {}
    except BaseException:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return LocalCluster(cluster, node_ids, root, static,
                        {n: p for n, p in zip(node_ids, ports) if p is not None},
                        f"http://127.0.0.1:{dashboard_port}" if dashboard_port else None)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_cluster(*args, **kwargs) -> Iterator[LocalCluster]:
    """:func:`start_local_cluster` as a context manager that always shuts down."""
    lc = start_local_cluster(*args, **kwargs)
    try:
        yield lc
    finally:
        lc.shutdown()
