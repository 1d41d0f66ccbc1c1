"""A Ray cluster on this machine run by Ray's real autoscaler, with the fake multi-node provider.

``ray.cluster_utils.AutoscalingCluster`` does this for Ray's own tests, but its
``start()`` and ``shutdown()`` run ``ray stop --force``, which kills every Ray
process on the machine -- anyone else's clusters included -- and on Ray 2.50 to
2.60 it reads ``fake_multi_node/example.yaml``, which the wheels do not ship.
This module starts the same head the same way (``ray start --head
--autoscaling-config=...`` with ``RAY_FAKE_CLUSTER=1``, so the monitor process
runs the autoscaler with ``FakeMultiNodeProvider``, which starts each "node" as
a raylet on this machine) but:

- in its own temp dir, on free ports (the GCS, the Ray client server, the
  dashboard agent, metrics), with the provider pointed at that GCS;
- as ``ray start --block`` in a new session this object owns, so every process
  of the cluster -- the head's, the monitor's, the raylets the provider adds
  and their workers -- is in that session and nothing else is;
- stopped by signalling exactly those processes (SIGTERM, then SIGKILL for any
  left after a grace period): never ``ray stop``.

Example::

    from ray_adaptive._private.fake_autoscaler import FakeAutoscalingCluster

    with FakeAutoscalingCluster(
        head_resources={"CPU": 0},
        worker_node_types={"cpu1": {"resources": {"CPU": 1}, "node_config": {},
                                    "min_workers": 1, "max_workers": 4}},
    ) as fc:
        ray.init(address=fc.address)
        ...
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["FakeAutoscalingCluster", "session_pids"]

# The node type name the fake provider gives its head (FAKE_HEAD_NODE_TYPE).
HEAD_NODE_TYPE = "ray.head.default"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid: int) -> List[int]:
    """The PIDs of every live process in session ``sid`` (read from ``/proc``; zombies left out)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # (gone meanwhile)
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(entry))
    return out


def _node_types_config(head_resources: Mapping[str, float], worker_node_types: Mapping[str, Mapping]) -> Dict:
    types = copy.deepcopy({k: dict(v) for k, v in worker_node_types.items()})
    if HEAD_NODE_TYPE in types:
        raise ValueError(f"worker_node_types may not name {HEAD_NODE_TYPE!r}: that is the head's type; rename it")
    for name, t in types.items():
        if "resources" not in t or "max_workers" not in t:
            raise ValueError(f"worker node type {name!r} needs 'resources' and 'max_workers' "
                             f"(Ray's available_node_types form), got {sorted(t)}")
        t.setdefault("node_config", {})
        t.setdefault("min_workers", 0)
    types[HEAD_NODE_TYPE] = {"resources": dict(head_resources), "node_config": {}, "max_workers": 0}
    return types


