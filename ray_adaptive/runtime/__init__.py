"""The runtime: a lowered plan as Ray actors and in-process schedulers, and every decision bound by a slot resource.

* :mod:`~ray_adaptive.runtime.topology` -- builds a plan's actors, or joins a running one;
* :mod:`~ray_adaptive.runtime.store`, :mod:`~ray_adaptive.runtime.selector` (its client:
  :mod:`~ray_adaptive.runtime.selector_client`, its lease: :mod:`~ray_adaptive.runtime.lease`),
  :mod:`~ray_adaptive.runtime.placement` -- one actor each, with the client that talks to it;
* :mod:`~ray_adaptive.runtime.decider` -- the interface a plan meets a submitting process by, implemented by
  :mod:`~ray_adaptive.runtime.local` (decentralized) and the selector's client (centralized, hybrid);
* :mod:`~ray_adaptive.runtime.messages` -- what those processes send each other;
* :mod:`~ray_adaptive.runtime.router` -- the submitting process's side: submission, and its parts
  (:mod:`~ray_adaptive.runtime.task_book`, :mod:`~ray_adaptive.runtime.harvest`,
  :mod:`~ray_adaptive.runtime.deadlines`, :mod:`~ray_adaptive.runtime.switch_gate`,
  :mod:`~ray_adaptive.runtime.membership`, :mod:`~ray_adaptive.runtime.dispatcher`);
* :mod:`~ray_adaptive.runtime.switch` -- live switches: the coordinator and each process's watcher
  (:mod:`~ray_adaptive.runtime.handover`: the State handed over, by the store);
* :mod:`~ray_adaptive.runtime.binding` -- the per-node slot resources decisions are bound with.

Users start a runtime with :func:`ray_adaptive.start`; nothing here chooses a
plan (that is the compiler's) or simulates one (the simulator's).
"""
