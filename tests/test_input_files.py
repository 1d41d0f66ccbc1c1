"""Files, data and flags: one clear line and exit 1, never a traceback (issues 21 and 24, the input items).

* Every command that reads a file (policy, scenario, trace, profile, plan) or
  writes one (``--out``) says which path and why it cannot.
* Every flag is checked by a click type before any work: the flag and its range.
* Scenario and trace data mean what they say: NaN, infinite times, negative or
  non-finite resources, unknown keys and ints beyond 64 bits are errors naming
  the entry (or row) and key; ``compile --trace`` with resources ends.

The CLI runs in this process through click's runner (the same ``main`` as the
``ray-adaptive`` script); a few runs go through a real process. Nothing here starts Ray.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from ray_adaptive.cli import main
from ray_adaptive.compiler.select import select_plan
from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.errors import FileError, PolicyRuntimeError, ScenarioError
from ray_adaptive.sim import replay
from ray_adaptive.workload import scenario_from_dict
from ray_adaptive.workload.trace import read_trace

NODES = [{"id": "n0"}, {"id": "n1"}]


def drf_task(i, **extra):
    return {"id": f"t{i}", "arrival": i * 0.01, "fields": {"tenant": "a", "resource_vec": [0.1, 0.2, 0.1]}, **extra}


def cli(*args, cwd=None):
    """Run the CLI in this process: ``(exit code, stdout, stderr)``, asserting it ended as a CLI should."""
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)
    assert isinstance(result.exception, (SystemExit, type(None))), f"{args}: {result.exception!r}"
    out = result.stdout + result.stderr
    assert "Traceback" not in out and "internal error" not in out, out
    assert result.exit_code in (0, 1), (result.exit_code, out)
    return result.exit_code, result.stdout, result.stderr


def one_line_error(*args) -> str:
    code, _, err = cli(*args)
    assert code == 1 and len(err.splitlines()) == 1, err
    return err.strip()


# --------------------------------------------------------------------------------- files, read and written


@pytest.fixture
def files(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "bin.json").write_bytes(b'\xff\xfe{"nodes": []}')
    (tmp_path / "bin.policy").write_bytes(b"Score(task, node):\n  return '\xff'\n")
    (tmp_path / "bin.csv").write_bytes(b"id,arrival\nt\xff,0\n")
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "ok.json").write_text(json.dumps({"nodes": NODES, "tasks": [drf_task(0)]}))
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (("replay", "drf_lb", "{d}/bin.json"), "{d}/bin.json: cannot read the scenario: not UTF-8 text (byte 0xff at offset 0)"),
    (("replay", "drf_lb", "{d}/folder"), "{d}/folder: cannot read the scenario: it is a directory"),
    (("replay", "{d}/folder", "{d}/ok.json"), "{d}/folder: cannot read the policy: it is a directory"),
    (("compile", "{d}/folder", "--rate", "10"), "{d}/folder: cannot read the policy: it is a directory"),
    (("compile", "{d}/bin.policy", "--rate", "10"), "{d}/bin.policy: cannot read the policy: not UTF-8 text"),
    (("compile", "drf_lb", "--trace", "{d}/bin.csv"), "{d}/bin.csv: cannot read the trace: not UTF-8 text"),
    (("compile", "drf_lb", "--trace", "{d}/folder.csv"), "'--trace': File '{d}/folder.csv' is a directory"),
    (("compile", "drf_lb", "--trace", "{d}/none.csv"), "{d}/none.csv: no such trace file"),
    (("compile", "drf_lb", "--rate", "10", "--profile", "{d}/bin.json"), "{d}/bin.json: cannot read the profile: not UTF-8"),
    (("compile", "drf_lb", "--rate", "10", "--profile", "{d}/ok.json"), "{d}/ok.json: not a valid profile"),
    (("compile", "drf_lb", "--rate", "10", "--out", "{d}/none/x.json"), "{d}/none/x.json: cannot write the plan file: the folder"),
    (("compile", "drf_lb", "--rate", "10", "--out", "{d}/folder"), "'--out': File '{d}/folder' is a directory"),
    (("reproduce", "--out", "{d}/ok.json", "--quick"), "'--out': Directory '{d}/ok.json' is a file"),
])
def test_a_file_that_cannot_be_read_or_written_is_one_line_naming_it(files, args, message):
    err = one_line_error(*[a.format(d=files) for a in args])
    assert message.format(d=files) in err


def test_check_names_each_file_it_cannot_read(files):
    code, _, err = cli("check", files / "folder", files / "bin.policy", files / "none.policy")
    assert code == 1
    assert err.splitlines() == [f"{files}/folder: error: cannot read the policy: it is a directory",
                                f"{files}/bin.policy: error: cannot read the policy: not UTF-8 text (byte 0xff at offset 29)",
                                f"{files}/none.policy: error: no policy file or shipped policy named "
                                f"'{files}/none.policy'; shipped policies: " + err.splitlines()[2].split("policies: ")[1]]


def test_out_is_checked_before_the_compile_runs(files):
    start = time.process_time()
    one_line_error("compile", "drf_lb", "--rate", "700", "--window", "100000", "--out", files / "none" / "plan.json")
    assert time.process_time() - start < 2  # (it failed only after the whole compile, with a FileNotFoundError)


def test_a_plan_file_is_read_through_the_same_path(files):
    policy = load_policy("fifo")
    for path, message in ((files / "bin.json", "cannot read the plan: not UTF-8"), (files / "folder.csv", "it is a directory")):
        with pytest.raises(FileError, match=message):
            select_plan(policy, str(path), nodes=2, executors=1, queue=2)
    (files / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a plan file: expected a JSON object"):
        select_plan(policy, str(files / "list.json"), nodes=2, executors=1, queue=2)


def test_the_table_s_file_rows_through_a_real_process(files):
    """Issue 21's rows as a user types them: the installed entry point, a fresh process."""
    for args in (("replay", "drf_lb", "bin.json"), ("compile", "folder"), ("replay", "drf_lb", "folder"),
                 ("compile", "drf_lb", "--rate", "10", "--out", "no_such_dir/x.json")):
        out = subprocess.run([sys.executable, "-m", "ray_adaptive", *args], capture_output=True, text=True,
                             cwd=files, timeout=60)
        assert out.returncode == 1 and "Traceback" not in out.stderr, (args, out.stderr)
        assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("error: "), (args, out.stderr)