class FakeAutoscalingCluster:
    """A head started with Ray's autoscaler and the fake multi-node provider, owned by this object.

    ``worker_node_types`` is Ray's ``available_node_types`` form without the head
    (``{"name": {"resources": {...}, "min_workers": m, "max_workers": n}}``).
    ``idle_timeout_s`` is how long a worker stays idle before the autoscaler
    removes it (Ray's ``idle_timeout_minutes``, short here so tests see it).
    The autoscaler is v1, ``ray start``'s default: v2 with this provider reads
    ``fake_multi_node/example.yaml`` when it loads its config, which Ray 2.50 to
    2.60 do not ship (its monitor exits with FileNotFoundError).
    """

    def __init__(self, head_resources: Mapping[str, float], worker_node_types: Mapping[str, Mapping], *,
                 idle_timeout_s: float = 6.0, upscaling_speed: float = 1.0,
                 system_config: Optional[Mapping[str, Any]] = None, update_interval_s: int = 1) -> None:
        self._head_resources = dict(head_resources)
        self._node_types = _node_types_config(head_resources, worker_node_types)
        self._idle_timeout_s = float(idle_timeout_s)
        self._upscaling_speed = float(upscaling_speed)
        self._system_config = {"enable_metrics_collection": False, **(system_config or {})}
        self._update_interval_s = int(update_interval_s)  # (Ray reads it as an integer)
        self._proc: Optional[subprocess.Popen] = None
        self.temp_dir: Optional[str] = None
        self.address: Optional[str] = None

    # -- the config Ray's autoscaler reads ------------------------------------------------------------------
    def config(self, gcs_address: str) -> Dict[str, Any]:
        """The autoscaling config the head is started with (what ``example.yaml`` plus
        ``AutoscalingCluster._generate_config`` make, with the provider pointed at ``gcs_address``)."""
        provider: Dict[str, Any] = {"type": "fake_multinode", "use_node_id_as_ip": True,
                                    "disable_node_updaters": True, "disable_launch_config_check": True,
                                    "gcs_address": gcs_address}
        return {
            "cluster_name": "fake_multinode",
            "max_workers": sum(int(t.get("max_workers", 0)) for t in self._node_types.values()),
            "provider": provider,
            "available_node_types": self._node_types,
            "head_node_type": HEAD_NODE_TYPE,
            "auth": {},
            "upscaling_speed": self._upscaling_speed,
            "idle_timeout_minutes": self._idle_timeout_s / 60.0,
            "docker": {},
            "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
            "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
            "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
            "rsync_exclude": [], "rsync_filter": [],
        }

    # -- life cycle ----------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> str:
        """Start the head (and through its autoscaler the ``min_workers`` of each type); return its address.

        Returns once the GCS answers; the autoscaler adds the minimum workers over
        the next seconds (wait for them with ``ray.nodes()``).
        """
        if self._proc is not None:
            raise RuntimeError("this FakeAutoscalingCluster was started already; make a new one")
        self.temp_dir = tempfile.mkdtemp(prefix="ray-adaptive-fake-as-", dir="/tmp")
        ray_dir = os.path.join(self.temp_dir, "ray")
        os.makedirs(ray_dir)
        port = _free_port()
        ip = "127.0.0.1"
        self.address = f"{ip}:{port}"
        config_path = os.path.join(self.temp_dir, "autoscaling.json")
        with open(config_path, "w") as f:
            json.dump(self.config(self.address), f)
        res = dict(self._head_resources)
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               f"--autoscaling-config={config_path}", f"--node-ip-address={ip}", f"--port={port}",
               f"--temp-dir={ray_dir}", "--include-dashboard=false", "--disable-usage-stats",
               f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
               f"--metrics-export-port={_free_port()}",
               f"--num-cpus={int(res.pop('CPU', 0))}", f"--num-gpus={int(res.pop('GPU', 0))}",
               "--system-config=" + json.dumps(self._system_config, separators=(",", ":"))]
        if "object_store_memory" in res:
            cmd.append(f"--object-store-memory={int(res.pop('object_store_memory'))}")
        if res:
            cmd.append("--resources=" + json.dumps(res))
        env = dict(os.environ)
        env.update({"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": str(self._update_interval_s),
                    "RAY_TMPDIR": self.temp_dir, "RAY_USAGE_STATS_ENABLED": "0"})
        # `ray start` (2.52+) turns token auth on by itself when a token file exists (~/.ray/auth_token);
        # ray.init() in this process does not: keep both ends on what this process's environment says
        env.setdefault("RAY_AUTH_MODE", "disabled")
        env.pop("RAY_enable_autoscaler_v2", None)
        log = open(os.path.join(self.temp_dir, "ray-start.log"), "wb")
        try:
            self._proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        try:
            self._wait_for_gcs(ip, port, timeout_s)
        except BaseException:
            self.shutdown(keep_temp_dir=True)  # (the log says why)
            raise
        return self.address

    def _wait_for_gcs(self, ip: str, port: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"the fake-provider head exited with {self._proc.returncode}: "
                                   f"{self._log_tail()}")
            try:
                with socket.create_connection((ip, port), timeout=0.5):
                    pass
                # the GCS listens before the head's raylet registers: wait for its "started" line
                with open(os.path.join(self.temp_dir or "", "ray-start.log"), "rb") as f:
                    if b"Ray runtime started" in f.read():
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"the fake-provider head did not start in {timeout_s:g} s: {self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        path = os.path.join(self.temp_dir or "", "ray-start.log")
        try:
            with open(path, errors="replace") as f:
                tail = "".join(f.readlines()[-lines:])
        except OSError:
            tail = "(no log)"
        return f"the end of {path}:\n{tail}"

    @property
    def sid(self) -> Optional[int]:
        """The session every process of this cluster runs in (the ``ray start`` process's PID)."""
        return None if self._proc is None else self._proc.pid

    def pids(self) -> List[int]:
        """Every live process of this cluster: the head's, the autoscaler's, the nodes it added, their workers."""
        return [] if self.sid is None else session_pids(self.sid)

    def shutdown(self, grace_s: float = 3.0, keep_temp_dir: bool = False) -> List[int]:
        """Stop every process of this cluster; return the PIDs that needed SIGKILL.

        ``ray start --block`` stops the head's processes on SIGTERM, but not the
        raylets the provider added (they are the monitor's children and share no
        fate with it): every process still in the session gets SIGTERM, and after
        ``grace_s`` SIGKILL. Only this cluster's session is signalled.
        """
        if self._proc is None:
            return []
        sid = self._proc.pid
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._signal_all(sid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = self._signal_all(sid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        left = session_pids(sid)
        if left:
            raise RuntimeError(f"processes of the fake-provider cluster still alive after SIGKILL: {left}")
        if self.temp_dir and not keep_temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return killed

    @staticmethod
    def _signal_all(sid: int, sig: int) -> List[int]:
        sent = []
        for pid in session_pids(sid):
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except ProcessLookupError:
                pass
        return sent

    def __enter__(self) -> "FakeAutoscalingCluster":
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
