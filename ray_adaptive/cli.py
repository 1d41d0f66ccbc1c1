"""The ``ray-adaptive`` command line (also ``python -m ray_adaptive``).

POLICY arguments are a path or the name of a shipped policy (``drf_lb``);
SCENARIO arguments are a path or the name of a shipped scenario.

Every error is one line on stderr and exit code 1 -- a bad policy
(``FILE:LINE:COL: error: ...``), a bad data file (its entry and key), a file
that cannot be read or written (its path and the cause), a flag out of its
range (the flag and the range, checked by click's own types before any work
starts) -- never a Python traceback. The limits are in ``docs/limits.md``.

One module for every command (longer than most): each is a thin wrapper of the
library's own functions, and the error handling and option types they share
read best beside them.
"""

from __future__ import annotations

import json
import math
import os
import sys
import unicodedata
from importlib import resources
from pathlib import Path

import click

from ray_adaptive.errors import RayAdaptiveError

#: Flag ranges: generous for real use, small enough that no value makes a command run for hours or
#: exhaust memory (docs/limits.md lists them with what they cost).
MAX_RATE = 1e9  # tasks/s
MAX_NODES = 1_000  # simulated nodes (a compile on 1,000 nodes already takes minutes)
MAX_RAY_NODES = 256  # nodes of a local Ray cluster (--ray, demo)
MAX_EXECUTORS = MAX_QUEUE = 1_000
MAX_WINDOW = 100_000  # tasks replayed per plan
MAX_SECONDS = 3_600.0  # simulated seconds per run (reproduce)
MIN_EVERY = 0.001  # seconds between demo rows: the shipped scenario spans a few seconds
MAX_SEED = 2**63 - 1


class _Group(click.Group):
    """The command group, whose usage errors -- an unknown option, a flag out of range -- are one line
    and exit 1, like every other error of the CLI (click's own way is a usage block and exit 2)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as err:
            where = getattr(getattr(err, "ctx", None), "command_path", None)
            hint = f" (see: {where} --help)" if isinstance(err, click.UsageError) and where else ""
            _fail(f"error: {' '.join(err.format_message().split())}{hint}")
        except click.Abort:
            _fail("error: aborted")
        except Exception as err:  # noqa: BLE001 -- a bug of ours: still one line, and a way to see more
            if os.environ.get("RAY_ADAPTIVE_TRACEBACK") == "1":
                raise
            _fail(f"error: internal error: {type(err).__name__}: {' '.join(str(err).split())[:300]} "
                  "(a bug in ray-adaptive; RAY_ADAPTIVE_TRACEBACK=1 shows where)")
        sys.exit(rv if isinstance(rv, int) else 0)


class _Finite(click.FloatRange):
    """``click.FloatRange`` that refuses NaN, which compares false with both bounds and so would pass."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if math.isnan(rv):
            self.fail(f"{value!r} is not a number in the range {self._describe_range()}.", param, ctx)
        return rv


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Rates(click.ParamType):
    """A comma-separated list of arrival rates, each a finite number in (0, MAX_RATE]."""

    name = "RATES"
    _one = _Finite(min=0.0, min_open=True, max=MAX_RATE)

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if not all(parts) or not all(_is_number(p) for p in parts):
            self.fail(f"{value!r} is not a comma-separated list of rates (tasks/s), e.g. 100,300,500.", param, ctx)
        return [self._one.convert(p, param, ctx) for p in parts]


class _Resources(click.ParamType):
    """A JSON object of resource amounts, e.g. ``{"CPU": 4}``: finite numbers >= 0."""

    name = "JSON"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        try:
            d = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            d = None
        if not isinstance(d, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf for v in d.values()):
            self.fail(f"{value!r} is not a JSON object of finite amounts >= 0, e.g. '{{\"CPU\": 4}}'.", param, ctx)
        return {str(k): float(v) for k, v in d.items()}


def _printable(line: str) -> str:
    """``line`` with control characters escaped (``\\x0c``, ``\\n``, ``\\x1b``): a message quoting the user's
    input stays one line, and cannot move the cursor or recolour the terminal."""
    return "".join(repr(ch)[1:-1] if unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp")
                   else ch for ch in line)


