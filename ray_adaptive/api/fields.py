"""The values a policy's declared fields get: checked against their types, or read from a node's Ray labels."""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from ray_adaptive.dsl.ir import FieldDecl, Policy, field_checker
from ray_adaptive.dsl.lengths import VecLengths, vec_lengths

__all__ = ["check_fields", "check_task_fields", "label_fields"]

# what a type's values are, for a value that is not one
_MEANING = {"int": " (a 64-bit integer)", "float": " (a finite number)", "vec": " (a list of finite numbers)",
            "map": " (a dict)"}

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


def check_fields(decls: Sequence[FieldDecl], values: Mapping[str, Any], what: str, arg: str,
                 lengths: Optional[VecLengths] = None, partial: bool = False) -> None:
    """Raise a ``TypeError`` naming the first field of ``values`` the declarations refuse (``arg``: the
    option the values came from, named in the message). ``lengths``: the policy's vec lengths (see
    :mod:`ray_adaptive.dsl.lengths`), which vec fields must have; ``partial``: declared fields may be
    missing (``.options()`` given some of them)."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{what}: {arg}= must be a dict of the policy's fields, got {values!r}")
    obj = "node." if arg == "node_fields" else "task."
    sized = {k[len(obj):]: n for k, n in (lengths or {}).items() if k.startswith(obj)}
    problem = field_checker(tuple(decls), sized, partial)(dict(values))
    if problem is None:
        return
    kind, name, t = problem
    if kind == "unknown":
        declared = ", ".join(d.name for d in decls) or "none"
        raise TypeError(f"{what}: unknown field {name!r} in {arg}=; the policy declares: {declared}")
    if kind == "missing":
        raise TypeError(f"{what}: field {name!r} ({t}) is missing; pass it in {arg}="
                        + (f" or label the node (ray start --labels {name}=...)" if arg == "node_fields" else ""))
    if kind == "length":
        assert lengths is not None  # (a length problem comes from them)
        place = name if name in sized else name + "[]"
        n, why = sized[place], lengths.why(obj + place)
        which = f"field {name!r} must be a vec of length {n}" if place == name else \
            f"field {name!r} must hold vecs of length {n}"
        raise TypeError(f"{what}: {which}{why}, got {values[name]!r}")
    meaning = _MEANING.get(t.kind, "") if t is not None else ""
    raise TypeError(f"{what}: field {name!r} must be {t}{meaning}, got {values[name]!r}")


def check_task_fields(policy: Policy, values: Mapping[str, Any], what: str, partial: bool = False) -> None:
    """:func:`check_fields` of a task's ``task=`` values against ``policy``'s Task fields and vec lengths."""
    check_fields(policy.task_fields, values, what, "task", vec_lengths(policy), partial)
