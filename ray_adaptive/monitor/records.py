"""The finished tasks a monitor keeps, in a form Python's garbage collector does not scan.

A process keeps its last ``keep`` finished tasks (100,000 by default) for the
compiler's recorded workload and the snapshot. A full collection of the
garbage collector stops the whole process -- its scheduler's callers too --
and scans every container it tracks, item by item. Kept as ``(finished at,
TaskSpec)`` pairs, the records were two tracked objects per task: in a driver
at the cap, 316,000 tracked objects and a 181 ms full collection, against
109,000 and 67 ms with the runtime just up (one of 322 ms fell inside a live
switch's pause: ``docs/benchmarks.md``, bench_switch ``--gc-trace``). Even
as columns of plain values the deques were still traversed, a pointer per
value (165 ms).

So a record is a tuple of atomic values -- the task's ``fields`` dict by its
content, a key into a table of the dicts the kept records use (a few: one per
distinct ``task=`` option, however many dicts were made for it), its
``resources`` as sorted items -- and every :data:`CHUNK` records are
sealed into one tuple. CPython stops tracking a tuple that holds only
untracked values at its next collection, so a sealed chunk costs nothing
afterwards. The :class:`~ray_adaptive.workload.specs.TaskSpec` of a record
is made again when it is read (rarely: a table refresh, a trace, a
snapshot), with the ``fields`` dict it was given.

Example:
    >>> from ray_adaptive.workload.specs import TaskSpec
    >>> r = FinishedRecords(keep=2)
    >>> r.extend(1.0, [TaskSpec("a", 0.0, 0.5), TaskSpec("b", 0.2, 0.4)])
    >>> r.extend(2.0, [TaskSpec("c", 1.5, 0.1)])
    >>> len(r), [t.id for t in r.copy().specs()], [t.id for t in r.copy(since=1.0).specs()]
    (2, ['b', 'c'], ['c'])
    >>> [t.id for t in r.copy(finished_since=1.5).specs()]
    ['c']
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ray_adaptive.workload.specs import TaskSpec

__all__ = ["FinishedRecords", "Kept", "CHUNK"]

CHUNK = 1024  # records sealed into one tuple (the open chunk, a list, is what a collection still scans)
_SEEN = 256  # fields dicts whose content key is remembered by identity

# a record: (finished at, id, arrival, duration, timeout, its fields' key in the table, resources' items,
# submitter, preemptible)
_AT, _ARRIVAL, _FIELDS = 0, 2, 5


def _frozen(value):
    """``value`` as a hashable of the same content: a list, tuple or dict as a tuple of its items (a
    dict's sorted), after a mark of its kind (a list and a tuple of the same items are not equal)."""
    if isinstance(value, dict):
        return ("{", *sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("[" if isinstance(value, list) else "(", *(_frozen(v) for v in value))
    hash(value)  # (TypeError: not to be keyed by content)
    return value


def _content(fields: dict) -> tuple:
    """What stands for ``fields`` in a record: its content, so that a dict made for each submission is
    kept once; a dict whose content cannot be a key (a value neither hashable nor a list or dict) by its
    identity -- the table keeps it alive, so no other dict takes its id meanwhile."""
    try:
        return _frozen(fields)
    except TypeError:
        return ("id", id(fields))


class FinishedRecords:
    """The last ``keep`` finished tasks, each with the time it finished, oldest first (not thread-safe:
    the monitor's lock guards it)."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._sealed: Deque[tuple] = deque()  # chunks of CHUNK records, oldest first
        self._skip = 0  # records of the oldest sealed chunk already dropped (past ``keep``)
        self._open: List[tuple] = []  # the newest records, not sealed yet
        self._count = 0
        # a fields dict's content (see _content) -> [the first dict seen with it, how many kept records use it]
        self._fields: Dict[tuple, list] = {}
        # id of a fields dict seen lately -> (the dict, its content key): the tasks of one .options() call
        # share their dict, so the router's harvest path keys it once, not once per task (3 us each). The
        # dict is held, so its id is not another's meanwhile; cleared past _SEEN entries.
        self._seen: Dict[int, Tuple[dict, tuple]] = {}

    def __len__(self) -> int:
        return self._count

    def extend(self, at: float, tasks: Sequence[TaskSpec]) -> None:
        """``tasks`` finished at ``at``; the oldest records past ``keep`` are dropped."""
        table, seen = self._fields, self._seen
        for t in tasks:
            hit = seen.get(id(t.fields))
            if hit is None:
                if len(seen) >= _SEEN:
                    seen.clear()
                hit = seen[id(t.fields)] = (t.fields, _content(t.fields))
            key = hit[1]
            entry = table.get(key)
            if entry is None:
                entry = table[key] = [t.fields, 0, key]
            entry[1] += 1
            key = entry[2]  # (the table's own: one object for the records of equal fields)
            self._open.append((at, t.id, t.arrival, t.duration, t.timeout, key,
                               tuple(sorted(t.resources.items())), t.submitter, t.preemptible))
            if len(self._open) == CHUNK:
                self._sealed.append(tuple(self._open))
                self._open = []
        self._count += len(tasks)
        self._drop(self._count - self._keep)

    def _drop(self, n: int) -> None:
        dropped: Sequence[tuple]
        while n > 0:
            if self._sealed:
                chunk = self._sealed[0]
                take = min(n, len(chunk) - self._skip)
                dropped = chunk[self._skip:self._skip + take]
                self._skip += take
                if self._skip == len(chunk):
                    self._sealed.popleft()
                    self._skip = 0
            else:
                take = n
                dropped, self._open = self._open[:take], self._open[take:]
            for record in dropped:
                entry = self._fields[record[_FIELDS]]
                entry[1] -= 1
                if not entry[1]:
                    del self._fields[record[_FIELDS]]
            self._count -= take
            n -= take

    def _records(self) -> Iterator[tuple]:
        """Every record, oldest first."""
        chunks = iter(self._sealed)
        first = next(chunks, None)
        if first is None:
            return iter(self._open)
        return itertools.chain(itertools.islice(first, self._skip, None), *chunks, self._open)

    def _newest_first(self) -> Iterator[tuple]:
        for chunk in itertools.chain((self._open,), reversed(self._sealed)):
            stop = self._skip if self._sealed and chunk is self._sealed[0] else 0
            for i in range(len(chunk) - 1, stop - 1, -1):
                yield chunk[i]

    def copy(self, since: Optional[float] = None, finished_since: Optional[float] = None) -> "Kept":
        """The records, oldest first, to be made into tasks outside the caller's lock (:meth:`Kept.specs`):
        ``since``, only the tasks that arrived then or later; ``finished_since``, only the newest ones,
        that finished then or later (read from the newest back: no pass over every record)."""
        if finished_since is None:
            records = [r for r in self._records() if since is None or r[_ARRIVAL] >= since]
        else:
            newest = itertools.takewhile(lambda r: r[_AT] >= finished_since, self._newest_first())
            records = [r for r in newest if since is None or r[_ARRIVAL] >= since][::-1]
        return Kept(records, {k: entry[0] for k, entry in self._fields.items()})


class Kept(NamedTuple):
    """A copy of some records (:meth:`FinishedRecords.copy`) and the fields dicts they use."""

    records: List[tuple]
    fields: Dict[tuple, dict]

    def specs(self) -> List[TaskSpec]:
        """Each record's task, with the fields dict it was given."""
        table = self.fields
        return [TaskSpec(tid, arrival, duration, timeout, table[key], dict(resources), submitter, preemptible)
                for _, tid, arrival, duration, timeout, key, resources, submitter, preemptible in self.records]
