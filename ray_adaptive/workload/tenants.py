"""Workload specs: tenants sharing a rate, written inline or as a JSON file (``--tenants``, ``--workload``).

Inline: tenants separated by commas, each ``NAME:SHARE`` with optional Task
field values ``:FIELD=VALUE``::

    a:1,b:1,greedy:3                 the paper's three tenants (greedy at 3x)
    a:1:weight=1,b:1:weight=3        two tenants of equal demand, weights 1 and 3

A JSON file holds the tenants and, optionally, how they arrive, the task
durations and the rate over time::

    {"tenants": [{"name": "a", "share": 1, "fields": {"weight": 1}},
                 {"name": "b", "share": 3, "clients": 2}],
     "arrivals": "poisson", "durations": "exponential", "duration": 0.02, "timeout": 1.0,
     "rate": "ramp:0=100,10=900"}

``rate`` is a rate profile (:mod:`ray_adaptive.workload.rates`; text or a
JSON object); ``seconds`` how long the workload lasts. Unknown keys are
errors that name the key and say what is expected.

Example:
    >>> s = parse_tenants("a:1:weight=1,b:3:weight=2")
    >>> [(t.name, t.share, t.fields) for t in s.tenants]
    [('a', 1.0, (('weight', 1),)), ('b', 3.0, (('weight', 2),))]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ray_adaptive.errors import ScenarioError
from ray_adaptive.workload.generate import ARRIVALS, DURATIONS
from ray_adaptive.workload.rates import RateProfile, parse_profile, profile_from_dict

__all__ = ["TenantSpec", "WorkloadSpec", "parse_tenants", "load_workload_spec", "workload_spec_from_dict"]

_TOP = {"tenants", "arrivals", "durations", "duration", "timeout", "rate", "seconds"}
_TENANT = {"name", "share", "fields", "clients"}


@dataclass(frozen=True)
class TenantSpec:
    name: str
    share: float
    fields: tuple = ()  # (field, value) pairs
    clients: Optional[int] = None


@dataclass(frozen=True)
class WorkloadSpec:
    tenants: tuple[TenantSpec, ...]
    arrivals: Optional[str] = None
    durations: Optional[str] = None
    duration: Optional[float] = None
    timeout: Optional[float] = None
    rate: Optional[RateProfile] = None
    seconds: Optional[float] = None


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a string field value, unquoted


def parse_tenants(text: str) -> WorkloadSpec:
    """An inline tenant list (see the module doc)."""
    tenants = []
    for item in [x.strip() for x in text.split(",") if x.strip()]:
        parts = item.split(":")
        if len(parts) < 2:
            raise ScenarioError(f"--tenants: each tenant is NAME:SHARE[:FIELD=VALUE...], found {item!r}")
        try:
            share = float(parts[1])
        except ValueError:
            raise ScenarioError(f"--tenants: the share of {parts[0]!r} must be a number, found {parts[1]!r}") from None
        fields = []
        for f in parts[2:]:
            k, eq, v = f.partition("=")
            if not eq or not k:
                raise ScenarioError(f"--tenants: a tenant's field is FIELD=VALUE, found {f!r} in {item!r}")
            fields.append((k, _value(v)))
        tenants.append(TenantSpec(parts[0], share, tuple(fields)))
    if not tenants:
        raise ScenarioError("--tenants: no tenant given; expected NAME:SHARE,NAME:SHARE,...")
    return WorkloadSpec(_check(tenants, "--tenants"))


def _check(tenants: list, where: str) -> tuple:
    names = [t.name for t in tenants]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{where}: tenant names must be unique, found {names}")
    for t in tenants:
        if not t.name or "/" in t.name:
            raise ScenarioError(f"{where}: a tenant name must be non-empty and without '/', found {t.name!r}")
        if not (math.isfinite(t.share) and t.share > 0):  # (an inf share makes every share inf / inf = NaN)
            raise ScenarioError(f"{where}: the share of tenant {t.name!r} must be a finite number > 0, found {t.share}")
    return tuple(tenants)


def workload_spec_from_dict(data: Any, source: str = "<workload>") -> WorkloadSpec:
    """A JSON workload spec (see the module doc); errors name the source and the key."""
    if not isinstance(data, dict) or "tenants" not in data:
        raise ScenarioError(f"{source}: expected an object with 'tenants' (and optionally {', '.join(sorted(_TOP - {'tenants'}))})")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ScenarioError(f"{source}: unknown key {unknown[0]!r}; expected keys: {', '.join(sorted(_TOP))}")
    tenants = []
    for i, t in enumerate(data["tenants"] if isinstance(data["tenants"], list) else []):
        where = f"{source}: tenants[{i}]"
        if not isinstance(t, dict) or "name" not in t:
            raise ScenarioError(f"{where}: expected an object with 'name' and 'share'")
        bad = sorted(set(t) - _TENANT)
        if bad:
            raise ScenarioError(f"{where}: unknown key {bad[0]!r}; expected keys: {', '.join(sorted(_TENANT))}")
        fields = t.get("fields", {})
        if not isinstance(fields, dict):
            raise ScenarioError(f"{where}: 'fields' must be an object of Task field values, found {fields!r}")
        clients = t.get("clients")
        if clients is not None and not (isinstance(clients, int) and clients >= 1):
            raise ScenarioError(f"{where}: 'clients' must be an integer >= 1, found {clients!r}")
        share = t.get("share", 1.0)
        if isinstance(share, bool) or not isinstance(share, (int, float)):
            raise ScenarioError(f"{where}: 'share' must be a number, found {share!r}")
        tenants.append(TenantSpec(str(t["name"]), float(share), tuple(sorted(fields.items())), clients))
    if not tenants:
        raise ScenarioError(f"{source}: 'tenants' must be a non-empty list of tenants")
    for key, allowed in (("arrivals", ARRIVALS), ("durations", DURATIONS)):
        if key in data and data[key] not in allowed:
            raise ScenarioError(f"{source}: '{key}' must be one of {', '.join(allowed)}, found {data[key]!r}")
    for key in ("duration", "timeout", "seconds"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ScenarioError(f"{source}: '{key}' must be a number > 0, found {v!r}")
    rate = data.get("rate")
    try:
        profile = (parse_profile(rate) if isinstance(rate, str) else profile_from_dict(rate)) if rate is not None else None
    except ValueError as err:
        raise ScenarioError(f"{source}: 'rate': {err}") from None
    return WorkloadSpec(_check(tenants, source), data.get("arrivals"), data.get("durations"), data.get("duration"),
                        data.get("timeout"), profile, data.get("seconds"))


def load_workload_spec(path: "str | Path") -> WorkloadSpec:
    """Read a JSON workload spec file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such workload file") from None
    except json.JSONDecodeError as err:
        raise ScenarioError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    return workload_spec_from_dict(data, str(path))