# -------------------------------------------------------------------------------------------------- flags


@pytest.mark.parametrize("args, flag, allowed", [
    (("compile", "drf_lb", "--rate", "-5"), "--rate", "0.0<x<="),
    (("compile", "drf_lb", "--rate", "nan"), "--rate", "0.0<x<="),
    (("compile", "drf_lb", "--rate", "inf"), "--rate", "0.0<x<="),
    (("compile", "drf_lb", "--rate", "10", "--nodes", "0"), "--nodes", "1<=x<=1000"),
    (("compile", "drf_lb", "--rate", "10", "--nodes", "100000"), "--nodes", "1<=x<=1000"),
    (("compile", "drf_lb", "--rate", "10", "--executors", "0"), "--executors", "1<=x<=1000"),
    (("compile", "drf_lb", "--rate", "10", "--queue", "-1"), "--queue", "0<=x<=1000"),
    (("compile", "drf_lb", "--rate", "10", "--window", "100000000"), "--window", "10<=x<=100000"),
    (("compile", "drf_lb", "--rate", "10", "--limit", "0"), "--limit", "1.0<=x<="),
    (("compile", "drf_lb", "--rate", "10", "--limit", "nan"), "--limit", "1.0<=x<="),
    (("compile", "drf_lb", "--rate", "10", "--headroom", "nan"), "--headroom", "0.0<=x<=10.0"),
    (("compile", "drf_lb", "--rate", "10", "--seed", "-1"), "--seed", "0<=x<="),
    (("compile", "drf_lb", "--rate", "10", "--node-resources", '{"CPU": NaN}'), "--node-resources", "finite amounts"),
    (("reproduce", "--seconds", "0"), "--seconds", "0.0<x<=3600.0"),
    (("reproduce", "--seconds", "nan"), "--seconds", "0.0<x<=3600.0"),
    (("reproduce", "--rates", "100,nan"), "--rates", "0.0<x<="),
    (("reproduce", "--rates", "100,,200"), "--rates", "comma-separated"),
    (("demo", "--replay", "--every", "0"), "--every", "0.001<=x<=3600.0"),
    (("demo", "--replay", "--every", "-1"), "--every", "0.001<=x<=3600.0"),
    (("demo", "--nodes", "0"), "--nodes", "1<=x<=256"),
])
def test_a_flag_out_of_its_range_is_one_line_naming_the_flag_and_the_range(args, flag, allowed):
    err = one_line_error(*args)
    assert err.startswith(f"error: Invalid value for '{flag}'") and allowed in err, err


