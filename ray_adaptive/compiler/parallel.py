"""Independent jobs of the compiler, run in forked processes as they free up: the same results, sooner on several cores.

Which jobs are worth running depends on the results so far (a plan's replay
matters only while its ratio can still change the choice), so the caller
names them afresh after every result, most telling first, and each free
process takes the next one named. A job never waits for a round of others to
end: the long replay of the plan that is finally chosen starts as soon as a
process is free, not after the round before it. The processes are forked
once and inherit the jobs: a job's key is the only message in, its result the
only message out; a job whose result can no longer matter is stopped with
its process. A forked worker dies with its parent: killed mid-compile,
the parent leaves no worker replaying on.

Example:
    >>> run_jobs({"a": 3, "b": 1}, workers=1, run=lambda x: x * x, wanted=lambda done: ["a", "b"])
    {'a': 9, 'b': 1}
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from typing import Callable, Hashable, Mapping, Sequence

__all__ = ["run_jobs"]

_ORPHAN_CHECK_S = 0.2  # how often a forked worker checks that its parent is alive


def run_jobs(jobs: Mapping[Hashable, object], workers: int, run: Callable,
             wanted: Callable[[Mapping], Sequence]) -> dict:
    """``{k: run(jobs[k])}`` for the keys ``wanted(done)`` names, asked again after every result (``done``:
    the results so far), until it names none that is not done. ``workers`` > 1: in up to that many
    forked processes, each taking the first key named that no other runs; a job no longer named is
    stopped (its result could not matter), so the keys done may be fewer than with one worker."""
    done: dict = {}

    def todo() -> list:
        return [k for k in wanted(done) if k not in done]

    workers = min(workers, len(jobs))
    if workers <= 1:
        while ks := todo():
            done[ks[0]] = run(jobs[ks[0]])
        return done
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("fork")
    parent = os.getpid()
    idle, running, started = [], {}, []  # running: a worker's connection -> (the worker, its key)

    def spawn() -> None:
        here, there = ctx.Pipe()
        child = ctx.Process(target=_forked_worker, args=(jobs, run, there, parent), daemon=True)
        child.start()
        there.close()
        idle.append((child, here))
        started.append((child, here))

    try:
        while True:
            named = todo()
            for conn, (child, key) in list(running.items()):
                if key not in named:  # (its result can no longer matter: stop it, its worker with it)
                    del running[conn]
                    child.terminate()
            busy = {k for _, k in running.values()}
            for key in [k for k in named if k not in busy]:
                if not idle and len(running) < workers:
                    spawn()
                if not idle:
                    break
                child, conn = idle.pop()
                conn.send(key)
                running[conn] = (child, key)
            if not running:
                return done
            for conn in wait(list(running)):
                child, key = running.pop(conn)
                try:
                    ok, payload = conn.recv()
                except EOFError:
                    raise RuntimeError(f"a compiler worker process died running {key!r}") from None
                if not ok:
                    raise payload
                done[key] = payload
                idle.append((child, conn))
    finally:
        for child, conn in started:
            if (child, conn) in idle:
                try:
                    conn.send(None)  # (done: exit)
                except OSError:
                    pass
            else:  # (stopped, or an error: no orphan keeps working)
                child.terminate()
        for child, conn in started:
            child.join()
            conn.close()


def _exit_with(parent: int) -> None:
    """End this process once ``parent`` is gone (a killed parent cannot terminate its workers)."""
    while os.getppid() == parent:
        time.sleep(_ORPHAN_CHECK_S)
    os._exit(1)


def _forked_worker(jobs: Mapping, run: Callable, conn, parent: int) -> None:
    """A forked process's life: run the job each key names, send back its result (or its error), until
    told to stop. The cyclic garbage collector stays off: it would only touch -- and so copy -- the
    parent's pages."""
    gc.disable()
    # stopped by SIGTERM when its job no longer matters: die at once, without a handler the parent
    # installed (a Ray driver's prints a stack trace)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    while (key := conn.recv()) is not None:
        try:
            conn.send((True, run(jobs[key])))
        except BaseException as e:  # noqa: BLE001 -- handed to the parent, which raises it
            conn.send((False, e))
    conn.close()
