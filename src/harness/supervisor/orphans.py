"""Orphaned run processes after a daemon crash (SPEC-0022 REQ-7; DESIGN.md §3 "Runs").

Every child the runner spawns is its own process group and carries ``HARNESS_NAME``,
``HARNESS_RUN_ID``, ``HARNESS_RUN_TRIGGER`` and ``HARNESS_SOCKET`` (runner.py `Run._spawn`,
set after the env files so a harness cannot change them). A daemon killed with SIGKILL
leaves those groups running; at the next boot `reconcile` closes their records as
interrupted/daemon_crash, and `kill_orphans` — called before any run starts — ends the
processes, so a resident never runs twice.

`find_orphans` reads ``/proc/<pid>/environ`` of the processes we may read (owned by our
uid) and picks those whose ``HARNESS_SOCKET`` is this daemon's control socket and whose
(``HARNESS_NAME``, ``HARNESS_RUN_ID``) is a crashed run. The socket path is what tells
this daemon's world from another's: several daemons (tests, users) may run harnesses of
the same names at once.

Invariants: a process is signalled only as part of a group found that way; never our
own process group, never a pgid <= 1; a group is SIGTERMed, polled (zombies do not count),
and SIGKILLed only if a member is still running after the grace; each run whose group
was stopped gets one note in its log saying so.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..ledger.logref import log_file
from . import logs
from .runner import (
    DEAD,
    DEFAULT_GRACE,
    ENV_NAME,
    ENV_RUN_ID,
    ENV_SOCKET,
    ENV_TRIGGER,
    _group_alive,
    _signal_group,
    proc_stat,
)

log = logging.getLogger("harness.supervisor")

_POLL = 0.05


@dataclass
class Orphan:
    """A process group left by a crashed daemon, and the run it belongs to."""

    pgid: int
    harness: str
    run_id: int
    pids: list[int] = field(default_factory=list)
    signalled: bool = False  # SIGTERM reached the group
    killed: bool = False  # still running after the grace: SIGKILLed
    gone: bool = False  # no member left running when kill_orphans returned


def _environ(pid: str) -> dict[bytes, bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:  # gone, or not ours to read
        return None
    env: dict[bytes, bytes] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key] = value
    return env


def find_orphans(socket_path: str, runs: Iterable[tuple[str, int]]) -> list[Orphan]:
    """The live process groups of `runs` ((harness, run_id) pairs) that belong to the
    daemon serving `socket_path`, sorted by pgid; empty when /proc cannot be read."""
    wanted = set(runs)
    if not wanted:
        return []
    sock = os.fsencode(socket_path)
    me, my_group, uid = os.getpid(), os.getpgrp(), os.geteuid()
    try:
        pids = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError as exc:
        log.warning("cannot look for orphaned runs: /proc: %s", exc)
        return []
    found: dict[int, Orphan] = {}
    for pid in pids:
        if int(pid) == me:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue
        env = _environ(pid)
        if env is None or env.get(ENV_SOCKET.encode()) != sock:
            continue
        try:
            key = (os.fsdecode(env[ENV_NAME.encode()]), int(env[ENV_RUN_ID.encode()]))
        except (KeyError, ValueError):
            continue
        if key not in wanted:
            continue
        st = proc_stat(pid)
        if st is None or st[0] in DEAD:
            continue
        pgid = st[1]
        if pgid <= 1 or pgid == my_group:
            continue
        orphan = found.setdefault(pgid, Orphan(pgid, *key))
        orphan.pids.append(int(pid))
    return [found[g] for g in sorted(found)]


def kill_orphans(socket_path: str, records: Iterable[Mapping[str, Any]], *,
                 grace: float = DEFAULT_GRACE, state: str | None = None) -> list[Orphan]:
    """Stop the process groups the crashed runs in `records` left behind; return them.

    `records` are the folded records `reconcile` closed (``harness``, ``run_id``, ``log``);
    `state` is the state dir holding their ledger, where a log path the ledger stored cut
    is found (None: such a log gets no note). Each group gets SIGTERM; what is still
    running after `grace` gets SIGKILL. Blocking: the daemon calls it in a thread, before
    any run can start.
    """
    recs = {(r["harness"], r["run_id"]): r for r in records}
    my_group = os.getpgrp()
    # find_orphans never returns these; filtered again here, where the signals are sent.
    orphans = [o for o in find_orphans(socket_path, recs) if 1 < o.pgid != my_group]
    live = []
    for o in orphans:
        log.warning("run %s/%s: its process group %d outlived the crashed daemon; stopping it",
                    o.harness, o.run_id, o.pgid)
        if _signal_group(o.pgid, signal.SIGTERM):
            o.signalled = True
            live.append(o)
        else:
            o.gone = True
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(_POLL)
        for o in [o for o in live if not _group_alive(o.pgid)]:
            o.gone = True
            live.remove(o)
    for o in live:
        o.killed = True
        _signal_group(o.pgid, signal.SIGKILL)
    end = time.monotonic() + grace
    while live and time.monotonic() < end:  # SIGKILL cannot be ignored: this is brief
        for o in [o for o in live if not _group_alive(o.pgid)]:
            o.gone = True
            live.remove(o)
        if live:
            time.sleep(_POLL)
    for o in live:
        log.error("run %s/%s: process group %d still running after SIGKILL", o.harness,
                  o.run_id, o.pgid)
    for o in orphans:
        if not o.signalled:
            continue  # it ended on its own between the scan and the signal
        how = f"SIGKILL after {grace:g}s" if o.killed else "SIGTERM"
        # The log file, not the field: a path the ledger stored cut names another file.
        path = log_file(recs[(o.harness, o.run_id)], state)
        if path is not None:
            logs.append_note(path, f"stopped the orphaned process group {o.pgid} left by "
                                   f"the crashed daemon ({how})")
    return orphans


__all__ = ["ENV_NAME", "ENV_RUN_ID", "ENV_SOCKET", "ENV_TRIGGER", "Orphan", "find_orphans",
           "kill_orphans"]
