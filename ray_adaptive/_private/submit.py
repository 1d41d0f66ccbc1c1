"""A task's submission without the work Ray's ``.remote()`` redoes on every call.

A policy's task is bound to one node's slot with options fixed for the
runtime's life (``fn.options(resources={slot: 1}, ...)``, made once per node).
Ray's ``RemoteFunction._remote`` still recomputes, per call, what depends only
on those options: the option defaults (reading ``RAY_TASK_MAX_RETRIES`` from
the environment), the resources, the placement group of the calling context,
and an ``inspect.Signature`` bound to the arguments -- about half of the
Python a ``.remote()`` costs the caller. Then it hands them to
``CoreWorker.submit_task``.

:func:`launcher` makes the first call with Ray's own ``.remote()`` (which
exports the function), then derives the arguments of ``submit_task`` from
the options once, by parameter name, step by step as ``_remote`` does
(:func:`_derived_arguments`), and lays them out in the order of
``submit_task``'s own parameter list (:func:`_submit_layout`). Later calls
flatten their arguments as Ray does -- checked against the function's
signature once per shape of call (how many positional arguments, which
keywords) -- and make that same call.

The derived call is made only where it cannot differ from Ray's:

* a Ray release listed in :data:`VERIFIED_RAY_VERSIONS`. ``_remote``'s steps
  and ``submit_task``'s parameters change between releases, and a change that
  keeps the parameters' names and count would submit wrong options without an
  error; a release is listed once ``tests/test_submit.py`` has found the
  derived call equal to Ray's own on it, argument by argument;
* ``submit_task``'s parameters, read from its signature under each new core
  worker, are exactly the ones derived: a parameter added, renamed or removed
  leaves the launch to Ray;
* a driver (a task's context may carry a placement group that captures its
  children), no Ray client, tracing or task-launch hook, one return value, no
  placement group, and the core worker the arguments were derived under (a
  new ``ray.init`` derives them again).

Anywhere else the launcher is Ray's ``.remote()`` itself; :func:`fast_path_off`
says why. ``docs/ray-versions.md`` says how to verify a new Ray release.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

__all__ = ["launcher", "fast_path_off", "RayGoneError", "VERIFIED_RAY_VERSIONS", "default_options"]

# The Ray releases on which tests/test_submit.py found the derived submit_task call equal to the call
# Ray's own .remote() makes (its _remote takes four shapes over these: 2.50-2.51; fallback_strategy
# from 2.52; no local mode from 2.55; num_objects_per_yield from 2.57). Any other release: .remote().
VERIFIED_RAY_VERSIONS = frozenset({
    "2.50.0", "2.50.1",
    "2.51.0", "2.51.1", "2.51.2",
    "2.52.0", "2.52.1",
    "2.53.0",
    "2.54.0", "2.54.1",
    "2.55.0", "2.55.1",
    "2.56.0", "2.56.1",
    "2.57.0", "2.57.1",
    "2.58.0", "2.58.1",
    "2.59.0",
    "2.60.0",
})

# submit_task's parameters that change with each call; every other one is derived from the options.
_PER_CALL = ("args", "debugger_breakpoint")


def default_options(remote_function) -> Dict[str, Any]:
    """The options a ``@ray.remote(...)`` function was declared with (its ``num_cpus``, ``resources``, ...):
    what its tasks ask of a node unless ``.options()`` says otherwise."""
    return dict(getattr(remote_function, "_default_options", None) or {})


def fast_path_off(remote_function) -> Optional[str]:
    """Why a launcher of ``remote_function`` (a ``@ray.remote`` function or its ``.options()``) must be
    Ray's ``.remote()`` in this process now, or None."""
    import ray
    import ray._private.worker as w
    from ray import remote_function as rf
    from ray._private.client_mode_hook import client_mode_should_convert
    from ray.util.tracing.tracing_helper import _is_tracing_enabled

    if ray.__version__ not in VERIFIED_RAY_VERSIONS:
        return f"Ray {ray.__version__} is not a release the derived submission is verified on"
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


