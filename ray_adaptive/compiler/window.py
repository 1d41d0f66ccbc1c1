"""How much of a workload the compiler replays to estimate a plan's competitive ratio.

A replay shows what a plan hides only if it lasts long enough for the hiding
to happen. The window is sized in time, then in tasks, by whichever of these
needs the most:

* **periods** -- replicas synced every 100 ms do not diverge in 55 ms: the
  sampled part of the replay covers ``periods`` of the plans' longest sync or
  heartbeat period;
* **clients** -- a decentralized plan's k schedulers each see their clients'
  tasks: the sampled part holds ``per_client`` tasks of every submitting client
  (the ``k`` of the throughput formula);
* **load** -- near the cluster's execution bound (``rho`` = rate / capacity
  within ``knee`` of 1) the queues remember for as long as a task may wait,
  one task timeout (the age at which a backlog is shed): a backlog builds over
  seconds, a plan's ratio swings with it from one second to the next, and a
  few hundred milliseconds of it say nothing of the mean. There the replay first warms up for one timeout, and the
  sampled part covers ``timeouts`` of them. Elsewhere a few hundred
  milliseconds settle a replay that starts from its plan's steady state
  (slots busy as its throughput keeps them; the ratio's ideal decides as many
  tasks at once as the plan, so a backlog matters once it holds a few tasks
  per tenant, not when it is full): the warm-up is then a third of the window;
* **decisions** -- the sampled part holds ``min_samples`` decisions at the rate the cluster can
  take (the rate, or its execution bound if lower), and the window ``min_tasks`` tasks in all;
* **burstiness** -- bursty arrivals bring contention in bursts, and a short sample can miss them:
  the decisions and clients a sample needs are scaled by the arrivals' index of dispersion
  (:func:`arrival_dispersion`; 1 for Poisson arrivals), up to ``max_dispersion``.

All of it costs replay time, so the window holds at most ``max_tasks`` tasks:
the timeouts sampled near the bound give way first, then the warm-up, then
the rest of the sampled part (``capped`` says so). On a thousand nodes the
bound's queues hold tens of thousands of tasks a second, and the cap keeps
the window to the periods' needs.

Example:
    >>> w = window_size(rate=520, capacity=510, periods_s=(0.1, 0.01), clients=5, timeout=1.0)
    >>> w.warm_s, w.sample_s, w.tasks, w.capped
    (1.0, 3.0, 2080, False)
    >>> w.why
    'near the execution bound (1.02x): 3 task timeouts after a warm-up of one'
    >>> window_size(rate=100, capacity=510, periods_s=(), clients=5, timeout=1.0).tasks
    600
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["WindowSize", "window_size", "plan_periods", "arrival_dispersion"]


@dataclass(frozen=True)
class WindowSize:
    """A replay window: ``warm_s`` of warm-up then ``sample_s`` sampled; ``tasks`` at the rate."""

    warm_s: float
    sample_s: float
    tasks: int
    why: str  # what decided the sampled part's length
    capped: bool = False  # max_tasks cut it short of what the rules ask
    backlog_s: float = 0.0  # how long a backlog may last: a task timeout (0: no timeout)
    bursts: float = 1.0  # the arrivals' index of dispersion the sample was scaled by (1: Poisson-like)

    @property
    def design_effect(self) -> float:
        """How much wider a ratio's interval is than its batch means say: ``sqrt(bursts)``.

        Bursts bring contention in episodes that a batch -- even a timeout long -- may miss or catch
        whole, so batch means vary less than the ratio over a longer run (CHANGELOG.md has the traces
        that showed it). The arrivals' index of dispersion is the variance inflation of their counts
        over Poisson's, and the factor the sample was lengthened by; its square root widens the
        interval in proportion (a design effect).
        """
        return math.sqrt(self.bursts)

    @property
    def seconds(self) -> float:
        return self.warm_s + self.sample_s

    def batch_s(self, period_s: float, backlogs: bool = True) -> float:
        """The length of the batches a ratio's interval is taken over: half the plan's period, and at
        least an eighth of the sampled part (the interval reflects how the ratio varies over it).

        With ``backlogs``, and a sample of at least three task timeouts, a timeout: a backlog -- a
        burst, the queues at the execution bound -- lasts up to a timeout before it is shed, and the
        ratio with it, so shorter batches are correlated through it and their interval claims more
        than the replay knows. A replay deciding whether it may stop early (above the limit: a
        conservative error) takes the shorter batches.
        """
        short = max(period_s / 2, self.sample_s / 8)
        if backlogs and self.backlog_s > 0 and self.sample_s >= 3 * self.backlog_s:
            return max(short, self.backlog_s)
        return short

    def as_dict(self) -> dict:
        return {"warm_s": round(self.warm_s, 4), "sample_s": round(self.sample_s, 4), "tasks": self.tasks,
                "why": self.why, "capped": self.capped}


def plan_periods(plan) -> float:
    """A plan's longest periodic step: its State sync or heartbeat period (0 if it has none)."""
    return max(plan.sync.period_s, plan.load.period_s)


