"""Processes an earlier daemon left running, stopped at boot (SPEC-0022 REQ-7; DESIGN.md §3
"Runs").

Every process the runner spawns, and every descendant of one, carries the marker of the
daemon's state directory and its run's identity (procs.py). One daemon at a time holds a
state directory (the ledger's lock), and a booting daemon has spawned nothing yet: so every
running process that carries its state directory's marker was spawned by an earlier
daemon, whatever the ledger says of its run — the record closed by this boot's `reconcile`
(the daemon was killed), closed before it (a boot killed during this very sweep; a helper
that left its run's group and outlived the run), still open (the closed line could not be
synced: a full disk), or missing (an opened line the daemon died with still queued, under
REQ-6's exception, and no entry in state.json to record the run by: the boot records a
run that has one before this sweep, `history.settle_firings`). `kill_orphans`, called
before any run starts, stops them all, so a resident never runs twice. A run spawned by a
daemon from before the marker is found by the socket that daemon served, which must be
this one's.

`find_orphans` finds them by the marker (procs.find_marked) and groups them by process
group: a descendant that left its run's group (setsid) is a group of its own.

Invariants: a process is signalled only as part of a group found that way; never our own
process group, never a pgid <= 1; a group is SIGTERMed, polled (zombies do not count), and
SIGKILLed only if a member is still running after the grace; each group stopped is said in
one line of the daemon's log, naming its run and what the ledger holds of it, and, when
the run has a record with a log, in one note in that log.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..ledger.logref import log_file
from . import logs
from .procs import (
    ENV_NAME,
    ENV_RUN_ID,
    ENV_SOCKET,
    ENV_STATE_DIR,
    ENV_TRIGGER,
    find_marked,
    live_groups,
    signal_group,
    state_marker,
)
from .runner import DEFAULT_GRACE

log = logging.getLogger("harness.supervisor")

_POLL = 0.05

Lookup = Callable[[str, int], Mapping[str, Any] | None]


@dataclass
class Orphan:
    """A process group an earlier daemon left running, and the run it belongs to."""

    pgid: int
    harness: str
    run_id: int
    pids: list[int] = field(default_factory=list)
    signalled: bool = False  # SIGTERM reached the group
    killed: bool = False  # still running after the grace: SIGKILLed
    gone: bool = False  # no member left running when kill_orphans returned
    # Its run's record when the sweep began (None: the ledger has none), and whether this
    # boot's reconcile is what closed it.
    record: Mapping[str, Any] | None = field(default=None, compare=False)
    crashed: bool = field(default=False, compare=False)


def find_orphans(state: str, socket_path: str) -> list[Orphan]:
    """The process groups of the running processes an earlier daemon of state directory
    `state` spawned (or, from before the marker, a daemon serving `socket_path`), sorted
    by pgid; empty when /proc cannot be read. A group's run is its lowest pid's."""
    found: dict[int, Orphan] = {}
    for m in find_marked(state_marker(state), socket=socket_path):
        found.setdefault(m.pgid, Orphan(m.pgid, m.harness, m.run_id)).pids.append(m.pid)
    return [found[g] for g in sorted(found)]


def _say(o: Orphan) -> None:
    """The daemon's one line on a group it is about to stop."""
    run = f"run {o.harness}/{o.run_id}: its process group {o.pgid}"
    rec = o.record
    if o.crashed or (rec is not None and rec.get("outcome") == "running"):
        log.warning("%s outlived the crashed daemon; stopping it", run)
    elif rec is not None:
        log.warning("%s outlived the daemon that started it (the run's record, closed "
                    "before this boot, reads %s); stopping it", run, rec.get("outcome"))
    else:
        log.warning("%s outlived the daemon that started it, and the ledger has no record "
                    "of that run; stopping it", run)


def kill_orphans(state: str, socket_path: str, crashed: Iterable[Mapping[str, Any]] = (),
                 record: Lookup | None = None, *, grace: float = DEFAULT_GRACE,
                 found: list[Orphan] | None = None) -> list[Orphan]:
    """Stop every process group an earlier daemon of state directory `state` left running
    (`find_orphans`); return them.

    `crashed` are the folded records this boot's `reconcile` closed (``harness``,
    ``run_id``, ``log``); `record` looks up any other run's record (the ledger's `get`;
    None: no other is known). `state` also finds a log path the ledger stored cut. Each
    group gets SIGTERM; what is still running after `grace` gets SIGKILL. Blocking: the
    daemon calls it in a thread, before any run can start. `found`: the groups a
    `find_orphans` of this boot found (none has been spawned since), not looked for again.
    """
    closed = {(r["harness"], r["run_id"]): r for r in crashed}
    orphans = find_orphans(state, socket_path) if found is None else found
    live = []
    for o in orphans:
        key = (o.harness, o.run_id)
        o.crashed = key in closed
        o.record = closed.get(key) or (record(*key) if record is not None else None)
        _say(o)
        if signal_group(o.pgid, signal.SIGTERM):
            o.signalled = True
            live.append(o)
        else:
            o.gone = True
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(_POLL)
        running = live_groups([o.pgid for o in live])
        for o in [o for o in live if o.pgid not in running]:
            o.gone = True
            live.remove(o)
    for o in live:
        o.killed = True
        signal_group(o.pgid, signal.SIGKILL)
    end = time.monotonic() + grace
    while live and time.monotonic() < end:  # SIGKILL cannot be ignored: this is brief
        running = live_groups([o.pgid for o in live])
        for o in [o for o in live if o.pgid not in running]:
            o.gone = True
            live.remove(o)
        if live:
            time.sleep(_POLL)
    for o in live:
        log.error("run %s/%s: process group %d still running after SIGKILL", o.harness,
                  o.run_id, o.pgid)
    for o in orphans:
        if not o.signalled or o.record is None:
            continue  # it ended on its own between the scan and the signal, or has no log
        how = f"SIGKILL after {grace:g}s" if o.killed else "SIGTERM"
        # The log file, not the field: a path the ledger stored cut names another file.
        path = log_file(o.record, state)
        if path is None:
            continue
        if o.crashed or o.record.get("outcome") == "running":
            logs.append_note(path, f"stopped the orphaned process group {o.pgid} left by "
                                   f"the crashed daemon ({how})")
        else:
            logs.append_note(path, f"stopped the process group {o.pgid} that outlived the "
                                   f"run and the daemon that started it ({how})")
    return orphans


__all__ = ["ENV_NAME", "ENV_RUN_ID", "ENV_SOCKET", "ENV_STATE_DIR", "ENV_TRIGGER", "Orphan",
           "find_orphans", "kill_orphans"]