def _error(line: str) -> None:
    click.echo(_printable(line), err=True)


def _fail(message: str) -> None:
    _error(message)
    sys.exit(1)


def _message(err: Exception) -> str:
    """The one line an error is shown as: a PolicyError is already ``FILE:LINE:COL: error: ...``."""
    from ray_adaptive.errors import PolicyError

    return str(err) if isinstance(err, PolicyError) else f"error: {err}"


def _load_policy(name_or_path: str):
    from ray_adaptive.dsl import load_policy

    try:
        return load_policy(name_or_path)
    except (RayAdaptiveError, FileNotFoundError) as err:
        _fail(_message(err))


def _scenario_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.exists() or "/" in name_or_path or name_or_path.endswith(".json"):
        return path
    return Path(str(resources.files("ray_adaptive").joinpath("scenarios", f"{name_or_path}.json")))


def _output(path: str, what: str) -> None:
    """Fail now, not after the work, when ``path`` cannot be written."""
    from ray_adaptive.files import check_writable

    try:
        check_writable(path, what)
    except RayAdaptiveError as err:
        _fail(f"error: {err}")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ray-adaptive")
def main() -> None:
    """Programmable and adaptive scheduling for Ray."""


@main.command()
@click.argument("files", nargs=-1, required=True)
def check(files: tuple[str, ...]) -> None:
    """Check policy FILES; print a summary per valid file, FILE:LINE:COL errors otherwise."""
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.errors import PolicyError

    failed = False
    for f in files:
        try:
            p = load_policy(f)
        except (RayAdaptiveError, FileNotFoundError) as err:
            # FILE:LINE:COL: error: ... for a policy error; FILE: error: ... for a file that cannot be read
            _error(str(err) if isinstance(err, PolicyError) else f"{f}: error: {getattr(err, 'message', err)}")
            failed = True
            continue
        hooks = ", ".join(h.name for h in p.hooks) or "no hooks"
        limit = f", limit {p.limit:g}" if p.limit is not None else ""
        preempt = (f", Preempt (grace {p.preempt.grace:g} s, max {p.preempt.max_preemptions})"
                   if p.preempt is not None else "")  # (issue 39)
        click.echo(_printable(
            f"{f}: ok: policy {p.name}: {len(p.task_fields)} task fields, {len(p.node_fields)} node fields, "
            f"{len(p.state)} state variables, Score{limit}{preempt}, {hooks}"
        ))
    sys.exit(1 if failed else 0)


def _tasks_per_s(rate: float) -> str:
    """A rate as a person reads it: whole tasks/s, or 3 significant digits below 100 (0.00333, not 0)."""
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"


def _json_line(d: dict) -> str:
    """``d`` as one line of strict JSON: a non-finite number (a Score of -inf) as the string "-inf"."""
    return json.dumps({k: v if not isinstance(v, float) or math.isfinite(v) else str(v) for k, v in d.items()})


@main.command()
@click.argument("policy")
@click.argument("scenario")
@click.option("--quiet", is_flag=True, help="Print only the summary line.")
def replay(policy: str, scenario: str, quiet: bool) -> None:
    """Run SCENARIO under POLICY's ideal scheduler: one JSON line per decision, then a summary."""
    from ray_adaptive.sim import Replay
    from ray_adaptive.workload import load_scenario

    p = _load_policy(policy)
    path = _scenario_path(scenario)
    try:
        sc = load_scenario(path)
        on_decision = None if quiet else (lambda d: click.echo(_json_line(d.as_dict())))
        result = Replay(p, sc, on_decision=on_decision, source=str(path)).run()
    except RayAdaptiveError as err:
        _fail(f"error: {err}")
    click.echo(json.dumps({"summary": result.summary()}))


@main.command()
@click.option("--replay", is_flag=True, help="Replay the shipped scenario in the simulator instead (no Ray).")
@click.option("--policy", "policy_name", default="drf_lb", show_default=True, help="Policy to replay (--replay).")
@click.option("--every", type=_Finite(min=MIN_EVERY, max=MAX_SECONDS), default=0.5, show_default=True,
              help="Seconds between rows (--replay).")
