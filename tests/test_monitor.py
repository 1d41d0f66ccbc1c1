"""The monitor's figures, on records fed by hand (no Ray needed)."""

import numpy as np
import pytest

from ray_adaptive.monitor import Monitor
from ray_adaptive.workload.specs import TaskSpec
from ray_adaptive.workload.trace import read_trace


def _feed(m, times, tenant, duration=0.1):
    for i, t in enumerate(times):
        m.arrived(t, {"tenant": tenant})
        m.finished(t + 0.01 + duration, [TaskSpec(f"{tenant}{i}", t, duration, fields={"tenant": tenant})])


def test_rates_burstiness_and_durations_per_group():
    m = Monitor("drf_lb", group_by="tenant")
    rng = np.random.default_rng(0)
    poisson = np.cumsum(rng.exponential(1 / 50, 4000))  # 50/s over ~80 s
    even = np.arange(0, poisson[-1], 0.1)  # 10/s, perfectly regular
    bursts = np.concatenate([k * 10.0 + np.linspace(0, 0.05, 50) for k in range(8)])  # 50 at once every 10 s
    _feed(m, poisson.tolist(), "poisson")
    _feed(m, even.tolist(), "even", duration=0.2)
    _feed(m, bursts.tolist(), "bursty")
    g = m.snapshot()["groups"]
    assert g["poisson"]["rate_per_s"] == pytest.approx(50, rel=0.05)
    assert g["poisson"]["burstiness"] == pytest.approx(1.0, abs=0.1)  # CV^2 of exponential gaps
    assert g["even"]["burstiness"] == pytest.approx(0.0, abs=1e-9)
    assert g["bursty"]["burstiness"] > 5
    assert g["even"]["duration_mean_s"] == pytest.approx(0.2)


def test_window_keep_and_trace(tmp_path):
    with pytest.raises(ValueError, match="keep must be >= 1"):
        Monitor("p", keep=0)
    m = Monitor("p", group_by="tenant", keep=5)
    _feed(m, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "a")
    assert len(m.records()) == 5  # the last 5 are kept
    assert m.snapshot(window_s=2.0)["arrivals"] == 3
    assert m.write_trace(tmp_path / "t.csv") == 5
    trace = read_trace(tmp_path / "t.csv")
    assert [t.arrival for t in trace] == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert all(t.duration == pytest.approx(0.1) and t.fields == {"tenant": "a"} for t in trace)


def test_load_reports_each_groups_goodput_over_the_last_seconds():
    """Per group, the finishes since the report ``recent_s`` ago over the time since (at least
    ``recent_s``): counted from the cumulative counters, not from the records."""
    import time

    m = Monitor("drf_lb", group_by="tenant")
    _feed(m, [0.0] * 4, "a")
    first = m.load(recent_s=60.0)  # younger than recent_s: 4 finishes per 60 s
    assert first["groups"]["a"]["goodput_per_s"] == pytest.approx(4 / 60.0)
    time.sleep(0.05)  # (time passing is what is measured: the next report's rate is over >= 0.05 s)
    _feed(m, [1.0] * 3, "b")
    later = m.load(recent_s=0.01)  # since the last report (older than 0.01 s): b's 3 only
    assert "goodput_per_s" not in later["groups"]["a"]
    assert 3 / 10.0 < later["groups"]["b"]["goodput_per_s"] <= 3 / 0.05
    assert (later["finished"], later["groups"]["a"]["finished"]) == (7, 4)  # the cumulative counts stand


def test_load_reports_the_arrival_rate_over_the_last_seconds():
    """The arrivals since the report ``recent_s`` ago over the time since (at least ``recent_s``),
    as the goodput: what the metrics export as ``ray_adaptive_arrival_rate``, with no pass over records."""
    import time

    m = Monitor("drf_lb", group_by="tenant")
    m.decided([{"tenant": "a"}, {"tenant": "b"}, {}])
    m.dropped({"tenant": "a"})
    for i in range(6):
        m.arrived(float(i), {"tenant": "a"})
    first = m.load(recent_s=60.0)
    assert first["arrival_rate_per_s"] == pytest.approx(6 / 60.0)
    assert {g: (c["decided"], c["dropped"]) for g, c in first["groups"].items()} == \
        {"a": (1, 1), "b": (1, 0), "": (1, 0)}
    time.sleep(0.05)  # (time passing is what is measured: the next report's rate is over >= 0.05 s)
    for i in range(3):
        m.arrived(10.0 + i, {"tenant": "b"})
    later = m.load(recent_s=0.01)  # since the last report only
    assert 3 / 10.0 < later["arrival_rate_per_s"] <= 3 / 0.05
    assert later["arrivals"] == 9


