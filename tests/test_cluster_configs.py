"""Offline checks of the cluster configs in examples/clusters/: no Ray cluster, no cloud.

Launcher YAMLs (aws, gcp, local) go through what ``ray up`` runs before it
touches a cloud: ``prepare_config`` (merges the provider's defaults.yaml
shipped with Ray; for ``local`` it also turns ``worker_ips`` into Ray's single
node type) and then ``validate_config`` (ray-schema.json). Neither needs the
network or a cloud SDK for any of the three providers: prepare_config only
reads the defaults file and validate_config is jsonschema, so no provider needs
a fallback. (Between the two, ``ray up`` loads the provider's node provider,
which imports boto3 / googleapiclient, and asks the cloud for instance
resources; after them it bootstraps the cloud side. Those steps are what is
left out here.) The rest reads the prepared config, i.e. the commands as they
will run.

kuberay.yaml goes through ``_derive_autoscaling_config_from_ray_cr``, the code
Ray's KubeRay autoscaler runs on a RayCluster: it parses each group's labels
and custom resources the way Ray does and then calls ``validate_config``.
Labels are in each group's top-level ``labels`` field, not in
``rayStartParams``: KubeRay >= 1.5 rejects ``rayStartParams.labels`` and Ray
2.60's parser ignores it (see the comments in kuberay.yaml).

Every check is also shown failing on a broken copy, so a pass means the
validator ran.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from ray._private.label_utils import parse_node_labels_string, validate_node_label_syntax
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTERS = Path(__file__).resolve().parent.parent / "examples" / "clusters"
LAUNCHER = ["aws", "gcp", "local"]
PERIOD_VAR = "RAY_raylet_report_resources_period_milliseconds"
# The variable must prefix the `ray start` command itself, possibly among other
# assignments (each launcher command runs in a new shell).
RAY_START_WITH_PERIOD = re.compile(rf"(^|[;&|\s]){PERIOD_VAR}=10\s+(\w+=\S*\s+)*ray start\b")
STANDARD_RESOURCES = {"CPU", "GPU", "TPU", "memory", "object_store_memory"}


def load(name: str) -> dict:
    with open(CLUSTERS / f"{name}.yaml") as f:
        return yaml.safe_load(f)


def prepared(name: str) -> dict:
    return prepare_config(load(name))


def ray_start_commands(cmds: list) -> list:
    return [c for c in cmds if re.search(r"\bray start\b", c)]


def custom(resources: dict) -> dict:
    return {k: v for k, v in resources.items() if k not in STANDARD_RESOURCES}


def nodes_of(name: str, cfg: dict) -> dict:
    """node type (or host) -> (is_head, labels, resources) as each node's `ray start` gets them."""
    if name != "local":
        head = cfg["head_node_type"]
        return {t: (t == head, nt.get("labels", {}), nt["resources"]) for t, nt in cfg["available_node_types"].items()}
    # The local provider has no node types: the head's flags are on its command
    # line, the workers' in one `case` arm per host IP.
    (head_cmd,) = ray_start_commands(cfg["head_start_ray_commands"])
    head_args = shlex.split(head_cmd.split("ray start", 1)[1])
    flags = dict(a[2:].split("=", 1) for a in head_args if a.startswith("--") and "=" in a)
    out = {cfg["provider"]["head_ip"]: (True, parse_node_labels_string(flags["labels"]), json.loads(flags["resources"]))}
    (worker_cmd,) = ray_start_commands(cfg["worker_start_ray_commands"])
    arms = re.findall(r"""\*" (\S+) "\*\) LABELS="([^"]*)"; RESOURCES='([^']*)' ;;""", worker_cmd)
    for ip, labels, resources in arms:
        out[ip] = (False, parse_node_labels_string(labels), json.loads(resources))
    return out


# ---------------------------------------------------------------- launcher YAMLs


@pytest.mark.parametrize("name", LAUNCHER)
def test_ray_up_accepts_the_config(name):
    cfg = prepared(name)
    validate_config(cfg)
    if name == "local":
        assert list(cfg["available_node_types"]) == ["local.cluster.node"]
        assert cfg["available_node_types"]["local.cluster.node"]["max_workers"] == len(cfg["provider"]["worker_ips"])
    else:  # our node types replaced the provider's defaults, not merged with them
        assert cfg["available_node_types"].keys() == load(name)["available_node_types"].keys()


def fixed_worker_types(name: str, cfg: dict) -> list:
    """The worker types of a prepared config that cannot grow (min_workers == max_workers); the local
    provider's single type is both the head's and the workers'."""
    types = cfg["available_node_types"]
    workers = types if name == "local" else {t: nt for t, nt in types.items() if t != cfg["head_node_type"]}
    assert workers, name
    return sorted(t for t, nt in workers.items() if nt["min_workers"] >= nt["max_workers"])


