"""Every path to the raylet validates names and capacities first, so bad input fails with no cluster.

``set_resource(s)``, ``ResourceScope``, ``resize_many`` (what ``esl.Gang``
uses) and ``esl.Gang`` itself refuse a resource name with a control character
(NUL, newline, escape, a bidirectional override), one of 10,000 characters, a
capacity of 1e300 or one below Ray's granularity -- before they connect to
anything: here the connection is replaced by a failure, and Ray never starts.
"""

from __future__ import annotations

import pytest

import esl
from ray_adaptive import resources
from ray_adaptive.errors import ResourceError
from ray_adaptive.resources import _session

BAD_NAMES = ["a\x00b", "a\nb", "a\rb", "esc\x1b[31m", "rtl\u202eevil", "line\u2028sep", "x" * 10_000, " lead", ""]
BAD_CAPACITIES = [1e300, 1e-9, float("nan"), float("inf"), -1]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    """Any call that reaches for the cluster fails the test (every path connects through _session.current)."""
    def touched():
        raise AssertionError("validation let bad input reach the cluster connection")

    monkeypatch.setattr(_session, "current", touched)


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_set_resource_refuses_a_bad_name_before_connecting(name):
    with pytest.raises(ValueError, match="resource name"):
        resources.set_resource(name, 1)
    with pytest.raises(ValueError, match="resource name"):
        resources.set_resources({"ok": 1, name: 1}, node_spec={})
    with pytest.raises(ValueError, match="resource name"):
        resources.ResourceScope().set_resource(name, 1)


@pytest.mark.parametrize("capacity", BAD_CAPACITIES, ids=repr)
def test_set_resource_refuses_a_bad_capacity_before_connecting(capacity):
    with pytest.raises(ValueError, match="capacity of 'ok'"):
        resources.set_resource("ok", capacity)


def test_control_characters_are_named_in_the_message():
    with pytest.raises(ValueError, match=r"control character '\\x00' \(U\+0000\)"):
        resources.set_resource("a\x00b", 1)
    with pytest.raises(ValueError, match=r"\(10,000 characters\) must be 1-256 characters"):
        resources.set_resource("x" * 10_000, 1)


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_resize_many_checks_every_name_convert_from_included(name):
    with pytest.raises(ValueError, match="resource name"):
        resources.resize_many({"node": {name: 1}})
    with pytest.raises(ValueError, match="resource name"):
        resources.resize_many({"node": {"CPU": 1}}, convert_from=["CPU", name])


@pytest.mark.parametrize("capacity", BAD_CAPACITIES, ids=repr)
def test_resize_many_checks_capacities_of_ray_s_own_names_too(capacity):
    with pytest.raises(ValueError, match="capacity of 'CPU'"):
        resources.resize_many({"node": {"CPU": capacity}}, convert_from=["CPU"])


def test_resize_many_still_refuses_a_reserved_name_not_given_to_convert():
    with pytest.raises(ResourceError, match="reserved by Ray"):
        resources.resize_many({"node": {"CPU": 1}})


def test_check_capacities_rounds_as_set_resource_would():
    assert resources.check_capacities({"a": 1.00004, "b": 0}) == {"a": 1.0, "b": 0.0}
    assert resources.check_capacities({"CPU": 3}, convert_from=["CPU"]) == {"CPU": 3.0}


@pytest.mark.parametrize("bundle, message", [
    ({"CPU": 1e300}, "must be a finite number in \\[0, 1e\\+14\\]"),
    ({"CPU": 1e-9}, "below Ray's resource granularity"),
    ({"x" * 10_000: 1}, "must be 1-256 characters"),
    ({"a\x00b": 1}, "control character"),
    ({"a\nb": 1}, "control character"),
], ids=["CPU-1e300", "CPU-1e-9", "name-10000", "name-NUL", "name-newline"])
def test_gang_checks_its_resources_when_built_not_at_the_raylet(bundle, message):
    with pytest.raises(ValueError, match=message) as info:
        esl.Gang([{"CPU": 1}, bundle])
    assert str(info.value).startswith("bundles[1] = ")
