"""The policy language: text -> syntax -> checked, typed IR, and back to text.

The stages, in order (each a module of this package):

1. :mod:`~ray_adaptive.dsl.parser`  -- sections, declarations, body syntax;
2. :mod:`~ray_adaptive.dsl.checker` -- whitelist + types -> :mod:`~ray_adaptive.dsl.ir`;
3. :mod:`~ray_adaptive.dsl.printer` -- IR -> text;
4. :mod:`~ray_adaptive.dsl.interp`  -- the reference semantics of the IR.

Example:
    >>> from ray_adaptive.dsl import parse_policy
    >>> p = parse_policy('''
    ... Task:
    ...   priority: int
    ... Score(task, node):
    ...   return -task.priority
    ... ''')
    >>> [f.name for f in p.task_fields]
    ['priority']
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from ray_adaptive import files
from ray_adaptive.dsl import limits
from ray_adaptive.dsl.checker import check_policy
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.dsl.parser import parse_source
from ray_adaptive.dsl.printer import format_policy
from ray_adaptive.errors import PolicyError

__all__ = ["Policy", "PolicyError", "parse_policy", "load_policy", "format_policy", "shipped_policies", "policy_path"]


def parse_policy(text: str, file: str = "<policy>", name: str | None = None) -> Policy:
    """Parse and check policy ``text``; raise :class:`PolicyError` (``FILE:LINE:COL: error: ...``)."""
    if name is None:
        name = Path(file).stem if file != "<policy>" else "policy"
    return check_policy(parse_source(text, file), name)


def shipped_policies() -> list[str]:
    """Names of the policies shipped with ray-adaptive (``policies/*.policy``)."""
    folder = resources.files("ray_adaptive.policies")
    return sorted(p.name[: -len(".policy")] for p in folder.iterdir() if p.name.endswith(".policy"))


def policy_path(name_or_path: str | os.PathLike) -> Path:
    """The file of a policy given as a path or as the name of a shipped policy."""
    path = Path(name_or_path)
    if path.exists():
        return path
    name = str(name_or_path)
    if os.sep not in name and not name.endswith(".policy"):
        shipped = Path(str(resources.files("ray_adaptive.policies").joinpath(f"{name}.policy")))
        if shipped.exists():
            return shipped
    raise FileNotFoundError(
        f"no policy file or shipped policy named {name!r}; shipped policies: {', '.join(shipped_policies())}"
    )


def load_policy(name_or_path: str | os.PathLike) -> Policy:
    """Load a policy from a path or by shipped name (e.g. ``"drf_lb"``); a file that cannot be read as
    UTF-8 text is a FileError, one over the size limit a PolicyError (``docs/limits.md``)."""
    path = policy_path(name_or_path)
    file = str(name_or_path) if Path(name_or_path).exists() else path.name
    data = files.read_bytes(path, "policy", limit=limits.MAX_POLICY_BYTES)  # (no more than the limit is read)
    limits.check_file_size(data, file)
    return parse_policy(files.decode(data, file, "policy"), file=file)
