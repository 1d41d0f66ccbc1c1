"""Arrival rates that change over time: steps, ramps, a diurnal sine, bursts.

A :class:`RateProfile` is a rate as a function of time. A tenant's arrivals
follow ``Tenant.rate x profile.at(t)`` (:mod:`ray_adaptive.workload.generate`
draws them by thinning a Poisson process at the peak rate), so a profile is
either a multiplier of the tenants' rates or, with tenants' rates given as
shares summing to 1, the total rate in tasks/s. :func:`retime` makes any
trace follow a profile instead: its tasks keep their order and mix, their
arrival times are moved so the rate is the profile's.

Profiles are written as text (the ``--rates`` of ``ray-adaptive simulate``)
or as JSON objects (workload files), one kind each:

=========================================  ====================================================
text                                       rate
=========================================  ====================================================
``const:400``                              400 throughout
``steps:0=200,5=800,10=200``               200 from 0 s, 800 from 5 s, 200 from 10 s
``ramp:0=100,10=900,20=100``               linear between the points, flat beyond them
``sine:mean=400,amplitude=300,period=20``  ``mean + amplitude * sin(2 pi (t - phase) / period)``
``bursts:base=200,peak=1000,every=5,length=1``  ``peak`` for ``length`` s every ``every`` s (from
                                           ``first``, default 0), ``base`` otherwise
=========================================  ====================================================

JSON: ``{"kind": "steps", "points": [[0, 200], [5, 800]]}``,
``{"kind": "sine", "mean": 400, "amplitude": 300, "period": 20}`` and so on
(:meth:`RateProfile.as_dict` / :func:`profile_from_dict`).

Example:
    >>> p = parse_profile("ramp:0=100,10=900")
    >>> p.at(5.0), p.at(20.0), p.peak(20.0), round(p.mean(10.0))
    (500.0, 900.0, 900.0, 500)
    >>> parse_profile("bursts:base=200,peak=1000,every=5,length=1").at(5.5)
    1000.0
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ray_adaptive.workload.limits import MAX_RATE

__all__ = ["RateProfile", "parse_profile", "profile_from_dict", "retime", "KINDS"]

KINDS = ("const", "steps", "ramp", "sine", "bursts")
_PARAMS = {"const": ("rate",), "sine": ("mean", "amplitude", "period", "phase"),
           "bursts": ("base", "peak", "every", "length", "first")}
_RATES = ("rate", "mean", "amplitude", "base", "peak")  # the parameters that are rates (tasks/s)


def _rate_ok(r: float) -> bool:
    return math.isfinite(r) and 0 <= r <= MAX_RATE


@dataclass(frozen=True)
class RateProfile:
    """A rate over time (see the module doc). ``points``: (time, rate) pairs of steps and ramps;
    ``params``: the named numbers of the other kinds."""

    kind: str
    points: tuple = ()
    params: tuple = ()  # (name, value) pairs

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"rate profile kind must be one of {', '.join(KINDS)}, found {self.kind!r}")
        p = dict(self.params)
        if self.kind in ("steps", "ramp"):
            if not self.points:
                raise ValueError(f"a {self.kind} profile needs at least one time=rate point")
            times = [t for t, _ in self.points]
            # (a NaN time compares false with everything: sorted() and "< 0" would both let it through)
            if not all(math.isfinite(t) for t in times) or times != sorted(times) or len(set(times)) != len(times) \
                    or times[0] < 0:
                raise ValueError(f"{self.kind} points must have distinct finite times >= 0 in increasing order, "
                                 f"found {times}")
            if any(not _rate_ok(r) for _, r in self.points):
                raise ValueError(f"{self.kind} rates must be finite numbers in [0, {MAX_RATE:g}] tasks/s, "
                                 f"found {[r for _, r in self.points]}")
            return
        need = {"const": ("rate",), "sine": ("mean", "amplitude", "period"),
                "bursts": ("base", "peak", "every", "length")}[self.kind]
        missing = [k for k in need if k not in p]
        unknown = [k for k in p if k not in _PARAMS[self.kind]]
        if missing or unknown:
            raise ValueError(f"a {self.kind} profile takes {', '.join(_PARAMS[self.kind])}; "
                             + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"))
        if any(not (v >= 0 and math.isfinite(v)) for k, v in p.items() if k != "phase") \
                or not math.isfinite(p.get("phase", 0.0)):
            raise ValueError(f"{self.kind} parameters must be finite numbers >= 0, found {p}")
        if any(not _rate_ok(v) for k, v in p.items() if k in _RATES):
            raise ValueError(f"{self.kind} rates ({', '.join(k for k in p if k in _RATES)}) must be at most "
                             f"{MAX_RATE:g} tasks/s, found {p}")
        if self.kind == "sine" and (p["amplitude"] > p["mean"] or p["period"] <= 0):
            raise ValueError(f"a sine needs amplitude <= mean (rates >= 0) and period > 0, found {p}")
        if self.kind == "bursts" and (p["every"] <= 0 or p["length"] > p["every"]):
            raise ValueError(f"bursts need every > 0 and length <= every, found {p}")

    def _p(self) -> dict:
        return dict(self.params)

    def at(self, t: "float | np.ndarray"):
        """The rate at time(s) ``t``."""
        arr = np.asarray(t, dtype=float)
        p = self._p()
        if self.kind == "const":
            out = np.full(arr.shape, p["rate"])
        elif self.kind in ("steps", "ramp"):
            times = np.array([x for x, _ in self.points])
            rates = np.array([r for _, r in self.points], dtype=float)
            if self.kind == "ramp":
                out = np.interp(arr, times, rates)
            else:
                out = rates[np.clip(np.searchsorted(times, arr, side="right") - 1, 0, None)]
        elif self.kind == "sine":
            out = p["mean"] + p["amplitude"] * np.sin(2 * math.pi * (arr - p.get("phase", 0.0)) / p["period"])
        else:
            phase = np.mod(arr - p.get("first", 0.0), p["every"])
            out = np.where((arr >= p.get("first", 0.0)) & (phase < p["length"]), p["peak"], p["base"])
        return float(out) if out.ndim == 0 else out

    def peak(self, seconds: float) -> float:
        """The highest rate over [0, ``seconds``]."""
        p = self._p()
        if self.kind == "const":
            return p["rate"]
        if self.kind in ("steps", "ramp"):
            inside = [r for t, r in self.points if t <= seconds]
            return float(max(inside + [self.at(0.0), self.at(seconds)]))
        if self.kind == "sine":
            return p["mean"] + p["amplitude"]
        return max(p["base"], p["peak"])

    def is_zero(self, seconds: float) -> bool:
        """Whether the rate is 0 throughout [0, ``seconds``]: nothing would arrive."""
        return not self.peak(seconds) > 0

    def mean(self, seconds: float, samples: int = 10_000) -> float:
        """The mean rate over [0, ``seconds``]."""
        t = (np.arange(samples) + 0.5) * (seconds / samples)
        return float(np.mean(self.at(t)))

    def as_dict(self) -> dict:
        if self.kind in ("steps", "ramp"):
            return {"kind": self.kind, "points": [list(x) for x in self.points]}
        return {"kind": self.kind, **self._p()}

    def label(self) -> str:
        """The profile as ``--rates`` text."""
        if self.kind in ("steps", "ramp"):
            return f"{self.kind}:" + ",".join(f"{t:g}={r:g}" for t, r in self.points)
        if self.kind == "const":
            return f"const:{self._p()['rate']:g}"
        return f"{self.kind}:" + ",".join(f"{k}={v:g}" for k, v in self.params)

    def scaled(self, factor: float) -> "RateProfile":
        """The same shape, every rate times ``factor``."""
        if self.kind in ("steps", "ramp"):
            return dataclasses.replace(self, points=tuple((t, r * factor) for t, r in self.points))
        keep = ("period", "phase", "every", "length", "first")
        return dataclasses.replace(self, params=tuple((k, v if k in keep else v * factor) for k, v in self.params))


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, found {text!r}") from None


def parse_profile(text: str) -> RateProfile:
    """A profile from its text form (see the module doc)."""
    kind, sep, body = text.partition(":")
    kind = kind.strip()
    if not sep or kind not in KINDS:
        raise ValueError(f"a rate profile is KIND:..., KIND one of {', '.join(KINDS)}; found {text!r}")
    if kind == "const":
        return RateProfile("const", params=(("rate", _number(body, "const rate")),))
    items = [x.strip() for x in body.split(",") if x.strip()]
    pairs = []
    for item in items:
        k, eq, v = item.partition("=")
        if not eq:
            raise ValueError(f"{kind} profile items are NAME=VALUE (or TIME=RATE), found {item!r} in {text!r}")
        pairs.append((k.strip(), v.strip()))
    if kind in ("steps", "ramp"):
        return RateProfile(kind, points=tuple((_number(k, "a time"), _number(v, "a rate")) for k, v in pairs))
    return RateProfile(kind, params=tuple((k, _number(v, k)) for k, v in pairs))


def profile_from_dict(d: Mapping) -> RateProfile:
    """A profile from its JSON form (see :meth:`RateProfile.as_dict`)."""
    if not isinstance(d, Mapping) or "kind" not in d:
        raise ValueError(f"a rate profile is an object with a 'kind' ({', '.join(KINDS)}), found {d!r}")
    kind = d["kind"]
    if kind in ("steps", "ramp"):
        pts = d.get("points")
        if not isinstance(pts, Sequence) or not all(isinstance(x, Sequence) and len(x) == 2 for x in pts):
            raise ValueError(f"a {kind} profile needs 'points': [[time, rate], ...], found {pts!r}")
        return RateProfile(kind, points=tuple((float(t), float(r)) for t, r in pts))
    return RateProfile(kind, params=tuple((k, float(v)) for k, v in d.items() if k != "kind"))


def retime(tasks: Sequence, profile: RateProfile, start: float = 0.0) -> list:
    """``tasks`` (specs, sorted by arrival) with arrivals moved to follow ``profile``: the i-th task
    arrives when the profile's cumulative rate reaches i + 1/2. Order, fields and durations are kept;
    a task's timeout still counts from its (new) arrival."""
    if not tasks:
        return []
    n = len(tasks)
    dt = 1e-3
    horizon, total = 0.0, 0.0
    while total < n:  # find when the cumulative rate reaches n (coarsely, then interpolate)
        horizon = max(1.0, 2 * horizon)
        grid = np.arange(0.0, horizon + dt, dt)
        total = float(np.sum(profile.at(grid[:-1])) * dt)
        if horizon > 1e7:
            raise ValueError(f"the profile {profile.label()} never reaches {n} arrivals (its rate stays ~0)")
    cumulative = np.concatenate([[0.0], np.cumsum(profile.at(grid[:-1]) * dt)])
    new = np.interp(np.arange(n) + 0.5, cumulative, grid)
    return [dataclasses.replace(t, arrival=round(start + float(a), 9)) for t, a in zip(tasks, new)]
