"""A live switch's handover, as the state store makes it: the State collected from the plan in force and
given to the next one (see :mod:`ray_adaptive.runtime.switch`, steps 3 and 4).

The store makes it, not the process that switches: once the last process acks, the store calls the
frozen selector, installs the State in the next one and publishes, with no round trip through the
switching process between those steps. That process is a submitting one, often busy; each hop through
it lengthened every process's pause.

Example:
    >>> h = Handover(config={}, base={"n": 0}, merge=None, rebuild=False, old_selector=None, old_placements=[],
    ...              replica_vars=None)
    >>> assemble(h, selector_state=None, merged={"n": 3})   # a decentralized plan: the replicas' State
    {'n': 3}
    >>> hybrid = Handover(config={}, base={}, merge=None, rebuild=False, old_selector=None, old_placements=[],
    ...                   replica_vars=frozenset({"load"}))   # (its placements keep replicas of "load")
    >>> assemble(hybrid, selector_state={"alloc": 1, "load": 0}, merged={"alloc": 9, "load": 4})
    {'alloc': 1, 'load': 4}
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple

import ray

from ray_adaptive.runtime.messages import Actor

__all__ = ["Handover", "assemble", "freeze_authority", "get_or_again", "HANDOVER_WAIT_S"]

#: How long a switch waits for the store's answer to a call that may hand the State over: the acks' wait
#: (DEAD_CHECK_S) and the handover's three calls of ``timeout_s`` at most each.
HANDOVER_WAIT_S = 120.0


@dataclass
class Handover:
    """What the store needs to hand a switch's State over, besides what it holds (the replicas' merged
    State)."""

    config: Dict[str, Any]  # the next generation's (a store restarted mid-switch no longer has it from prepare)
    base: Dict[str, Any]  # the next plan's initial State: what the handed-over State is laid on
    merge: Optional[Mapping[str, str]]  # the next plan's merge rules (None: no replicas)
    rebuild: bool  # the State is not collected: each process rebuilds its share (a job left)
    old_selector: Optional[Actor]  # the plan in force's selector (None: decentralized)
    old_placements: List[Actor]  # its placement actors, when they keep replicas (push theirs at freeze)
    # variables the replicas hold, not the selector (a hybrid whose placements keep replicas); None: the
    # selector holds all there is, or there is no selector
    replica_vars: Optional[FrozenSet[str]] = None
    # each call to the old and new actors waits at most this long (three in a row stay within what the switch
    # waits for the store's answer: HANDOVER_WAIT_S)
    timeout_s: float = 30.0


def freeze_authority(h: Handover) -> Tuple[Optional[dict], bool]:
    """Freeze the plan in force's selector (and its placements' replicas): its State and whether it is
    exact. No selector: ``(None, True)``, the replicas' merged State is the authority."""
    if h.old_selector is None:
        return None, True
    try:
        out = ray.get(h.old_selector.freeze.remote(), timeout=h.timeout_s)
    except Exception:  # it died: its State is gone
        return None, False
    state, exact = out["state"], out["exact"]
    if exact and h.old_placements:
        try:  # the hybrid's placements keep replicas of what the node part reads: their last changes
            ray.get([p.freeze.remote() for p in h.old_placements], timeout=h.timeout_s)
        except Exception:
            exact = False
    return state, exact


def assemble(h: Handover, selector_state: Optional[dict], merged: dict) -> dict:
    """The State handed over: the selector's, the replicas' (no selector), or the selector's with the
    variables the replicas hold taken from their merged State."""
    if selector_state is None:
        return merged
    if h.replica_vars is None:
        return selector_state
    return {**selector_state, **{var: value for var, value in merged.items() if var in h.replica_vars}}


def get_or_again(ref: Any, call: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """``ray.get(ref)`` of a call ``call()`` made, made again while its actor restarts (Ray answers
    ActorUnavailableError meanwhile); ``timeout_s`` in all."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            ref = call()
