"""Replicated State helpers: what a replica pushes, how the store merges it, and comparing States."""

import numpy as np

from ray_adaptive.plan.replicas import DeltaLog, merge_into, same_state


def test_a_replica_pushes_its_changes_and_the_store_merges_them():
    state = {"alloc": {"a": 1.0, "c": 5.0}, "peak": np.array([1.0, 2.0])}
    log = DeltaLog({"alloc": "add", "peak": "max"}, state)
    state["alloc"]["a"] = 2.0  # hook by hook: in place in the map, a new value each time
    state["alloc"]["a"] = 3.0
    state["alloc"]["b"] = 1.0
    state["peak"] = np.array([0.5, 4.0])
    store = {"alloc": {"a": 10.0}, "peak": np.array([2.0, 1.0])}
    merge_into(store, log.take(), log.merge)
    assert store["alloc"] == {"a": 12.0, "b": 1.0}  # c did not change: not pushed
    assert store["peak"].tolist() == [2.0, 4.0]
    assert not log


def test_after_a_sync_only_the_changes_not_pushed_yet_are_left():
    """The replica's State becomes the store's answer plus what changed since the push."""
    state = {"alloc": {"a": 1.0}}
    log = DeltaLog({"alloc": "add"}, state)
    state["alloc"]["a"] = 2.0
    pushed = log.take()
    state["alloc"]["a"] = 2.5  # after the push, before the answer
    answer = {"alloc": {"a": 7.0}}  # the store merged others' changes and ours
    merged = {"alloc": dict(answer["alloc"])}
    merge_into(merged, log.peek(), log.merge)
    state.update(merged)
    log.rebase(answer)
    assert pushed == {"alloc": {"a": 1.0}} and state["alloc"] == {"a": 7.5}
    assert log.peek() == {"alloc": {"a": 0.5}}
    assert log.take() == {"alloc": {"a": 0.5}} and not log


def test_same_state_compares_vecs_element_wise_and_maps_key_by_key():
    a = {"usage": {"t1": np.array([1.0, 2.0])}, "n": 3, "v": np.array([1, 2])}
    assert same_state(a, {"usage": {"t1": np.array([1.0, 2.0])}, "n": 3, "v": np.array([1, 2])})
    assert not same_state(a, {**a, "usage": {"t1": np.array([1.0, 2.5])}})
    assert not same_state(a, {**a, "usage": {"t2": np.array([1.0, 2.0])}})
    assert not same_state(a, {**a, "v": np.array([1, 2, 3])})
    assert not same_state(a, {**a, "n": 4})
    assert not same_state(a, {"n": 3})
    assert same_state({}, {})
    nan = float("nan")
    assert same_state({"x": nan, "v": np.array([nan, 1.0])}, {"x": nan, "v": np.array([nan, 1.0])})
    assert not same_state({"x": nan}, {"x": 1.0})