@click.option("--nodes", type=click.IntRange(1, MAX_RAY_NODES), default=4, show_default=True,
              help="Nodes of the local Ray cluster.")
def demo(replay: bool, policy_name: str, every: float, nodes: int) -> None:
    """DRF-LB through the runtime on a local Ray cluster: goodput and fairness per plan.

    With --replay: the shipped 3-tenant scenario in the simulator, each tenant's share over time.
    """
    if replay:
        from ray_adaptive.experiments.demo import run_demo

        try:
            run_demo(policy_name, every)
        except (RayAdaptiveError, FileNotFoundError) as err:
            _fail(_message(err))
        return
    from ray_adaptive.experiments.on_ray import reproduce_ray

    click.echo("DRF-LB, 3 tenants (greedy at 3x each other), each submitting from its own process, "
               "under each plan, below and above the cluster's capacity.")
    reproduce_ray("out/demo", quick=True, nodes=nodes, echo=click.echo)


def _read_profile(path: str):
    from ray_adaptive.compiler import Profile
    from ray_adaptive.files import read_text

    try:
        return Profile.from_dict(json.loads(read_text(path, "profile")))
    except RayAdaptiveError as err:
        _fail(f"error: {err}")
    except (json.JSONDecodeError, RecursionError, ValueError, TypeError, KeyError, AttributeError) as err:
        _fail(f"error: {path}: not a valid profile: {' '.join(str(err).split())[:200]}")


@main.command(name="compile")
@click.argument("policy")
@click.option("--rate", type=_Finite(min=0.0, min_open=True, max=MAX_RATE), default=None,
              help="Arrival rate (tasks/s); default: the trace's own rate.")
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), default=12, show_default=True, help="Nodes in the cluster.")
@click.option("--executors", type=click.IntRange(1, MAX_EXECUTORS), default=1, show_default=True,
              help="Executors per node.")
@click.option("--queue", type=click.IntRange(0, MAX_QUEUE), default=2, show_default=True, help="Node queue length.")
@click.option("--node-resources", type=_Resources(), default=None,
              help='Resources of every node, as JSON (e.g. \'{"CPU": 4}\'): what a trace\'s tasks ask for.')
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="Workload trace (.csv or .parquet) to replay.")
@click.option("--window", type=click.IntRange(10, MAX_WINDOW), default=600, show_default=True,
              help="The fewest tasks of the trace to replay (more when the plans' sync periods, the clients or a "
                   "load near the execution bound need a longer window).")
@click.option("--whole-window", is_flag=True,
              help="Replay every plan over the whole window (a more precise competitive ratio; by default a "
                   "replay stops once its ratio is settled above the limit).")
@click.option("--replay-all", is_flag=True,
              help="Replay every plan (by default only the plans whose competitive ratio can change the choice).")
@click.option("--limit", type=_Finite(min=1.0, max=MAX_RATE), default=None,
              help="Competitive-ratio limit, >= 1 (default: the policy's [limit=...]).")
