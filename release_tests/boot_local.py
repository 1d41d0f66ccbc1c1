"""Boot a cluster from examples/clusters/local.yaml on this machine, submit the example job, check it.

    python release_tests/boot_local.py --out boot_local.json [--smoke-test]

What `ray up examples/clusters/local.yaml` would run on each host, run here
instead: the config's `head_start_ray_commands` once and its
`worker_start_ray_commands` once per `worker_ips` entry, each in bash exactly
as written, with this machine standing in for every host (a worker's IP in
its command is replaced by this machine's, so the command's `case` gives it
that host's labels and resources). Then `ray job submit` of
examples/jobs/zone_job.py with that folder as the job's `runtime_env`
working_dir, and the job's final status and output are checked: it ran
zone_affinity over the zones the labels gave, every task in its zone.

Several raylets on one host need what separate hosts would not, and the
script adds it to each `ray start` (a `ray` shim first on PATH): their own
ports, their own temp dir under one fresh folder, `--block` (so that each
node's processes belong to a process this script started), no autoscaler
(`--autoscaling-config=`: the local provider's autoscaler would SSH to the
config's hosts), 2 CPUs and a small object store each. The shim skips `ray
stop` -- it stops every Ray process on the host, not only this cluster's.
Teardown: SIGTERM to each started process group, then SIGKILL to any process
left whose command line names this run's folder; nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "clusters" / "local.yaml"
JOB_DIR = ROOT / "examples" / "jobs"
BIN = pathlib.Path(sys.executable).parent

_SHIM = """#!/usr/bin/env bash
# ray, as the config's commands call it, on a host shared by several nodes (release_tests/boot_local.py)
if [ "$1" = stop ]; then
  echo "boot_local: 'ray stop' skipped (it would stop every Ray process on this host)" >&2; exit 0
fi
if [ "$1" = start ]; then shift; exec "$RA_BOOT_RAY" start "$@" $RA_BOOT_FLAGS; fi
exec "$RA_BOOT_RAY" "$@"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _free_range(n: int = 50) -> tuple[int, int]:
    """``n`` consecutive ports no process listens on now (the node's workers)."""
    for _ in range(200):
        lo = random.randrange(20_000, 60_000 - n)
        try:
            socks = []
            for p in range(lo, lo + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("", p))
            return lo, lo + n - 1
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free range of worker ports")


def _node_flags(head: bool, temp_dir: pathlib.Path, gcs: int, dashboard: int, ip: str) -> str:
    lo, hi = _free_range()
    flags = [f"--temp-dir={temp_dir}", "--num-cpus=2", "--object-store-memory=100000000", "--block",
             f"--node-manager-port={_free_port()}", f"--object-manager-port={_free_port()}",
             f"--min-worker-port={lo}", f"--max-worker-port={hi}", f"--metrics-export-port={_free_port()}",
             f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
             f"--runtime-env-agent-port={_free_port()}", "--disable-usage-stats"]
    if head:
        flags += [f"--port={gcs}", f"--dashboard-port={dashboard}", "--include-dashboard=true",
                  f"--ray-client-server-port={_free_port()}", "--autoscaling-config="]
    else:
        flags += [f"--address={ip}:{gcs}"]  # (after the config's --address=$RAY_HEAD_IP:6379: the last one counts)
    return " ".join(flags)


def _host_ip() -> str:
    """This machine's first address as `hostname -I` lists it: what the config's worker commands match on."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return found[0] if found else socket.gethostbyname(socket.gethostname())


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def _wait(what: str, ok, timeout: float, procs) -> float:
    """Seconds until ``ok()`` holds; fails if it does not within ``timeout`` or a node's process exits."""
    t0 = time.monotonic()
    while True:
        try:
            if ok():
                return time.monotonic() - t0
        except OSError:
            pass  # not listening yet
        for name, p, log in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name}: its start command exited {p.returncode} while waiting for {what}:\n"
                                   + log.read_text()[-3000:])
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.5)


def _alive_nodes(dashboard: int) -> list:
    nodes = _get(f"http://127.0.0.1:{dashboard}/api/v0/nodes?limit=100&detail=1")["data"]["result"]["result"]
    return [n for n in nodes if n["state"] == "ALIVE"]


def _ours(root: pathlib.Path) -> list[int]:
    """PIDs of the processes whose command line names ``root`` (this run's nodes and their workers)."""
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if str(root).encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass  # it ended meanwhile
    return pids


def _teardown(procs, root: pathlib.Path) -> int:
    """Stop what this run started; the number of processes that needed a SIGKILL."""
    for _, p, _ in reversed(procs):  # workers first, the head last
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)  # (ray start --block stops its node's processes on SIGTERM)
    # the head's `ray start --block` takes ~30 s after a SIGTERM to stop its node (33 s here, 2026-11-27);
    # a process still running after this long is SIGKILLed, and counted
    deadline = time.monotonic() + 45
    killed = 0
    for _, p, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            killed += 1
    time.sleep(1)
    left = _ours(root)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return killed + len(left)


