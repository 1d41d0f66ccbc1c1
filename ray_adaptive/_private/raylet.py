"""Private Ray APIs of the raylet and the GCS (those of task submission: submit.py).

Ray removed ``ray.experimental.set_resource``, but its raylet serves two
node-manager RPCs (since Ray 2.50) that are enough to rebuild it:

* ``NodeManagerService.ResizeLocalResourceInstances(map<string, double>)``
  sets the *total* of each named resource on that raylet (creating it if new,
  removing it at 0) and replies with the node's new totals. The raylet applies
  ``delta = target - current_total`` clamped so that ``available`` never goes
  negative; unit-instance resources (``GPU``) are refused with
  ``INVALID_ARGUMENT``.
* ``NodeManagerService.GetResourceLoad()`` replies with the node's own view of
  its totals and availability (``ResourcesData``), straight from the raylet.

Everything private lives here: the generated stubs
(``ray.core.generated.node_manager_pb2*``), Ray's own gRPC channel factory
(TLS and keepalive as Ray's clients use them, and the cluster auth-token
interceptor on the Rays that have token auth: :func:`channel_factory`) and the
node table. ``tests/test_raylet_rpc.py`` checks each of them against the
installed Ray and fails naming what moved (``check_ray_compat``).

One module (just over 500 lines): the raylet client and the node table it
addresses are one private surface, checked together.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from ray_adaptive._private import ray_versions
from ray_adaptive.errors import ResourceError

__all__ = [
    "ClusterLock",
    "NodeInfo",
    "RayletClient",
    "check_ray_compat",
    "client",
    "current_node_id",
    "list_nodes",
]

# What we rely on, in one place: (module, attribute) pairs checked by `check_ray_compat` and by
# tests/test_raylet_rpc.py (with the channel factory of the installed Ray: `required_symbols`).
_REQUIRED = (
    ("ray.core.generated.node_manager_pb2", "ResizeLocalResourceInstancesRequest"),
    ("ray.core.generated.node_manager_pb2", "ResizeLocalResourceInstancesReply"),
    ("ray.core.generated.node_manager_pb2", "GetResourceLoadRequest"),
    ("ray.core.generated.node_manager_pb2", "GetResourceLoadReply"),
    ("ray.core.generated.node_manager_pb2_grpc", "NodeManagerServiceStub"),
    ("ray.experimental.internal_kv", "_internal_kv_put"),
    ("ray.experimental.internal_kv", "_internal_kv_get"),
    ("ray.experimental.internal_kv", "_internal_kv_del"),
)
# Ray's gRPC client channel factory, `init_grpc_channel(address, options)`. Ray 2.52 added cluster
# token auth and moved the factory to ray._private.grpc_utils, where it adds the auth-token
# interceptor when the cluster's token auth is on; before 2.52 it is in ray._private.utils and does
# TLS and keepalive only -- all a raylet of those releases asks of a client.
_TOKEN_AUTH_SINCE = (2, 52, 0)
_CHANNEL_FACTORY_WITH_TOKEN_AUTH = ("ray._private.grpc_utils", "init_grpc_channel")
_CHANNEL_FACTORY_BEFORE_TOKEN_AUTH = ("ray._private.utils", "init_grpc_channel")
# Fields of the messages above that we read or write: (message, field, kind).
_REQUIRED_FIELDS = (
    ("ResizeLocalResourceInstancesRequest", "resources", "map<string,double>"),
    ("ResizeLocalResourceInstancesReply", "total_resources", "map<string,double>"),
    ("GetResourceLoadReply", "resources", "ResourcesData"),
)
_RPC_METHODS = ("ResizeLocalResourceInstances", "GetResourceLoad")

_RPC_TIMEOUT_S = 10.0
# The node table (addresses, liveness) is cached this long; a node not in the
# cache, or an RPC that fails, forces a refresh.
_NODE_TABLE_TTL_S = 1.0


def channel_factory_location() -> Tuple[str, str]:
    """(module, function) of the installed Ray's gRPC client channel factory (see ``_TOKEN_AUTH_SINCE``)."""
    if ray_versions.at_least(*_TOKEN_AUTH_SINCE):
        return _CHANNEL_FACTORY_WITH_TOKEN_AUTH
    return _CHANNEL_FACTORY_BEFORE_TOKEN_AUTH


def channel_factory():
    """The installed Ray's ``init_grpc_channel``: a channel as Ray's own clients open it."""
    import importlib

    module, name = channel_factory_location()
    return getattr(importlib.import_module(module), name)


