"""Private Ray lives in ``ray_adaptive/_private/`` alone, and what lives there still works on this Ray.

The fence is read from the source (an AST walk), so it fails on the line
that crosses it: an import of one of Ray's private packages, or a read of a
private attribute of Ray's objects, anywhere in ``ray_adaptive`` outside
``_private`` or in ``esl``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import ray

from ray_adaptive._private import actors

ROOT = Path(__file__).resolve().parent.parent
FENCED = [p for pkg in ("ray_adaptive", "esl") for p in sorted((ROOT / pkg).rglob("*.py"))
          if "_private" not in p.relative_to(ROOT).parts]

# Ray's packages that are not its public API (ray._private, ray._raylet, ray._common, ...: any
# component with a leading underscore), and the generated protocol stubs and the GCS store.
_PRIVATE_MODULES = ("ray.core.generated", "ray.experimental.internal_kv")
# Attributes of Ray's objects (handles, workers, remote functions) that no public API documents.
_PRIVATE_ATTRS = {"_actor_id", "__ray_ready__", "__ray_call__", "_remote", "_function_descriptor",
                  "_default_options", "global_worker", "core_worker", "_internal_kv_put", "_internal_kv_get"}


def _private_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "ray":
        return False
    return any(p.startswith("_") for p in parts[1:]) or name.startswith(_PRIVATE_MODULES)


def _crossings(path: Path, root: Path = ROOT) -> list:
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(root)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if _private_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _private_module(node.module):
                out.append(f"{where}:{node.lineno}: from {node.module} import ...")
            elif node.module.split(".")[0] == "ray":
                out += [f"{where}:{node.lineno}: from {node.module} import {a.name}"
                        for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute):
            if node.attr in _PRIVATE_ATTRS:
                out.append(f"{where}:{node.lineno}: .{node.attr}")
            else:  # ray.x._y: a private attribute reached from the ray module itself
                chain, base = [node.attr], node.value
                while isinstance(base, ast.Attribute):
                    chain.append(base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id == "ray" and _private_module(".".join(["ray", *chain[::-1]])):
                    out.append(f"{where}:{node.lineno}: ray.{'.'.join(chain[::-1])}")
    return out


def test_no_private_ray_outside_the_private_package():
    crossings = [c for path in FENCED for c in _crossings(path)]
    assert not crossings, ("private Ray used outside ray_adaptive/_private (put it behind a function "
                           "there, with a test):\n" + "\n".join(crossings))


def test_the_fence_sees_what_it_forbids(tmp_path):
    """The walk above finds each kind of crossing (else the test before proves nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import ray._private.worker\nfrom ray._raylet import ObjectRef\n"
                   "from ray.core.generated import node_manager_pb2\nfrom ray.util import _private_thing\n"
                   "h._actor_id.hex()\nh.__ray_ready__.remote()\nray._private.worker.global_worker\n")
    found = _crossings(bad, root=tmp_path)
    assert {int(c.split(":")[1]) for c in found} == set(range(1, 8)), found


def test_the_actor_helpers_work_on_this_ray(ray_cluster):
    @ray.remote(num_cpus=0)
    class Probe:
        def __init__(self):
            self.value = 7

    a, b = Probe.options(name="ra-test-probe", namespace="ra-test").remote(), Probe.remote()
    actors.wait_ready([a, b], timeout=60)
    assert actors.actor_key(a) != actors.actor_key(b)
    assert actors.actor_key(a) == actors.actor_key(ray.get_actor("ra-test-probe", namespace="ra-test"))
    assert ray.get(actors.call_in_actor(a, lambda self, k: self.value * k, 6), timeout=60) == 42
    for h in (a, b):
        ray.kill(h)


def test_wait_ready_raises_the_constructor_error(ray_cluster):
    @ray.remote(num_cpus=0)
    class Broken:
        def __init__(self):
            raise ValueError("no")

    with pytest.raises(Exception, match="no"):
        actors.wait_ready([Broken.remote()], timeout=60)


def test_the_job_table_reads_on_this_ray(ray_cluster):
    """This driver's job is in the GCS job table, alive, with the metadata its job config carries."""
    from ray_adaptive._private.jobs import job_table

    me = ray.get_runtime_context().get_job_id()
    table = job_table()
    assert me in table and not table[me].dead and table[me].start_ms > 0
    assert all(isinstance(r.metadata, dict) for r in table.values())


def test_the_actor_watch_reads_actor_states_on_this_ray(ray_cluster):
    """What ActorWatch reads of the GCS (the job's ALIVE actors, one actor's state) and of a class's options
    still reads so on this Ray: alive -> nothing; killed -> dead (issue 38)."""
    from ray_adaptive._private.actor_watch import ActorWatch, actor_id_of, class_default_options

    @ray.remote(num_cpus=0, max_restarts=2)
    class Probe:
        def node(self):
            return ray.get_runtime_context().get_node_id()

    assert class_default_options(Probe)["max_restarts"] == 2
    a = Probe.remote()
    node = ray.get(a.node.remote(), timeout=60)
    watch = ActorWatch(ray.get_runtime_context().get_job_id())
    key = (actor_id_of(a), node)
    assert watch._ended([key]) == {}
    ray.kill(a, no_restart=True)
    from tests.conftest import wait_for

    assert wait_for(lambda: watch._ended([key]), timeout=20)[key]["end"] == "dead"


def test_auto_connect_is_held_off_while_a_runtime_part_lives_and_restored_after():
    """Ray's auto-connect switch exists on this Ray, and holds nest: the last release restores it as it was."""
    from ray._private import auto_init_hook

    from ray_adaptive._private import autoinit

    before = auto_init_hook.enable_auto_connect
    autoinit.hold()
    autoinit.hold()
    assert auto_init_hook.enable_auto_connect is False
    autoinit.release()
    assert auto_init_hook.enable_auto_connect is False
    autoinit.release()
    assert auto_init_hook.enable_auto_connect == before
