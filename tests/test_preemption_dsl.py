"""The language of preemption and aging (issue 39): Preempt / OnPreempt, their annotations, task.waited,
victim's attributes -- parsed, checked, printed back, and interpreted."""

from types import SimpleNamespace

import numpy as np
import pytest

from ray_adaptive.dsl import format_policy, parse_policy
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.errors import PolicyError

POLICY = """\
Task:
  priority: int

State:
  held: map<string, int>

Score(task, node):
  return -task.priority * 1000 + get_load(node) - task.waited

Preempt(task, victim, node): [grace=2, max=3]
  if task.priority > victim.priority and victim.preemptions < 2:
    return victim.priority * 1000 + (now() - victim.started) + get_load(node)
  return inf

OnDispatch(task, node):
  held[node.id] += 1

OnPreempt(task, node):
  held[node.id] -= 1

OnFinish(task, node):
  held[node.id] -= 1
"""


def test_preempt_and_on_preempt_round_trip():
    p = parse_policy(POLICY, file="p.policy")
    assert (p.preempt.grace, p.preempt.max_preemptions) == (2.0, 3)
    assert [h.name for h in p.hooks] == ["OnDispatch", "OnFinish", "OnPreempt"]
    text = format_policy(p)
    assert "Preempt(task, victim, node): [grace=2.0, max=3]" in text
    again = parse_policy(text, file="p.policy")
    assert again == p and format_policy(again) == text


def test_max_defaults_to_one():
    p = parse_policy("Score(task, node):\n  return 0\nPreempt(task, victim, node): [grace=0]\n  return 0\n")
    assert (p.preempt.grace, p.preempt.max_preemptions) == (0.0, 1)


def test_waited_is_now_minus_arrival():
    """task.waited is sugar: the IR (and so every later stage) holds now() - task.arrival."""
    a = parse_policy("Score(task, node):\n  return task.waited\n")
    b = parse_policy("Score(task, node):\n  return now() - task.arrival\n")
    assert a == b
    task = SimpleNamespace(id="t", arrival=2.0, fields={})
    node = SimpleNamespace(id="n", index=0, executors=1, queue=0, resources={}, fields={}, available={}, load=0)
    assert Interpreter(a).score(task, node, now=7.5) == 5.5


def test_preempt_matrix_pairs_waiting_tasks_with_victims_on_their_nodes():
    p = parse_policy(POLICY)
    it = Interpreter(p)
    n0 = SimpleNamespace(id="n0", index=0, executors=1, queue=0, resources={}, fields={}, available={}, load=1)
    n1 = SimpleNamespace(id="n1", index=1, executors=1, queue=0, resources={}, fields={}, available={}, load=3)
    v = [SimpleNamespace(id="v0", arrival=0.0, fields={"priority": 1}, started=1.0, preemptions=0, node=n0),
         SimpleNamespace(id="v1", arrival=0.0, fields={"priority": 1}, started=3.0, preemptions=2, node=n1),
         SimpleNamespace(id="v2", arrival=0.0, fields={"priority": 4}, started=3.0, preemptions=0, node=n1)]
    tasks = [SimpleNamespace(id="t", arrival=2.0, fields={"priority": 3}),
             SimpleNamespace(id="u", arrival=2.0, fields={"priority": 9})]
    m = it.preempt_matrix(tasks, v, now=4.0)
    # v0: priority 1 < 3, run 3 s, load 1 -> 1000 + 3 + 1; v1: preempted twice already -> inf;
    # v2: priority 4 > 3 -> inf for t, 4000 + 1 + 3 for u
    assert m.tolist() == [[1004.0, np.inf, np.inf], [1004.0, np.inf, 4004.0]]
    it.run_hook("OnPreempt", tasks[0], n0, 4.0)
    assert it.state == {"held": {"n0": -1}}


def test_a_policy_without_preempt_never_preempts():
    it = Interpreter(parse_policy("Score(task, node):\n  return 0\n"))
    assert it.preempt_matrix([SimpleNamespace(id="t", arrival=0.0, fields={})], [object()]).tolist() == [[np.inf]]


S = "Score(task, node):\n  return 0\n"


@pytest.mark.parametrize("text, line, col, kind, message", [
    (S + "Preempt(task, victim, node):\n  return 0\n", 3, 1, "structure",
     "Preempt needs a grace period: write 'Preempt(task, victim, node): [grace=SECONDS]'"),
    (S + "OnPreempt(task, node):\n  pass\n", 3, 1, "structure", "OnPreempt runs only when a task is preempted"),
    (S + "Preempt(task, victim, node): [grace=1, max=1.5]\n  return 0\n", 3, 44, "type",
     "max (times one task may be preempted) must be a whole number, found 1.5"),
    (S + "Preempt(task, victim, node): [grace=1, max=0]\n  return 0\n", 3, 44, "type",
     "max (times one task may be preempted) must be in [1, 100], found 0"),
    (S + "Preempt(task, victim, node): [grace=4000]\n  return 0\n", 3, 37, "type",
     "grace (seconds a victim runs on once chosen) must be in [0, 3600], found 4000"),
    (S + "Preempt(task, victim, node): [grace=1, grace=2]\n  return 0\n", 3, 40, "section", "annotation 'grace' given twice"),
    (S + "Preempt(task, victim, node): [grace=1, limit=2]\n  return 0\n", 3, 40, "section",
     "unknown annotation 'limit'; expected [grace=NUMBER, max=NUMBER]"),
    (S + "Preempt(task, node): [grace=1]\n  return 0\n", 3, 15, "section",
     "Preempt takes parameters (task, victim, node), found (task, node)"),
    (S + "Preempt(task, victim, node): [grace=1]\n  x = 1\n", 4, 3, "structure",
     "Preempt must end in a return on every path"),
    ("State:\n  s: int\n" + S + "Preempt(task, victim, node): [grace=1]\n  s = 1\n  return 0\n", 6, 3, "readonly",
     "Preempt must not change state ('s')"),
    ("Score(task, node):\n  return victim.id\n", 2, 10, "name",
     "Score has no victim; 'victim' (the running task a waiting one would displace) is only available in Preempt"),
    (S + "Preempt(task, victim, node): [grace=1]\n  return victim.startd\n", 4, 17, "name",
     "victim has no field 'startd' (did you mean 'started'?)"),
    ("Task:\n  waited: float\n" + S, 2, 3, "name", "'waited' is a built-in attribute of every task"),
    (S + "OnFinish(task, node):\n  x = victim.started\n", 4, 7, "name", "OnFinish has no victim"),
])
def test_errors_are_located_and_say_what_was_expected(text, line, col, kind, message):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, file="bad.policy")
    e = info.value
    assert (e.line, e.col, e.kind) == (line, col, kind), str(e)
    assert message in str(e) and str(e).startswith(f"bad.policy:{line}:{col}: error: ")