def required_symbols() -> Tuple[Tuple[str, str], ...]:
    """Every (module, attribute) this module uses on the installed Ray."""
    return (*_REQUIRED, channel_factory_location())


def check_ray_compat() -> None:
    """Raise ``ResourceError`` naming the first private Ray API that moved.

    Checks the modules, classes, RPC methods and message fields this module
    uses; cheap (imports only), so it runs once before the first RPC.
    """
    import importlib

    if ray_versions.installed() < ray_versions.OLDEST_SUPPORTED:
        oldest = ".".join(map(str, ray_versions.OLDEST_SUPPORTED))
        raise ResourceError(
            f"Ray {_ray_version()} is older than {oldest}, the first release whose raylet serves "
            f"NodeManagerService.ResizeLocalResourceInstances (what set_resource stands on): "
            f"ray-adaptive needs Ray >= {oldest}"
        )
    for mod_name, attr in required_symbols():
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as err:
            raise ResourceError(
                f"ray-adaptive needs the private module {mod_name!r}, which this Ray "
                f"({_ray_version()}) does not have ({err}); ray_adaptive/_private/"
                "raylet.py must be ported to this Ray release"
            ) from err
        if not hasattr(mod, attr):
            raise ResourceError(
                f"ray-adaptive needs {mod_name}.{attr}, which this Ray "
                f"({_ray_version()}) does not define; ray_adaptive/_private/raylet.py "
                "must be ported to this Ray release"
            )
    from ray.core.generated import node_manager_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name.get("NodeManagerService")
    if service is None:
        raise ResourceError(
            f"Ray {_ray_version()} has no gRPC service ray.rpc.NodeManagerService"
        )
    methods = {m.name: m for m in service.methods}
    for name in _RPC_METHODS:
        if name not in methods:
            raise ResourceError(
                f"Ray {_ray_version()}'s NodeManagerService has no RPC {name!r} "
                f"(has: {sorted(methods)}); set_resource cannot work on this Ray "
                f"(ray-adaptive supports Ray {'.'.join(map(str, ray_versions.OLDEST_SUPPORTED))} and newer)"
            )
    for msg_name, field_name, kind in _REQUIRED_FIELDS:
        msg = pb.DESCRIPTOR.message_types_by_name[msg_name]
        field = msg.fields_by_name.get(field_name)
        if field is None:
            raise ResourceError(
                f"Ray {_ray_version()}: message ray.rpc.{msg_name} lost its field "
                f"{field_name!r} ({kind}); fields now: {[f.name for f in msg.fields]}"
            )
        if kind.startswith("map<"):
            entry = field.message_type
            ok = (
                entry is not None
                and entry.GetOptions().map_entry
                and entry.fields_by_name["key"].type == entry.fields_by_name["key"].TYPE_STRING
                and entry.fields_by_name["value"].type == entry.fields_by_name["value"].TYPE_DOUBLE
            )
            if not ok:
                raise ResourceError(
                    f"Ray {_ray_version()}: ray.rpc.{msg_name}.{field_name} is no longer "
                    f"a {kind}"
                )
        elif field.message_type is None or field.message_type.name != kind:
            raise ResourceError(
                f"Ray {_ray_version()}: ray.rpc.{msg_name}.{field_name} is no longer "
                f"a {kind}"
            )
    resources_data = methods["GetResourceLoad"].output_type.fields_by_name[
        "resources"
    ].message_type
    for field_name in ("resources_available", "resources_total"):
        if field_name not in resources_data.fields_by_name:
            raise ResourceError(
                f"Ray {_ray_version()}: ray.rpc.ResourcesData lost {field_name!r}"
            )


def _ray_version() -> str:
    import ray

    return ray.__version__


@dataclass(frozen=True)
class NodeInfo:
    """One entry of the GCS node table."""

    node_id: str
    address: str
    port: int
    alive: bool
    resources: Mapping[str, float]


def list_nodes() -> List[NodeInfo]:
    """The GCS node table (alive and dead nodes), via ``ray.nodes()``."""
    import ray

    out = []
    for n in ray.nodes():
        out.append(
            NodeInfo(
                node_id=n["NodeID"],
                address=n["NodeManagerAddress"],
                port=int(n["NodeManagerPort"]),
                alive=bool(n["Alive"]),
                resources=dict(n.get("Resources") or {}),
            )
        )
    return out


def current_node_id() -> str:
    """The node id (hex) of the calling driver, worker or actor."""
    import ray

    return ray.get_runtime_context().get_node_id()


