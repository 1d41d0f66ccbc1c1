"""Task fields bound to the submitting Ray job by the operator: a job cannot claim another tenant's share.

A policy's fairness (DRF-LB's allocations, weighted fair queueing's
weights) is keyed by a Task field such as ``tenant``, which tasks carry as
their submitter writes it. On a cluster shared by teams the operator binds
the field to something the job cannot choose::

    ray-adaptive serve drf_lb --bind tenant=job            # the Ray job id
    ray-adaptive serve drf_lb --bind tenant=metadata:team  # ray job submit --metadata-json '{"team": "a"}'

The values are read from the GCS job table (the metadata a job was
submitted with), never from the job's own word. A task of that job gets the
value when it gives none; one that gives another is refused with
:class:`TenantBindingError` at ``.remote()`` / ``.submit()``. The check runs in
the job's process, in this library: it keeps honest code honest and stops
mistakes, not code that bypasses the library to call the policy's actors.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from ray_adaptive._private import jobs
from ray_adaptive.dsl.ir import FieldDecl
from ray_adaptive.errors import RayAdaptiveError

__all__ = ["TenantBindingError", "parse_bind", "bound_values", "apply_bound"]

_JOB = "job"
_METADATA = "metadata:"


class TenantBindingError(RayAdaptiveError, PermissionError):
    """A task names a value of a Task field the operator bound to its job (see :mod:`ray_adaptive.runtime.tenancy`)."""


def parse_bind(specs: Sequence[str], task_fields: Sequence[FieldDecl], policy: str) -> Dict[str, str]:
    """``["tenant=job", "team=metadata:team"]`` -> ``{"tenant": "job", "team": "metadata:team"}``, each
    checked: a string Task field of the policy, bound once, to ``job`` or ``metadata:KEY``."""
    strings = {d.name for d in task_fields if d.type.kind == "string"}
    out: Dict[str, str] = {}
    for spec in specs:
        field, sep, source = (spec or "").partition("=")
        field, source = field.strip(), source.strip()
        if not sep or not field or not source:
            raise ValueError(f"--bind {spec!r}: expected FIELD=job or FIELD=metadata:KEY (e.g. tenant=metadata:team)")
        if field not in strings:
            raise ValueError(f"--bind {spec!r}: policy {policy!r} has no string Task field {field!r} "
                             f"(its string Task fields: {', '.join(sorted(strings)) or 'none'})")
        if source != _JOB and not (source.startswith(_METADATA) and source[len(_METADATA):].strip()):
            raise ValueError(f"--bind {spec!r}: bind {field!r} to 'job' (the Ray job id) or 'metadata:KEY' (a key "
                             f"of the job's submission metadata), not {source!r}")
        if field in out:
            raise ValueError(f"--bind: field {field!r} is bound twice")
        out[field] = source
    return out


def bound_values(bind: Mapping[str, str], job: str,
                 table: Optional[Mapping[str, jobs.JobRecord]] = None) -> Dict[str, Any]:
    """Field -> ``{"value": v}`` for ``job``, or ``{"error": why}`` when the job lacks what the field is bound
    to (its tasks are refused, with that reason). ``table``: the GCS job table, if read already."""
    if not bind:
        return {}
    record = (table if table is not None else jobs.job_table()).get(job)
    out: Dict[str, Any] = {}
    for field, source in bind.items():
        if source == _JOB:
            out[field] = {"value": job}
            continue
        key = source[len(_METADATA):]
        if record is None or key not in record.metadata:
            out[field] = {"error": f"this runtime binds Task field {field!r} to the job's submission metadata key "
                                   f"{key!r}, and job {job or '?'} was submitted without it (ray job submit "
                                   f"--metadata-json '{{\"{key}\": ...}}')"}
        else:
            out[field] = {"value": record.metadata[key]}
    return out


def apply_bound(bound: Mapping[str, Any], fields: Mapping[str, Any], policy: str) -> Dict[str, Any]:
    """``fields`` with every bound field set to its job's value; raises :class:`TenantBindingError` for a
    field that names another value, or when the job lacks what a field is bound to."""
    out = dict(fields)
    for field, found in bound.items():
        if "error" in found:
            raise TenantBindingError(f"policy {policy!r}: {found['error']}")
        value = found["value"]
        if field in out and out[field] != value:
            raise TenantBindingError(
                f"policy {policy!r}: task field {field}={out[field]!r} is refused: the operator bound {field!r} to "
                f"the submitting job, and this job's {field} is {value!r} (leave {field!r} out, or give {value!r})")
        out[field] = value
    return out
