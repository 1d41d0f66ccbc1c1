"""The oldest supported Ray, in a fresh venv: this checkout's Ray-facing tests on it.

    python release_tests/ray_range.py --out ray_range.json [--smoke-test] [--ray 2.50.0]

pyproject.toml allows every Ray from the oldest release whose raylet serves the
resize RPC (``ray_adaptive._private.ray_versions.OLDEST_SUPPORTED``) on, but
the project's own venv holds the newest. This makes a venv in a temp dir,
installs that oldest Ray together with this checkout and its test extras in
one pip resolve (so pyproject's range must admit it), and runs the tests that
check the private-Ray pieces there: the raylet RPCs and their channel, the
derived task submission against Ray's own call (and its version gate), the
actor helpers and the private-Ray fence; the full run adds the ephemeral
resource API and the runtime on a cluster. Figures: the Ray version the venv
got, each test's outcome, pass/fail counts, and the seconds of each step.

The tests start their own local clusters: run it under the machine's Ray lock
(``flock /tmp/ra-ray.lock``), not inside another such lock (it takes none).
docs/ray-versions.md says what each private piece needs on each release.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _oldest_supported() -> str:
    """The checkout's oldest supported Ray, read from its module alone (no package import, no Ray)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ray_versions", ROOT / "ray_adaptive/_private/ray_versions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return ".".join(map(str, module.OLDEST_SUPPORTED))


# What a smoke run covers: every module that touches a private-Ray piece (each starts one shared cluster).
SMOKE_MODULES = ["tests/test_raylet_rpc.py", "tests/test_submit.py", "tests/test_private_ray.py"]
# The full run adds the public API built on those pieces, on a cluster.
FULL_MODULES = SMOKE_MODULES + ["tests/test_resources.py", "tests/test_runtime.py"]


def _run(cmd, log: pathlib.Path, timeout: float, **kw) -> tuple[int, float]:
    """Run ``cmd`` with its output to ``log``; (exit code, seconds)."""
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, **kw)
    return proc.returncode, round(time.monotonic() - t0, 1)


def _tail(path: pathlib.Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:]


def _outcomes(junit: pathlib.Path) -> dict:
    """test id -> "passed" / "failed" / "skipped" from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out[test_id] = "failed"
        elif case.find("skipped") is not None:
            out[test_id] = "skipped"
        else:
            out[test_id] = "passed"
    return out


def run(ray_version: str, modules: list, keep: bool) -> dict:
    work = pathlib.Path(tempfile.mkdtemp(prefix="ray-adaptive-ray-range-"))
    venv, py = work / "venv", work / "venv" / "bin" / "python"
    figures: dict = {"ray_requested": ray_version, "modules": modules, "work_dir": str(work) if keep else None}
    try:
        code, figures["venv_s"] = _run([sys.executable, "-m", "venv", str(venv)], work / "venv.log", 300)
        if code:
            raise RuntimeError(f"venv failed:\n{_tail(work / 'venv.log')}")
        # One resolve: the pinned Ray must satisfy the checkout's own ray[default] range.
        code, figures["install_s"] = _run(
            [str(py), "-m", "pip", "install", "--disable-pip-version-check", f"ray[default]=={ray_version}",
             "-e", f"{ROOT}[test]"], work / "install.log", 1800)
        if code:
            raise RuntimeError(f"pip install failed:\n{_tail(work / 'install.log')}")
        got = subprocess.run([str(py), "-c", "import ray, sys; sys.stdout.write(ray.__version__)"],
                             capture_output=True, text=True, timeout=120, cwd=work)
        figures["ray_installed"] = got.stdout.strip()
        figures["python"] = subprocess.run([str(py), "-c", "import sys; sys.stdout.write(sys.version.split()[0])"],
                                           capture_output=True, text=True, timeout=60).stdout
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VIRTUAL_ENV", "PYTHONPATH")}
        junit = work / "junit.xml"
        code, figures["tests_s"] = _run(
            [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *modules],
            work / "pytest.log", 1800, cwd=ROOT, env=env)
        figures["pytest_exit"] = code
        tests = _outcomes(junit) if junit.exists() else {}
        figures["tests"] = tests
        for outcome in ("passed", "failed", "skipped"):
            figures[outcome] = sum(1 for v in tests.values() if v == outcome)
        if code or figures["failed"] or not figures["passed"]:
            figures["pytest_tail"] = _tail(work / "pytest.log")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return figures


def check(figures: dict) -> None:
    assert figures["ray_installed"] == figures["ray_requested"], (
        f"the venv got Ray {figures['ray_installed']}, not {figures['ray_requested']}")
    assert figures["pytest_exit"] == 0 and figures["failed"] == 0 and figures["passed"] > 0, (
        figures.get("pytest_tail", ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    ap.add_argument("--smoke-test", action="store_true", help=f"only {', '.join(SMOKE_MODULES)}")
    ap.add_argument("--ray", default=_oldest_supported(),
                    help="the Ray release to install (default: the oldest supported)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (venv, logs)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    figures = run(args.ray, SMOKE_MODULES if args.smoke_test else FULL_MODULES, args.keep)
    figures["total_s"] = round(time.monotonic() - t0, 1)
    text = json.dumps(figures, indent=2)
    print(json.dumps({k: v for k, v in figures.items() if k not in ("tests", "pytest_tail")}, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    check(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
