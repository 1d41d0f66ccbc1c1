"""How a release script hands its figures over: JSON on stdout, and in ``--out`` if given.

Run as ``python release_tests/<script>.py``, a script finds this module beside it (``sys.path[0]``).
"""

from __future__ import annotations

import json
from typing import Any, Optional


def emit(figures: Any, out: Optional[str]) -> None:
    """Print ``figures`` as indented JSON and write the same text to ``out`` (if not None). numpy
    arrays and scalars (a State's vectors) are written as lists and numbers."""
    text = json.dumps(figures, indent=2, default=lambda o: o.tolist())
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
