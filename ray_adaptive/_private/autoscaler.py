"""What the cluster's autoscaler may still add, as Ray exposes it (private Ray API, kept here alone).

A task whose Ray resources no live node can ever hold fails at once -- unless
the autoscaler may add a node that holds them; then it waits for that node.
:func:`launchable_node_types` answers which node types may still be added, from
what Ray publishes, in this order:

1. **The cluster config in the GCS** (``GlobalState.get_cluster_config()``, the
   ``ClusterConfig`` proto under ``__autoscaler_cluster_config``): each node
   group's resources and ``max_count``. Autoscaler v2 and KubeRay publish it;
   Ray Data reads it the same way. A group's live count is not in it, so a group
   at its maximum is still listed (``max_count`` 0 is left out).
2. **Autoscaler v1's status** (``__autoscaling_status`` in the GCS KV, what
   ``ray status`` reads): it names the monitor process and, per node type, how
   many are up and being launched, but not a type's resources. Those are in the
   autoscaling config the monitor was started with (``--autoscaling-config``, on
   the head node): read from the monitor's command line when this process runs
   on the head (a launcher cluster's drivers and ``ray job submit`` entrypoints
   do). Types at their ``max_workers`` are left out.
3. Neither: ``None`` -- no autoscaler is known (a fixed cluster, or a v1
   autoscaler whose config this host cannot read: logged once, with what to do).

Both sources exist, with the same layout, on every release from 2.50 to 2.60.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["launchable_node_types", "node_types_from_config", "node_types_from_cluster_config",
           "v1_status", "fits_any"]

log = logging.getLogger(__name__)
_warned = False

# The head's own type in a launcher config: never added by the autoscaler.
_HEAD_TYPE_KEYS = ("head_node_type",)


def node_types_from_config(config: Mapping[str, Any], counts: Optional[Mapping[str, int]] = None) -> List[Dict[str, float]]:
    """The resources of each worker type of a launcher/autoscaling ``config`` that may still be added:
    ``max_workers`` > 0 and, given ``counts`` (type -> nodes up or launching), below it; the head's type
    and types with no ``resources`` are left out. Sorted by type name (deterministic)."""
    types = config.get("available_node_types") or {}
    head = config.get("head_node_type")
    cluster_max = config.get("max_workers")
    total = sum((counts or {}).get(t, 0) for t in types if t != head)
    if cluster_max is not None and counts is not None and total >= int(cluster_max):
        return []
    out = []
    for name in sorted(types):
        spec = types[name] or {}
        if name == head or not spec.get("resources"):
            continue
        most = int(spec.get("max_workers", cluster_max if cluster_max is not None else 0))
        if most <= 0 or (counts is not None and counts.get(name, 0) >= most):
            continue
        out.append({k: float(v) for k, v in spec["resources"].items()})
    return out


def node_types_from_cluster_config(groups: Sequence[Mapping[str, Any]]) -> List[Dict[str, float]]:
    """From the GCS ``ClusterConfig``'s node groups (each ``{"name", "resources", "max_count"}``; -1 is no
    limit): the resources of the groups that may have nodes, sorted by name."""
    return [{k: float(v) for k, v in g["resources"].items()}
            for g in sorted(groups, key=lambda g: g.get("name", ""))
            if g.get("resources") and int(g.get("max_count", 0)) != 0]


def fits_any(request: Mapping[str, float], node_types: Sequence[Mapping[str, float]]) -> bool:
    """Whether a node of one of ``node_types`` holds ``request`` (a task's Ray resources) on its own."""
    want = {k: float(v) for k, v in request.items() if float(v) > 0}
    return any(all(float(t.get(k, 0.0)) >= v for k, v in want.items()) for t in node_types)


def _cluster_config_groups() -> Optional[List[Dict[str, Any]]]:
    import ray._private.state

    config = ray._private.state.state.get_cluster_config()
    if config is None or not config.node_group_configs:
        return None
    return [{"name": g.name, "resources": dict(g.resources), "max_count": g.max_count}
            for g in config.node_group_configs]


def v1_status() -> Optional[Dict[str, Any]]:
    """Autoscaler v1's last published status (``ray status``'s source), or None when none runs."""
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_initialized

    if not _internal_kv_initialized():
        return None
    raw = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
    return json.loads(raw) if raw else None


_NOT_HERE = object()  # the monitor runs on another host: its config cannot be read from this one


def _monitor_config(pid: int) -> Any:
    """The autoscaling config file the monitor ``pid`` runs with, when that process is on this host; None
    when it runs with none (``ray start --head`` and ``ray.cluster_utils.Cluster`` run a monitor that only
    reports: no autoscaler); ``_NOT_HERE`` when it is not on this host (or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return _NOT_HERE
    if not any(a.endswith("monitor.py") for a in argv):
        return _NOT_HERE  # (another host's monitor: this PID is some other process here)
    path = next((a.split("=", 1)[1] for a in argv if a.startswith("--autoscaling-config=")), None)
    if path is None:
        i = argv.index("--autoscaling-config") if "--autoscaling-config" in argv else -1
        path = argv[i + 1] if 0 <= i < len(argv) - 1 else None
    if not path:
        return None
    import yaml  # type: ignore[import-untyped]  # (Ray depends on PyYAML; a JSON file is YAML too)

    try:
        with open(os.path.expanduser(path)) as f:
            return yaml.safe_load(f)
    except OSError:
        return _NOT_HERE


def launchable_node_types() -> Optional[List[Dict[str, float]]]:
    """The resources of the node types the cluster's autoscaler may still add (see the module doc);
    ``[]`` when an autoscaler runs and may add nothing more; ``None`` when no autoscaler is known.
    Needs Ray initialised (a few GCS reads: call it at submission of an unplaceable task, not per task)."""
    global _warned
    groups = _cluster_config_groups()
    if groups is not None:
        return node_types_from_cluster_config(groups)
    status = v1_status()
    if status is None:
        return None
    config = _monitor_config(int(status.get("monitor_pid", 0) or 0))
    if config is None:
        return None  # (a monitor with no autoscaling config: it only reports)
    if config is _NOT_HERE:
        if not _warned:
            _warned = True
            log.warning("ray-adaptive: Ray's autoscaler (v1) runs, but its node types cannot be read from this "
                        "host (its config is on the head node); a task no live node can hold fails at once. "
                        "Run the driver or the policy service on the head, or use autoscaler v2 "
                        "(RAY_enable_autoscaler_v2=1; KubeRay), which publishes them to the GCS.")
        return None
    report = status.get("autoscaler_report") or {}
    counts: Dict[str, int] = {}
    for key in ("active_nodes", "pending_launches", "idle_nodes"):
        for t, n in (report.get(key) or {}).items():
            counts[t] = counts.get(t, 0) + int(n)
    for entry in report.get("pending_nodes") or []:  # [ip, type, status]
        if len(entry) >= 2:
            counts[entry[1]] = counts.get(entry[1], 0) + 1
    return node_types_from_config(config, counts)
