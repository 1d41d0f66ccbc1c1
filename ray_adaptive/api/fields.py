"""The values a policy's declared fields get: checked against their types, or read from a node's Ray labels."""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Sequence

from ray_adaptive.dsl.ir import FieldDecl, field_problem

__all__ = ["check_fields", "label_fields"]

_LABEL_VALUES: Dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "string": str, "bool": lambda v: {"true": True, "false": False}[v.lower()]}


def label_fields(decls: Sequence[FieldDecl], labels: Mapping[str, str], given: set, what: str) -> Dict[str, Any]:
    """The policy's scalar ``Node:`` fields a node's Ray labels (``ray start --labels``) give.

    Labels are how a cluster config says what a node is (its zone, its rack),
    so a policy that declares ``zone: string`` reads it from there without the
    driver copying ``ray.nodes()`` into ``node_fields=``; labels the policy does
    not declare are Ray's business and are left alone, and so are the fields
    ``given`` in ``node_fields=``, which win.

    Example:
        >>> from ray_adaptive.dsl import parse_policy
        >>> p = parse_policy("Node:\\n  zone: string\\n  rack: int\\nScore(task, node):\\n  return node.rack\\n")
        >>> label_fields(p.node_fields, {"zone": "us-a", "rack": "3", "gpu": "a100"}, set(), "node n0")
        {'zone': 'us-a', 'rack': 3}
    """
    out: Dict[str, Any] = {}
    for d in decls:
        convert = _LABEL_VALUES.get(d.type.kind)
        if convert is None or d.name not in labels or d.name in given:
            continue
        try:
            out[d.name] = convert(labels[d.name])
        except (ValueError, KeyError):
            raise TypeError(f"{what}: its Ray label {d.name}={labels[d.name]!r} cannot be read as {d.type} "
                            f"(the policy's Node field {d.name!r}); relabel the node or pass node_fields=") from None
    return out


def check_fields(decls: Sequence[FieldDecl], values: Mapping[str, Any], what: str, arg: str) -> None:
    """Raise a ``TypeError`` naming the first field of ``values`` the declarations refuse (``arg``: the
    option the values came from, named in the message)."""
    problem = field_problem(tuple(decls), dict(values))
    if problem is None:
        return
    kind, name, t = problem
    if kind == "unknown":
        declared = ", ".join(d.name for d in decls) or "none"
        raise TypeError(f"{what}: unknown field {name!r} in {arg}=; the policy declares: {declared}")
    if kind == "missing":
        raise TypeError(f"{what}: field {name!r} ({t}) is missing; pass it in {arg}="
                        + (f" or label the node (ray start --labels {name}=...)" if arg == "node_fields" else ""))
    raise TypeError(f"{what}: field {name!r} must be {t}, got {values[name]!r}")
