"""The Ray releases ray-adaptive runs on, and which one is installed.

The private pieces of this package that differ between releases ask
:func:`installed` (or :func:`at_least`) which code path to take, so that each
difference is one named branch with the release it starts at, not a try/except
that swallows whatever moved. ``docs/ray-versions.md`` lists every piece, the
release it exists since and how it is checked.
"""

from __future__ import annotations

import re
from typing import Tuple

__all__ = ["OLDEST_SUPPORTED", "NEWEST_SUPPORTED", "installed", "at_least", "parse", "supported"]

# The raylet serves NodeManagerService.ResizeLocalResourceInstances -- the RPC every ephemeral resource
# (set_resource, the runtime's slots, every ESL) stands on -- since Ray 2.50; 2.49 and older do not have it.
OLDEST_SUPPORTED = (2, 50, 0)
# The newest release the private pieces were run against (tests/test_raylet_rpc.py, test_submit.py,
# test_private_ray.py); pyproject.toml's `ray[default]` range ends below the next minor release.
NEWEST_SUPPORTED = (2, 60, 0)


def parse(version: str) -> Tuple[int, int, int]:
    """``"2.58.1"`` -> ``(2, 58, 1)``; a pre-release or dev suffix (``"2.61.0rc1"``, ``"3.0.0.dev0"``) is
    dropped, so such a build counts as the release it leads to."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if m is None:
        raise ValueError(f"not a Ray version: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def installed() -> Tuple[int, int, int]:
    """The installed Ray's version as ``(major, minor, patch)``."""
    import ray

    return parse(ray.__version__)


def at_least(major: int, minor: int, patch: int = 0) -> bool:
    """Whether the installed Ray is that release or newer."""
    return installed() >= (major, minor, patch)


def supported() -> bool:
    """Whether the installed Ray lies in the range ray-adaptive supports (pyproject.toml's)."""
    return OLDEST_SUPPORTED <= installed() < (NEWEST_SUPPORTED[0], NEWEST_SUPPORTED[1] + 1, 0)
