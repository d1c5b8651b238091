"""The processes of runs, as /proc shows them (SPEC-0022 REQ-3, REQ-7; DESIGN.md §3 "Runs").

Owns the identity every child of a run carries and the looks at /proc that find and stop
processes by it: a process's state and group (`proc_stat`), its environment (`environ`),
which process groups still have a running member (`live_groups`), signalling a group
(`signal_group`), and finding the running processes that carry a run's identity
(`find_marked`). runner.py stops a run's processes with them, orphans.py an earlier
daemon's.

The identity: the runner spawns each child as the leader of its own session and process
group and sets, after the env files so that no harness can change them, ``HARNESS_NAME``,
``HARNESS_RUN_ID``, ``HARNESS_RUN_TRIGGER``, ``HARNESS_SOCKET`` and ``HARNESS_STATE_DIR``,
the marker: the state directory of the daemon that spawned it, as `state_marker` spells
it. One daemon at a time holds a state directory (the ledger's lock), so the marker tells
that daemon's processes from any other's, whatever socket either serves. A descendant
inherits the environment, one that left the run's group or session (setsid) too.

Invariants: only processes of our uid are read; a zombie never counts as running (an init
that does not reap, a container's PID 1, keeps them); `find_marked` never returns this
process or a member of its process group or of a group <= 1, and `signal_group` never
signals one of those groups.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass

log = logging.getLogger("harness.supervisor")

ENV_NAME = "HARNESS_NAME"
ENV_RUN_ID = "HARNESS_RUN_ID"
ENV_TRIGGER = "HARNESS_RUN_TRIGGER"
ENV_SOCKET = "HARNESS_SOCKET"
ENV_STATE_DIR = "HARNESS_STATE_DIR"

# /proc states of a process that no longer runs: zombie, dead.
DEAD = (b"Z", b"X")


def state_marker(state: str) -> str:
    """The ``HARNESS_STATE_DIR`` of the runs of a daemon whose state directory is `state`.

    Resolved: the ledger's lock is on the directory, not on one spelling of its path, so
    a daemon that reaches it through a symlink is still the same directory's daemon.
    """
    return os.path.realpath(state)


def proc_stat(pid: str) -> tuple[bytes, int] | None:
    """(state, pgid) of a process from /proc/<pid>/stat; None when it is gone.

    Split after the last ")": the command name before it may hold spaces and parentheses.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0], int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def environ(pid: str) -> dict[bytes, bytes] | None:
    """The environment process `pid` was started with; None when it is gone or not ours."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    env: dict[bytes, bytes] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key] = value
    return env


def _pids() -> list[str] | None:
    try:
        return [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return None


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when no member is left.

    Our own group and a pgid <= 1 (every process we may signal) are never signalled:
    False, as for a group that is gone.
    """
    if pgid <= 1 or pgid == os.getpgrp():
        return False
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A member changed credentials (setuid); the rest of the group was still signalled.
        return True
    return True


def live_groups(pgids: Collection[int]) -> set[int]:
    """Those of the process groups `pgids` with a member still running, in one pass over
    /proc (zombies do not count).

    kill(pgid, 0) alone says yes for a zombie, and a descendant reparented to an init that
    does not reap stays one: every stop would wait out its grace. It does tell a group
    that is gone for good, so /proc is read only when one may still run.
    """
    maybe = {g for g in pgids if signal_group(g, 0)}
    if not maybe:
        return set()
    pids = _pids()
    if pids is None:
        return maybe  # no /proc: trust kill(2)
    live: set[int] = set()
    for pid in pids:
        st = proc_stat(pid)  # None: gone meanwhile
        if st is not None and st[1] in maybe and st[0] not in DEAD:
            live.add(st[1])
            if live == maybe:
                break
    return live


@dataclass(frozen=True)
class Marked:
    """A running process that carries a run's identity."""

    pid: int
    pgid: int
    harness: str
    run_id: int


def find_marked(marker: str, *, socket: str | None = None,
                run: tuple[str, int] | None = None) -> list[Marked]:
    """The running processes of our uid whose ``HARNESS_STATE_DIR`` is `marker`, sorted by
    pid; empty when /proc cannot be read (logged).

    With `socket`, also those that carry no marker at all and whose ``HARNESS_SOCKET`` is
    `socket`: runs spawned by a daemon from before the marker. With `run` (harness,
    run_id), only that run's. A process must carry its run's name and id as well: a shell
    an operator exported HARNESS_SOCKET in is not a run.
    """
    mark, sock = os.fsencode(marker), None if socket is None else os.fsencode(socket)
    me, my_group, uid = os.getpid(), os.getpgrp(), os.geteuid()
    pids = _pids()
    if pids is None:
        log.warning("cannot look for the processes of runs: /proc cannot be read")
        return []
    found: list[Marked] = []
    for pid in pids:
        if int(pid) == me:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue
        env = environ(pid)
        if env is None:
            continue
        theirs = env.get(ENV_STATE_DIR.encode())
        if theirs != mark and (theirs is not None or sock is None
                               or env.get(ENV_SOCKET.encode()) != sock):
            continue
        try:
            key = (os.fsdecode(env[ENV_NAME.encode()]), int(env[ENV_RUN_ID.encode()]))
        except (KeyError, ValueError):
            continue
        if run is not None and key != run:
            continue
        st = proc_stat(pid)
        if st is None or st[0] in DEAD or st[1] <= 1 or st[1] == my_group:
            continue
        found.append(Marked(int(pid), st[1], *key))
    return sorted(found, key=lambda m: m.pid)


__all__ = ["DEAD", "ENV_NAME", "ENV_RUN_ID", "ENV_SOCKET", "ENV_STATE_DIR", "ENV_TRIGGER",
           "Marked", "environ", "find_marked", "live_groups", "proc_stat", "signal_group",
           "state_marker"]
