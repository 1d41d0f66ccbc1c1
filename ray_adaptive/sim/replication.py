"""Hooks on the simulator's copies of State: the truth's, each scheduler's, and periodic sync between replicas.

A run keeps several interpreters of the policy: the *truth* (hooks at the
true moments: arrival, dispatch, leave) and each scheduler's own State.
:class:`HookRunner` runs a hook on any of them, and for a plan whose
replicas sync periodically, keeps what each replica changed since its last
push (``unpushed``) and merges pushes into the shared store by the plan's
merge rules (:func:`~ray_adaptive.plan.replicas.merge_into`, the rules the
runtime's state store applies).

*Delta hooks* (the compiler's :meth:`~ray_adaptive.compiler.Analysis.delta_hooks`:
every write an ``add`` of something only the task's fields decide) run once
per kind of task on a scratch interpreter; afterwards their delta is added
-- the same State, a fraction of the work.
"""

from __future__ import annotations

import bisect
import math

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.plan import LoweredPlan, SyncKind
from ray_adaptive.plan.replicas import copy_state, merge_into
from ray_adaptive.plan.scoring import row_key

__all__ = ["HookRunner"]


def _add(state: dict, delta: dict) -> None:
    for v, d in delta.items():
        if isinstance(d, dict):
            m = state[v]
            for k, x in d.items():
                m[k] = m[k] + x if k in m else x
        else:
            state[v] = state[v] + d


def _accumulate(pending: dict, delta: dict) -> None:
    """Add ``delta`` (of add rules) to what a replica has not pushed yet."""
    for v, x in delta.items():
        if isinstance(x, dict):
            pend = pending.setdefault(v, {})
            for k, y in x.items():
                pend[k] = pend[k] + y if k in pend else y
        else:
            pending[v] = pending[v] + x if v in pending else x


class HookRunner:
    """Runs ``plan``'s hooks on the run's interpreters (see the module doc)."""

    def __init__(self, plan: LoweredPlan, num_nodes: int, keys: dict):
        """``keys``: the run's shared cache of task group keys (see :func:`~ray_adaptive.plan.scoring.row_key`)."""
        self.plan, self.num_nodes = plan, num_nodes
        self.merge = dict(plan.merge)
        self.dynamic = tuple(self.merge)
        self.periodic = plan.sync.kind is SyncKind.PERIODIC and bool(self.dynamic)
        hooks = {h.name: h for h in plan.policy.hooks}
        keyed = {name: row_key(hooks[name], cache=True, shared=keys) for name in plan.delta_hooks if name in hooks}
        self._hook_keys = {k: f for k, f in keyed.items() if f is not None}
        self._deltas: dict = {}  # (hook, kind of task) -> delta
        self._task_deltas: dict = {name: {} for name in self._hook_keys}  # hook -> task -> delta
        self.store: dict = {}  # periodic sync: the merged State replicas push to and pull from

    def _delta(self, name: str, task) -> dict:
        """The State change of delta hook ``name`` for ``task``: computed once per kind of task
        (and looked up once per task: the truth and the schedulers apply it too)."""
        d = self._task_deltas[name].get(task)
        if d is None:
            d = self._task_deltas[name][task] = self._kind_delta(name, task)
        return d

    def _kind_delta(self, name: str, task) -> dict:
        key = (name, self._hook_keys[name](task))
        d = self._deltas.get(key)
        if d is None:
            scratch = Interpreter(self.plan.policy, num_nodes=self.num_nodes)
            before = copy_state(scratch.state)
            scratch.run_hook(name, task, None, 0.0)
            d = {}
            for v in self.merge:
                old, new = before[v], scratch.state[v]
                if isinstance(new, dict):
                    changed = {k: x for k, x in new.items() if old.get(k) is not x}
                    if changed:
                        d[v] = {k: (x - old[k] if k in old else x) for k, x in changed.items()}
                elif new is not old:
                    d[v] = new - old
            self._deltas[key] = d
        return d

    def run(self, interp: Interpreter, name: str, task, node, now: float) -> None:
        """Run hook ``name`` on ``interp``'s State."""
        if name in self._hook_keys:
            _add(interp.state, self._delta(name, task))
        else:
            interp.run_hook(name, task, node, now)

    def run_replica(self, interp: Interpreter, unpushed: dict, name: str, task, node, now: float) -> None:
        """Run hook ``name`` on a replica that syncs periodically, adding its changes to ``unpushed``."""
        if not self.periodic:
            self.run(interp, name, task, node, now)
            return
        if name in self._hook_keys:
            d = self._delta(name, task)
            _add(interp.state, d)
            _accumulate(unpushed, d)  # add deltas accumulate until the next push
            return
        state = interp.state
        before = {v: (dict(state[v]) if isinstance(state[v], dict) else state[v]) for v in self.dynamic}
        interp.run_hook(name, task, node, now)
        for v in self.dynamic:
            old, new = before[v], state[v]
            add = self.merge[v] == "add"
            if isinstance(new, dict):
                changed = {k: x for k, x in new.items() if old.get(k) is not x}
                if not changed:
                    continue
                pend = unpushed.setdefault(v, {})
                for k, x in changed.items():
                    if add:
                        prev = old.get(k)
                        d = x - prev if prev is not None else x
                        pend[k] = pend[k] + d if k in pend else d
                    else:
                        pend[k] = x
            elif new is not old:
                if add:
                    d = new - old
                    unpushed[v] = unpushed[v] + d if v in unpushed else d
                else:
                    unpushed[v] = new

    def start_store(self, state: dict) -> None:
        """The store starts from a replica's initial State."""
        self.store = copy_state(state)
        self._versions: list[tuple[float, dict]] = [(-math.inf, copy_state(self.store))]

    def push_pull(self, interp: Interpreter, unpushed: dict, now: float = 0.0) -> None:
        """A periodic sync: merge the replica's changes into the store, take the merged State back."""
        if unpushed:
            merge_into(self.store, unpushed, self.merge)
            unpushed.clear()
            self._versions.append((now, copy_state(self.store)))
        self.pull(interp, self.store)

    def pull(self, interp: Interpreter, store: dict) -> None:
        """Take ``store``'s State (a replica's pull)."""
        state = interp.state
        for v in self.dynamic:
            x = store[v]
            state[v] = dict(x) if isinstance(x, dict) else x

    def store_at(self, t: float) -> dict:
        """The store as it was at time ``t`` (after the pushes at ``t``): what a replica pulling then got."""
        i = bisect.bisect_right(self._versions, t, key=lambda v: v[0]) - 1
        return self._versions[i][1]
