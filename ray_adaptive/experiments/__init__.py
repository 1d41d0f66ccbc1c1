"""Experiment drivers, apart from the library's layers: they use it as a user would.

* :mod:`~ray_adaptive.experiments.reproduce` -- the paper's experiment in the simulator
  (``ray-adaptive reproduce``): sweeps, figures, Table 1, the compiler's choices;
* :mod:`~ray_adaptive.experiments.on_ray` -- the same experiment on a local multi-node Ray cluster
  through the runtime (``ray-adaptive reproduce --ray``, and the main ``ray-adaptive demo``);
* :mod:`~ray_adaptive.experiments.demo` -- the replay demo (``ray-adaptive demo --replay``).
"""
