"""The experiments' figures: matplotlib without a display, and one way to write a figure.

Example:
    >>> import tempfile, pathlib
    >>> plt = pyplot()
    >>> fig, ax = plt.subplots()
    >>> written = []
    >>> save(fig, pathlib.Path(tempfile.mkdtemp()) / "x.png", written).name
    'x.png'
    >>> [p.name for p in written]
    ['x.png']
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["pyplot", "save"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (headless: CI, cluster nodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, written: Optional[list] = None, dpi: int = 110) -> Path:
    """Lay ``fig`` out, write it to ``path``, close it (figures hold memory until closed); append
    ``path`` to ``written``."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    if written is not None:
        written.append(path)
    return path