@pytest.mark.parametrize("name", LAUNCHER)
def test_the_workers_autoscale(name):
    """Every worker type may grow (min_workers < max_workers), within the cluster's max_workers; a copy
    pinned to a fixed size is caught."""
    cfg = prepared(name)
    assert fixed_worker_types(name, cfg) == []
    if name != "local":
        head = cfg["head_node_type"]
        assert sum(nt["max_workers"] for t, nt in cfg["available_node_types"].items() if t != head) <= cfg["max_workers"]
    pinned = load(name)
    if name == "local":
        pinned["min_workers"] = pinned["max_workers"]
    else:
        for nt in pinned["available_node_types"].values():
            nt["min_workers"] = nt["max_workers"]
    assert fixed_worker_types(name, prepare_config(pinned))


@pytest.mark.parametrize("name", LAUNCHER)
def test_validate_config_rejects_broken_copies(name):
    cfg = prepared(name)
    no_provider = copy.deepcopy(cfg)
    del no_provider["provider"]
    with pytest.raises(jsonschema.ValidationError, match="provider"):
        validate_config(no_provider)
    float_resource = copy.deepcopy(cfg)
    node_type = next(iter(float_resource["available_node_types"].values()))
    node_type["resources"]["zone-x"] = 0.5
    with pytest.raises(jsonschema.ValidationError, match="integer"):
        validate_config(float_resource)


def test_local_provider_refuses_node_types():
    """Why local.yaml sets zones on `ray start` command lines rather than in node types."""
    import click

    raw = load("local")
    raw["available_node_types"] = {"w": {"node_config": {}, "resources": {}, "labels": {"zone": "a"}}}
    with pytest.raises(click.ClickException, match="available_node_types"):
        prepare_config(raw)


@pytest.mark.parametrize("name", LAUNCHER)
def test_every_ray_start_sets_the_report_period(name):
    cfg = prepared(name)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = ray_start_commands(cfg[key])
        assert len(starts) == 1, (key, cfg[key])
        assert RAY_START_WITH_PERIOD.search(starts[0]), (key, starts[0])
    # What the pattern tells apart:
    assert RAY_START_WITH_PERIOD.search(f"ulimit -n 65536; {PERIOD_VAR}=10 OTHER=1 ray start --head")
    assert not RAY_START_WITH_PERIOD.search(f"export {PERIOD_VAR}=10")  # lost before the next command
    assert not RAY_START_WITH_PERIOD.search(f"{PERIOD_VAR}=10; ray start --head")
    assert not RAY_START_WITH_PERIOD.search(f"{PERIOD_VAR}=100 ray start --head")


@pytest.mark.parametrize("name", LAUNCHER)
def test_ray_adaptive_is_installed_from_the_mounted_checkout_non_editable(name):
    raw, cfg = load(name), prepared(name)
    (mount,) = [remote for remote, local in raw["file_mounts"].items() if local == "."]
    for key in ("head_setup_commands", "worker_setup_commands"):  # setup_commands merged into both
        pips = [shlex.split(c) for c in cfg[key] if "pip install" in c]
        assert any(mount in args for args in pips), (key, cfg[key])
        assert any('ray[default]==2.60.0' in args for args in pips), (key, cfg[key])
        for args in pips:
            assert "-e" not in args and "--editable" not in args and not any(a.startswith("--editable=") for a in args), args
        order = [i for i, c in enumerate(cfg[key]) if "pip install" in c]
        ray_pin = next(i for i in order if "ray[default]==2.60.0" in cfg[key][i])
        install = next(i for i in order if mount in shlex.split(cfg[key][i]))
        assert ray_pin < install, cfg[key]


@pytest.mark.parametrize("name", LAUNCHER)
def test_nodes_have_a_zone_label_and_integer_custom_resources(name):
    cfg = prepared(name)
    nodes = nodes_of(name, cfg)
    heads = [n for n, (is_head, _, _) in nodes.items() if is_head]
    workers = {n: v for n, v in nodes.items() if not v[0]}
    assert len(heads) == 1 and len(workers) >= 2, nodes
    if name == "local":
        assert set(workers) == set(cfg["provider"]["worker_ips"]), "every worker host needs a case arm"
    for node, (_, labels, resources) in nodes.items():
        validate_node_label_syntax(labels)  # what `ray start` checks
        assert set(labels) >= {"zone", "rack"}, (node, labels)
        extra = custom(resources)
        assert extra and all(type(v) is int and v >= 0 for v in extra.values()), (node, resources)
        assert f"zone-{labels['zone']}" in extra, (node, labels, resources)
        assert not any(r.startswith("ra-") for r in extra), "slot resources are created by ra.start"
    assert len({labels["zone"] for _, labels, _ in workers.values()}) >= 2, "workers in at least two zones"
    if name == "aws":
        zones = cfg["provider"]["availability_zone"].split(",")
        assert all(labels["zone"] in zones for _, labels, _ in nodes.values())


