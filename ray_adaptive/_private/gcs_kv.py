"""The GCS internal key-value store: what outlives an actor's restart (private Ray API, kept here alone).

The runtime's state store keeps the plan in force here, so that a store
restarted by Ray after a live switch comes back with the plan switched to,
not the one it was first started with. Values are pickled with cloudpickle.
"""

from __future__ import annotations

from typing import Any, Optional

import cloudpickle

__all__ = ["put", "get", "delete", "NAMESPACE"]

NAMESPACE = "ray_adaptive.runtime"


def put(key: str, value: Any) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(key.encode(), cloudpickle.dumps(value), overwrite=True, namespace=NAMESPACE)


def get(key: str) -> Optional[Any]:
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key.encode(), namespace=NAMESPACE)
    return cloudpickle.loads(raw) if raw is not None else None


def delete(key: str) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(key.encode(), namespace=NAMESPACE)