@click.option("--headroom", type=_Finite(min=0.0, max=10.0), default=0.1, show_default=True,
              help="Throughput margin over the rate (0.1: 10%).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="JSON file of latency-model parameters (see docs/compiler.md).")
@click.option("--no-measure", is_flag=True, help="Use the profile's fixed unit compute instead of timing units.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the plan file (one JSON object) instead of the report.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the plan file (JSON) here.")
def compile_(policy: str, rate, nodes, executors, queue, node_resources, trace_path, window, whole_window, replay_all,
             limit, headroom, profile_path, no_measure, seed, as_json, out) -> None:
    """Compile POLICY: its execution units, every plan with its estimates, and the chosen plan."""
    from ray_adaptive.compiler import compile_policy
    from ray_adaptive.files import write_text
    from ray_adaptive.workload.trace import read_trace

    if out:
        _output(out, "plan file")
    p = _load_policy(policy)
    if rate is None and trace_path is None:
        _fail("error: give --rate R (tasks/s) or --trace FILE to compile against")
    profile = _read_profile(profile_path) if profile_path else None
    try:
        tasks = read_trace(trace_path) if trace_path else None
        result = compile_policy(p, rate=rate, trace=tasks, nodes=nodes, executors=executors, queue=queue,
                                node_resources=node_resources, profile=profile, measure=not no_measure,
                                window=window, headroom=headroom, limit=limit, seed=seed,
                                workers=os.cpu_count() or 1, settle=not whole_window,
                                replay="all" if replay_all else "deciding")
        plan_file = result.as_dict()
        if out:
            write_text(out, json.dumps(plan_file, indent=2) + "\n", "plan file")
    except (RayAdaptiveError, ValueError) as err:
        _fail(f"error: {err}")
    click.echo(json.dumps(plan_file) if as_json else result.format())


@main.command()
@click.option("--quick", is_flag=True, help="Fewer rates, shorter runs (a few seconds).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out/reproduce", show_default=True,
              help="Folder for sweep.csv and the PNGs.")
@click.option("--rates", type=_Rates(), default=None, help="Comma-separated arrival rates (tasks/s) instead of the default sweep.")
@click.option("--seconds", type=_Finite(min=0.0, min_open=True, max=MAX_SECONDS), default=None,
              help="Simulated seconds per run (default 2.5, quick 1.6).")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option("--no-measure", is_flag=True, help="Use the fixed unit compute of the latency model (machine-independent).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--ray", "on_ray", is_flag=True, help="Run it on a local Ray cluster through the runtime instead.")
@click.option("--nodes", type=click.IntRange(1, MAX_RAY_NODES), default=None,
              help="Nodes of the local Ray cluster (--ray; default 6, with --adaptive 4).")
@click.option("--adaptive", is_flag=True,
              help="The adaptive run instead: low -> above the crossover -> far above -> low, vs C, D, H "
                   "(simulated; with --ray on a local Ray cluster of 2-CPU nodes, 2 ms tasks: the scheduler "
                   "as the knee).")
@click.option("--phase", "phase_s", type=_Finite(min=0.0, min_open=True, max=MAX_SECONDS), default=None,
              help="Seconds per phase of --adaptive (default 20, quick 10; with --ray quick 6).")
@click.option("--switch-pause", type=_Finite(min=0.0, max=MAX_SECONDS), default=None,
              help="Seconds a switch of --adaptive pauses the schedulers (default 0.1).")
@click.option("--scale-out", is_flag=True,
              help="With --adaptive: the scale-out experiment, 12 -> 200 -> 12 nodes (quick: 4 -> 24 -> 4) with "
                   "the rate following the size, adaptive vs every static plan (simulated).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="With --adaptive --ray: the compiler's latency model as JSON, e.g. the host calibrated by "
                   "release_tests/calibrate_host.py --profile-out (default: the paper's model).")
def reproduce(quick, out_dir, rates, seconds, seed, no_measure, no_progress, on_ray, nodes, adaptive, phase_s,
              switch_pause, scale_out, profile_path) -> None:
    """The paper's experiment: C/D/H across arrival rates; CSV, figures, Table 1 and the compiler's choices."""
    from ray_adaptive.experiments.reproduce import reproduce as run

    from ray_adaptive.files import describe_os_error

    if nodes is not None and not on_ray:
        _fail("error: --nodes is for --ray (the simulated experiment has the paper's 12 nodes)")
    if scale_out and on_ray:
        _fail("error: --scale-out is simulated: not --ray")
    if profile_path and not (adaptive and on_ray):
        _fail("error: --profile is for --adaptive --ray (the simulated experiments keep the paper's model)")
    if adaptive and on_ray:
        from ray_adaptive.experiments.adaptive_ray import reproduce_adaptive_ray

        if rates or seconds or switch_pause is not None:  # (the runtime measures its own pauses)
            _fail("error: --adaptive --ray runs its own phases (--phase sets their length) and measures its "
                  "switches' pauses: not --rates / --seconds / --switch-pause")
        try:
            reproduce_adaptive_ray(out_dir if out_dir != "out/reproduce" else "out/reproduce_adaptive_ray",
                                   quick=quick, phase_s=phase_s, nodes=nodes or 4, seed=seed, echo=click.echo,
                                   profile=_read_profile(profile_path) if profile_path else None)
        except (RayAdaptiveError, ValueError) as err:
            _fail(f"error: {err}")
        except OSError as err:
            _fail(f"error: {err.filename or out_dir}: cannot write the results: {describe_os_error(err)}")
        return
    if on_ray:
        from ray_adaptive.experiments.on_ray import reproduce_ray

        reproduce_ray(out_dir if out_dir != "out/reproduce" else "out/reproduce_ray", quick=quick, nodes=nodes or 6,
                      rates=rates, echo=click.echo)
        return

    if not adaptive and (phase_s is not None or switch_pause is not None):
        _fail("error: --phase and --switch-pause are for --adaptive")
    if scale_out and not adaptive:
        _fail("error: --scale-out is for --adaptive (reproduce --adaptive --scale-out)")
    if adaptive and scale_out:
        from ray_adaptive.experiments.scale_out import reproduce_scale_out

        if rates or seconds:
            _fail("error: --scale-out runs its own phases (--phase sets their length), not --rates / --seconds")
        try:
            reproduce_scale_out(out_dir if out_dir != "out/reproduce" else "out/reproduce_scale_out", quick=quick,
                                phase_s=phase_s, seed=seed, pause_s=switch_pause, echo=click.echo)
        except (RayAdaptiveError, ValueError) as err:
            _fail(f"error: {err}")
        except OSError as err:
            _fail(f"error: {err.filename or out_dir}: cannot write the results: {describe_os_error(err)}")
        return
    if adaptive:
        from ray_adaptive.experiments.reproduce import reproduce_adaptive

        if rates or seconds:
            _fail("error: --adaptive runs its own phases (--phase sets their length), not --rates / --seconds")
        try:
            reproduce_adaptive(out_dir if out_dir != "out/reproduce" else "out/reproduce_adaptive", quick=quick,
                               phase_s=phase_s, seed=seed, pause_s=switch_pause, echo=click.echo)
        except (RayAdaptiveError, ValueError) as err:
            _fail(f"error: {err}")
        except OSError as err:
            _fail(f"error: {err.filename or out_dir}: cannot write the results: {describe_os_error(err)}")
        return

    try:
        run(out_dir, quick=quick, rates=rates, seconds=seconds, seed=seed, measure=not no_measure,
            show_progress=not no_progress, echo=click.echo)
    except (RayAdaptiveError, ValueError) as err:
        _fail(f"error: {err}")
    except OSError as err:  # the folder cannot be made, or a file in it written
        _fail(f"error: {err.filename or out_dir}: cannot write the results: {describe_os_error(err)}")


@main.command()
@click.argument("policy")
@click.option("--address", default=None, help="The Ray cluster (default: auto, the one this machine runs).")
@click.option("--plan", default="auto", show_default=True,
              help="auto, adaptive (switched live on the load of every attached job), a plan name "
                   "`ray-adaptive compile` lists, or a plan file.")
@click.option("--rate", type=_Finite(min=0.0, min_open=True, max=MAX_RATE), default=None,
              help="The arrival rate (tasks/s) auto and adaptive compile for (default: the execution bound).")
@click.option("--queue", type=click.IntRange(0, MAX_QUEUE), default=2, show_default=True,
              help="Tasks each node may hold waiting besides those running.")
@click.option("--bind", "binds", multiple=True, metavar="FIELD=job|FIELD=metadata:KEY",
              help="Bind a Task field to the submitting job: its Ray job id, or a key of its submission "
                   "metadata (ray job submit --metadata-json). Repeat for several fields.")
def serve(policy, address, plan, rate, queue, binds) -> None:
    """Run POLICY as the cluster's policy service: owned by no driver, shared by every job.

    Returns once it serves. Jobs attach with @ra.policy(POLICY), no ra.start needed; one that
    ends leaves the policy (its undecided tasks dropped, its share of State released).
    `ray-adaptive stop POLICY` removes it."""
    import ray_adaptive as ra
    from ray_adaptive.runtime.tenancy import parse_bind
    from ray_adaptive.status import connect

    try:
        p = _load_policy(policy)
        bind = parse_bind(binds, p.task_fields, p.name) if binds else None
        connect(address)
        rt = ra.start(p, plan=plan, rate=rate, queue=queue, detached=True, bind=bind)
    except (RayAdaptiveError, ValueError, TypeError, RuntimeError) as err:
        _fail(_message(err))
    click.echo(f"policy {p.name}: served, plan {rt.plan.name}")
    click.echo(f"  why: {rt.why}")
    if bind:
        click.echo("  bound to the submitting job: " + ", ".join(f"{k}={v}" for k, v in bind.items()))
    click.echo(f"  jobs attach with @ra.policy({p.name!r}); stop it with: ray-adaptive stop {p.name}")
    ra.shutdown(p.name)  # (this process detaches; the service runs on)


@main.command()
@click.argument("policy")
@click.option("--address", default=None, help="The Ray cluster (default: auto, the one this machine runs).")
def stop(policy, address) -> None:
    """Stop POLICY's runtime on the cluster (its service, or what a dead driver left): no actor of it and no
    slot resource stays. Tasks running finish first; undecided ones fail in their jobs."""
    import ray_adaptive as ra
    from ray_adaptive.status import connect

    try:
        connect(address)
        found = ra.stop(policy)
    except (RayAdaptiveError, ValueError, RuntimeError) as err:
        _fail(_message(err))
    if not found:
        _fail(f"error: policy {policy!r} does not run on this cluster")
    click.echo(f"policy {policy}: stopped")


@main.command()
@click.argument("policy", required=False)
@click.option("--address", default=None, help="The Ray cluster (default: auto, the one this machine runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--audit", "audit", is_flag=True,
              help="Check POLICY's State against the tasks in flight (exit 1 if not exact; see docs/operations.md).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.0), default=10.0, show_default=True,
              help="With --audit: how long to read again while tasks move, in seconds.")
def status(policy, address, as_json, audit, timeout_s) -> None:
    """Every policy runtime on the cluster (or POLICY's): plan, actors, slots, tenants, latency."""
    from ray_adaptive.status import audit as audit_state
    from ray_adaptive.status import connect, describe, format_audit, format_status, runtimes

    if audit and not policy:
        _fail("error: --audit checks one runtime: give its POLICY (ray-adaptive status lists them)")
    try:
        connect(address)
        if audit:
            report = audit_state(policy, timeout_s)
        else:
            names = [policy] if policy else runtimes()
            if not names:
                _fail("no ray-adaptive runtime runs on this cluster (start one with ra.start(...))")
            found = [describe(n) for n in names]
    except RayAdaptiveError as err:
        _fail(f"error: {err}")
    if audit:
        click.echo(json.dumps(report, default=_jsonable) if as_json else format_audit(report))
        if not report["exact"]:
            sys.exit(1)
        return
    click.echo(json.dumps(found if not policy else found[0], default=str) if as_json
               else "\n\n".join(format_status(d) for d in found))


def _jsonable(v):
    """numpy values as JSON lists and numbers; anything else as its text."""
    return v.tolist() if hasattr(v, "tolist") else str(v)


@main.command()
@click.argument("policy")
@click.argument("task_id")
@click.option("--address", default=None, help="The Ray cluster (default: auto, the one this machine runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def why(policy, task_id, address, as_json) -> None:
    """Why TASK_ID of POLICY is still pending, or why it landed where it did."""
    from ray_adaptive.status import connect, format_why
    from ray_adaptive.status import why as ask

    try:
        connect(address)
        answer = ask(policy, task_id)
    except RayAdaptiveError as err:
        _fail(f"error: {err}")
    click.echo(json.dumps(answer, default=str) if as_json else format_why(answer))
    if answer.get("state") == "unknown":
        sys.exit(1)


@main.command()
@click.argument("policy")
@click.option("--plan", "plans", multiple=True,
              help="A plan the compiler lists (repeat, or comma-separate, for several), or all. Default: all.")
@click.option("--workload", type=click.Path(dir_okay=False), default=None, help="A trace (.csv, .parquet) or a workload file (.json) to run.")
@click.option("--tenants", default=None,
              help="Tenants as NAME:SHARE[:FIELD=VALUE...],... (e.g. a:1:weight=1,b:1:weight=3) or a workload "
                   "file (.json). Default: the paper's a:1,b:1,greedy:3.")
@click.option("--rates", default=None,
              help="Rates: tasks/s or % of the execution bound, comma-separated (200,400 or 50%,120%), or a rate "
                   "over time (steps:0=200,5=800 | ramp:0=100,10=900 | sine:mean=400,amplitude=300,period=20 | "
                   "bursts:base=200,peak=1000,every=5,length=1). Default: 40-160% of the execution bound.")
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), default=12, show_default=True, help="Nodes in the cluster.")
@click.option("--executors", type=click.IntRange(1, MAX_EXECUTORS), default=1, show_default=True,
              help="Executors per node.")
