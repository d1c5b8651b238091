"""Run the real `harness daemon` over an injected disk (tests only; nothing in src/ knows).

    python tests/faultdaemon.py [--slow-sync S] [--fail-write ERRNO] [--fail-sync ERRNO]
                                [--fail-query N] [--control FILE] [--watchdog S]
                                [--clock FILE]
                                -- [harness global options]

The seam is the one the daemon already has: `harness.daemon.main` opens its ledger with
the `RunLedger` name of its own module, and `RunLedger` takes a `files=` file layer. This
launcher rebinds that name to a subclass that always passes one shared
`harness.ledger.files.FaultyFiles`, then runs the real CLI's `daemon` command in this
process. Everything else — config, socket, manager, runner, writer — is the product's.

Faults given on the command line are armed before the ledger opens. `--control FILE`
changes them while the daemon runs: the test writes FILE as

    {"gen": N, "faults": {"sync": {"delay": 2.0}, "write": {"errno": "EROFS"}}}

(ops "open", "write", "sync", "truncate"; keys errno, delay, partial, times, and hang: true,
a hang that lasts until the next fault set is armed); a thread
polling every 20 ms disarms every fault, arms the new set and then writes FILE.ack as
``{"gen": N, "calls": {...}}`` (FaultyFiles' per-operation call counts), so the test knows
from when on the disk behaves as asked. `--watchdog S` arms faulthandler to dump every
thread's stack to stderr if the process is still alive after S seconds (and again every
S seconds), so a deadlock in a stress run leaves its stacks behind. `--fail-query N` makes
the ledger's first N queries fail with EIO, as reading a day file on a failing disk does
(reads do not go through the file layer). `--clock FILE` shifts the ledger's wall clock
(`RunLedger(clock=...)`, the stamps of every line) by the integer number of nanoseconds in
FILE, re-read at every call, so a test can step the wall clock back or forward mid-run.
"""

from __future__ import annotations

import argparse
import errno as errno_mod
import faulthandler
import json
import os
import sys
import threading
import time
from typing import Any

import harness.daemon
from harness.cli.main import cli
from harness.ledger.files import FaultyFiles
from harness.ledger.runledger import RunLedger

FAULTS = FaultyFiles()
POLL = 0.02
FAILING_QUERIES = [0]  # queries still to fail
CLOCK_FILE: list[str] = []  # --clock: the file holding the wall clock's offset


def shifted_clock() -> int:
    """time.time_ns() plus the offset in the --clock file (0 while it reads as none)."""
    try:
        with open(CLOCK_FILE[0]) as f:
            offset = int(f.read().strip() or 0)
    except (OSError, ValueError):
        offset = 0  # not written yet, or caught mid-write
    return time.time_ns() + offset


class FaultyRunLedger(RunLedger):
    """The daemon's RunLedger, writing through the shared FaultyFiles."""

    def __init__(self, directory: str, **kw: Any) -> None:
        kw["files"] = FAULTS
        if CLOCK_FILE:
            kw["clock"] = shifted_clock
        super().__init__(directory, **kw)

    def query(self, q: Any) -> Any:
        if FAILING_QUERIES[0] > 0:
            FAILING_QUERIES[0] -= 1
            raise OSError(errno_mod.EIO, os.strerror(errno_mod.EIO),
                          os.path.join(self.directory, "2026-01-01.jsonl"))
        return super().query(q)


def _errno(name: str | int | None) -> int | None:
    if name is None or isinstance(name, int):
        return name
    value = getattr(errno_mod, name, None)
    if not isinstance(value, int):
        raise SystemExit(f"faultdaemon: unknown errno {name!r}")
    return value


def arm(faults: dict[str, dict[str, Any]]) -> None:
    """Replace every armed fault by `faults` (op → inject() keywords)."""
    FAULTS.clear()
    for op, spec in faults.items():
        FAULTS.inject(op, errno=_errno(spec.get("errno")), delay=float(spec.get("delay", 0.0)),
                      partial=bool(spec.get("partial", False)), times=spec.get("times"),
                      hang=bool(spec.get("hang", False)))


def _write_ack(path: str, gen: int) -> None:
    with FAULTS._lock:  # a consistent snapshot of the counters
        calls = dict(FAULTS.calls)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"gen": gen, "calls": calls}, f)
    os.replace(tmp, path)


def _watch_control(path: str) -> None:
    applied: int | None = None
    while True:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = None  # not written yet, or caught mid-write: read it again next poll
        if isinstance(doc, dict) and doc.get("gen") != applied:
            try:
                arm(doc.get("faults") or {})
            except (SystemExit, ValueError, TypeError) as exc:
                print(f"faultdaemon: bad control file {path}: {exc}", file=sys.stderr,
                      flush=True)
            applied = doc.get("gen")
            _write_ack(f"{path}.ack", int(applied or 0))
        time.sleep(POLL)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="faultdaemon")
    p.add_argument("--slow-sync", type=float, default=0.0, metavar="S")
    p.add_argument("--fail-write", metavar="ERRNO")
    p.add_argument("--fail-sync", metavar="ERRNO")
    p.add_argument("--fail-query", type=int, default=0, metavar="N")
    p.add_argument("--control", metavar="FILE")
    p.add_argument("--watchdog", type=float, default=0.0, metavar="S")
    p.add_argument("--clock", metavar="FILE")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest

    initial: dict[str, dict[str, Any]] = {}
    if args.slow_sync:
        initial["sync"] = {"delay": args.slow_sync}
    if args.fail_sync:
        initial.setdefault("sync", {})["errno"] = args.fail_sync
    if args.fail_write:
        initial["write"] = {"errno": args.fail_write}
    arm(initial)
    FAILING_QUERIES[0] = args.fail_query
    if args.clock:
        CLOCK_FILE.append(args.clock)
    if args.control:
        threading.Thread(target=_watch_control, args=(args.control,), daemon=True,
                         name="faultdaemon-control").start()
    if args.watchdog:
        faulthandler.enable(all_threads=True)
        faulthandler.dump_traceback_later(args.watchdog, repeat=True, exit=False)

    harness.daemon.RunLedger = FaultyRunLedger  # type: ignore[misc]
    cli.main(args=[*rest, "daemon"], prog_name="harness")


if __name__ == "__main__":
    main(sys.argv[1:])