def test_long_tasks_are_recorded_while_they_run(tmp_path):
    """A policy's actors (issue 38): counted as running from their launch, in the records and the trace with
    their lifetime so far; a window's records have one that arrived before it from the window's start; at its
    end it is a finished task like any."""
    import time

    m = Monitor("p", group_by="tenant")
    _feed(m, [0.0, 1.0], "a")
    m.arrived(2.0, {"tenant": "b"})
    m.started(3.0, [("actor0", 2.0, 2.5, {"tenant": "b"})])  # launched at 2.5, told at 3.0
    time.sleep(0.05)
    live = m.running()
    assert [t.id for t in live] == ["actor0"] and live[0].fields == {"tenant": "b"}
    assert 0.55 <= live[0].duration < 60  # 0.5 s before it was told, and the time since
    assert [t.id for t in m.records()] == ["a0", "a1", "actor0"]
    assert [t.id for t in m.records(running=False)] == ["a0", "a1"]
    window = {t.id: t for t in m.records(since=2.8)}
    assert set(window) == {"actor0"}  # (a0, a1 arrived before the window)
    assert window["actor0"].arrival == 2.8 and 0.25 <= window["actor0"].duration <= live[0].duration + 60
    assert window["actor0"].duration < m.running()[0].duration  # (only its part inside the window)
    assert m.snapshot()["running_long"] == 1
    assert m.write_trace(tmp_path / "t.csv") == 3
    assert {t.id: t.duration > 0.5 for t in read_trace(tmp_path / "t.csv")} == {"a0": False, "a1": False,
                                                                               "actor0": True}
    m.finished(10.0, [TaskSpec("actor0", 2.0, 7.5, fields={"tenant": "b"})])  # its end
    assert m.running() == [] and m.snapshot()["running_long"] == 0
    assert [(t.id, t.duration) for t in m.records()][-1] == ("actor0", 7.5)


def test_a_finished_task_kept_adds_nothing_the_garbage_collector_tracks():
    """A process keeps up to 100,000 finished tasks: as objects, every full collection scanned them all,
    stopping the process -- its scheduler's callers too (monitor.records). Kept as plain values, what the
    collector tracks does not grow with the records, and each reads back as it was given."""
    import gc

    m = Monitor("p", group_by="tenant", keep=20_000)
    fields = {"tenant": "a", "resource_vec": [0.1, 0.2]}  # (one .options() call: shared by its tasks)

    def spec(i):
        return TaskSpec(f"t{i}", 0.001 * i, 0.002, 1.0, fields, submitter="a/0", preemptible=i % 2 == 0)

    m.finished(0.5, [spec(i) for i in range(100)])

    def tracked() -> int:  # (a collection untracks a tuple of untracked values, one level of nesting each)
        for _ in range(4):
            gc.collect()
        return len(gc.get_objects())

    before = tracked()
    for k in range(1, 100):
        m.finished(0.5 + k, [spec(100 * k + i) for i in range(100)])
    assert tracked() - before < 100  # (as TaskSpecs: 2 per task, 19,800 more)
    got = m.records(since=9.9)
    assert got == [spec(i) for i in range(9900, 10000)] and got[0].fields is fields
    assert m.snapshot()["finished"] == 10_000


def test_kept_records_read_back_as_a_deque_of_the_last_keep_would():
    """FinishedRecords against the plain deque it replaces, across its chunk edges (keep 1, 1,023-1,025,
    3,000; batches of 0 to 2,100): every read, the fields dicts' table holding exactly what is kept."""
    import collections
    import random

    from ray_adaptive.monitor.records import FinishedRecords

    rng = random.Random(2)
    shared = [{"tenant": "a", "v": [1, 2]}, {"tenant": "b"}, {}, {"x": {1, 2}}, {"v": (1, 2)}]
    for keep in (1, 5, 1023, 1024, 1025, 3000):
        kept, ref, i, at = FinishedRecords(keep), collections.deque(maxlen=keep), 0, 0.0
        for _ in range(12):
            at += 1.0
            tasks = []
            for _ in range(rng.choice([0, 1, 3, 500, 1024, 2100])):
                f = rng.choice(shared)
                tasks.append(TaskSpec(f"t{i}", rng.random() * at, 0.1, 1.0, dict(f) if rng.random() < 0.3 else f,
                                      {"CPU": 1.0} if i % 3 == 0 else {}, "s/0", i % 2 == 0))
                i += 1
            kept.extend(at, tasks)
            ref.extend((at, t) for t in tasks)
            since, finished_since = rng.random() * at, at - rng.choice([0, 1, 2])
            assert len(kept) == len(ref) and kept.copy().specs() == [t for _, t in ref]
            assert kept.copy(since).specs() == [t for _, t in ref if t.arrival >= since]
            newest = [t for a, t in ref if a >= finished_since and t.arrival >= since]
            assert kept.copy(since, finished_since).specs() == newest
        uses = collections.Counter(record[5] for record in kept._records())
        assert {k: e[1] for k, e in kept._fields.items()} == dict(uses), keep