@click.option("--queue", type=click.IntRange(0, MAX_QUEUE), default=2, show_default=True, help="Node queue length.")
@click.option("--duration", type=_Finite(min=0.0, min_open=True, max=MAX_SECONDS), default=None,
              help="Mean task duration, s (default: the paper's 12/510).")
@click.option("--arrivals", type=click.Choice(["poisson", "bursty"]), default=None, help="How tenants' tasks arrive.")
@click.option("--durations", type=click.Choice(["fixed", "exponential", "lognormal"]), default=None,
              help="How task durations vary.")
@click.option("--limit", type=_Finite(min=1.0, max=MAX_RATE), default=None,
              help="Competitive-ratio limit, >= 1 (default: the policy's [limit=...]).")
@click.option("--seconds", type=_Finite(min=0.0, min_open=True, max=MAX_SECONDS), default=None,
              help="Simulated seconds per run (default 3; with a rate over time, the workload file's or 20).")
@click.option("--warmup", type=_Finite(min=0.0, max=MAX_SECONDS), default=0.5, show_default=True, help="Seconds left out of each run's figures.")
@click.option("--every", type=_Finite(min=MIN_EVERY, max=MAX_SECONDS), default=0.5, show_default=True, help="Epoch length, s, of a rate over time.")
@click.option("--window", type=click.IntRange(10, MAX_WINDOW), default=600, show_default=True,
              help="The fewest tasks the compiler replays to choose a plan at each rate.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out/simulate", show_default=True, help="Folder for the CSV and the PNGs.")
