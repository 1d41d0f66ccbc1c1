"""Fails loudly when Ray moves the private APIs ray_adaptive/_private/raylet.py uses, on any Ray of
the supported range (release_tests/ray_range.py runs it on the oldest).

The first tests need no cluster (imports and protobuf descriptors only); the
last ones call the two RPCs on the shared cluster and check the semantics the
library builds on (create, resize, clamp to in-use, delete, GPU refused).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys

import pytest
import ray

from ray_adaptive._private import ray_versions, raylet, submit
from ray_adaptive.errors import ResourceError
from tests.conftest import wait_for


def _pyproject_ray_range():
    """The version specifier of pyproject.toml's ``ray[default]`` dependency."""
    import pathlib
    import re

    from packaging.requirements import Requirement

    pyproject = (pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    return Requirement(re.search(r'"(ray\[default\][^"]*)"', pyproject).group(1)).specifier


def test_ray_version_is_in_the_supported_range():
    """The installed Ray is one pyproject.toml allows, and that range is the one the private pieces
    know (ray_versions: the oldest with the resize RPC, the newest they were run against)."""
    spec = _pyproject_ray_range()
    assert spec.contains(ray.__version__), (
        f"Ray {ray.__version__} is outside ray-adaptive's supported range {spec}: run tests/test_raylet_rpc.py, "
        "tests/test_submit.py and tests/test_private_ray.py on it and port ray_adaptive/_private if they fail "
        "(docs/ray-versions.md)")
    assert ray_versions.supported()
    major, minor, patch = ray_versions.OLDEST_SUPPORTED
    just_below = f"{major}.{minor}.{patch - 1}" if patch else f"{major}.{minor - 1}.999"
    assert spec.contains(f"{major}.{minor}.{patch}") and not spec.contains(just_below), spec
    major, minor, patch = ray_versions.NEWEST_SUPPORTED
    assert spec.contains(f"{major}.{minor}.{patch}") and not spec.contains(f"{major}.{minor + 1}.0"), spec


def test_the_verified_submission_releases_lie_in_the_range():
    """A release the derived submission is verified on but pyproject.toml excludes is a list out of date."""
    spec = _pyproject_ray_range()
    assert {v for v in submit.VERIFIED_RAY_VERSIONS if not spec.contains(v)} == set()


def test_an_older_ray_is_refused_naming_the_rpc(monkeypatch):
    """On a Ray older than the resize RPC the error says which release is needed and why."""
    monkeypatch.setattr(ray_versions, "installed", lambda: (2, 49, 2))
    with pytest.raises(ResourceError, match=r"older than 2\.50\.0.*ResizeLocalResourceInstances"):
        raylet.check_ray_compat()


def test_the_channel_factory_is_the_one_of_this_release():
    """Ray's gRPC channel factory moved to ray._private.grpc_utils with token auth (2.52); before, it is
    ray._private.utils' and Ray has no token auth (nothing to miss)."""
    module, name = raylet.channel_factory_location()
    if ray_versions.at_least(2, 52):
        assert module == "ray._private.grpc_utils"
        importlib.import_module("ray._private.authentication.grpc_authentication_client_interceptor")
    else:
        assert module == "ray._private.utils"
        assert importlib.util.find_spec("ray._private.authentication") is None
    assert callable(raylet.channel_factory()) and raylet.channel_factory().__name__ == name


@pytest.mark.parametrize("module, attr", raylet.required_symbols(), ids=lambda v: str(v))
def test_private_symbol_exists(module, attr):
    try:
        mod = importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - only on a changed Ray
        pytest.fail(f"Ray {ray.__version__} no longer has module {module} ({err})")
    assert hasattr(mod, attr), f"Ray {ray.__version__}: {module}.{attr} is gone"


def test_check_ray_compat_passes_on_this_ray():
    raylet.check_ray_compat()


def test_check_ray_compat_names_a_missing_rpc(monkeypatch):
    """Simulate a Ray where the RPC moved: the error names it."""
    monkeypatch.setattr(raylet, "_RPC_METHODS", ("ResizeLocalResourceInstances", "NoSuchRpc"))
    with pytest.raises(ResourceError, match="NoSuchRpc"):
        raylet.check_ray_compat()


def test_check_ray_compat_names_a_missing_field(monkeypatch):
    monkeypatch.setattr(
        raylet,
        "_REQUIRED_FIELDS",
        (("ResizeLocalResourceInstancesRequest", "resource_map", "map<string,double>"),),
    )
    with pytest.raises(ResourceError, match="resource_map"):
        raylet.check_ray_compat()


def test_check_ray_compat_names_a_missing_module(monkeypatch):
    monkeypatch.setattr(raylet, "_REQUIRED", (("ray.core.generated.no_such_pb2", "X"),))
    with pytest.raises(ResourceError, match="no_such_pb2"):
        raylet.check_ray_compat()


_TLS_PROBE = """
from ray_adaptive import resources
from ray_adaptive.local_multinode import local_cluster

with local_cluster(num_nodes=1, num_cpus=1):
    node = resources.set_resource("tls_probe", 2)[0]
    assert resources.get_cluster_state()[node]["tls_probe"]["total"] == 2.0
    resources.set_resource("tls_probe", 0)
print("resized over TLS")
"""


def test_the_raylet_channel_follows_rays_tls_settings(tmp_path):
    """On a cluster whose processes use TLS (RAY_USE_TLS=1 and certificates, Ray's settings), the
    resize RPC reaches the raylet over TLS; a plaintext channel fails the handshake. Its own process:
    the settings are environment variables every Ray process of that cluster reads."""
    from ray._private.test_utils import generate_self_signed_tls_certs

    cert, key = generate_self_signed_tls_certs()
    (tmp_path / "server.crt").write_text(cert)
    (tmp_path / "server.key").write_text(key)
    env = {**os.environ, "RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": str(tmp_path / "server.crt"),
           "RAY_TLS_SERVER_KEY": str(tmp_path / "server.key"), "RAY_TLS_CA_CERT": str(tmp_path / "server.crt")}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", _TLS_PROBE], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "resized over TLS" in out.stdout, out.stderr[-3000:]


def test_node_table_fields(ray_cluster):
    for n in ray.nodes():
        for key in ("NodeID", "NodeManagerAddress", "NodeManagerPort", "Alive", "Resources"):
            assert key in n, f"ray.nodes() entries lost {key!r}: {sorted(n)}"


def test_resize_semantics_on_a_live_raylet(ray_cluster):
    """The RPC still creates, resizes, clamps to in-use, deletes and refuses GPU."""
    client = raylet.client()
    node = ray_cluster.node_ids[1]
    assert client.resize(node, {"rpc_probe": 3})["rpc_probe"] == 3
    totals, available = client.load([node])[node]
    assert totals["rpc_probe"] == 3 and available["rpc_probe"] == 3

    @ray.remote(num_cpus=1, resources={"rpc_probe": 2})
    def hold():
        import time

        time.sleep(0.5)

    ref = hold.remote()

    def held():
        return client.load([node])[node][1].get("rpc_probe", 0) == 1

    wait_for(held, timeout=20, message="the task to take 2 of the 3 rpc_probe")
    # Shrinking below the 2 units in use is clamped to them.
    assert client.resize(node, {"rpc_probe": 0})["rpc_probe"] == 2, (
        "ResizeLocalResourceInstances no longer clamps to in-use: "
        "ray_adaptive.resources' convergence logic must be revisited"
    )
    ray.get(ref)
    # ...and does not catch up by itself after release: the total stays 2.
    assert client.load([node])[node][0].get("rpc_probe") == 2
    assert client.resize(node, {"rpc_probe": 0}).get("rpc_probe") is None
    with pytest.raises(ResourceError, match="refused"):
        client.resize(node, {"GPU": 1})
