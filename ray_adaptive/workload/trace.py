"""Trace files: tasks in (a workload to replay or compile on) and out (what a run did with them).

A trace is a table, one row per task, as CSV or Parquet (by the file's
extension, ``.csv`` or ``.parquet``/``.pq``; Parquet needs ``pyarrow``):

==================  =======================================================
column              meaning
==================  =======================================================
``id``              task id (string, unique)
``arrival``         seconds
``duration``        seconds (default 0.02)
``timeout``         seconds; empty or ``inf``: none
``submitter``       the client that submitted it (optional)
``resources``       JSON object, e.g. ``{"CPU": 1}`` (optional)
``task.<field>``    one column per Task field of the policy; vec and map
                    values as JSON (``[0.1, 0.2, 0.1]``)
==================  =======================================================

Written traces add the outcome: ``status`` (finished / dropped / pending),
``node``, ``scheduler``, ``dispatched_at``, ``started_at``, ``finished_at``,
``on_time``. Reading ignores those columns, so a run's output is a workload
again.

Example:
    >>> import tempfile, os
    >>> from ray_adaptive.workload.specs import TaskSpec
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> write_trace(path, [TaskSpec("t0", 0.5, fields={"tenant": "a", "resource_vec": [0.1, 0.2]})])
    >>> read_trace(path)[0].fields
    {'tenant': 'a', 'resource_vec': [0.1, 0.2]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping, Optional

from ray_adaptive.errors import ScenarioError
from ray_adaptive import files
from ray_adaptive.workload import specs
from ray_adaptive.workload.specs import TaskSpec

__all__ = ["read_trace", "write_trace", "OUTCOME_COLUMNS"]

BASE_COLUMNS = ("id", "arrival", "duration", "timeout", "submitter", "resources")
OUTCOME_COLUMNS = ("status", "node", "scheduler", "dispatched_at", "started_at", "finished_at", "on_time")
_PREFIX = "task."


def _format(path: Path) -> str:
    ext = path.suffix.lower()
    if ext == ".csv":
        return "csv"
    if ext in (".parquet", ".pq"):
        return "parquet"
    raise ScenarioError(f"{path}: unknown trace format {ext or '(no extension)'!r}; use .csv or .parquet")


def _encode(v):
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def write_trace(path: "str | Path", tasks: Iterable, placed_by: Optional[Mapping[str, str]] = None) -> None:
    """Write ``tasks`` (specs, or a simulated run's tasks -- anything with a ``spec`` and
    a ``status`` -- with their outcome) to a CSV or Parquet trace."""
    import pandas as pd

    path = Path(path)
    fmt = _format(path)
    rows = []
    for t in tasks:
        spec = getattr(t, "spec", t)
        row = {
            "id": spec.id, "arrival": spec.arrival, "duration": spec.duration,
            "timeout": spec.timeout if math.isfinite(spec.timeout) else None,
            "submitter": spec.submitter, "resources": json.dumps(spec.resources) if spec.resources else "",
        }
        row.update({_PREFIX + k: _encode(v) for k, v in spec.fields.items()})
        if spec is not t:  # a run's task: its outcome too
            row.update({
                "status": t.status, "node": t.node.id if t.node is not None else "",
                "scheduler": (placed_by or {}).get(spec.id, ""),
                "dispatched_at": t.dispatched_at, "started_at": t.started_at, "finished_at": t.finished_at,
                "on_time": bool(t.on_time),
            })
        rows.append(row)
    df = pd.DataFrame(rows)
    if fmt == "csv":
        df.to_csv(path, index=False)
    else:
        try:
            df.to_parquet(path, index=False)
        except ImportError as err:
            raise ScenarioError(f"{path}: writing Parquet needs pyarrow (pip install pyarrow): {err}") from None


class _Decoder:
    """One column's cells as values: JSON texts parsed (each distinct text once: a trace repeats a few
    values over many rows; each row still gets its own list or dict), numpy scalars made Python ones."""

    def __init__(self, column: str):
        self.column = column
        self._seen: dict = {}  # text -> (value, flat: a list/dict of scalars, copied cheaply)

    def __call__(self, v, where):
        if not (isinstance(v, str) and v[:1] in ("[", "{")):
            return v.item() if hasattr(v, "item") else v  # (numpy scalars from pandas)
        hit = self._seen.get(v)
        if hit is None:
            try:
                value = json.loads(v)
            except json.JSONDecodeError as err:
                raise ScenarioError(f"{where()}: column '{self.column}': invalid JSON {v[:40]!r}: {err.msg}") from None
            except RecursionError:  # (json recurses on nested lists)
                raise ScenarioError(f"{where()}: column '{self.column}': JSON nested too deeply") from None
            items = value.values() if isinstance(value, dict) else value
            hit = self._seen[v] = (value, not any(isinstance(x, (list, dict)) for x in items))
        value, flat = hit
        if not flat:
            return json.loads(v)
        return dict(value) if isinstance(value, dict) else list(value)


def _number(v, where: str, column: str, default: float, finite: bool) -> float:
    v = v.item() if hasattr(v, "item") else v  # (numpy scalars from pandas: shown as the numbers they are)
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return default
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise ScenarioError(f"{where}: column '{column}' must be a number, found {v!r}") from None
    if x < 0 or math.isnan(x) or (finite and math.isinf(x)):
        raise ScenarioError(f"{where}: column '{column}' must be >= 0{' and finite' if finite else ''}, found {v!r}")
    return x


def _numbers(df, column: str, default: float, where, finite: bool = True) -> list:
    """A numeric column as floats (``default`` where empty), checked all at once; the first bad row is
    reported as :func:`_number` reports it. ``finite``: infinity is refused too (an arrival at infinity
    never comes, a replay would wait for it)."""
    import numpy as np
    import pandas as pd

    if column not in df.columns:
        return [default] * len(df)
    raw = df[column]
    x = pd.to_numeric(raw, errors="coerce")
    empty = raw.isna() | (raw.astype(str) == "") if raw.dtype == object else raw.isna()
    bad = (x.isna() & ~empty) | (x < 0)
    if finite:
        bad |= np.isinf(x.astype(float))
    if bad.any():
        i = int(bad.to_numpy().argmax())
        _number(raw.iloc[i], where(i), column, default, finite)  # raises, naming the row
    return x.astype(float).fillna(default).tolist()


def _resources(value, where) -> dict:
    """A row's ``resources`` cell, decoded, as ``{name: amount}`` with finite amounts >= 0."""
    if value in ("", None) or (isinstance(value, float) and math.isnan(value)):
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(f"{where()}: column 'resources' must be a JSON object, found {value!r}"[:200])
    out = {}
    for name, amount in value.items():
        ok = isinstance(amount, (int, float)) and not isinstance(amount, bool) and 0 <= amount < math.inf
        if not ok:
            raise ScenarioError(f"{where()}: column 'resources': '{name}' must be a finite number >= 0, "
                                f"found {json.dumps(amount)[:40]}")
        out[name] = float(amount)
    return out


