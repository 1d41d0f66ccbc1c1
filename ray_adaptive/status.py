"""What operators see of the policy runtimes on a cluster, from any process that can reach it.

``ray-adaptive status`` and ``ray-adaptive why`` connect to the cluster as a
driver of their own (no ``ra.start`` needed) and read each runtime's state
store: the plan in force and why, the switches, the actors and where they
run, each node's slot resource (capacity, in use), per tenant (or the
runtime's ``group_by`` field) the tasks pending, running, finished and dropped
and the goodput of the last 10 s, the adaptive controller's estimate against
the measured load, and the decision latency; ``why`` asks the process that
submitted a task why it waits, or why it landed where it did; ``status POLICY
--audit`` checks the State in force against the tasks in flight (see
:mod:`ray_adaptive.runtime.audit`).
"""

from __future__ import annotations

import os
import re
import time
from typing import Dict, List, Optional

from ray_adaptive.errors import RayAdaptiveError
from ray_adaptive.monitor import percentiles
from ray_adaptive.runtime.actor_life import format_actor_reports, merge_actor_reports
from ray_adaptive.runtime.topology import NAMESPACE

__all__ = ["StatusError", "connect", "runtimes", "describe", "format_status", "why", "format_why", "audit",
           "format_audit"]

_STORE = re.compile(r"^ra-(.+)-store$")


class StatusError(RayAdaptiveError):
    """The cluster cannot be reached, or nothing asked for runs on it (the message says which)."""


def connect(address: Optional[str]) -> None:
    """Join the cluster at ``address`` (default: the one this machine runs, ``auto``) as a driver."""
    import ray

    if ray.is_initialized():
        return
    _probe(address)
    try:
        ray.init(address=address or "auto", namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    except ConnectionError as err:
        raise StatusError(f"cannot reach a Ray cluster at {address or 'auto'!r}: {err}") from None
    except Exception as err:  # noqa: BLE001 -- Ray says it differently per cause: name it
        text = str(err)
        if re.search(r"auth|token|unauthenticated|permission", text, re.I):
            raise StatusError(f"the Ray cluster at {address or 'auto'!r} refused this process: {text.splitlines()[0]} "
                              "(set RAY_AUTH_TOKEN / the cluster's token for this shell)") from None
        raise StatusError(f"cannot join the Ray cluster at {address or 'auto'!r}: {text.splitlines()[0]}") from None


_ADDRESS = re.compile(r"(ray://)?(?:\[([^\]]*)\]|([^:\[\]/\s]+)):(-?\d+)")


def _probe(address: Optional[str], timeout_s: float = 5.0) -> None:
    """Refuse in seconds an address that is no cluster's: ``local`` (``ray.init`` would start a new,
    empty cluster: a command that reads a cluster must never make one), one that is not ``auto``,
    ``host:port``, ``[IPv6]:port`` or ``ray://host:port``, a port out of 1-65535, or one where
    nothing listens.

    Ray's own connect retries the GCS for about a minute before it gives up --
    for ever on a host it cannot parse -- which reads as a hung command to an
    operator who mistyped an address.
    """
    import ipaddress

    if address is None or address == "auto":  # (the cluster this machine runs: Ray finds it, or says there is none)
        return
    if address == "local":
        raise StatusError("--address local would start a new, empty Ray cluster just for this command: give the "
                          "running cluster's address (host:port, or auto for the one this machine runs)")
    m = _ADDRESS.fullmatch(address)
    host = None if m is None else (m.group(2) if m.group(2) is not None else m.group(3))
    if m is not None and m.group(2) is not None:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            host = None
    if host is None or not re.fullmatch(r"[A-Za-z0-9._:-]+", host):
        raise StatusError(f"{address!r} is not a Ray cluster address: expected host:port, [IPv6]:port, "
                          f"ray://host:port or auto")
    port = int(m.group(4))  # type: ignore[union-attr]  # (host is set: it matched)
    if not 1 <= port <= 65535:
        raise StatusError(f"cannot reach a Ray cluster at {address!r}: {port} is not a port (1-65535)")
    try:
        speaks = _speaks_grpc(host, port, timeout_s)
    except OSError as err:
        raise StatusError(f"cannot reach a Ray cluster at {address!r}: nothing answers there ({err})") from None
    if not speaks and os.environ.get("RAY_USE_TLS", "0").lower() not in ("1", "true"):
        raise StatusError(f"cannot reach a Ray cluster at {address!r}: something answers there, but not as Ray "
                          f"does (gRPC); is it the cluster's GCS port (ray start --head --port)?")


def _speaks_grpc(host: str, port: int, timeout_s: float) -> bool:
    """Whether the server at ``host:port`` answers HTTP/2's connection preface with its SETTINGS frame, as
    Ray's GCS (and Ray Client's server) -- gRPC -- does: another service there (an HTTP/1 server, sshd)
    would have Ray retry for minutes. Raises OSError when nothing listens."""
    import socket

    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        conn.settimeout(timeout_s)
        conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        head = b""
        try:
            while len(head) < 9:  # (a frame header: length (3 bytes), type, flags, stream id)
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except OSError:  # (no answer in time, or reset: not gRPC)
            return False
    return len(head) == 9 and head[3] == 0x04  # a SETTINGS frame


def runtimes() -> List[str]:
    """The names of the policies whose runtime runs on the connected cluster."""
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == NAMESPACE]
    return sorted(m.group(1) for m in (_STORE.match(n) for n in names) if m)


