"""The extension points are declared interfaces, and the type checker holds the code to them.

The test command runs mypy over the packages ``[tool.mypy]`` in pyproject.toml
names; these tests show that what it checks is worth checking: a call a
:class:`~ray_adaptive.runtime.decider.Decider` does not declare fails, even on
a decider that has the method, and a decider that lacks a declared method
cannot be handed to a router.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mypy(tmp_path: Path, source: str) -> str:
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(probe)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.stdout + proc.stderr


def test_a_call_the_decider_interface_lacks_fails_the_type_check(tmp_path):
    # (SelectorClient has this method; the Decider a router drives does not declare it)
    out = _mypy(tmp_path, "from ray_adaptive.runtime.router import Router\n\n\n"
                          "def probe(router: Router) -> None:\n"
                          "    router.decider.leased_decision_latencies()\n")
    assert '"Decider" has no attribute "leased_decision_latencies"' in out, out


def test_a_decider_missing_a_declared_method_is_refused(tmp_path):
    out = _mypy(tmp_path, "from typing import List, Sequence\n\n"
                          "from ray_adaptive.plan import TaskState\n"
                          "from ray_adaptive.runtime.decider import Decider\n"
                          "from ray_adaptive.runtime.local import LocalDecider\n\n\n"
                          "class Incomplete(LocalDecider):\n"
                          "    freeze = None  # type: ignore[assignment]\n\n\n"
                          "def probe(d: Incomplete) -> Decider:\n"
                          "    return d\n")
    assert "Incompatible return value type" in out and "Decider" in out, out