@pytest.mark.parametrize("args", [("compile", "drf_lb", "--bogus"), ("compile",), ("nosuchcommand",), ("replay", "drf_lb")])
def test_usage_errors_are_one_line_and_exit_1(args):
    assert one_line_error(*args).startswith("error: ")


def test_a_rate_or_window_that_would_take_hours_is_refused_with_what_to_change():
    start = time.process_time()
    err = one_line_error("compile", "drf_lb", "--rate", "1e-300")  # (this hung)
    assert "spans 6e+302 simulated seconds, over the compiler's limit of 10,000" in err and "raise --rate" in err
    assert time.process_time() - start < 2


# ----------------------------------------------------------------------------------------- scenario data


@pytest.mark.parametrize("change, message", [
    (lambda d: d["tasks"][0]["fields"].update(resource_vec=[math.nan, 0.2, 0.1]), "field 'resource_vec' must be vec<float>"),
    (lambda d: d["tasks"][0]["fields"].update(tenant=math.nan), "field 'tenant' must be string"),
    (lambda d: d["tasks"][0].update(resources={"CPU": math.nan}), "resource 'CPU' must be a finite number >= 0, found NaN"),
    (lambda d: d["tasks"][0].update(resources={"CPU": math.inf}), "resource 'CPU' must be a finite number >= 0"),
    (lambda d: d["nodes"][0].update(resources={"CPU": math.nan}), "resource 'CPU' must be a finite number >= 0"),
    (lambda d: d["tasks"][0].update(arrival=math.inf), "'arrival' must be >= 0 and finite (seconds), found Infinity"),
    (lambda d: d["tasks"][0].update(duration=math.inf), "'duration' must be >= 0 and finite (seconds), found Infinity"),
    (lambda d: d["tasks"][0].update(arrival=math.nan), "'arrival' must be >= 0 and finite (seconds), found NaN"),
    (lambda d: d.update(notes="x"), "top level: unknown key 'notes'; expected keys: nodes, tasks"),
    (lambda d: d["nodes"][0].update(queue=10**9), "'queue' must be a non-negative integer (at most 100,000)"),
])
def test_scenario_values_that_cannot_mean_what_they_say_are_refused(tmp_path, change, message):
    data = {"nodes": [dict(n) for n in NODES], "tasks": [drf_task(i) for i in range(3)]}
    change(data)
    (tmp_path / "s.json").write_text(json.dumps(data))  # (json writes NaN and Infinity, as a careless tool does)
    assert message in one_line_error("replay", "drf_lb", tmp_path / "s.json")


def test_ints_beyond_64_bits_in_fields_are_refused():
    p = parse_policy("Task:\n  prio: int\nScore(task, node):\n  return task.prio\n")
    sc = scenario_from_dict({"nodes": NODES, "tasks": [{"id": "t", "arrival": 0, "fields": {"prio": 10**30}}]})
    with pytest.raises(ScenarioError, match=r"field 'prio' must be int \(a 64-bit integer\)"):
        replay(p, sc)


