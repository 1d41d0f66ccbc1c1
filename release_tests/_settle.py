"""The end of a release script's run on one selector: its queues empty, then its State and an audit.

Run as ``python release_tests/<script>.py``, a script finds this module beside it (``sys.path[0]``).
"""

from __future__ import annotations

import time
from typing import Any, Tuple


def settled_state(rt: Any, timeout_s: float = 30.0) -> Tuple[dict, Any]:
    """Wait (``timeout_s`` at most) until the selector of runtime ``rt`` has nothing running or pending --
    the last finishes harvested and applied -- and return its State and ``rt.audit()``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ex = rt.export()["selector"]
        if not ex["running"] and not ex["pending"]:
            break
        time.sleep(0.05)
    return rt.export()["selector"]["state"], rt.audit()
