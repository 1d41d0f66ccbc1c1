"""Independent jobs of the compiler, run here and in forked processes: the same results, sooner on several cores.

Each process takes the next job, longest first, whenever it is free. This
process works too (a pool of ``workers`` would leave it waiting: on 2 CPUs,
one fork instead of two), the forked ones inherit the jobs, and a process's
results are its only message. A forked worker dies with its parent: killed
mid-compile, the parent leaves no worker replaying on.

Example:
    >>> run_jobs([3, 1, 2], workers=1, run=lambda x: x * x)
    [9, 1, 4]
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Callable, Sequence

__all__ = ["run_jobs"]

_ORPHAN_CHECK_S = 0.2  # how often a forked worker checks that its parent is alive


def run_jobs(jobs: Sequence, workers: int, run: Callable, cost: Callable = lambda job: 1.0) -> list:
    """``[run(job) for job in jobs]``, computed here and in ``workers - 1`` forked processes; ``cost(job)``
    orders them (the longest first, so none straggles at the end)."""
    workers = min(workers, len(jobs))
    if workers <= 1:
        return [run(j) for j in jobs]
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    order = sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))
    taken = ctx.Value("i", 0)

    def work() -> list:
        done = []
        while True:
            with taken.get_lock():
                k = taken.value
                taken.value += 1
            if k >= len(order):
                return done
            done.append((order[k], run(jobs[order[k]])))

    parent = os.getpid()
    children = []
    for _ in range(workers - 1):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_forked_worker, args=(work, send, parent), daemon=True)
        child.start()
        send.close()
        children.append((child, receive))
    try:
        results = dict(work())
        for child, receive in children:
            try:
                ok, payload = receive.recv()
            except EOFError:
                raise RuntimeError("a compiler worker process died") from None
            if not ok:
                raise payload
            results.update(payload)
    except BaseException:
        for child, _ in children:  # no orphan keeps working
            child.terminate()
        raise
    finally:
        for child, _ in children:
            child.join()
    return [results[i] for i in range(len(jobs))]


def _exit_with(parent: int) -> None:
    """End this process once ``parent`` is gone (a killed parent cannot terminate its workers)."""
    while os.getppid() == parent:
        time.sleep(_ORPHAN_CHECK_S)
    os._exit(1)


def _forked_worker(work: Callable, send, parent: int) -> None:
    """A forked process's life: its share of the jobs, sent back (an error too). It exits after: the cyclic
    garbage collector would only touch -- and so copy -- the parent's pages."""
    gc.disable()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    try:
        send.send((True, work()))
    except BaseException as e:  # noqa: BLE001 -- handed to the parent, which raises it
        send.send((False, e))
    finally:
        send.close()