def test_a_length_1_resource_vec_is_an_error_not_a_broadcast():
    short = {"tenant": "b", "resource_vec": [0.5]}  # (DRF-LB's capacity has 3)
    data = {"nodes": NODES, "tasks": [{**drf_task(0), "fields": short, "duration": 10},  # (still holding [0.5] when:)
                                      {**drf_task(1), "arrival": 0.5, "fields": short}]}
    # refused as the scenario is read (issue 36), naming the length and where the policy fixes it
    with pytest.raises(ScenarioError, match=r"tasks\[0\].*'resource_vec' must be a vec of length 3 .*drf_lb\.policy:15"):
        replay(load_policy("drf_lb"), scenario_from_dict(data))


def test_replay_prints_strict_json_even_for_an_infinite_score(tmp_path):
    (tmp_path / "p.policy").write_text("Score(task, node):\n  return -inf\n")
    (tmp_path / "s.json").write_text(json.dumps({"nodes": NODES, "tasks": [{"id": "t0", "arrival": 0}]}))
    code, out, _ = cli("replay", tmp_path / "p.policy", tmp_path / "s.json")

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    lines = [json.loads(line, parse_constant=refuse) for line in out.splitlines()]
    assert code == 0 and lines[0]["score"] == "-inf"


# -------------------------------------------------------------------------------------------- trace data


def write_trace(tmp_path, rows, header="id,arrival,duration,resources,task.tenant,task.resource_vec"):
    path = tmp_path / "t.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def row(i, arrival=None, duration="0.02", resources='""'):
    return f't{i},{i * 0.01 if arrival is None else arrival},{duration},{resources},a,"[0.1, 0.2, 0.1]"'


@pytest.mark.parametrize("rows, message", [
    ([row(0, resources='"{""CPU"": -1}"')], "row 2 (id 't0'): column 'resources': 'CPU' must be a finite number >= 0"),
    ([row(0, resources='"{""CPU"": NaN}"')], "column 'resources': 'CPU' must be a finite number >= 0, found NaN"),
    ([row(0, resources='"{""CPU"": ""x""}"')], "column 'resources': 'CPU' must be a finite number >= 0"),
    ([row(0), row(1, arrival="inf")], "row 3 (id 't1'): column 'arrival' must be >= 0 and finite, found inf"),
    ([row(0, duration="inf")], "column 'duration' must be >= 0 and finite"),
    ([row(0, resources='"' + "[" * 100_000 + "]" * 100_000 + '"')], "column 'resources': JSON nested too deeply"),
])
def test_trace_values_that_cannot_mean_what_they_say_are_refused(tmp_path, rows, message):
    with pytest.raises(ScenarioError) as info:
        read_trace(write_trace(tmp_path, rows))
    assert message in str(info.value)


def test_compile_a_trace_of_zero_durations_is_one_line(tmp_path):
    path = write_trace(tmp_path, [row(i, duration="0") for i in range(30)])
    assert "every task of the trace takes 0 s" in one_line_error("compile", "drf_lb", "--trace", path, "--no-measure")


def test_compile_a_trace_with_resources_ends_and_models_them(tmp_path):
    path = write_trace(tmp_path, [row(i, resources='"{""CPU"": 1}"') for i in range(30)])
    start = time.process_time()
    err = one_line_error("compile", "drf_lb", "--trace", path, "--no-measure")  # (this never ended)
    assert 'task "t0" asks for {"CPU": 1.0}, more than any node has (nodes have {})' in err and "--node-resources" in err
    code, out, _ = cli("compile", "drf_lb", "--trace", path, "--no-measure", "--window", "30",
                       "--node-resources", '{"CPU": 2}', "--json")
    assert code == 0 and json.loads(out)["choice"]["name"]
    assert time.process_time() - start < 30


def test_the_simulator_refuses_a_task_no_node_could_ever_take():
    from ray_adaptive.compiler import compile_policy

    sc = scenario_from_dict({"nodes": NODES, "tasks": [{**drf_task(i), "resources": {"GPU": 1}} for i in range(20)]})
    with pytest.raises(ScenarioError, match="could never be placed"):
        compile_policy(load_policy("drf_lb"), trace=sc.tasks, nodes=2, window=20, measure=False, workers=1)
