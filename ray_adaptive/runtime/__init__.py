"""The runtime: a lowered plan as Ray actors and in-process schedulers, and every decision bound by a slot resource.

* :mod:`~ray_adaptive.runtime.topology` -- builds a plan's actors, or joins a running one;
* :mod:`~ray_adaptive.runtime.store`, :mod:`~ray_adaptive.runtime.selector`,
  :mod:`~ray_adaptive.runtime.placement` -- one actor each, with the client that talks to it;
* :mod:`~ray_adaptive.runtime.local` -- a decentralized plan's scheduler, in the submitting process;
* :mod:`~ray_adaptive.runtime.messages` -- what those processes send each other;
* :mod:`~ray_adaptive.runtime.router` -- the submitting process's side: queue, launch, completions;
* :mod:`~ray_adaptive.runtime.binding` -- the per-node slot resources decisions are bound with.

Users start a runtime with :func:`ray_adaptive.start`; nothing here chooses a
plan (that is the compiler's) or simulates one (the simulator's).
"""
