"""A regular install is the whole library: the wheel carries every module, policy and scenario, and runs.

CI installs the project editable; users and cluster nodes install a wheel.
This builds the wheel from the working tree, checks its contents against the
tree, installs it (non-editable, into a folder of its own) and runs a
policy-decorated task on a local two-node cluster from it, in a process whose
``ray_adaptive`` can only come from that install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True)
    (path,) = out.glob("ray_adaptive-*.whl")
    return path


def _tracked(pattern: str) -> list[str]:
    """The files of the source tree (git's view: what a clean clone holds)."""
    listed = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, check=True, capture_output=True, text=True)
    return [line for line in listed.stdout.splitlines() if line]


def test_the_wheel_carries_every_module_policy_and_scenario(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = [p for p in _tracked("ray_adaptive/*.py") + _tracked("esl/*.py")]
    assert modules and "ray_adaptive/runtime/router.py" in modules
    missing = [m for m in modules if m not in names]
    assert not missing, f"the wheel leaves out {missing}: list their packages in pyproject.toml"
    policies = [f"ray_adaptive/policies/{Path(p).name}" for p in _tracked("policies/*.policy")]
    assert len(policies) >= 10 and not [p for p in policies if p not in names]
    assert "ray_adaptive/scenarios/drf_3tenants.json" in names
    assert not [n for n in names if n.startswith(("tests/", "release_tests/", "examples/"))]


_JOB = textwrap.dedent('''
    import ray
    import ray_adaptive as ra
    from ray_adaptive.local_multinode import local_cluster

    with local_cluster(num_nodes=2, num_cpus=1) as lc:
        ra.start("least_loaded", plan="decentralized", queue=1)

        @ra.policy("least_loaded")
        @ray.remote(num_cpus=1)
        def where(x):
            import ray_adaptive
            return x, ray.get_runtime_context().get_node_id(), ray_adaptive.__file__

        out = ray.get([where.remote(i) for i in range(6)])
        ra.shutdown()
        assert [x for x, _, _ in out] == list(range(6))
        assert {n for _, n, _ in out} == set(lc.node_ids)  # the policy spread them over both nodes
        print("driver:", ra.__file__)
        print("workers:", sorted({f for _, _, f in out}))
''')


def test_the_installed_wheel_runs_a_policy_decorated_task(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, text=True)
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if line.startswith(("driver:", "workers:")))
    assert lines["driver"].startswith(str(target)), lines  # not the editable checkout
    assert str(target) in lines["workers"] and str(ROOT) not in lines["workers"], lines
