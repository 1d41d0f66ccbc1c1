"""Printer and parser agree: parse(print(ir)) == ir, for every shipped policy and more."""

import pytest

from ray_adaptive.dsl import format_policy, load_policy, parse_policy, shipped_policies


@pytest.mark.parametrize("name", shipped_policies())
def test_round_trip_of_shipped_policies(name):
    p = load_policy(name)
    text = format_policy(p)
    again = parse_policy(text, name=p.name)
    assert again == p
    assert format_policy(again) == text  # printing is a fixed point


def test_round_trip_keeps_precedence_and_branches():
    src = """
Task:
  a: float
  v: vec<float>
State:
  m: map<string, int> = {"x": 1, "y": -2}
  w: vec<float> = [1, 2.5]
  s: string = "q\\"uote"
Score(task, node): [limit=1.5]
  x = (task.a - 1) - (2 - task.a) * -(3 % 2) / (1 + 1)
  y = not (x > 1 and x < 2 or x == 0)
  if y:
    return -x
  elif x >= 3:
    return max(task.v * w + 1) if m["x"] != 0 else inf
  else:
    return -inf
OnArrival(task):
  m[s + "k"] += 1
  w = w * 2
"""
    p = parse_policy(src)
    assert parse_policy(format_policy(p)) == p
    assert "x = task.a - 1 - (2 - task.a) * -(3 % 2) / (1 + 1)" in format_policy(p)


def test_locations_are_kept_but_not_compared():
    p = load_policy("drf_lb_paper")
    ret = p.score.body[-1]
    assert (ret.loc.line, ret.loc.col) == (18, 3)
