"""A task's submission without the work Ray's ``.remote()`` redoes on every call.

A policy's task is bound to one node's slot with options fixed for the
runtime's life (``fn.options(resources={slot: 1}, ...)``, made once per node).
Ray's ``RemoteFunction._remote`` still recomputes, per call, what depends only
on those options: the option defaults (reading ``RAY_TASK_MAX_RETRIES`` from
the environment), the resources, the placement group of the calling context,
and an ``inspect.Signature`` bound to the arguments -- about half of the
Python a ``.remote()`` costs the caller. Then it hands them to
``CoreWorker.submit_task``.

:func:`launcher` lets Ray make one real ``.remote()`` and records the
arguments Ray gave ``submit_task`` (a stand-in core worker forwards every
call and notes that one), so every option is Ray's own doing, nothing
re-derived here. Later calls flatten their arguments as Ray does -- checked
against the function's signature once per shape of call (how many
positional arguments, which keywords) -- and call ``submit_task`` with the
recorded rest. Each call is then exactly the call Ray would make.

Only where the recorded call cannot differ from Ray's: a driver (a task's
context may carry a placement group that captures its children), no Ray
client, tracing or task-launch hook, one return, and the same core worker
(a new ``ray.init`` records again). Anywhere else, and on any Ray whose
``submit_task`` arguments do not look as recorded (``_check_layout``), the
launcher is Ray's ``.remote()`` itself. ``tests/test_submit.py`` checks the
recorded call against the one Ray makes, on the installed Ray.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Tuple

__all__ = ["launcher", "fast_path_off"]

_ARGS, _BREAKPOINT, _ARITY = 2, 10, 18  # submit_task's positional layout in Ray 2.60


class _Recorder:
    """Stands in for the core worker during one ``.remote()``: forwards everything, and keeps the
    arguments of the ``submit_task`` that this thread makes."""

    def __init__(self, real):
        self._real = real
        self._thread = threading.get_ident()
        self.args: Optional[tuple] = None

    def submit_task(self, *args):
        if self.args is None and threading.get_ident() == self._thread:
            self.args = args
        return self._real.submit_task(*args)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def fast_path_off(remote_function) -> Optional[str]:
    """Why a launcher of ``remote_function`` (a ``@ray.remote`` function or its ``.options()``) must be
    Ray's ``.remote()`` in this process now, or None."""
    import ray
    import ray._private.worker as w
    from ray import remote_function as rf
    from ray._private.client_mode_hook import client_mode_should_convert
    from ray.util.tracing.tracing_helper import _is_tracing_enabled

    worker = w.global_worker
    if worker.mode != ray.SCRIPT_MODE:
        return "not a driver (a task's placement group may capture its children)"
    if client_mode_should_convert():
        return "Ray client"
    if _is_tracing_enabled():
        return "tracing is on"
    if rf._task_launch_hook is not None:
        return "a task-launch hook is set"
    fn = _function_of(remote_function)
    if fn is None:
        return "not a remote function"
    if fn._is_generator or fn._decorator is not None or fn._is_cross_language:
        return "a generator, decorated or cross-language function"
    return None


def _function_of(remote_function):
    """The ``RemoteFunction`` behind ``.options()``' wrapper (its ``remote`` closes over it)."""
    from ray.remote_function import RemoteFunction

    if isinstance(remote_function, RemoteFunction):
        return remote_function
    cells = getattr(getattr(remote_function, "remote", None), "__closure__", None) or ()
    for cell in cells:
        if isinstance(cell.cell_contents, RemoteFunction):
            return cell.cell_contents
    return None


def _check_layout(recorded: tuple, args: tuple, kwargs: dict) -> bool:
    """Whether ``submit_task``'s recorded arguments carry this call's arguments where this module
    puts them (flattened as ``[DUMMY, a, ..., key, value, ...]``) and an empty debugger breakpoint."""
    from ray._common.signature import DUMMY_TYPE

    if len(recorded) != _ARITY or recorded[_BREAKPOINT] != b"":
        return False
    flat = recorded[_ARGS]
    values = [*args, *kwargs.values()]
    keys = [DUMMY_TYPE] * len(args) + list(kwargs)
    return (isinstance(flat, list) and len(flat) == 2 * len(values)
            and all(a is b for a, b in zip(flat[1::2], values)) and flat[0::2] == keys)


class _Launcher:
    """``launch(args, kwargs) -> ObjectRef`` for one bound remote function (see the module doc)."""

    def __init__(self, bound):
        import ray._private.worker
        from ray._common.signature import DUMMY_TYPE

        self._bound = bound
        self._fn = _function_of(bound)
        self._workers = ray._private.worker  # (its global_worker is replaced by each ray.init)
        self._dummy = DUMMY_TYPE
        self._core = None  # the core worker the recorded call was made with
        self._recorded: Optional[Tuple[tuple, tuple, tuple]] = None  # submit_task's arguments around args, breakpoint
        self._shapes: set = set()  # (positional count, keywords) of calls bound against the signature
        self._lock = threading.Lock()
        self.fast = 0  # calls that took the recorded path (a test reads it)

    def __call__(self, args: tuple, kwargs: dict):
        worker = self._workers.global_worker
        recorded = self._recorded
        if recorded is None or worker.core_worker is not self._core or not worker.connected:
            return self._record(args, kwargs)
        shape = (len(args), *kwargs) if kwargs else len(args)
        if shape not in self._shapes:
            from ray._common.signature import flatten_args

            flatten_args(self._fn._function_signature, args, kwargs)  # (a TypeError, as Ray raises it)
            self._shapes.add(shape)
        dummy, flat = self._dummy, []
        for a in args:
            flat += (dummy, a)
        for k, v in kwargs.items():
            flat += (k, v)
        head, middle, tail = recorded
        refs = self._core.submit_task(*head, flat, *middle, worker.debugger_breakpoint, *tail)
        worker.debugger_breakpoint = b""  # (as Ray does: a breakpoint applies to one call)
        self.fast += 1
        return refs[0]

    def _record(self, args: tuple, kwargs: dict):
        """Ray's own ``.remote()``, its ``submit_task`` recorded when the fast path may be taken."""
        import ray

        if fast_path_off(self._bound) is not None:
            return self._bound.remote(*args, **kwargs)
        worker = self._workers.global_worker
        with self._lock:  # (one thread records at a time)
            real = worker.core_worker
            recorder = _Recorder(real)
            worker.core_worker = recorder
            try:
                ref = self._bound.remote(*args, **kwargs)
            finally:
                if worker.core_worker is recorder:
                    worker.core_worker = real
            got = recorder.args
            if got is not None and isinstance(ref, ray.ObjectRef) and _check_layout(got, args, kwargs):
                self._recorded = (got[:_ARGS], got[_ARGS + 1:_BREAKPOINT], got[_BREAKPOINT + 1:])
                self._core = real
                self._shapes.add((len(args), *kwargs) if kwargs else len(args))
        return ref


def launcher(bound) -> Callable[[tuple, dict], Any]:
    """``launch(args, kwargs)``: ``bound.remote(*args, **kwargs)``, the same call to Ray's core worker,
    with the per-call work of Ray's ``.remote()`` that depends only on the options done once.

    Example::

        launch = launcher(fn.options(resources={slot: 1}))
        ref = launch((21,), {})      # as fn.options(resources={slot: 1}).remote(21)
    """
    return _Launcher(bound)