def _closure(remote_function) -> dict:
    """The variables ``.options()``' wrapper closes over (its ``remote``: the function, the options,
    the runtime env); empty for anything else."""
    remote = getattr(remote_function, "remote", None)
    code, cells = getattr(remote, "__code__", None), getattr(remote, "__closure__", None)
    return dict(zip(code.co_freevars, (c.cell_contents for c in cells))) if code and cells else {}


def _function_of(remote_function):
    """The ``RemoteFunction`` itself, or the one behind ``.options()``' wrapper; None for anything else."""
    from ray.remote_function import RemoteFunction

    if isinstance(remote_function, RemoteFunction):
        return remote_function
    fn = _closure(remote_function).get("func_cls")
    return fn if isinstance(fn, RemoteFunction) else None


def _derived_arguments(bound, fn, worker) -> Optional[Dict[str, Any]]:
    """``submit_task``'s arguments that depend only on ``bound``'s options, by parameter name, as
    ``RemoteFunction._remote`` derives them in a driver; None where the call could differ (see the
    module doc). Names a Ray release does not pass (``fallback_strategy`` before 2.52,
    ``num_objects_per_yield`` before 2.57) are derived all the same: :func:`_submit_layout` takes
    those ``submit_task`` has."""
    import os

    import ray._common.utils
    from ray._common import ray_option_utils
    from ray.util.placement_group import _configure_placement_group_based_on_context

    cells = _closure(bound) if bound is not fn else {}
    options = dict(cells.get("updated_options", fn._default_options))
    env_info = cells.get("serialized_runtime_env_info", fn._serialized_base_runtime_env_info)
    options.pop("max_calls", None)
    for k, v in ray_option_utils.task_options.items():
        default = int(os.environ.get("RAY_TASK_MAX_RETRIES", v.default_value)) if k == "max_retries" \
            else v.default_value
        options[k] = options.get(k, default)
    options.pop("max_calls", None)
    if options["num_returns"] not in (None, 1) or options["scheduling_strategy"] is not None:
        return None
    retry_exceptions, allowlist = options["retry_exceptions"], None
    if isinstance(retry_exceptions, (list, tuple)):
        retry_exceptions, allowlist = True, tuple(retry_exceptions)
    resources = ray._common.utils.resources_from_ray_options(options)
    capture = options["placement_group_capture_child_tasks"]
    group = _configure_placement_group_based_on_context(
        worker.should_capture_child_tasks_in_placement_group if capture is None else capture,
        options["placement_group_bundle_index"], resources, {}, fn._function_descriptor.function_name,
        placement_group=options["placement_group"])
    if not group.is_empty:
        return None
    backpressure, per_yield = options["_generator_backpressure_num_objects"], options.get("_num_objects_per_yield")
    return {
        "language": fn._language,
        "function_descriptor": fn._function_descriptor,
        "name": "" if options["name"] is None else options["name"],
        "num_returns": 1,
        "resources": resources,
        "max_retries": options["max_retries"],
        "retry_exceptions": retry_exceptions,
        "retry_exception_allowlist": allowlist,
        "scheduling_strategy": "DEFAULT",
        "serialized_runtime_env_info": env_info or "{}",
        "generator_backpressure_num_objects": -1 if backpressure is None else backpressure,
        "num_objects_per_yield": 1 if per_yield is None else per_yield,
        "enable_task_events": options.get("enable_task_events"),
        "labels": options.get("_labels"),
        "label_selector": options.get("label_selector"),
        "fallback_strategy": options.get("fallback_strategy"),
    }


def _submit_task_parameters(core_worker) -> Optional[Tuple[str, ...]]:
    """The names of ``submit_task``'s parameters after ``self``, in order; None where Ray's Cython does
    not expose its signature."""
    import inspect

    try:
        names = tuple(inspect.signature(type(core_worker).submit_task).parameters)
    except (TypeError, ValueError):
        return None
    return names[1:] if names[:1] == ("self",) else None


