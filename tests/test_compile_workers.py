"""A killed ``ray-adaptive compile`` leaves no forked worker replaying on (issue 24).

The compiler replays its plans in forked processes (:mod:`ray_adaptive.compiler.parallel`);
killed with SIGKILL, the parent cannot stop them, so each must notice and exit by itself.
Nothing here starts Ray.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for

# a worker that used 0.2 s of CPU (in clock ticks) is replaying: past its fork and set-up
REPLAYING_TICKS = max(1, os.sysconf("SC_CLK_TCK") // 5)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists() or (os.cpu_count() or 1) < 2,
                                reason="needs /proc and two CPUs (the compiler forks one worker per extra CPU)")


def _proc_stat(pid: int):
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _stat(pid: int):
    """``(state, parent pid)`` of a process, or None once it is gone."""
    fields = _proc_stat(pid)
    return None if fields is None else (fields[0], int(fields[1]))


def _children(pid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and (_stat(int(p.name)) or ("", 0))[1] == pid]


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")  # (a zombie has exited: only its exit status is left)


def _cpu_ticks(pid: int) -> int:
    """CPU time a process used so far (user + system, in clock ticks); 0 once it is gone."""
    fields = _proc_stat(pid)
    return 0 if fields is None else int(fields[11]) + int(fields[12])


def test_killing_compile_mid_run_leaves_no_worker():
    compile_ = subprocess.Popen([sys.executable, "-m", "ray_adaptive", "compile", "drf_lb", "--rate", "700",
                                 "--window", "20000", "--whole-window", "--no-measure"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        workers = wait_for(lambda: _children(compile_.pid), timeout=30, period=0.05,
                           message="the compile to fork a worker to kill")
        # mid-replay: each worker took a job and works on it (a fresh fork waiting for its first job
        # uses no CPU; a replay of this window uses seconds of it)
        wait_for(lambda: all(_cpu_ticks(w) >= REPLAYING_TICKS for w in workers), timeout=30, period=0.05,
                 message=lambda: f"the workers replaying (CPU ticks: {[_cpu_ticks(w) for w in workers]})")
        assert all(_alive(w) for w in workers)
        compile_.send_signal(signal.SIGKILL)
        compile_.wait(timeout=5)
        wait_for(lambda: not any(_alive(w) for w in workers), timeout=3, period=0.05,
                 message=lambda: f"workers {[w for w in workers if _alive(w)]} to end with their killed parent")
    finally:
        if compile_.poll() is None:
            compile_.kill()
            compile_.wait()
        for w in workers:  # (only if the test failed: this test's own workers)
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def _sleep_then_square(x):
    time.sleep(x[1])  # (the job's work: its length is what the test is about)
    return x[0] * x[0]


def test_a_job_whose_result_no_longer_matters_is_stopped_with_its_worker():
    from ray_adaptive.compiler.parallel import run_jobs

    # "fast" decides: once it is done nothing else is wanted, so "slow" (60 s) must be stopped, not awaited
    jobs = {"fast": (3, 0.5), "slow": (4, 60.0), "never": (5, 0.0)}
    asked = []

    def wanted(done):
        asked.append(dict(done))
        return [] if "fast" in done else ["fast", "slow"]

    before = set(_children(os.getpid()))  # (a session's Ray cluster runs as this process's children too)
    t0 = time.monotonic()
    done = run_jobs(jobs, workers=2, run=_sleep_then_square, wanted=wanted)
    assert done == {"fast": 9}
    assert time.monotonic() - t0 < 20, "run_jobs waited for a job no longer wanted"
    left = [c for c in _children(os.getpid()) if c not in before and _alive(c)]
    assert not left, f"run_jobs left workers {left} running"
    # one worker: the same keys done, one at a time in the order named
    assert run_jobs(jobs, workers=1, run=_sleep_then_square, wanted=wanted) == {"fast": 9}


def _logged_sleep(x):
    path, key, seconds = x
    with open(path, "a") as f:
        f.write(f"start {key}\n")
    time.sleep(seconds)  # (the job's work: its length is what the test is about)
    with open(path, "a") as f:
        f.write(f"end {key}\n")
    return key


def test_a_free_worker_takes_the_next_job_named_without_waiting_for_the_others(tmp_path):
    from ray_adaptive.compiler.parallel import run_jobs

    # a: 5 s; b, c, d: 0.2 s each. In rounds of two, c and d would start after a ends; taken as workers
    # free up, they run one after the other beside a.
    log = tmp_path / "log"
    jobs = {k: (str(log), k, 5.0 if k == "a" else 0.2) for k in "abcd"}
    done = run_jobs(jobs, workers=2, run=_logged_sleep, wanted=lambda done: list(jobs))
    assert done == {k: k for k in "abcd"}
    events = log.read_text().split("\n")
    assert events.index("start d") < events.index("end a"), events