def _read_table(path: Path, fmt: str):
    """The trace file as a DataFrame; its errors (unreadable, not UTF-8, not a table) as one line."""
    import io

    import pandas as pd

    data = files.read_bytes(path, "trace")
    try:
        if fmt == "csv":
            text = files.decode(data, path, "trace")
            return pd.read_csv(io.StringIO(text), dtype={"id": str, "submitter": str}, keep_default_na=False,
                               na_values=[""])
        return pd.read_parquet(io.BytesIO(data))
    except ImportError as err:
        raise ScenarioError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow): {err}") from None
    except (ValueError, pd.errors.ParserError) as err:
        raise ScenarioError(f"{path}: not a readable {fmt} trace: {str(err).splitlines()[0] if str(err) else err!r}") from None
    except Exception as err:  # noqa: BLE001 -- pyarrow's own errors on a file that is not Parquet (ArrowException)
        if fmt != "parquet":
            raise
        raise ScenarioError(f"{path}: not a readable parquet trace: {str(err).splitlines()[0] if str(err) else err!r}") from None


def read_trace(path: "str | Path") -> tuple[TaskSpec, ...]:
    """Read a CSV or Parquet trace into task specs, sorted by (arrival, id); errors name the row and column."""
    path = Path(path)
    fmt = _format(path)
    df = _read_table(path, fmt)
    for column in ("id", "arrival"):
        if column not in df.columns:
            raise ScenarioError(f"{path}: missing column '{column}'; a trace needs at least: id, arrival")
    unknown = [c for c in df.columns if c not in BASE_COLUMNS + OUTCOME_COLUMNS and not c.startswith(_PREFIX)]
    if unknown:
        raise ScenarioError(f"{path}: unknown column '{unknown[0]}'; expected {', '.join(BASE_COLUMNS)}, "
                            f"task.<field> columns, or outcome columns ({', '.join(OUTCOME_COLUMNS)})")
    ids = df["id"].tolist()

    def where(i: int) -> str:
        return f"{path}: row {i + 2 if fmt == 'csv' else i} (id {ids[i]!r})"

    seen = set()
    for i, tid in enumerate(ids):
        if tid is None or (isinstance(tid, float) and math.isnan(tid)) or str(tid) == "":
            raise ScenarioError(f"{where(i)}: empty id")
        tid = ids[i] = str(tid)
        if tid in seen:
            raise ScenarioError(f"{where(i)}: duplicate task id")
        seen.add(tid)
    arrivals = _numbers(df, "arrival", math.nan, where)
    for i, a in enumerate(arrivals):
        if math.isnan(a):
            raise ScenarioError(f"{where(i)}: column 'arrival' is empty")
    durations = _numbers(df, "duration", specs.DEFAULT_DURATION, where)
    timeouts = _numbers(df, "timeout", math.inf, where, finite=False)
    n = len(ids)
    resources_col = df["resources"].tolist() if "resources" in df.columns else [""] * n
    submitters = df["submitter"].tolist() if "submitter" in df.columns else [None] * n
    fields = [(c[len(_PREFIX):], c, df[c].tolist(), _Decoder(c)) for c in df.columns if c.startswith(_PREFIX)]
    decode_resources = _Decoder("resources")
    out = []
    for i in range(n):
        at = lambda i=i: where(i)  # noqa: E731 -- formatted only for an error
        resources = _resources(decode_resources(resources_col[i] or "", at), at)
        task_fields = {}
        for name, c, values, decode in fields:
            v = values[i]
            if isinstance(v, float) and math.isnan(v):
                raise ScenarioError(f"{where(i)}: column '{c}' is empty")
            task_fields[name] = decode(v, at)
        sub = submitters[i]
        out.append(TaskSpec(
            id=ids[i], arrival=arrivals[i], duration=durations[i], timeout=timeouts[i],
            fields=task_fields, resources=resources,
            submitter="" if sub is None or (isinstance(sub, float) and math.isnan(sub)) else str(sub),
        ))
    out.sort(key=lambda t: (t.arrival, t.id))
    return tuple(out)
