"""Ray's auto-connect held off while the library's threads may call Ray (private Ray API, kept here alone).

Ray's public calls (``.remote()`` on a function or an actor method) start or join
a cluster when none is connected (``ray._private.auto_init_hook``). A library
thread that checked ``ray.is_initialized()`` a moment before the driver's
``ray.shutdown()`` would thus connect a new driver from a background thread --
seen here from the job watch, mid-shutdown (``connected`` turns False only
late in ``ray.shutdown()``). While any part of a runtime lives in this process,
auto-connect is off; the last part to end restores the setting as it was (so
a user's own plain ``.remote()`` after every runtime stopped behaves as Ray's).
"""

from __future__ import annotations

import threading

__all__ = ["hold", "release"]

_lock = threading.Lock()
_holders = 0
_saved = True


def hold() -> None:
    """A part of a runtime starts: no call of this process starts Ray until it :func:`release`s."""
    global _holders, _saved
    from ray._private import auto_init_hook

    with _lock:
        if _holders == 0:
            _saved = auto_init_hook.enable_auto_connect
            auto_init_hook.enable_auto_connect = False
        _holders += 1


def release() -> None:
    """That part has ended (once per :func:`hold`)."""
    global _holders
    from ray._private import auto_init_hook

    with _lock:
        _holders = max(0, _holders - 1)
        if _holders == 0:
            auto_init_hook.enable_auto_connect = _saved