def boot_and_submit(tasks: int, keep: bool = False) -> dict:
    cfg = yaml.safe_load(CONFIG.read_text())
    ip = _host_ip()
    root = pathlib.Path(tempfile.mkdtemp(prefix="rab-", dir="/tmp"))  # short: Ray's socket paths live under it
    shim = root / "bin"
    shim.mkdir()
    (shim / "ray").write_text(_SHIM)
    (shim / "ray").chmod(0o755)
    gcs, dashboard = _free_port(), _free_port()
    base_env = {**os.environ, "PATH": f"{shim}:{BIN}:{os.environ.get('PATH', '')}", "RAY_HEAD_IP": ip,
                "RA_BOOT_RAY": str(BIN / "ray")}
    base_env.pop("RAY_ADDRESS", None)
    procs: list = []
    out: dict = {"config": str(CONFIG.relative_to(ROOT)), "host_ip": ip, "workers": len(cfg["provider"]["worker_ips"])}

    def start(name: str, commands: list, head: bool, substitute: dict) -> None:
        temp_dir = root / name
        env = {**base_env, "RA_BOOT_FLAGS": _node_flags(head, temp_dir, gcs, dashboard, ip)}
        log = root / f"{name}.log"
        for cmd in commands:
            for old, new in substitute.items():
                cmd = cmd.replace(old, new)
            if cmd.strip() == "ray stop":
                subprocess.run(["bash", "-c", cmd], env=env, check=True, timeout=60)
                continue
            f = open(log, "ab")
            procs.append((name, subprocess.Popen(["bash", "-c", cmd], env=env, stdout=f, stderr=subprocess.STDOUT,
                                                 start_new_session=True, cwd=root), log))

    try:
        t0 = time.monotonic()
        start("head", cfg["head_start_ray_commands"], True, {})
        out["head_up_s"] = round(_wait("head with its dashboard", lambda: _alive_nodes(dashboard), 180, procs), 1)
        for i, host in enumerate(cfg["provider"]["worker_ips"]):
            # this machine plays the host: its IP where the config names the host's
            start(f"worker{i + 1}", cfg["worker_start_ray_commands"], False, {f" {host} ": f" {ip} "})
        n = 1 + len(cfg["provider"]["worker_ips"])
        _wait(f"{n} alive nodes", lambda: len(_alive_nodes(dashboard)) == n, 180, procs)
        out["cluster_up_s"] = round(time.monotonic() - t0, 1)
        out["node_labels"] = sorted(f"{(x.get('labels') or {}).get('zone')}/{(x.get('labels') or {}).get('rack')}"
                                    for x in _alive_nodes(dashboard))

        sid = f"boot-local-{os.getpid()}-{int(time.time())}"
        t1 = time.monotonic()
        submit = subprocess.run(
            [str(shim / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{dashboard}", "--submission-id", sid,
             "--runtime-env-json", json.dumps({"working_dir": str(JOB_DIR)}), "--no-wait", "--",
             "python", "zone_job.py", "--tasks", str(tasks)],
            env=base_env, capture_output=True, text=True, timeout=120)
        if submit.returncode != 0:
            raise RuntimeError(f"ray job submit exited {submit.returncode}:\n{submit.stdout}\n{submit.stderr}")
        job = f"http://127.0.0.1:{dashboard}/api/jobs/{sid}"
        _wait("a finished job", lambda: _get(job)["status"] in ("SUCCEEDED", "FAILED", "STOPPED"), 600, procs)
        out["job_status"] = _get(job)["status"]
        out["job_s"] = round(time.monotonic() - t1, 1)
        logs = _get(f"{job}/logs")["logs"]
        lines = [ln for ln in logs.splitlines() if ln.startswith("{")]
        out["job_output"] = json.loads(lines[-1]) if lines else None
        out["job_log_tail"] = logs[-2000:]
    finally:
        out["sigkilled_after_stop"] = _teardown(procs, root)
        if keep:
            out["kept"] = str(root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return out


def check(out: dict, tasks: int) -> None:
    """The boot worked: every node joined with its labels, the job succeeded and placed every task in its zone."""
    j = out["job_output"]
    assert out["job_status"] == "SUCCEEDED", out
    assert j is not None and j["misplaced"] == 0 and j["results_in_order"], out
    assert j["nodes"] == 1 + out["workers"] and j["zones"] == ["dc1-a", "dc1-b"], out
    assert j["tasks"] == 2 * tasks and j["stats"]["finished"] == j["tasks"], out
    assert out["node_labels"] == ["dc1-a/r0", "dc1-a/r1", "dc1-b/r2"], out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="boot_local.json")
    ap.add_argument("--tasks", type=int, default=100, help="tasks per zone")
    ap.add_argument("--smoke-test", action="store_true", help="10 tasks per zone")
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (the nodes' logs)")
    args = ap.parse_args(argv)
    tasks = 10 if args.smoke_test else args.tasks
    out = boot_and_submit(tasks, keep=args.keep)
    print(json.dumps({k: v for k, v in out.items() if k != "job_log_tail"}, indent=2))
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    try:
        check(out, tasks)
    except AssertionError:
        print(out.get("job_log_tail", ""), file=sys.stderr)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