def _submit_layout(derived: Dict[str, Any], parameters: Optional[Sequence[str]]
                   ) -> Optional[Tuple[tuple, tuple, tuple]]:
    """``derived``'s values in ``submit_task``'s parameter order: those before the call's arguments,
    between them and the debugger breakpoint, and after it. None unless every parameter is either
    per-call or derived, each once: the call is then complete and each value in its own place,
    whatever order the release gives them."""
    if parameters is None or len(set(parameters)) != len(parameters):
        return None
    if any(p not in parameters for p in _PER_CALL) or any(p not in derived for p in parameters if p not in _PER_CALL):
        return None
    at_args, at_breakpoint = parameters.index("args"), parameters.index("debugger_breakpoint")
    if at_args > at_breakpoint:
        return None
    return (tuple(derived[p] for p in parameters[:at_args]),
            tuple(derived[p] for p in parameters[at_args + 1:at_breakpoint]),
            tuple(derived[p] for p in parameters[at_breakpoint + 1:]))


class _Launcher:
    """``launch(args, kwargs) -> ObjectRef`` for one bound remote function (see the module doc)."""

    def __init__(self, bound):
        import ray._private.worker
        from ray._common.signature import DUMMY_TYPE

        self._bound = bound
        self._fn = _function_of(bound)
        self._workers = ray._private.worker  # (its global_worker is replaced by each ray.init)
        self._dummy = DUMMY_TYPE
        self._core = None  # the core worker the arguments were derived under
        self._recorded: Optional[Tuple[tuple, tuple, tuple]] = None  # see _submit_layout
        self._shapes: set = set()  # (positional count, keywords) of calls bound against the signature
        self._lock = threading.Lock()
        self.fast = 0  # calls that took the fast path (a test reads it)

    def __call__(self, args: tuple, kwargs: dict):
        worker = self._workers.global_worker
        if not worker.connected:  # (Ray's own .remote() would start a new Ray: a library never does that)
            raise RayGoneError("Ray is not connected (ray.shutdown() was called): the task was not launched")
        if getattr(worker, "core_worker", None) is not self._core:
            return self._first(args, kwargs)
        recorded = self._recorded
        if recorded is None:  # (the fast path is off here)
            return self._bound.remote(*args, **kwargs)
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

    def _first(self, args: tuple, kwargs: dict):
        """The first call under this core worker: Ray's own ``.remote()`` (which exports the function);
        then the arguments of ``submit_task`` for the next calls, where the fast path may be taken."""
        ref = self._bound.remote(*args, **kwargs)
        worker = self._workers.global_worker
        with self._lock:
            layout = None
            why = fast_path_off(self._bound)
            if why is None:
                try:
                    derived = _derived_arguments(self._bound, self._fn, worker)
                    if derived is not None:
                        layout = _submit_layout(derived, _submit_task_parameters(worker.core_worker))
                        if layout is None:
                            why = "submit_task's parameters are not the ones derived"
                except Exception:  # (a Ray whose internals moved: its own .remote() it is)
                    logging.getLogger(__name__).debug("no fast submission for %r", self._bound, exc_info=True)
            if why is not None:
                logging.getLogger(__name__).debug("Ray's .remote() for %r: %s", self._bound, why)
            self._recorded, self._core = layout, worker.core_worker
            self._shapes.add((len(args), *kwargs) if kwargs else len(args))
        return ref


class RayGoneError(RuntimeError):
    """A launch after ``ray.shutdown()``: Ray would start itself again, and the library never lets it."""


def launcher(bound) -> Callable[[tuple, dict], Any]:
    """``launch(args, kwargs)``: ``bound.remote(*args, **kwargs)``, the same call to Ray's core worker,
    with the per-call work of Ray's ``.remote()`` that depends only on the options done once.

    Example::

        launch = launcher(fn.options(resources={slot: 1}))
        ref = launch((21,), {})      # as fn.options(resources={slot: 1}).remote(21)
    """
    return _Launcher(bound)