class RayletClient:
    """gRPC client to every raylet of the connected cluster.

    One channel per node, opened on first use and kept. Thread-safe. Errors
    come back as ``ResourceError`` naming the node and what the raylet said.
    """

    def __init__(self) -> None:
        check_ray_compat()
        self._lock = threading.Lock()
        self._nodes: Dict[str, NodeInfo] = {}
        self._nodes_at = 0.0
        self._stubs: Dict[str, object] = {}
        self._channels: Dict[str, object] = {}

    # -- node table -------------------------------------------------------
    def nodes(self, refresh: bool = False) -> Dict[str, NodeInfo]:
        """node id -> NodeInfo for every node the GCS knows (cached ~1 s)."""
        with self._lock:
            if refresh or time.monotonic() - self._nodes_at > _NODE_TABLE_TTL_S:
                self._nodes = {n.node_id: n for n in list_nodes()}
                self._nodes_at = time.monotonic()
            return dict(self._nodes)

    def alive_nodes(self, refresh: bool = False) -> Dict[str, NodeInfo]:
        return {k: v for k, v in self.nodes(refresh).items() if v.alive}

    def alive_node(self, node_id: str) -> NodeInfo:
        """The node `node_id`, refreshed once if unknown or dead; ``ResourceError`` if it is not alive."""
        info = self.nodes().get(node_id)
        if info is None or not info.alive:
            info = self.nodes(refresh=True).get(node_id)
        if info is None:
            raise ResourceError(
                f"node {node_id!r} is not part of this Ray cluster "
                f"(known nodes: {sorted(self.nodes())})"
            )
        if not info.alive:
            raise ResourceError(
                f"node {node_id!r} is dead; resources can only be set on alive nodes"
            )
        return info

    def _stub(self, node_id: str):
        info = self.alive_node(node_id)
        with self._lock:
            stub = self._stubs.get(node_id)
            if stub is None:
                from ray.core.generated import node_manager_pb2_grpc

                # Ray's own channel: TLS when the cluster uses it (RAY_USE_TLS and its
                # certificates, as every Ray process reads them), the auth-token interceptor
                # when token auth is on -- never the token over plaintext where Ray uses TLS.
                channel = channel_factory()(
                    f"{info.address}:{info.port}",
                    options=[
                        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                        ("grpc.max_send_message_length", 64 * 1024 * 1024),
                    ],
                )
                stub = node_manager_pb2_grpc.NodeManagerServiceStub(channel)
                self._channels[node_id] = channel
                self._stubs[node_id] = stub
            return stub

    def _drop(self, node_id: str) -> None:
        with self._lock:
            self._stubs.pop(node_id, None)
            channel = self._channels.pop(node_id, None)
            self._nodes_at = 0.0
        if channel is not None:
            channel.close()

    def _rpc_error(self, node_id: str, what: str, err) -> ResourceError:
        import grpc

        self._drop(node_id)
        code = err.code() if isinstance(err, grpc.RpcError) else None
        if code == grpc.StatusCode.UNAVAILABLE:
            alive = self.nodes(refresh=True).get(node_id)
            state = "dead" if alive is None or not alive.alive else "unreachable"
            return ResourceError(f"{what} on node {node_id!r} failed: the raylet is {state}")
        details = err.details() if isinstance(err, grpc.RpcError) else str(err)
        return ResourceError(f"{what} on node {node_id!r} was refused by the raylet: {details}")

    # -- RPCs -------------------------------------------------------------
    def resize(self, node_id: str, targets: Mapping[str, float]) -> Dict[str, float]:
        """Set the totals of ``targets`` on one node in one RPC.

        Returns the node's totals after the call (all resources). Capacities
        are clamped by the raylet so ``available`` stays >= 0.
        """
        return self.resize_many({node_id: targets})[node_id]

    def resize_many(
        self, per_node: Mapping[str, Mapping[str, float]]
    ) -> Dict[str, Dict[str, float]]:
        """``resize`` on several nodes, RPCs in flight concurrently."""
        from ray.core.generated import node_manager_pb2

        futures = []
        for node_id, targets in per_node.items():
            request = node_manager_pb2.ResizeLocalResourceInstancesRequest(
                resources={k: float(v) for k, v in targets.items()}
            )
            stub = self._stub(node_id)
            futures.append(
                (node_id, stub.ResizeLocalResourceInstances.future(request, timeout=_RPC_TIMEOUT_S))
            )
        out = {}
        errors = []
        for node_id, fut in futures:
            try:
                out[node_id] = dict(fut.result().total_resources)
            except Exception as err:  # grpc.RpcError and friends
                errors.append(self._rpc_error(node_id, "ResizeLocalResourceInstances", err))
        if errors:
            raise errors[0]
        return out

    def load(self, node_ids: Iterable[str]) -> Dict[str, Tuple[Dict[str, float], Dict[str, float]]]:
        """node id -> (totals, available), asked of each raylet directly.

        Nodes that do not answer (died meanwhile) are left out.
        """
        from ray.core.generated import node_manager_pb2

        futures = []
        for node_id in node_ids:
            try:
                stub = self._stub(node_id)
            except ResourceError:
                continue
            futures.append(
                (
                    node_id,
                    stub.GetResourceLoad.future(
                        node_manager_pb2.GetResourceLoadRequest(), timeout=_RPC_TIMEOUT_S
                    ),
                )
            )
        out = {}
        for node_id, fut in futures:
            try:
                data = fut.result().resources
            except Exception:
                self._drop(node_id)
                continue
            out[node_id] = (dict(data.resources_total), dict(data.resources_available))
        return out

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
            self._nodes.clear()
            self._nodes_at = 0.0
        for channel in channels:
            channel.close()