def arrival_dispersion(arrivals: Sequence[float], per_bin: float = 5.0) -> float:
    """The index of dispersion of arrival counts (variance / mean) in bins holding ``per_bin`` arrivals
    on average: ~1 for a Poisson process, more for bursts.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> round(arrival_dispersion(np.sort(rng.uniform(0, 10, 5000))), 1)
        1.0
        >>> bursts = np.repeat(np.sort(rng.uniform(0, 10, 500)), 10)   # bursts of 10 at once
        >>> arrival_dispersion(bursts) > 5
        True
    """
    t = np.sort(np.asarray(arrivals, dtype=float))
    if t.size < 20 or t[-1] <= t[0]:
        return 1.0
    width = per_bin * (t[-1] - t[0]) / (t.size - 1)
    counts = np.bincount(((t - t[0]) / width).astype(np.int64))[:-1]  # (the last bin is partial)
    if counts.size < 4 or counts.mean() <= 0:
        return 1.0
    return float(counts.var() / counts.mean())


def window_size(rate: float, capacity: float, periods_s: Sequence[float], clients: int, timeout: float,
                min_tasks: int = 600, max_tasks: int = 30_000, periods: int = 4, per_client: int = 8,
                min_samples: int = 200, knee: float = 0.15, timeouts: float = 3.0, warm_share: float = 1 / 3,
                dispersion: float = 1.0, max_dispersion: float = 8.0) -> WindowSize:
    """The window for a workload offering ``rate`` tasks/s to a cluster executing ``capacity`` tasks/s
    (see the module doc). ``periods_s``: the plans' sync and heartbeat periods; ``clients``: submitting
    clients; ``timeout``: a task's timeout (s; inf: none); ``dispersion``: the arrivals' index of
    dispersion."""
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"the rate must be a positive number of tasks/s, found {rate}")
    if min_samples > min_tasks:
        min_tasks = min_samples
    if min_tasks < 10 or max_tasks < min_tasks:
        raise ValueError(f"need 10 <= min_tasks <= max_tasks, found {min_tasks} and {max_tasks}")
    longest = max(periods_s, default=0.0)
    bursts = min(max(dispersion, 1.0), max_dispersion)
    more = f" x {bursts:.1f} for bursty arrivals" if bursts > 1.5 else ""
    bursts = bursts if more else 1.0
    needs = {
        f"{periods} periods of {longest * 1e3:g} ms": periods * longest,
        f"{per_client} tasks from each of {clients} clients{more}": bursts * per_client * max(clients, 1) / rate,
        f"{min_samples} decisions{more}": bursts * min_samples / min(rate, capacity if capacity > 0 else rate),
    }
    why, base = max(needs.items(), key=lambda kv: kv[1])
    sample = base
    rho = rate / capacity if capacity > 0 else math.inf
    if abs(rho - 1) <= knee and math.isfinite(timeout) and timeout > 0:
        warm = timeout
        if timeouts * timeout > base:
            sample = timeouts * timeout
            why = f"near the execution bound ({rho:.2f}x): {timeouts:g} task timeouts after a warm-up of one"
        else:
            why += f"; near the execution bound ({rho:.2f}x), a warm-up of a task timeout"
    else:
        warm = sample * warm_share / (1 - warm_share)
    if (warm + sample) * rate < min_tasks:  # a short window: the rest is sampled
        extra = min_tasks / rate - warm - sample
        sample, warm = sample + extra * (1 - warm_share), warm + extra * warm_share
        why = f"{min_tasks} tasks"
    capped = False
    if (warm + sample) * rate > max_tasks:
        capped = True
        room = max_tasks / rate
        warm = min(warm, room - min(base, room))  # the timeouts near the bound give way first, then the warm-up
        sample = min(sample, room - warm)
    return WindowSize(warm, sample, min(int(math.ceil((warm + sample) * rate)), max_tasks), why, capped,
                      timeout if math.isfinite(timeout) and timeout > 0 else 0.0, bursts)
