"""How large a workload may be: rates, and the tasks one simulation generates (``docs/limits.md``).

A simulation generates every task of a run before it starts, about 1 KB
each (measured: 400,000 tasks of ``simulate drf_lb`` peak at 0.5 GB), so a
rate and a length that multiply to billions of tasks would exhaust memory
long before they finished. Both are checked before any work starts.

Example:
    >>> check_rate(400.0, "--rates")
    >>> check_rate(float("inf"), "--rates")
    Traceback (most recent call last):
    ...
    ValueError: --rates: inf is not a rate in (0, 1e+09] tasks/s
"""

from __future__ import annotations

import math

__all__ = ["MAX_RATE", "MAX_SIM_TASKS", "check_rate", "check_tasks"]

#: The highest arrival rate, tasks/s, anything takes (``compile --rate``, ``simulate --rates``, ``ra.start(rate=)``).
MAX_RATE = 1e9
#: The most tasks one ``simulate`` / ``reproduce`` command generates, over all its runs (~2 GB).
MAX_SIM_TASKS = 2_000_000


def check_rate(rate: float, flag: str, allow_zero: bool = False) -> None:
    """Refuse a rate that is not a finite number in (0, MAX_RATE] ([0, MAX_RATE] with ``allow_zero``)."""
    low = "[0" if allow_zero else "(0"
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) \
            or not (rate >= 0 if allow_zero else rate > 0) or rate > MAX_RATE:
        raise ValueError(f"{flag}: {rate!r} is not a rate in {low}, {MAX_RATE:g}] tasks/s")


def check_tasks(tasks: float, what: str, fix: str) -> None:
    """Refuse a simulation of ``tasks`` tasks (an estimate: rate x seconds) over :data:`MAX_SIM_TASKS`;
    ``what`` says where the number comes from, ``fix`` which flag to change."""
    if not tasks <= MAX_SIM_TASKS:
        raise ValueError(f"{what} would simulate ~{tasks:,.0f} tasks, over the limit of {MAX_SIM_TASKS:,} "
                         f"(docs/limits.md): {fix}")