_client: Optional[RayletClient] = None
_client_key: Optional[str] = None
_client_lock = threading.Lock()


def client() -> RayletClient:
    """The process-wide RayletClient for the cluster Ray is connected to.

    Rebuilt when the process reconnects to another cluster (new GCS address).
    """
    global _client, _client_key
    import ray

    if not ray.is_initialized():
        raise ResourceError(
            "Ray is not initialized: call ray.init() (or run inside a Ray task) "
            "before setting resources"
        )
    key = cluster_key()
    with _client_lock:
        if _client is None or _client_key != key:
            if _client is not None:
                _client.close()
            _client = RayletClient()
            _client_key = key
        return _client


def close_client() -> None:
    """Close the process-wide client's channels (before the cluster goes away)."""
    global _client, _client_key
    with _client_lock:
        if _client is not None:
            _client.close()
        _client = _client_key = None


def cluster_key() -> str:
    import ray

    ctx = ray.get_runtime_context()
    try:
        return ctx.gcs_address
    except AttributeError:  # older/newer Ray: fall back to the job id
        return ctx.get_job_id()


# -- a cluster-wide mutex over the GCS internal KV ----------------------------

_LOCK_NAMESPACE = "ray_adaptive.locks"


class ClusterLock:
    """A best-effort mutex shared by every process of the cluster.

    Built on the GCS internal KV's put-if-absent. A holder that dies leaves
    the key behind; it is taken over once older than ``stale_s``, so a holder
    that merely stalled that long may wake up without it: writes that depend
    on what was read under the lock check :meth:`held` and the values read
    first (``resources.compare_and_resize``).
    Used to serialize read-modify-write changes of a node's ``CPU`` total.
    """

    def __init__(self, name: str, stale_s: float = 10.0, poll_s: float = 0.002) -> None:
        self._key = name.encode()
        self._stale_s = stale_s
        self._poll_s = poll_s
        self._token: Optional[bytes] = None

    def acquire(self, timeout_s: float = 30.0) -> None:
        from ray.experimental import internal_kv

        deadline = time.monotonic() + timeout_s
        while True:
            token = f"{time.time():.6f}:{id(self)}:{threading.get_ident()}".encode()
            existed = internal_kv._internal_kv_put(
                self._key, token, overwrite=False, namespace=_LOCK_NAMESPACE
            )
            if not existed:
                self._token = token
                return
            held = internal_kv._internal_kv_get(self._key, namespace=_LOCK_NAMESPACE)
            if held is not None:
                try:
                    since = float(held.split(b":", 1)[0])
                except ValueError:
                    since = 0.0
                if time.time() - since > self._stale_s:
                    internal_kv._internal_kv_del(self._key, namespace=_LOCK_NAMESPACE)
                    continue
            if time.monotonic() > deadline:
                raise ResourceError(
                    f"timed out after {timeout_s}s waiting for the cluster lock "
                    f"{self._key.decode()!r}"
                )
            time.sleep(self._poll_s)

    def held(self) -> bool:
        """Whether this holder still holds the lock: False once another process took it over as
        stale (this one stalled past ``stale_s``) -- a write under it must not go ahead then."""
        from ray.experimental import internal_kv

        return self._token is not None and internal_kv._internal_kv_get(
            self._key, namespace=_LOCK_NAMESPACE) == self._token

    def release(self) -> None:
        from ray.experimental import internal_kv

        if self._token is None:
            return
        held = internal_kv._internal_kv_get(self._key, namespace=_LOCK_NAMESPACE)
        if held == self._token:
            internal_kv._internal_kv_del(self._key, namespace=_LOCK_NAMESPACE)
        self._token = None

    def __enter__(self) -> "ClusterLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