def _store(policy: str):
    import ray

    from ray_adaptive.runtime.topology import actor_name

    try:
        return ray.get_actor(actor_name(policy, "store"), namespace=NAMESPACE)
    except ValueError:
        running = ", ".join(runtimes()) or "none"
        raise StatusError(f"policy {policy!r} has no runtime on this cluster (running: {running})") from None


def describe(policy: str) -> dict:
    """Everything ``status`` shows of ``policy``'s runtime, as data (what ``--json`` prints)."""
    import ray

    from ray_adaptive import resources
    from ray_adaptive.api import service

    d = ray.get(_store(policy).describe.remote(), timeout=30)
    selector = None
    if d["actors"]["selector"]:
        selector = ray.get_actor(d["actors"]["selector"], namespace=NAMESPACE)
        d["actors"]["selector"] = {"name": d["actors"]["selector"], "node": ray.get(selector.where.remote(), timeout=30)}
    placements = []
    for name in d["actors"]["placements"]:
        try:
            placements.append({"name": name, "node": ray.get(ray.get_actor(name, namespace=NAMESPACE).where.remote(),
                                                             timeout=30)})
        except (ValueError, ray.exceptions.RayActorError):
            placements.append({"name": name, "node": None})
    d["actors"]["placements"] = placements
    state = resources.get_cluster_state([n["id"] for n in d["nodes"]])
    for n in d["nodes"]:
        slot = state.get(n["id"], {}).get(n["slot"], {})
        n["slot_capacity"], n["slot_in_use"] = slot.get("total"), (slot.get("total", 0) - slot.get("available", 0)
                                                                   if slot else None)
    d["groups"] = _groups(d["reports"].values())
    d["policy_actors"] = merge_actor_reports(d["reports"].values())  # (issue 38)
    d["jobs"] = jobs_of(d)
    d["service"] = service.find(policy) is not None  # (the policy service owns it; else a driver does)
    latencies = [r["decision_p99_s"] for r in d["reports"].values() if r.get("decision_p99_s") is not None]
    if selector is not None:
        p50, p99 = percentiles(ray.get(selector.decision_latencies.remote(), timeout=30)[-10_000:], (0.5, 0.99))
        d["decision_p50_s"], d["decision_p99_s"] = p50, p99
    else:
        d["decision_p99_s"] = max(latencies) if latencies else None
        p50s = [r["decision_p50_s"] for r in d["reports"].values() if r.get("decision_p50_s") is not None]
        d["decision_p50_s"] = sorted(p50s)[len(p50s) // 2] if p50s else None
    d["goodput_per_s"] = round(sum(g.get("goodput_per_s", 0.0) for g in d["groups"].values()), 2)
    return d


def jobs_of(d: dict) -> List[dict]:
    """The jobs attached to a runtime (from its store's :meth:`describe`): each with its processes, tasks
    pending and running, its tenants (the values bound to it, or the groups its processes reported) and
    when it attached. The owner's own process (it submits nothing) is left out."""
    from ray_adaptive._private.jobs import job_table
    from ray_adaptive.runtime.tenancy import bound_values

    by_job: Dict[str, dict] = {}
    owner = d.get("info", {}).get("owner")
    for client, j in d.get("jobs", {}).items():
        if client == owner:
            continue
        report = d["reports"].get(client, {})
        groups = report.get("groups", {})
        job = by_job.setdefault(j["job"], {"job": j["job"], "processes": 0, "pending": 0, "running": 0,
                                           "tenants": set(), "attached": j["attached"], "clients": []})
        job["processes"] += 1
        job["clients"].append(client)  # (task ids are <client>-<n>: what `why` asks)
        job["attached"] = min(job["attached"], j["attached"])
        for g, c in groups.items():
            job["pending"] += c.get("pending", 0)
            job["running"] += c.get("running", 0)
            if c.get("arrivals"):
                job["tenants"].add(g)
    bind = d.get("bind") or {}
    table = job_table() if bind and by_job else None  # (one read of the GCS job table for every job)
    out = []
    for job in sorted(by_job.values(), key=lambda j: j["attached"]):
        if bind:
            bound = bound_values(bind, job["job"], table)
            job["tenants"] = {v["value"] for v in bound.values() if "value" in v}
        job["tenants"] = sorted(job["tenants"])
        out.append(job)
    return out


def _groups(reports) -> Dict[str, dict]:
    out: Dict[str, dict] = {}
    for r in reports:
        for g, c in r.get("groups", {}).items():
            acc = out.setdefault(g, {})
            for k, v in c.items():
                acc[k] = round(acc.get(k, 0) + v, 3)
    return dict(sorted(out.items()))


def _ms(s: Optional[float]) -> str:
    return f"{s * 1e3:.2f} ms" if s is not None else "-"


def format_status(d: dict) -> str:
    """``describe``'s figures as text."""
    out = [f"policy {d['policy']}: plan {d['plan']} ({d['architecture']}), generation {d['generation']}"
           + (" -- SWITCHING" if d["phase"] != "running" else "")]
    info = d.get("info", {})
    if info.get("why"):
        out.append(f"  why: {info['why']}")
    for h in info.get("history", [])[-3:]:
        pause = f", pause {_ms(h.get('pause_s'))}" if h.get("pause_s") is not None else ""
        out.append(f"  switch to generation {h['generation']}: {h['from']} -> {h['to']} ({h['reason']}; "
                   f"frozen {_ms(h.get('freeze_s'))}{pause})")
    a = d["actors"]
    out.append(f"  actors: store on {a['store'][:12]}"
               + (f"; selector on {a['selector']['node'][:12]}" if a["selector"] else "")
               + (f"; {len(a['placements'])} placement(s) on "
                  + ", ".join((p['node'] or 'gone')[:12] for p in a["placements"]) if a["placements"] else ""))
    owner = "the policy service (ray-adaptive stop " + d["policy"] + ")" if d.get("service") else "a driver"
    out.append(f"  owned by {owner}; processes attached: {sum(j['processes'] for j in d.get('jobs', []))}"
               + (f"; bound to the job: {', '.join(f'{k}={v}' for k, v in d['bind'].items())}" if d.get("bind") else ""))
    if d.get("jobs"):
        out.append("  jobs: id / processes / pending / running / tenants / attached")
        for j in d["jobs"]:
            when = time.strftime("%H:%M:%S", time.localtime(j["attached"]))
            out.append(f"    {j['job']:<10} {j['processes']:>3} {j['pending']:>6} {j['running']:>6}   "
                       f"{','.join(j['tenants']) or '-':<12} {when}")
    out.append("  nodes (slot in use / capacity):")
    for n in d["nodes"]:
        out.append(f"    {n['id'][:12]}  {n['slot_in_use']} / {n['slot_capacity']}   executors {n['executors']}, "
                   f"queue {n['queue']}")
    out += format_actor_reports(d.get("policy_actors"))  # (issue 38)
    label = d.get("group_by") or "group"
    out.append(f"  per {label}: pending / running / finished / dropped, goodput (last 10 s)")
    for g, c in d["groups"].items():
        out.append(f"    {g or '-':<12} {c.get('pending', 0):>6} {c.get('running', 0):>6} {c.get('finished', 0):>9} "
                   f"{c.get('dropped', 0):>6}   {c.get('goodput_per_s', 0.0):.1f}/s")
    ev = info.get("evaluation")
    if ev and ev.get("estimate"):
        out.append(f"  estimate: goodput {ev['estimate']['goodput']:.0f}/s at {ev['measured']['rate']:.0f}/s offered "
                   f"(measured {d['goodput_per_s']:.0f}/s); controller: {ev['reason']}")
    else:
        out.append(f"  goodput {d['goodput_per_s']:.0f}/s (no estimate: the runtime is not adaptive)")
    out.append(f"  decision latency: p50 {_ms(d.get('decision_p50_s'))}, p99 {_ms(d.get('decision_p99_s'))}")
    waiting = [w for r in d["reports"].values() for w in r.get("oldest_pending", [])]
    if waiting:
        out.append("  waiting longest: " + ", ".join(f"{tid} ({s:.1f} s)" for tid, s in sorted(waiting, key=lambda w: -w[1])[:5])
                   + "   (ray-adaptive why POLICY TASK_ID)")
    return "\n".join(out)


def why(policy: str, task_id: str, timeout_s: float = 10.0) -> dict:
    """Ask the process that submitted ``task_id`` why it waits, or why it landed where it did."""
    import ray

    return ray.get(_store(policy).ask.remote(task_id, timeout_s), timeout=timeout_s + 30)


def audit(policy: str, timeout_s: float = 10.0) -> dict:
    """The State audit of ``policy``'s runtime (see :mod:`ray_adaptive.runtime.audit`), as data: what
    ``status POLICY --audit`` prints."""
    from ray_adaptive.runtime.audit import audit_store

    return audit_store(_store(policy), timeout_s).as_dict()


def format_audit(report: dict) -> str:
    from ray_adaptive.runtime.audit import AuditReport

    return AuditReport(**report).format()


def format_why(answer: dict) -> str:
    lines = [f"{answer.get('task', '')} {answer['state']}: {answer['why']}".strip()]
    for node, score in sorted(answer.get("scores", {}).items(), key=lambda x: (x[1] != x[1], x[1])):
        lines.append(f"  {node[:12]}  {score:g}" + ("   <- chosen" if node == answer.get("node") else ""))
    return "\n".join(lines)