@pytest.mark.parametrize("name", LAUNCHER)
def test_nothing_of_ray_adaptive_starts_on_the_nodes(name):
    cfg = prepared(name)
    names = ("ray-adaptive", "ray_adaptive", "ra.start")
    for key in ("head_start_ray_commands", "worker_start_ray_commands", "initialization_commands"):
        for cmd in cfg[key]:
            assert not any(n in cmd for n in names), (key, cmd)
    for key in ("head_setup_commands", "worker_setup_commands"):
        for cmd in cfg[key]:
            if any(n in cmd for n in names):  # only its installation
                assert shlex.split(cmd)[:2] == ["pip", "install"], (key, cmd)


# ---------------------------------------------------------------- kuberay.yaml


def ray_cr() -> dict:
    cr = load("kuberay")
    cr["metadata"].setdefault("namespace", "default")  # set by Kubernetes on apply
    return cr


def groups(cr: dict) -> list:
    return [("headgroup", cr["spec"]["headGroupSpec"])] + [(g["groupName"], g) for g in cr["spec"]["workerGroupSpecs"]]


def test_kuberay_structure():
    cr = ray_cr()
    assert cr["apiVersion"] == "ray.io/v1" and cr["kind"] == "RayCluster"
    spec = cr["spec"]
    assert isinstance(spec["headGroupSpec"]["rayStartParams"], dict)
    workers = spec["workerGroupSpecs"]
    assert len(workers) >= 2
    # the cluster autoscales (nodes that join enter the policy live; the policy's backlog reaches the autoscaler)
    assert spec.get("enableInTreeAutoscaling") is True
    for g in workers:
        assert g["groupName"]
        for k in ("replicas", "minReplicas", "maxReplicas"):
            assert type(g[k]) is int, (g["groupName"], k)
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        assert g["minReplicas"] < g["maxReplicas"], (g["groupName"], "a group that cannot grow")
    for name, g in groups(cr):
        params = g["rayStartParams"]
        assert all(isinstance(v, str) for v in params.values()), (name, params)  # map[string]string in the CRD
        assert "labels" not in params, "KubeRay >= 1.5 rejects rayStartParams.labels; use the group's labels"
        assert {"zone", "rack"} <= set(g["labels"]), (name, g.get("labels"))
        pod = g["template"]["spec"]
        assert pod["nodeSelector"]["topology.kubernetes.io/zone"] == g["labels"]["zone"], name
        containers = pod["containers"] + pod.get("initContainers", [])
        for c in containers:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env.get(PERIOD_VAR) == "10", (name, c["name"], env)
            assert "ray-adaptive" in c["image"], (name, c["image"])
            cmd = " ".join(c.get("command", []) + c.get("args", []))
            assert not any(n in cmd for n in ("ray-adaptive", "ray_adaptive", "ra.start")), (name, cmd)
    assert len({g["labels"]["zone"] for g in workers}) >= 2, "worker groups in at least two zones"


def test_kuberay_through_rays_kuberay_parser():
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    cr = ray_cr()
    derived = _derive_autoscaling_config_from_ray_cr(cr)  # calls validate_config itself
    validate_config(derived)
    for name, g in groups(cr):
        node_type = derived["available_node_types"][name]
        assert node_type["labels"] == g["labels"]
        extra = custom(node_type["resources"])
        assert f"zone-{g['labels']['zone']}" in extra and all(type(v) is int for v in extra.values()), node_type
        assert node_type["resources"]["CPU"] >= 1
        # KubeRay writes `--resources=<value>` into the container's bash command:
        # the shell must leave a JSON object with integer values.
        (flag,) = shlex.split(f"--resources={g['rayStartParams']['resources']}")
        assert json.loads(flag.split("=", 1)[1]) == extra

    broken = ray_cr()
    broken["spec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"] = '"{\\"zone-x\\": 0.5}"'
    with pytest.raises(AssertionError):  # Ray's parser wants integer custom resources
        _derive_autoscaling_config_from_ray_cr(broken)
    broken = ray_cr()
    broken["spec"]["workerGroupSpecs"][0]["labels"]["zone"] = "not a label value"
    with pytest.raises(ValueError):
        _derive_autoscaling_config_from_ray_cr(broken)