@click.option("--adaptive", is_flag=True,
              help="With a rate over time: an adaptive run too, the runtime's controller switching plans live.")
@click.option("--switch-pause", type=_Finite(min=0.0, max=MAX_SECONDS), default=None,
              help="Seconds a switch of the adaptive run pauses the schedulers (default 0.1).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def simulate(policy, plans, workload, tenants, rates, nodes, executors, queue, duration, arrivals, durations, limit,
             seconds, warmup, every, window, seed, out_dir, adaptive, switch_pause, no_progress) -> None:
    """Simulate POLICY's plans on a workload: what each would deliver, and which the compiler would choose."""
    from ray_adaptive.experiments import simulate as S

    _load_policy(policy)
    if workload and tenants:
        _fail("error: give --workload or --tenants, not both")
    try:
        exp, file_rate, file_seconds = S.build_experiment(policy, tenants=tenants, workload=workload, nodes=nodes,
                                                          executors=executors, queue=queue, duration=duration,
                                                          arrivals=arrivals, durations=durations, limit=limit)
        names = S.resolve_plans(policy, nodes, [n.strip() for p in plans for n in p.split(",") if n.strip()])
        # (--rates "" is refused, not taken for the default: only a missing --rates is)
        given = S.parse_rates(rates, exp.capacity) if rates is not None or not file_rate else file_rate
        if exp.trace and rates is None:
            given = [round(exp.trace_rate, 1)]
        secs = (seconds or 3.0) if isinstance(given, list) else (seconds or file_seconds or 20.0)
        S.check_run(exp, given, secs, window)  # (the execution bound, the tasks to simulate: before any work)
    except (RayAdaptiveError, ValueError) as err:
        _fail(f"error: {err}")
    if (adaptive or switch_pause is not None) and isinstance(given, list):
        _fail("error: --adaptive needs a rate over time (e.g. --rates steps:0=200,5=800,10=200), "
              f"found rates {', '.join(f'{r:g}' for r in given)}")
    if switch_pause is not None and not adaptive:
        _fail("error: --switch-pause is for --adaptive runs")
    from ray_adaptive.files import describe_os_error

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _fail(f"error: {out_dir}: cannot make the folder: {describe_os_error(err)}")
    bar = None
    if not no_progress:
        from tqdm import tqdm

        bar = tqdm(desc="simulate", unit="run", leave=False)
    tick = (lambda what: (bar.set_postfix_str(what), bar.update(1))) if bar is not None else None
    from ray_adaptive.compiler import Profile

    profile = Profile()
    try:
        if isinstance(given, list):
            if warmup >= secs:
                _fail(f"error: --warmup ({warmup} s) must be shorter than --seconds ({secs} s)")
            rows = S.run_sweep(exp, names, given, secs, warmup, profile, seed=seed, progress=tick, window=window)
            import pandas as pd

            pd.DataFrame(rows).to_csv(out / "sweep.csv", index=False)
            figures = S.plot_sweep(rows, out, exp.capacity, title=f"{policy} on {nodes} nodes")
            if bar is not None:
                bar.close()
            click.echo(f"{policy}: {len(names)} plan(s) x {len(given)} rate(s) on {nodes} nodes "
                       f"(execution bound {_tasks_per_s(exp.capacity)} tasks/s)")
            click.echo("")
            click.echo("The compiler's choice vs the simulator's best plan (within the limit, the most goodput)")
            click.echo(S.format_choices(rows))
            click.echo("")
            click.echo(f"wrote {out / 'sweep.csv'} and {', '.join(p.name for p in figures)}")
        else:
            setup = None
            if adaptive:
                from ray_adaptive.sim.adaptive import SWITCH_PAUSE_S

                setup = S.adaptive_setup(exp, given, secs, profile, window=window, seed=seed,
                                         pause_s=SWITCH_PAUSE_S if switch_pause is None else switch_pause)
            timeline, totals = S.run_profile(exp, names, given, secs, profile, every=every, seed=seed, progress=tick,
                                             window=window, adaptive=setup)
            import pandas as pd

            pd.DataFrame(timeline).to_csv(out / "timeline.csv", index=False)
            fig = S.plot_timeline(timeline, out, title=f"{policy}: {given.label()}")
            if bar is not None:
                bar.close()
            click.echo(f"{policy} on {nodes} nodes, rate {given.label()} over {secs:g} s "
                       f"(execution bound {_tasks_per_s(exp.capacity)} tasks/s)")
            for t in totals:
                if t.get("cannot_run"):
                    click.echo(f"  {t['plan']:<48} cannot run: {t['cannot_run']}")
                    continue
                mark = " ".join(m for m, k in (("[compiler's choice at the mean rate]", "chosen_at_mean"),
                                                ("[at the peak rate]", "chosen_at_peak")) if t[k])
                click.echo(f"  {t['plan']:<48} goodput {t['goodput']:8.1f}/s  JFI {t['jfi']:.3f}  "
                           f"CR {t['cr_sim']:.3f}  {mark}")
                if t["plan"] == "adaptive":
                    click.echo(S.format_switches(t))
            click.echo(f"wrote {out / 'timeline.csv'} and {fig.name}")
    except (RayAdaptiveError, ValueError) as err:
        _fail(f"error: {err}")
    except OSError as err:  # a file in the folder cannot be written
        _fail(f"error: {err.filename or out_dir}: cannot write the results: {describe_os_error(err)}")


if __name__ == "__main__":  # pragma: no cover
    main()
