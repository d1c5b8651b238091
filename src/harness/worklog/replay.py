"""Replaying a verified work-ledger chain into the run's projected state.

It owns the projection `replay(rows) -> State`: per task its status, attempts, deps
and last seq; for the run whether it was opened and closed and how often it was
resumed; and the resume frontier — the in-flight tasks plus the scheduled tasks whose
``deps`` all completed, in the order they were first scheduled.

Invariants:

* Deterministic: the state is a pure function of the rows in order (no clock, no
  host, no dict-order accident), so two machines replaying one chain agree.
* Completed is terminal: completed work is never redone, so a later row for a
  completed task is recorded (``last_seq``) but does not reopen it.
* Rows of kinds this version does not know are counted and carried through untouched,
  never errors: a ledger written by a newer scheduler still resumes here.
* A task is in the frontier only when its deps can be read and all completed. One whose
  ``deps`` are not a list of task ids (strings, `rows.deps_problem`: a chain written by
  hand or by another tool; the writer refuses it) or name a task no row of the chain
  schedules can never be ready: it is held, never scheduled, and `State.held` says
  which and why.

Rows are taken as verified (`harness.worklog.verify`); replay does not check hashes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import quoted
from .rows import deps_problem

__all__ = ["State", "TaskState", "replay"]

# The most tasks of a cycle a held task's reason spells out one by one.
_CYCLE_SHOWN = 8

SCHEDULED, STARTED, COMPLETED, FAILED, ABANDONED = (
    "scheduled",
    "started",
    "completed",
    "failed",
    "abandoned",
)
_STATUS_OF = {
    "task.scheduled": SCHEDULED,
    "task.started": STARTED,
    "task.completed": COMPLETED,
    "task.failed": FAILED,
    "task.abandoned": ABANDONED,
}


@dataclass
class TaskState:
    task_id: str
    status: str
    first_seq: int  # the seq that first scheduled (or, failing that, first named) it
    last_seq: int
    attempts: int = 0  # task.started rows
    deps: list[str] = field(default_factory=list)
    # Why the deps in force cannot be read (`rows.deps_problem`), and the seq of the
    # task.scheduled row that set them; None when they can.
    deps_error: str | None = None
    deps_seq: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "task_id": self.task_id,
            "status": self.status,
            "attempts": self.attempts,
            "deps": list(self.deps),
            "deps_error": self.deps_error,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
        }


@dataclass
class State:
    tasks: dict[str, TaskState] = field(default_factory=dict)
    opened: bool = False
    closed: bool = False
    resumes: int = 0
    unknown: list[dict[str, Any]] = field(default_factory=list)  # rows carried untouched
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    entry_count: int = 0
    head_seq: int = 0
    head_hash: str | None = None

    def _ids(self, status: str) -> list[str]:
        return [t.task_id for t in self._ordered() if t.status == status]

    def _ordered(self) -> list[TaskState]:
        return sorted(self.tasks.values(), key=lambda t: (t.first_seq, t.task_id))

    @property
    def finished(self) -> list[str]:
        return self._ids(COMPLETED)

    @property
    def in_flight(self) -> list[str]:
        return self._ids(STARTED)

    @property
    def scheduled(self) -> list[str]:
        return self._ids(SCHEDULED)

    @property
    def failed(self) -> list[str]:
        return self._ids(FAILED)

    @property
    def abandoned(self) -> list[str]:
        return self._ids(ABANDONED)

    @property
    def frontier(self) -> list[str]:
        """In-flight tasks plus scheduled tasks whose deps all completed, by first schedule."""
        return [t.task_id for t in self._ordered() if t.status == STARTED or self._ready(t)]

    def _ready(self, t: TaskState) -> bool:
        # A dep the ledger never names cannot have completed: the task waits.
        return t.status == SCHEDULED and t.deps_error is None and all(
            d in self.tasks and self.tasks[d].status == COMPLETED for d in t.deps
        )

    @property
    def held(self) -> list[dict[str, object]]:
        """The scheduled tasks that can never be ready, by first schedule: each as
        {task_id, seq (of the task.scheduled row that set its deps), reason}."""
        found: list[tuple[TaskState, str]] = []
        cycles = self._cycles()
        # Few tasks are held: only they are sorted, not every task of the run.
        for t in self.tasks.values():
            if t.status != SCHEDULED:
                continue
            reason = t.deps_error
            if reason is None:
                unknown = [d for d in t.deps if d not in self.tasks]
                if unknown:
                    names = ", ".join(quoted(d, cut=True) for d in unknown)
                    reason = f"deps name {names}, which no row of this ledger schedules"
                elif t.task_id in cycles:
                    reason = self._cycle_reason(t, cycles[t.task_id])
                else:
                    continue
            found.append((t, reason))
        found.sort(key=lambda h: (h[0].first_seq, h[0].task_id))
        return [{"task_id": t.task_id, "seq": t.deps_seq, "reason": why} for t, why in found]

    def _cycles(self) -> dict[str, set[str]]:
        """Each scheduled task that waits on itself through scheduled tasks alone, mapped
        to the tasks of its cycle (its strongly connected set). None of them can start
        until a later row changes their deps: a task started by hand, or completed,
        leaves the cycle, so only scheduled tasks are followed. Tarjan's strongly
        connected components, iterative: a chain of a million tasks is no recursion."""
        tasks = self.tasks
        # The graph: scheduled tasks that wait on scheduled tasks. Most tasks wait on
        # none (no deps, or all completed) and cannot be in a cycle: they are left out
        # before the walk, and so is an edge to them.
        waits: dict[str, list[str]] = {}
        for t in tasks.values():
            if t.status == SCHEDULED and t.deps and t.deps_error is None:
                w = [d for d in t.deps if (u := tasks.get(d)) is not None
                     and u.status == SCHEDULED and u.deps_error is None]
                if w:
                    waits[t.task_id] = w
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: dict[str, set[str]] = {}
        for root in waits:
            if root in index:
                continue
            index[root] = low[root] = len(index)
            stack.append(root)
            on_stack.add(root)
            work = [(root, iter(waits[root]))]
            while work:
                v, deps = work[-1]
                d = next(deps, None)
                if d is not None:
                    if d not in waits:
                        continue  # waits on nothing: no way back from it
                    if d not in index:
                        index[d] = low[d] = len(index)
                        stack.append(d)
                        on_stack.add(d)
                        work.append((d, iter(waits[d])))
                    elif d in on_stack:
                        low[v] = min(low[v], index[d])
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] != index[v]:
                    continue
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == v:
                        break
                if len(members) > 1 or v in waits[v]:
                    ring = set(members)
                    for m in members:
                        out[m] = ring
        return out

    def _cycle_reason(self, t: TaskState, members: set[str]) -> str:
        """Why `t`, one of the strongly connected `members`, waits for ever: the cycle
        itself when it is short enough to read; in a larger one, the dep that leads back
        (one hop, so that a cycle of a million tasks costs no walk per task)."""
        if len(members) == 1:
            return "it depends on itself"
        if len(members) <= _CYCLE_SHOWN:
            ring = self._ring(t.task_id, members)
            return "its deps form a cycle: " + " -> ".join(
                quoted(d, cut=True) for d in [*ring, ring[0]])
        back = next(d for d in t.deps if d in members)
        return (f"its deps form a cycle of {len(members)} tasks: it waits on "
                f"{quoted(back, cut=True)}, whose deps lead back to it")

    def _ring(self, start: str, members: set[str]) -> list[str]:
        """One cycle through `start` within `members` (a strongly connected set): the
        path a breadth-first walk finds back to it, so the message names a real cycle."""
        came: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt = []
            for v in frontier:
                for d in self.tasks[v].deps:
                    if d == start:
                        path = [v]
                        while path[-1] != start:
                            path.append(came[path[-1]])
                        return path[::-1]
                    if d in members and d not in came:
                        came[d] = v
                        nxt.append(d)
            frontier = nxt
        return [start]  # unreachable for a strongly connected set

    def to_json(self) -> dict[str, object]:
        return {
            "finished": self.finished,
            "in_flight": self.in_flight,
            "scheduled": self.scheduled,
            "failed": self.failed,
            "abandoned": self.abandoned,
            "prior_resumes": self.resumes,
            "frontier": self.frontier,
            "held": self.held,
            "opened": self.opened,
            "closed": self.closed,
            "entry_count": self.entry_count,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "unknown_kinds": dict(sorted(self.unknown_kinds.items())),
            "tasks": [t.to_json() for t in self._ordered()],
        }


def _deps(payload: object) -> tuple[list[str], str | None] | None:
    """(the task ids, why they cannot be read or None) of the ``deps`` a task.scheduled
    payload names, or None when it names none. Ids that can be read are kept even when
    others cannot, so the projection shows what the row names."""
    if not isinstance(payload, dict) or "deps" not in payload:
        return None
    raw = payload["deps"]
    if not isinstance(raw, list):
        return [], deps_problem(raw)
    ids = [d for d in raw if type(d) is str]
    # Order kept, duplicates dropped: deps are a set, but a stable order keeps
    # to_json deterministic without sorting away what the scheduler wrote. A list of
    # strings is what `deps_problem` passes: only another is asked why (replay reads
    # every task.scheduled row, and almost all are such lists).
    return list(dict.fromkeys(ids)), (None if len(ids) == len(raw) else deps_problem(raw))


def replay(rows: Iterable[dict[str, Any]]) -> State:
    """Project rows (in chain order) into the run's state and frontier."""
    st = State()
    # Tasks first named by a row other than task.scheduled: the first schedule of one
    # moves its place (`first_seq`) there, the order the frontier is documented to keep.
    unscheduled: set[str] = set()
    for row in rows:
        kind = row.get("kind")
        seq = row.get("seq")
        seq = seq if type(seq) is int else st.head_seq + 1
        st.entry_count += 1
        st.head_seq = seq
        st.head_hash = row.get("entry_hash")
        status = _STATUS_OF.get(kind) if isinstance(kind, str) else None
        if status is not None:
            tid = row.get("task_id")
            if not isinstance(tid, str):
                _carry(st, row, str(kind))
                continue
            t = st.tasks.get(tid)
            if t is None:
                t = st.tasks[tid] = TaskState(tid, status, seq, seq)
                if status != SCHEDULED:
                    unscheduled.add(tid)
            elif status == SCHEDULED and tid in unscheduled:
                unscheduled.discard(tid)
                t.first_seq = seq
            t.last_seq = seq
            if status == STARTED:
                t.attempts += 1
            if status == SCHEDULED:
                deps = _deps(row.get("payload"))
                if deps is not None:
                    t.deps, t.deps_error = deps
                    t.deps_seq = seq
            if t.status != COMPLETED:
                t.status = status
        elif kind == "run.open":
            st.opened = True
        elif kind == "run.resumed":
            st.resumes += 1
        elif kind == "run.closed":
            st.closed = True
        else:
            _carry(st, row, str(kind))
    return st


def _carry(st: State, row: dict[str, Any], kind: str) -> None:
    st.unknown.append(row)
    st.unknown_kinds[kind] = st.unknown_kinds.get(kind, 0) + 1
