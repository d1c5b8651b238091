"""A real daemon over injected disks and through crashes (SPEC-0022 REQ-6, REQ-7, REQ-13).

The daemon is the real one, started as `python tests/faultdaemon.py … --` (see that file):
the only fake is the ledger's file layer, a `FaultyFiles` the test drives through a control
file while the daemon runs (slow syncs, a read-only disk that recovers). The SIGKILL and
legacy-import tests need no fake and boot the plain `python -m harness.cli daemon`.

Every wait is a poll with a generous deadline; the timing assertions only ever compare an
instant with one the injected delay provably separates it from (a sync delayed by S seconds
ends at least S seconds after its line's `at`), so a loaded machine can make them slower,
never wrong.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import harness.supervisor.manager as manager_mod
from conftest import World
from daemons import (
    DEADLINE,
    Daemons,
    FaultDaemons,
    alive,
    comm,
    interruptible,
    read_log,
    reaped,
    record_of,
    request,
    runs_of,
    states_of,
    until,
)
from harness.control.client import DaemonError
from harness.ledger.runledger import RunLedger
from harness.timefmt import format_ns, parse_ns
from ledgertools import all_lines, line_of, verify_ok

LONG = 90.0  # deadline for what waits out writer backoff or several 2 s syncs
NS = 1_000_000_000


# -- helpers --------------------------------------------------------------------------


def ledger_info(d: Daemons) -> dict[str, Any]:
    info: dict[str, Any] = request(d, "daemon_info")["ledger"]
    return info


def seqs_in_order(world: World) -> list[int]:
    """The seqs on disk, asserting they run 1, 2, 3, … in file order with no gap or repeat."""
    seqs = [x["seq"] for x in all_lines(world.ledger)]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    return seqs


def script(world: World, name: str, body: str) -> str:
    """A Python script in the world, run by the daemon's harnesses; returns its path."""
    path = world.root / name
    path.write_text(textwrap.dedent(body))
    return str(path)


# A resident that records its pid (for cleanup) and its start time, then runs until told.
SERVICE = """
import os, sys, time
root, name = sys.argv[1], sys.argv[2]
open(os.path.join(root, "pids", str(os.getpid())), "w").close()
with open(os.path.join(root, name + ".starts"), "a") as f:
    f.write(f"{time.time_ns()}\\n")
mode = sys.argv[3] if len(sys.argv) > 3 else "serve"
if mode == "exit-once" and not os.path.exists(os.path.join(root, name + ".exited")):
    while not os.path.exists(os.path.join(root, name + ".go")):
        time.sleep(0.02)
    open(os.path.join(root, name + ".exited"), "w").close()
    sys.exit(0)
print("up", flush=True)
time.sleep(600)
"""

# A one-shot that records when it started and what the ledger files held at that moment.
PROBE = """
import glob, json, os, sys, time
t = time.time_ns()
root, ledger = sys.argv[1], sys.argv[2]
lines = []
for p in sorted(glob.glob(os.path.join(ledger, "*.jsonl"))):
    with open(p, "rb") as f:
        lines += [json.loads(r) for r in f.read().split(b"\\n")[:-1] if r]
with open(os.path.join(root, "probe.%d.json" % os.getpid()), "w") as f:
    json.dump({"t": t, "lines": lines}, f)
"""


def starts(world: World, name: str) -> list[int]:
    path = world.root / f"{name}.starts"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def wait_live(world: World, name: str, run_id: int, n_starts: int) -> dict[str, Any]:
    """Run `run_id` of `name` is open and its process has started (n_starts starts so far)."""
    def probe() -> dict[str, Any] | None:
        rec = record_of(world, name, run_id)
        ok = rec is not None and rec["outcome"] == "running" and len(starts(world, name)) >= \
            n_starts
        return rec if ok else None
    return until(f"{name} run {run_id} to be up", probe)


# -- REQ-6: a slow disk ---------------------------------------------------------------


def test_stop_waits_for_the_closed_line_or_the_2s_bound(world: World, fd: FaultDaemons) -> None:
    svc = script(world, "service.py", SERVICE)
    fd.write_config(f"""
[harness.svc]
kind = "resident"
restart_delay = "200ms"
argv = ["{sys.executable}", "{svc}", "{world.root}", "svc"]
""")
    fd.start_faulty()
    wait_live(world, "svc", 1, 1)

    # A sync that takes 1.2 s, inside the bound: stop returns only once the line is synced.
    fd.faults(sync={"delay": 1.2})
    t0 = time.monotonic()
    res = world.harness("stop", "svc")
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "svc: stopped run 1 (cancelled/operator)"
    assert res.stderr == ""  # its record is on disk: nothing to add
    assert took >= 1.2, took
    closed = line_of(world.ledger, "closed", "svc", 1)
    assert closed is not None
    assert closed["outcome"] == "cancelled" and closed["reason"] == "operator"
    assert ledger_info(fd)["append_errors"] == 0

    # A sync that takes 3 s, past the bound: stop returns at the bound (2 s), the late
    # sync is logged and counted, and the closed line still lands.
    fd.faults()
    res = world.harness("start", "svc")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "svc: started (run 2)"
    wait_live(world, "svc", 2, 2)
    fd.faults(sync={"delay": 3.0})
    t0 = time.monotonic()
    res = world.harness("stop", "svc")
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert took >= 2.0, took
    assert res.stdout.strip() == "svc: stopped run 2 (cancelled/operator)"
    # Returned at the bound: the operator is told the record is not on disk yet.
    assert res.stderr == ("harness: svc run 2's closed line is not on disk yet: the "
                          "ledger's disk is failing; the line stays queued and is written "
                          "once the disk takes it\n")
    until("the late closed line", lambda: line_of(world.ledger, "closed", "svc", 2))
    until("the late sync to be counted", lambda: ledger_info(fd)["append_errors"] == 1)
    # Counted when the bound passed, maybe before the sync returned and committed it.
    until("the late sync to return", lambda: ledger_info(fd)["queued"] == 0, LONG)
    err = fd.stderr()
    # Told when the bound passes (or, should the machine stall the watchdog past the
    # sync's end, by the writer once it returns); counted once either way.
    assert "not synced within 2s" in err
    assert len(re.findall(r" ERROR harness\.ledger: ledger write and sync of \S+ (has not "
                          r"returned within|took [0-9.]+s, over) the 2s bound", err)) == 1
    fd.faults()
    rec = record_of(world, "svc", 2)
    assert rec is not None and rec["outcome"] == "cancelled" and rec["reason"] == "operator"
    seqs_in_order(world)
    verify_ok(world)


def test_a_one_shot_spawns_only_after_its_opened_line_is_synced(
        world: World, fd: FaultDaemons) -> None:
    probe = script(world, "probe.py", PROBE)
    fd.write_config(f"""
[harness.probe]
kind = "oneshot"
argv = ["{sys.executable}", "{probe}", "{world.root}", "{world.ledger}"]
""")
    fd.start_faulty()
    delay = 1.2  # inside REQ-6's 2 s bound, so the append succeeds and the spawn follows
    fd.faults(sync={"delay": delay})
    res = world.harness("trigger", "probe", "--wait")
    assert res.returncode == 0, res.stderr
    [out] = list(world.root.glob("probe.*.json"))
    seen = json.loads(out.read_text())
    fd.faults()
    opened = line_of(world.ledger, "opened", "probe", 1)
    assert opened is not None
    # The child saw its own opened line in the file …
    assert opened in seen["lines"]
    # … and started no sooner than the sync that made it durable could have ended.
    assert seen["t"] - parse_ns(opened["at"]) >= delay * NS
    rec = record_of(world, "probe", 1)
    assert rec is not None and rec["outcome"] == "success" and rec["exit_code"] == 0
    seqs_in_order(world)
    verify_ok(world)


def test_a_one_shot_under_the_specs_2s_sync_leaves_no_phantom_running_record(
        world: World, fd: FaultDaemons) -> None:
    """REQ-6's own example disk (every sync takes 2 s) against a one-shot: the opened line's
    wait hits the 2 s bound. Whether admission then proceeds or refuses, the run must not be
    left as a record that reads `running` with no process behind it."""
    fd.write_config("""
[harness.ok]
kind = "oneshot"
argv = ["true"]
""")
    fd.start_faulty()
    fd.faults(sync={"delay": 2.0})
    res = world.harness("trigger", "ok", "--wait")
    # The opened line's sync and the closed line's both pass the bound.
    until("the late syncs", lambda: ledger_info(fd)["append_errors"] >= 1, LONG)
    fd.faults()
    until("the queue to drain", lambda: ledger_info(fd)["queued"] == 0, LONG)
    [rec] = runs_of(world, "ok")
    assert rec["run_id"] == 1
    # Under no budget, admitted: it ran once the 2 s bound passed (REQ-6).
    assert res.returncode == 0, res.stderr
    assert (rec["outcome"], rec["exit_code"]) == ("success", 0)
    assert "Traceback" not in fd.stderr()
    seqs_in_order(world)
    verify_ok(world)


def flapping_resident(world: World, fd: FaultDaemons) -> subprocess.Popen[str]:
    """A faulty daemon supervising `flap`, a resident restarted at once (`restart =
    "always"`) that exits 0 on its own once `flap.go` appears; returned once run 1 is live."""
    svc = script(world, "service.py", SERVICE)
    fd.write_config(f"""
[harness.flap]
kind = "resident"
restart = "always"
restart_delay = "100ms"
argv = ["{sys.executable}", "{svc}", "{world.root}", "flap", "exit-once"]
""")
    proc = fd.start_faulty()
    wait_live(world, "flap", 1, 1)
    return proc


def test_an_unbudgeted_residents_restart_does_not_wait_for_a_slow_sync(
        world: World, fd: FaultDaemons) -> None:
    flapping_resident(world, fd)
    delay = 3.0
    fd.faults(sync={"delay": delay})
    (world.root / "flap.go").touch()  # run 1 now exits 0 on its own
    until("the restart to spawn", lambda: len(starts(world, "flap")) >= 2)
    t_restart = starts(world, "flap")[1]
    closed = until("run 1's closed line", lambda: line_of(world.ledger, "closed", "flap", 1), LONG)
    # The restart's process started before run 1's closed line could have been synced.
    assert t_restart < parse_ns(closed["at"]) + delay * NS, (
        (t_restart - parse_ns(closed["at"])) / NS)
    opened = until("run 2's opened line", lambda: line_of(world.ledger, "opened", "flap", 2), LONG)
    assert opened["seq"] == closed["seq"] + 1
    assert closed["outcome"] == "success" and closed["exit_code"] == 0
    assert opened["trigger"] == "restart"
    until("both lines durable", lambda: ledger_info(fd)["queued"] == 0, LONG)
    fd.faults()
    rec = record_of(world, "flap", 2)
    assert rec is not None and rec["outcome"] == "running" and rec["trigger"] == "restart"
    seqs_in_order(world)
    verify_ok(world)


# -- REQ-6: a read-only disk that recovers ---------------------------------------------

RO = {"write": {"errno": "EROFS"}, "sync": {"errno": "EROFS"}}


def counted_errors_logged(err: str) -> int:
    """How many append errors the daemon's stderr reports: each failure is told once,
    by its line in full, or in a summary of repeats as "N more time(s)"; a late sync by
    its own line."""
    n = 0
    for ln in err.splitlines():
        if " ERROR harness.ledger: " not in ln:
            continue
        if m := re.search(r": (\d+) more time\(s\) in [0-9.]+s, \d+ failure\(s\) so far", ln):
            n += int(m[1])
        elif (ln.endswith("retrying in order") or "over the 2s bound" in ln
              or "has not returned within the 2s bound" in ln):
            n += 1
    return n


def test_daemon_info_shows_a_hung_sync_counted_and_degraded_while_it_hangs(
        world: World, fd: FaultDaemons) -> None:
    """REQ-6 on a real daemon: a sync that hangs (a frozen disk) has failed once it has not
    returned within 2 s. daemon_info counts it and reads degraded while it still hangs, the
    log says so with its harness and seq then, and once it returns nothing more is counted,
    the log tells the episode's end and every line lands once, in order."""
    fd.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    fd.start_faulty()
    fd.booted()
    seq = ledger_info(fd)["next_seq"]
    fd.faults(sync={"hang": True})
    request(fd, "trigger", name="ok")  # its opened line's sync hangs; admitted at the bound
    # The opened line, and the closed line queued behind it once `true` has exited.
    info = until("the hang to be counted, the closed line queued",
                 lambda: (i := ledger_info(fd))["append_errors"] and i["queued"] == 2 and i,
                 LONG)
    assert (info["append_errors"], info["degraded"], info["queued"]) == (1, True, 2)
    day = re.escape(str(world.ledger)) + r"/[0-9]{4}-[0-9]{2}-[0-9]{2}\.jsonl"
    hung = re.compile(rf"^\S+ \S+ ERROR harness\.ledger: ledger write and sync of {day} has "
                      rf"not returned within the 2s bound \(harness=ok run_id=1 seq={seq}\); "
                      r"1 line\(s\) queued behind it$", re.M)
    assert len(hung.findall(fd.stderr())) == 1
    assert "over the 2s bound" not in fd.stderr()

    fd.faults()  # the hung sync returns
    until("the queue to drain", lambda: ledger_info(fd)["queued"] == 0, LONG)
    info = ledger_info(fd)
    assert (info["append_errors"], info["degraded"]) == (1, False)
    err = fd.stderr()
    assert len(hung.findall(err)) == 1 and "over the 2s bound" not in err
    assert counted_errors_logged(err) == 1
    assert re.search(rf" WARNING harness\.ledger: ledger: writing {day} again after "
                     r"1 failure\(s\) in [0-9.]+s$", err, re.M)
    new = [(x["seq"], x["type"], x["harness"], x["run_id"]) for x in all_lines(world.ledger)
           if x["seq"] >= seq]
    assert new == [(seq, "opened", "ok", 1), (seq + 1, "closed", "ok", 1)]
    rec = record_of(world, "ok", 1)
    assert rec is not None and (rec["outcome"], rec["exit_code"]) == ("success", 0)
    assert "Traceback" not in err
    seqs_in_order(world)
    verify_ok(world)


def test_a_read_only_disk_counts_logs_and_then_drains_in_order(
        world: World, fd: FaultDaemons) -> None:
    svc = script(world, "service.py", SERVICE)
    fd.write_config(f"""
[harness.svc]
kind = "resident"
restart_delay = "200ms"
argv = ["{sys.executable}", "{svc}", "{world.root}", "svc"]

[harness.flap]
kind = "resident"
restart = "always"
restart_delay = "100ms"
argv = ["{sys.executable}", "{svc}", "{world.root}", "flap", "exit-once"]

[harness.ok]
kind = "oneshot"
argv = ["true"]
""")
    fd.start_faulty()
    wait_live(world, "svc", 1, 1)
    wait_live(world, "flap", 1, 1)
    assert world.harness("trigger", "ok", "--wait").returncode == 0
    before = all_lines(world.ledger)
    assert [x["type"] for x in before] == ["opened", "opened", "opened", "closed"]
    assert ledger_info(fd)["append_errors"] == 0

    fd.faults(**RO)
    # An operator stop still answers (with the record as it will read), its line queued.
    res = world.harness("stop", "svc")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "svc: stopped run 1 (cancelled/operator)"
    # An unbudgeted resident that exits on its own restarts while the disk is read-only.
    (world.root / "flap.go").touch()
    until("flap to restart on a read-only disk", lambda: len(starts(world, "flap")) == 2)
    info = ledger_info(fd)
    assert info["append_errors"] >= 1 and info["degraded"] is True
    assert info["queued"] == 3  # svc 1 closed, flap 1 closed, flap 2 opened
    assert all_lines(world.ledger) == before  # nothing reached the file
    err = fd.stderr()
    day = sorted(world.ledger.glob("*.jsonl"))[-1]
    assert (f"ERROR harness.ledger: ledger write of {day} failed: Read-only file system "
            "(injected on write) (harness=svc run_id=1 seq=5)") in err

    fd.faults()
    until("the queue to drain", lambda: ledger_info(fd)["queued"] == 0, LONG)
    info = ledger_info(fd)
    assert info["degraded"] is False
    assert info["append_errors"] == counted_errors_logged(fd.stderr())
    # And the log says the disk came back, with the count of the failures before.
    recovered = re.findall(rf" WARNING harness\.ledger: ledger: writing {re.escape(str(day))} "
                           r"again after (\d+) failure\(s\) in [0-9.]+s$", fd.stderr(), re.M)
    assert recovered and sum(map(int, recovered)) == info["append_errors"]
    after = all_lines(world.ledger)
    assert after[:len(before)] == before
    new = [(x["seq"], x["type"], x["harness"], x["run_id"]) for x in after[len(before):]]
    assert new == [(5, "closed", "svc", 1), (6, "closed", "flap", 1), (7, "opened", "flap", 2)]
    assert after[4]["outcome"] == "cancelled" and after[4]["reason"] == "operator"
    assert after[5]["outcome"] == "success" and after[5]["exit_code"] == 0
    assert after[6]["trigger"] == "restart"
    seqs_in_order(world)
    verify_ok(world)
    recs = {(r["harness"], r["run_id"]): r["outcome"]
            for r in json.loads(world.harness("runs", "--json").stdout)}
    assert recs == {("svc", 1): "cancelled", ("flap", 1): "success", ("flap", 2): "running",
                    ("ok", 1): "success"}


@pytest.mark.parametrize("budgeted", [False, True])
def test_a_trigger_on_a_read_only_disk_leaves_no_open_record(
        world: World, fd: FaultDaemons, budgeted: bool) -> None:
    """A one-shot whose opened line cannot be synced: under no budget it is admitted anyway
    (REQ-6: supervision does not wait on the retry); under a budget it is not started and
    closes failed/spawn. Either way, once the disk is back its lines land in order and the
    record is closed — it never reads `running` with no process behind it."""
    fd.write_config(f"""
[harness.ok]
kind = "oneshot"
argv = ["true"]
{"max_runs_per_day = 100" if budgeted else ""}
""")
    fd.start_faulty()
    assert world.harness("trigger", "ok", "--wait").returncode == 0
    fd.faults(**RO)
    res = world.harness("trigger", "ok")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "2"
    until("the append error", lambda: ledger_info(fd)["append_errors"] >= 1, LONG)
    fd.faults()
    until("the queue to drain", lambda: ledger_info(fd)["queued"] == 0, LONG)
    rec2 = until("run 2 closed", lambda: (r := {x["run_id"]: x for x in runs_of(world, "ok")}
                                           .get(2)) and r["outcome"] != "running" and r, LONG)
    if budgeted:
        assert (rec2["outcome"], rec2["reason"]) == ("failed", "spawn")
        assert "exit_code" not in rec2
    else:
        assert (rec2["outcome"], rec2["exit_code"]) == ("success", 0)
        assert "run ok/2: opened line not yet durable, starting anyway" in fd.stderr()
    # The next trigger works (run 3: ids are never reused).
    again = world.harness("trigger", "ok", "--wait")
    assert again.returncode == 0, again.stderr
    recs = {r["run_id"]: r for r in runs_of(world, "ok")}
    assert sorted(recs) == [1, 2, 3]
    assert recs[1]["outcome"] == "success" and recs[3]["outcome"] == "success"
    assert "Traceback" not in fd.stderr()
    seqs_in_order(world)
    verify_ok(world)


def test_sigterm_with_lines_the_disk_never_took_exits_1_naming_them_without_a_traceback(
        world: World, fd: FaultDaemons) -> None:
    """REQ-20: the shutdown drains the queue within its timeout. When the disk takes no
    write until the end, what is still queued is lost to this process: the daemon logs
    one line naming the first of it (harness, run_id, seq) and exits 1, not 0 (nothing
    says the history is whole) and not with a traceback."""
    fd.write_config("""
[harness.ok]
kind = "oneshot"
argv = ["true"]
""")
    proc = fd.start_faulty()
    fd.booted()
    fd.faults(**RO)
    res = world.harness("trigger", "ok")
    assert (res.returncode, res.stdout, res.stderr) == (0, "1\n", "")
    # The run ends (its process was started anyway, REQ-6); its closed line is queued too.
    until("both lines of run 1 queued", lambda: ledger_info(fd)["queued"] == 2, LONG)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 1, fd.stderr()
    err = fd.stderr()
    assert "Traceback" not in err
    lost = [ln.split(" ", 2)[2] for ln in err.splitlines() if "they are lost" in ln]
    assert lost == ["ERROR harness.daemon: ledger: closed with 2 line(s) still queued (not "
                    "durable) (harness=ok run_id=1 seq=1); they are lost"]
    assert all_lines(world.ledger) == []


def test_a_ledger_error_is_scrubbed_once_and_keeps_its_record_in_the_daemons_log(
        world: World, fd: FaultDaemons) -> None:
    """A ledger error is scrubbed where it is made (LedgerError), and the ledger's own
    warnings by its logger's filter; the daemon's handler, and `_say`, scrubbed the
    whole line again. A secret whose form runs to the end of the line ("Authorization:
    Bearer ...", in a state dir's name) then took with it every word after the error:
    the harness and seq REQ-6 logs a failure with, the count of the repeats, the queue.
    Now each piece is scrubbed once, where it enters: the secret reads [REDACTED] once,
    the rest of each line is kept, and a line with no secret is as it was written."""
    token = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # the form of a GitHub token
    world.env["XDG_STATE_HOME"] = str(world.root / f"Authorization: Bearer {token}" / "s")
    shown = f"{world.root}/Authorization: Bearer [REDACTED]"
    fd.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    proc = fd.start_faulty()
    fd.booted()
    # A second daemon on the same state dir (its own socket) cannot have the ledger.
    second = subprocess.run([sys.executable, "-m", "harness.cli", "--socket",
                             str(world.root / "other.sock"), "daemon"], env=world.env,
                            capture_output=True, text=True, timeout=LONG)
    assert (second.returncode, second.stderr.splitlines()[-1]) == (
        1, f"harness: cannot open the ledger {shown}: the ledger {shown}")
    fd.faults(**RO)
    res = world.harness("trigger", "ok")
    assert (res.returncode, res.stdout, res.stderr) == (0, "1\n", "")
    until("both lines of run 1 queued", lambda: ledger_info(fd)["queued"] == 2, LONG)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 1, fd.stderr()
    err = fd.stderr()
    assert token not in err and "Traceback" not in err
    said = [ln.split(" ", 2)[2] for ln in err.splitlines() if " INFO " not in ln]
    failed = f"ledger write of {shown} (harness=ok run_id=1 seq=1)"
    assert sorted(said[:3]) == sorted([
        f"ERROR harness.ledger: {failed}; 1 line(s) queued, retrying in order",
        f"ERROR harness.supervisor: run ok/1: opened line not yet durable, starting anyway: "
        f"{failed}",
        # No secret: as the ledger wrote it.
        "ERROR harness.supervisor: run ok/1: closed line not yet durable: queued behind a "
        "failing write; it will be retried in order (harness=ok run_id=1 seq=2)",
    ])
    repeats = re.compile(rf"ERROR harness\.ledger: {re.escape(failed)}: \d+ more time\(s\) "
                         r"in [0-9.]+s, \d+ failure\(s\) so far(; 2 line\(s\) queued, "
                         r"retrying in order)?")
    assert said[3:-2] and all(repeats.fullmatch(ln) for ln in said[3:-2]), said
    assert re.fullmatch(rf"ERROR harness\.ledger: ledger: gave up on {re.escape(shown)} after "
                        r"\d+ failure\(s\) in [0-9.]+s; 2 line\(s\) still queued",
                        said[-2]), said
    assert said[-1] == ("ERROR harness.daemon: ledger: closed with 2 line(s) still queued "
                        "(not durable) (harness=ok run_id=1 seq=1); they are lost")
    assert all(ln.count("[REDACTED]") <= 1 for ln in said)


# -- `trigger --wait` on a disk that takes no line ------------------------------------


def _waiting(world: World, err: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "trigger", "ok", "--wait"],
                            env=world.env, stdout=subprocess.PIPE, stderr=err, text=True,
                            preexec_fn=interruptible)


def _stuck_line(world: World, run_id: int) -> str:
    day = sorted(world.ledger.glob("*.jsonl"))[-1]
    return (f"harness: ok run {run_id}: its record is not durable yet, the run ledger cannot "
            f"write it (ledger write of {day} failed: Read-only file system (injected on "
            "write)); still waiting (Ctrl-C stops the wait, not the run)\n")


def test_trigger_wait_says_once_why_the_record_is_not_durable_then_waits_for_it(
        world: World, fd: FaultDaemons) -> None:
    """The ledger's disk refuses every line: `trigger --wait` hung, silent, for as long
    as it did. Now it says once, on stderr, that the run's record cannot be written and
    the daemon's reason, keeps waiting (it reports no outcome that is not durable), and
    once the disk is back exits with the run's own code, read from its durable record."""
    fd.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["sh", "-c", "exit 3"]\n')
    fd.start_faulty()
    first = world.harness("trigger", "ok", "--wait")
    assert (first.returncode, first.stderr) == (3, "ok run 1: failed\n")
    fd.faults(**RO)
    stuck = _stuck_line(world, 2)
    err_path = world.root / "wait.err"
    with open(err_path, "w") as err, reaped(_waiting(world, err)) as proc:
        until("the wait to say why run 2 is not durable",
              lambda: err_path.read_text() == stuck, LONG)
        # The daemon's answer the CLI showed, and no word for a run that is durable.
        assert request(fd, "pending", name="ok", run_id=2) == {
            "stuck": stuck[stuck.index("(") + 1:stuck.index("); still")]}
        assert request(fd, "pending", name="ok", run_id=1) == {"stuck": None}
        assert proc.poll() is None
        assert record_of(world, "ok", 2) is None  # nothing of run 2 is durable
        fd.faults()
        out, _ = proc.communicate(timeout=LONG)
    assert (proc.returncode, out) == (3, "")
    assert err_path.read_text() == stuck + "ok run 2: failed\n"  # said once only
    rec = record_of(world, "ok", 2)
    assert rec is not None and (rec["outcome"], rec["exit_code"]) == ("failed", 3)


def test_trigger_wait_on_a_stuck_record_ends_with_130_on_ctrl_c(
        world: World, fd: FaultDaemons) -> None:
    fd.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    fd.start_faulty()
    fd.booted()
    fd.faults(**RO)
    err_path = world.root / "wait.err"
    with open(err_path, "w") as err, reaped(_waiting(world, err)) as proc:
        until("the wait to say why run 1 is not durable",
              lambda: err_path.read_text() == _stuck_line(world, 1)
              if list(world.ledger.glob("*.jsonl")) else False, LONG)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=LONG)
    assert (proc.returncode, out) == (130, "")
    assert err_path.read_text() == _stuck_line(world, 1)


def test_trigger_wait_says_once_that_a_sync_hangs_then_waits_for_it(
        world: World, fd: FaultDaemons) -> None:
    """A sync that hangs well past the 2 s bound (REQ-6) is the other way a record is
    stuck: said once, with how long the sync has not returned, and waited out."""
    fd.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    fd.start_faulty()
    fd.booted()
    fd.faults(sync={"delay": 10.0})
    err_path = world.root / "wait.err"
    said = re.compile(r"harness: ok run 1: its record is not durable yet, the run ledger "
                      r"cannot write it \(a ledger write or sync has not returned for "
                      r"[0-9]+s\); still waiting \(Ctrl-C stops the wait, not the run\)\n")
    with open(err_path, "w") as err, reaped(_waiting(world, err)) as proc:
        until("the wait to say the sync hangs", lambda: said.fullmatch(err_path.read_text()),
              LONG)
        fd.faults()  # the sync under way still takes its 10 s; the next ones do not
        out, _ = proc.communicate(timeout=LONG)
    assert (proc.returncode, out) == (0, "")
    stuck, done = err_path.read_text().splitlines(keepends=True)
    assert said.fullmatch(stuck) and done == "ok run 1: success\n"


def test_the_pending_op_refuses_a_bad_request(world: World, fd: FaultDaemons) -> None:
    fd.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    fd.start_faulty()
    fd.booted()
    for args, message in [
        ({"name": "ok"}, "run_id is required"),
        ({"name": "ok", "run_id": 0}, "run_id must be a positive integer, got 0"),
        ({"name": "ok", "run_id": True}, "run_id must be an integer, got True"),
        ({"run_id": 1}, "name must be a non-empty string, got None"),
        ({"name": "ok", "run_id": 1, "seq": 3}, "unknown field 'seq' (valid: name, run_id)"),
    ]:
        with pytest.raises(DaemonError) as info:
            request(fd, "pending", **args)
        assert (info.value.code, str(info.value)) == ("bad_request", message)


# -- REQ-7: SIGKILL mid-run -------------------------------------------------------------

CRASH_NOTE = "harness: run interrupted: the daemon stopped without closing it (daemon_crash)"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_sigkill_mid_run_closes_one_shot_and_resident_as_daemon_crash(
        world: World, fd: FaultDaemons) -> None:
    svc = script(world, "service.py", SERVICE)
    fd.write_config(f"""
[harness.svc]
kind = "resident"
restart_delay = "200ms"
argv = ["{sys.executable}", "{svc}", "{world.root}", "svc"]

[harness.long]
kind = "oneshot"
argv = ["{sys.executable}", "{svc}", "{world.root}", "long"]

[harness.ok]
kind = "oneshot"
argv = ["true"]
""")
    proc = fd.start()
    wait_live(world, "svc", 1, 1)
    # Some history first, so the ids in flight are not all 1s.
    assert world.harness("trigger", "ok", "--wait").returncode == 0
    assert world.harness("trigger", "ok", "--wait").returncode == 0
    res = world.harness("restart", "svc")
    assert res.stdout.strip() == "svc: restarted (replaced run 1, new run 2)", res.stderr
    wait_live(world, "svc", 2, 2)
    res = world.harness("trigger", "long")
    assert res.returncode == 0 and res.stdout.strip() == "1", res.stderr
    wait_live(world, "long", 1, 1)
    orphans = [int(p.name) for p in (world.root / "pids").iterdir()]
    lines_before = all_lines(world.ledger)

    proc.kill()
    assert proc.wait(timeout=DEADLINE) == -signal.SIGKILL
    # The offline view: both runs read "running?" and nothing is written.
    off = world.harness("runs", "--json")
    assert off.returncode == 0 and "read the ledger from disk" in off.stderr
    assert {(r["harness"], r["run_id"]): r["outcome"] for r in json.loads(off.stdout)} == {
        ("svc", 1): "cancelled", ("svc", 2): "running?", ("long", 1): "running?",
        ("ok", 1): "success", ("ok", 2): "success"}
    assert all_lines(world.ledger) == lines_before

    fd.start()
    fd.booted()
    err = fd.stderr()
    assert "WARNING harness.daemon: run long/1: closed as interrupted (daemon_crash)" in err
    assert "WARNING harness.daemon: run svc/2: closed as interrupted (daemon_crash)" in err
    new = all_lines(world.ledger)[len(lines_before):]
    closes = [x for x in new if x["type"] == "closed"][:2]
    assert sorted((x["harness"], x["run_id"]) for x in closes) == [("long", 1), ("svc", 2)]
    for x in closes:
        assert x["outcome"] == "interrupted" and x["reason"] == "daemon_crash"
        assert "ended_at" not in x and "duration_ms" not in x
    # The resident autostarts again as run 3 (ids continue, never reused).
    third = wait_live(world, "svc", 3, 3)
    assert third["trigger"] == "autostart"

    for name, run_id in (("long", 1), ("svc", 2)):
        rec = record_of(world, name, run_id)
        assert rec is not None
        assert rec["outcome"] == "interrupted" and rec["reason"] == "daemon_crash", rec
        assert "ended_at" not in rec and "duration_ms" not in rec
    listed = world.harness("runs", "--json")
    assert listed.returncode == 0 and listed.stderr == ""  # the daemon answered
    got = [(r["harness"], r["run_id"], r["outcome"], r.get("reason"))
           for r in json.loads(listed.stdout)]
    assert got == [("svc", 3, "running", None), ("long", 1, "interrupted", "daemon_crash"),
                   ("svc", 2, "interrupted", "daemon_crash"), ("ok", 2, "success", None),
                   ("ok", 1, "success", None), ("svc", 1, "cancelled", "operator")]
    table = world.harness("runs", "long")
    assert table.returncode == 0
    assert "interrupted" in table.stdout.splitlines()[1]

    # Each run's log says so, once: the one-shot's per-run log (closed, so compressed, as
    # every closed run's log is) and the resident's durable log (which goes on, plain).
    assert not (world.state / "jobs" / "long" / "1.log").exists()
    packed = read_log(str(world.state / "jobs" / "long" / "1.log"))
    assert packed is not None
    long_log = packed.decode()
    svc_log = (world.state / "logs" / "svc.log").read_text()
    assert [ln for ln in long_log.splitlines() if ln.endswith(CRASH_NOTE)] == [
        ln for ln in long_log.splitlines() if "daemon_crash" in ln]
    assert sum(ln.endswith(CRASH_NOTE) for ln in long_log.splitlines()) == 1
    assert sum(ln.endswith(CRASH_NOTE) for ln in svc_log.splitlines()) == 1

    # New run ids continue above everything used before the crash.
    res = world.harness("trigger", "long")
    assert res.returncode == 0 and res.stdout.strip() == "2", res.stderr
    res = world.harness("trigger", "ok", "--wait")
    assert res.returncode == 0
    assert [r["run_id"] for r in runs_of(world, "ok")] == [3, 2, 1]
    seqs_in_order(world)
    verify_ok(world)
    # The crashed runs' process groups did not outlive the reboot (no twin resident).
    until("the crashed runs' processes to be gone",
           lambda: not any(_alive(p) for p in orphans))


def _worker_lines(world: World, name: str) -> list[tuple[int, str, str, str | None, int | None]]:
    """(run_id, type, outcome, reason, exit_code) of every line of `name`, in seq order."""
    return [(x["run_id"], x["type"], x["outcome"], x.get("reason"), x.get("exit_code"))
            for x in all_lines(world.ledger) if x["harness"] == name]


def test_a_shutdown_keeps_a_residents_own_exit_whose_closed_line_is_still_queued(
        world: World, fd: FaultDaemons) -> None:
    """REQ-6's no-wait exception meets REQ-7's shutdown: the resident exited 1 on its own
    and its closed line is still in the writer's queue (a 3 s sync) when SIGTERM comes.
    The shutdown closes only what is really open, so the run reads failed (REQ-5), with
    its own end, not interrupted/shutdown; and the next boot's REQ-7 pass finds nothing
    left open to close as daemon_crash."""
    gate = world.root / "worker.go"
    fd.write_config(f"""
[harness.worker]
kind = "resident"
restart = "no"
argv = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.02; done; exit 1"]
""")
    proc = fd.start_faulty()
    until("run 1 to be up", lambda: (rec := record_of(world, "worker", 1)) is not None
          and rec["outcome"] == "running")
    # Only the next sync is slow: the closed line's. Its 3 s leave the shutdown below
    # plenty of time to look while the line is queued.
    fd.faults(sync={"delay": 3.0, "times": 1})
    gate.touch()  # the worker exits 1 on its own: its closed line is queued, not waited for
    until("run 1's closed line to be queued", lambda: ledger_info(fd)["queued"] == 1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    assert _worker_lines(world, "worker") == [(1, "opened", "running", None, None),
                                             (1, "closed", "failed", None, 1)]
    closed = line_of(world.ledger, "closed", "worker", 1)
    assert closed is not None
    rec = record_of(world, "worker", 1)  # read from the files: the daemon is down
    assert rec is not None
    assert (rec["outcome"], rec.get("reason"), rec["exit_code"], rec["ended_at"]) == (
        "failed", None, 1, closed["ended_at"])
    assert "closed 1 open record(s) as interrupted (shutdown)" not in fd.stderr()

    # The next boot reads only the files: nothing there is open, nothing is closed again.
    # The worker autostarts as run 2 and waits for its gate, which is gone.
    gate.unlink()
    proc = fd.start()
    until("run 2 to be up", lambda: (rec := record_of(world, "worker", 2)) is not None
          and rec["outcome"] == "running")
    assert "daemon_crash" not in fd.stderr()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    assert _worker_lines(world, "worker") == [
        (1, "opened", "running", None, None), (1, "closed", "failed", None, 1),
        (2, "opened", "running", None, None), (2, "closed", "interrupted", "shutdown", -1)]
    seqs_in_order(world)
    verify_ok(world)


def test_a_shutdown_after_an_unwaited_restart_closes_only_the_restart(
        world: World, fd: FaultDaemons) -> None:
    """The restart half of REQ-6's exception: the resident exits 0 on its own and restarts
    at once, its closed line and the restart's opened line both queued behind a 5 s sync.
    SIGTERM stops the restart (interrupted/shutdown); run 1 keeps its own success, with
    no second closed line, and a reboot closes nothing as daemon_crash."""
    proc = flapping_resident(world, fd)
    # Only the next sync is slow: run 1's closed line's. The restart's stop waits out its
    # 2 s bound, and the shutdown still looks well inside the 5 s.
    fd.faults(sync={"delay": 5.0, "times": 1})
    (world.root / "flap.go").touch()  # run 1 now exits 0 on its own
    until("the restart to spawn", lambda: len(starts(world, "flap")) >= 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    assert _worker_lines(world, "flap") == [
        (1, "opened", "running", None, None), (1, "closed", "success", None, 0),
        (2, "opened", "running", None, None), (2, "closed", "interrupted", "shutdown", -1)]
    closed1 = line_of(world.ledger, "closed", "flap", 1)
    closed2 = line_of(world.ledger, "closed", "flap", 2)
    assert closed1 is not None and closed2 is not None
    runs = {r["run_id"]: r for r in runs_of(world, "flap")}
    assert sorted(runs) == [1, 2]
    assert (runs[1]["outcome"], runs[1].get("reason"), runs[1]["exit_code"],
            runs[1]["ended_at"]) == ("success", None, 0, closed1["ended_at"])
    assert (runs[2]["outcome"], runs[2]["reason"], runs[2]["trigger"], runs[2]["ended_at"]) == (
        "interrupted", "shutdown", "restart", closed2["ended_at"])

    # The next boot closes nothing as daemon_crash; the resident autostarts as run 3.
    proc = fd.start()
    wait_live(world, "flap", 3, 3)
    assert "daemon_crash" not in fd.stderr()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    assert _worker_lines(world, "flap")[:4] == [
        (1, "opened", "running", None, None), (1, "closed", "success", None, 0),
        (2, "opened", "running", None, None), (2, "closed", "interrupted", "shutdown", -1)]
    assert [x[:2] for x in _worker_lines(world, "flap")[4:]] == [(3, "opened"), (3, "closed")]
    seqs_in_order(world)
    verify_ok(world)


# -- a queued firing's record on a slow or failing disk (REQ-6, REQ-7, REQ-20) -----------


def _job_and_other(world: World, on_overlap: str) -> str:
    """The config of one-shots `job` (writing its pid to job.pid, then sleeping) and
    `other`."""
    return f"""
[harness.job]
kind = "oneshot"
on_overlap = "{on_overlap}"
argv = ["sh", "-c", "echo $$ > {world.root / 'job.pid'}; exec sleep 1000"]

[harness.other]
kind = "oneshot"
argv = ["true"]
"""


def _queued_behind_a_live_run(world: World, fd: FaultDaemons, *, resident: bool = False,
                              faults: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str],
                                                                     dict[str, int]]:
    """A daemon whose one-shot `job` (on_overlap = "queue") has run 1 live and run 2
    queued behind it, and (`resident`) whose resident `worker` runs too; returns the
    daemon and the pid of each live run's process."""
    pidfile = {n: world.root / f"{n}.pid" for n in ("job", "worker")}
    config = _job_and_other(world, "queue")
    if resident:
        config += f"""
[harness.worker]
kind = "resident"
argv = ["sh", "-c", "echo $$ > {pidfile['worker']}; exec sleep 1000"]
"""
    fd.write_config(config)
    proc = fd.start_faulty(*faults)
    fd.booted()
    assert request(fd, "trigger", name="job") == {"decision": "started", "run_id": 1}
    assert request(fd, "trigger", name="job") == {"decision": "queued", "run_id": 2}
    names = ("job", "worker") if resident else ("job",)
    return proc, {n: _sleep_pid(pidfile[n]) for n in names}


def _sleep_pid(pidfile: Path) -> int:
    """The pid in `pidfile` once it names the run's `sleep` (the shell exec'd it)."""
    until(f"{pidfile.name} to name a sleep", lambda: pidfile.exists()
          and pidfile.read_text().strip() and comm(int(pidfile.read_text())) == "sleep")
    return int(pidfile.read_text())


def _records(world: World, name: str) -> list[tuple[int, str, str, str | None, bool]]:
    """(run_id, trigger, outcome, reason, has ended_at) of `name`'s records, newest first."""
    return [(r["run_id"], r["trigger"], r["outcome"], r.get("reason"), "ended_at" in r)
            for r in runs_of(world, name)]


def _not_on_disk(name: str, run_id: int, line: str) -> str:
    return (f"harness: {name} run {run_id}'s {line} line is not on disk yet: the ledger's "
            "disk is failing; the line stays queued and is written once the disk takes it")


def _says_run_2_not_on_disk(stderr: str) -> None:
    """The warnings of an op that closed `_queued_behind_a_live_run`'s held run 2 on a
    slow disk: run 2's decided line is not on disk, and run 1's closed line may have
    queued behind it too, or landed in time; nothing else is said."""
    warnings = stderr.splitlines()
    assert _not_on_disk("job", 2, "decided") in warnings
    assert set(warnings) <= {_not_on_disk("job", 2, "decided"),
                             _not_on_disk("job", 1, "closed")}


def _held_entries(world: World, table: str = "held") -> dict[str, list[int]]:
    """The held firings (or the run ids of `table`) state.json names: {harness: [run_id,
    ...]}."""
    doc = json.loads((world.state / "state.json").read_text())
    return {h: [e["run_id"] for e in entries] for h, entries in doc.get(table, {}).items()}


def test_a_shutdown_whose_queued_firings_record_outlasts_the_sync_bound_closes_every_record(
        world: World, fd: FaultDaemons) -> None:
    """SIGTERM while a firing is queued and the next sync takes 3 s (past REQ-6's 2 s
    bound): the queued firing's decided line is not durable in time. The shutdown used to
    die there with a LedgerUnavailable traceback and exit 1, before it stopped any run:
    job 1 and worker 1 stayed open (`running?`). It now stops every run, the late line
    lands, and every record closes interrupted/shutdown with an end (REQ-7). The firing
    stays in state.json until a boot finds its record (it was not on disk when dropped),
    and that boot only forgets it."""
    proc, pids = _queued_behind_a_live_run(world, fd, resident=True)
    fd.faults(sync={"delay": 3.0, "times": 1})
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    err = fd.stderr()
    assert "Traceback" not in err
    assert "harness job: the interrupted record 2 is not durable yet: not synced within 2s" \
        in err
    assert [p for p in pids.values() if alive(p)] == []
    assert _records(world, "job") == [(2, "manual", "interrupted", "shutdown", True),
                                      (1, "manual", "interrupted", "shutdown", True)]
    assert _records(world, "worker") == [(1, "autostart", "interrupted", "shutdown", True)]
    assert line_of(world.ledger, "decided", "job", 2) is not None
    assert _held_entries(world) == {"job": [2]}

    proc = fd.start()
    until("worker run 2", lambda: record_of(world, "worker", 2))
    assert _held_entries(world) == {}
    assert "daemon_crash" not in fd.stderr()
    assert [r[0] for r in _records(world, "job")] == [2, 1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    seqs_in_order(world)
    verify_ok(world)


def test_a_shutdown_on_a_failing_disk_with_a_queued_firing_stops_the_runs_before_the_ledger(
        world: World, fd: FaultDaemons) -> None:
    """The same on a disk that fails every write (EIO): nothing the shutdown writes can
    land, and the daemon exits 1 naming what was lost. Its runs must still be stopped by
    the shutdown itself, at once, not by the interpreter's teardown after the ledger was
    closed (the held firing's failed line used to escape Manager.shutdown). The next boot
    closes what is open as daemon_crash and records the queued firing from state.json."""
    proc, pids = _queued_behind_a_live_run(world, fd, resident=True)
    fd.faults(write={"errno": "EIO"}, sync={"errno": "EIO"})
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 1, fd.stderr()
    err = fd.stderr()
    assert "Traceback" not in err
    assert "the ledger is closed" not in err  # no run was closed after the ledger
    assert "run job/1: closed line not yet durable" in err
    assert "run worker/1: closed line not yet durable" in err
    assert "they are lost" in err
    assert [p for p in pids.values() if alive(p)] == []
    assert _held_entries(world) == {"job": [2]}

    proc = fd.start()  # a healthy disk
    until("worker run 2", lambda: record_of(world, "worker", 2))
    assert _records(world, "job") == [(2, "manual", "interrupted", "daemon_crash", False),
                                      (1, "manual", "interrupted", "daemon_crash", False)]
    assert _records(world, "worker") == [(2, "autostart", "running", None, False),
                                         (1, "autostart", "interrupted", "daemon_crash", False)]
    assert _held_entries(world) == {}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG) == 0, fd.stderr()
    seqs_in_order(world)
    verify_ok(world)


def test_stop_with_a_queued_firing_whose_record_outlasts_the_sync_bound_still_stops_the_run(
        world: World, fd: FaultDaemons) -> None:
    """`harness stop job` cancels the queued firing, then stops the live run. With the
    firing's decided line past REQ-6's 2 s bound, the stop used to fail `unavailable`
    (exit 1) and leave run 1 running. The stop is done now, and says which records are
    not on disk yet, as a stop already did for its own closed line."""
    _, pids = _queued_behind_a_live_run(world, fd)
    fd.faults(sync={"delay": 3.0, "times": 1})
    res = world.harness("stop", "job")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "job: stopped run 1 (cancelled/operator)\n"
    # Run 1's closed line may queue behind the slow sync too, or land in time.
    _says_run_2_not_on_disk(res.stderr)
    assert not alive(pids["job"])
    assert states_of(world) == {"job": "armed", "other": "armed"}
    until("both records", lambda: [r[2] for r in _records(world, "job")] == [
        "cancelled", "cancelled"], LONG)
    assert _records(world, "job") == [(2, "manual", "cancelled", "operator", True),
                                      (1, "manual", "cancelled", "operator", True)]
    seqs_in_order(world)
    verify_ok(world)


def test_a_reload_removing_a_harness_with_a_queued_firing_on_a_slow_disk_stops_its_run(
        world: World, fd: FaultDaemons) -> None:
    """A reload removes `job`, whose queued firing's decided line outlasts the sync bound.
    The reload used to fail `internal` half-applied: the new config in force, so `job`
    could no longer be named, and its run 1 running on with nothing to stop it. The
    reload is applied whole now: run 1 ends cancelled/reload, and the reply says which
    records are not on disk yet."""
    _, pids = _queued_behind_a_live_run(world, fd)
    fd.write_config('[harness.other]\nkind = "oneshot"\nargv = ["true"]\n')
    fd.faults(sync={"delay": 3.0, "times": 1})
    res = world.harness("reload")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "reloaded: removed job; 1 unchanged\n"
    _says_run_2_not_on_disk(res.stderr)
    assert not alive(pids["job"])
    assert states_of(world) == {"other": "armed"}
    until("both records", lambda: [r[2] for r in _records(world, "job")] == [
        "cancelled", "cancelled"], LONG)
    assert _records(world, "job") == [(2, "manual", "cancelled", "reload", True),
                                      (1, "manual", "cancelled", "reload", True)]
    seqs_in_order(world)
    verify_ok(world)


def test_a_skip_whose_record_outlasts_the_sync_bound_is_answered_not_failed(
        world: World, fd: FaultDaemons) -> None:
    """A trigger that overlaps a live run is skipped; its decided line outlasts the sync
    bound. The trigger used to fail `unavailable` (exit 1, no run id) though the skip
    was decided and its record lands. It is answered now: the run id, the skip, and that
    its record is not on disk yet."""
    pidfile = world.root / "job.pid"
    fd.write_config(f"""
[harness.job]
kind = "oneshot"
argv = ["sh", "-c", "echo $$ > {pidfile}; exec sleep 1000"]
""")
    fd.start_faulty()
    fd.booted()
    assert request(fd, "trigger", name="job") == {"decision": "started", "run_id": 1}
    fd.faults(sync={"delay": 3.0, "times": 1})
    res = world.harness("trigger", "job")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "2\n"
    assert res.stderr.splitlines() == ["job: run 2 skipped", _not_on_disk("job", 2, "decided")]
    # The daemon answers `runs` with committed records only: once the late sync returns.
    until("run 2's record", lambda: record_of(world, "job", 2), LONG)
    assert _records(world, "job") == [(2, "manual", "skipped", "overlap", False),
                                      (1, "manual", "running", None, False)]
    seqs_in_order(world)
    verify_ok(world)


def test_a_replace_of_a_queued_firing_on_a_slow_disk_starts_and_says_what_is_not_on_disk(
        world: World, fd: FaultDaemons) -> None:
    """A reload switches `job` from queue to replace while run 2 is held behind live run
    1; the next trigger replaces both, and the held firing's decided line outlasts the
    sync bound. The trigger used to fail `unavailable` with run 1 still running and no
    new run; it starts run 3 now, and says which records are not on disk yet."""
    _, pids = _queued_behind_a_live_run(world, fd)
    pidfile = world.root / "job.pid"
    fd.write_config(_job_and_other(world, "replace"))
    res = world.harness("reload")
    assert res.returncode == 0, res.stderr
    fd.faults(sync={"delay": 3.0, "times": 1})
    res = world.harness("trigger", "job")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "3\n"
    _says_run_2_not_on_disk(res.stderr)
    assert not alive(pids["job"])
    until("all three records", lambda: len(_records(world, "job")) == 3
          and _records(world, "job")[1][2] != "running", LONG)
    assert _records(world, "job") == [(3, "manual", "running", None, False),
                                      (2, "manual", "replaced", None, True),
                                      (1, "manual", "replaced", None, True)]
    assert alive(_sleep_pid(pidfile))  # run 3's, the pid file rewritten
    seqs_in_order(world)
    verify_ok(world)


def test_a_later_queued_firing_keeps_an_earlier_ones_entry_whose_record_is_not_on_disk(
        world: World, fd: FaultDaemons) -> None:
    """Run 2 is held behind run 1; the disk's writes hang from then on. `harness stop job`
    cancels run 2, whose decided line stays queued, so state.json keeps run 2's entry for
    the next boot. Run 3 starts, run 4 is held behind it, and the daemon is SIGKILLed with
    every one of those lines still queued. Run 4's entry used to replace run 2's (one
    entry per harness): after the boot run 2, a run id the client was told, had no record
    at all. Each firing keeps its own entry now, and the boot records both. Run 3, started
    with its opened line queued (REQ-6), had no record either: it is named in state.json
    from the write of its id, and the boot, finding its process, records that it ran."""
    proc, pids = _queued_behind_a_live_run(world, fd)
    pidfile = world.root / "job.pid"
    # Writes hang: a line merely written but not synced would survive the SIGKILL.
    fd.faults(write={"hang": True})
    res = world.harness("stop", "job")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "job: stopped run 1 (cancelled/operator)\n"
    assert sorted(res.stderr.splitlines()) == [_not_on_disk("job", 1, "closed"),
                                               _not_on_disk("job", 2, "decided")]
    assert not alive(pids["job"])
    # Admitted with its opened line still queued (an unbudgeted one-shot, REQ-6).
    assert request(fd, "trigger", name="job") == {"decision": "started", "run_id": 3}
    until("run 3's sleep", lambda: pidfile.read_text().strip() != str(pids["job"])
          and comm(int(pidfile.read_text())) == "sleep")
    assert request(fd, "trigger", name="job") == {"decision": "queued", "run_id": 4}
    assert _held_entries(world) == {"job": [2, 4]}
    assert _held_entries(world, "issued") == {"job": [3]}  # run 1's went with run 2's id
    proc.kill()
    proc.wait(timeout=LONG)

    fd.start()  # a healthy disk
    fd.booted()
    err = fd.stderr()
    for run_id in (2, 4):
        assert (f"run job/{run_id}: the queued firing was lost with the daemon; closed as "
                "interrupted (daemon_crash)") in err
    # Run 3's opened line was queued behind run 2's decided line and went with the
    # daemon; state.json names it from the write of its id, and its process outlived
    # the daemon: it ran, and reads as any run a crash cut short.
    assert ("run job/3: its opened line was lost with the daemon, but its process outlived "
            "it; recorded, to be closed as interrupted (daemon_crash)") in err
    assert sorted(_records(world, "job")) == [
        (1, "manual", "interrupted", "daemon_crash", False),
        (2, "manual", "interrupted", "daemon_crash", False),
        (3, "manual", "interrupted", "daemon_crash", False),
        (4, "manual", "interrupted", "daemon_crash", False)]
    assert _held_entries(world) == {}
    assert "issued" not in json.loads((world.state / "state.json").read_text())
    seqs_in_order(world)
    verify_ok(world)


def test_a_queued_firing_started_past_the_sync_bound_keeps_its_entry_until_it_is_recorded(
        world: World, fd: FaultDaemons) -> None:
    """Run 2 is held behind run 1; the disk's writes hang from then on. Run 1's process
    ends, and the reaper starts run 2 under its held id, its opened line past REQ-6's
    bound (started anyway). Its entry in state.json used to be forgotten as soon as it
    had started, so the daemon, SIGKILLed, left run 2 with no record though its process
    ran. The entry now stays until the record is on disk (a later allocation drops it),
    and the boot, finding run 2's process, records that it ran."""
    proc, pids = _queued_behind_a_live_run(world, fd)
    pidfile = world.root / "job.pid"
    fd.faults(write={"hang": True})
    os.kill(pids["job"], signal.SIGTERM)  # run 1 ends on its own: the reaper starts run 2
    until("run 2's sleep", lambda: pidfile.read_text().strip() != str(pids["job"])
          and comm(int(pidfile.read_text())) == "sleep", LONG)
    second = int(pidfile.read_text())
    # Taken once the reaper has let go of the harness: after it forgot (or kept) run 2.
    assert request(fd, "trigger", name="job") == {"decision": "queued", "run_id": 3}
    assert _held_entries(world) == {"job": [2, 3]}
    proc.kill()
    proc.wait(timeout=LONG)
    assert alive(second)

    fd.start()  # a healthy disk
    fd.booted()
    assert not alive(second)
    err = fd.stderr()
    assert ("run job/2: its opened line was lost with the daemon, but its process outlived "
            "it; recorded, to be closed as interrupted (daemon_crash)") in err
    assert sorted(_records(world, "job")) == [
        (1, "manual", "interrupted", "daemon_crash", False),
        (2, "manual", "interrupted", "daemon_crash", False),
        (3, "manual", "interrupted", "daemon_crash", False)]
    rec2 = record_of(world, "job", 2)
    assert rec2 is not None and "started_at" not in rec2
    assert _held_entries(world) == {}
    seqs_in_order(world)
    verify_ok(world)


def test_a_one_shot_started_past_the_sync_bound_and_lost_with_the_daemon_has_its_record(
        world: World, fd: FaultDaemons) -> None:
    """The disk's writes hang. `job` (under no budget) is triggered: its opened line
    outlasts REQ-6's 2 s bound, so it starts anyway and the client is told run 1. A
    second trigger is skipped as run 2, its decided line queued too. The daemon is
    SIGKILLed with both lines unwritten. Neither run had any record after the next boot,
    though run 1's process ran (that boot stopped it). Each id is named in state.json by
    the write that persisted it; the boot records run 1, whose process it found, as a run
    a crash cut short (no start or end time: neither is known), and run 2 as what its
    client was told, skipped/overlap, at the time it was fired (it used to read
    interrupted/daemon_crash)."""
    pidfile = world.root / "job.pid"
    fd.write_config(_job_and_other(world, "skip"))
    proc = fd.start_faulty()
    fd.booted()
    fd.faults(write={"hang": True})  # a line merely written would survive the SIGKILL
    assert request(fd, "trigger", name="job") == {"decision": "started", "run_id": 1}
    orphan = _sleep_pid(pidfile)
    res = world.harness("trigger", "job")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "2\n"
    assert res.stderr.splitlines() == ["job: run 2 skipped", _not_on_disk("job", 2, "decided")]
    state = json.loads((world.state / "state.json").read_text())
    issued = state["issued"]["job"]
    assert [{k: v for k, v in e.items() if k != "at"} for e in issued] == [
        {"run_id": 1, "trigger": "manual", "window": None, "kind": "oneshot"},
        {"run_id": 2, "trigger": "manual", "window": None, "kind": "oneshot",
         "decided": {"outcome": "skipped", "reason": "overlap"}}]
    assert all_lines(world.ledger) == []
    proc.kill()
    proc.wait(timeout=LONG)
    assert alive(orphan)

    fd.start()  # a healthy disk
    fd.booted()
    assert not alive(orphan)
    err = fd.stderr()
    assert ("WARNING harness.supervisor: run job/1: its opened line was lost with the "
            "daemon, but its process outlived it; recorded, to be closed as interrupted "
            "(daemon_crash)") in err
    assert "WARNING harness.daemon: run job/1: closed as interrupted (daemon_crash)" in err
    assert ("WARNING harness.supervisor: run job/2: its record was lost with the daemon, and "
            "no process of it outlived it; recorded as skipped") in err
    assert (f"run job/1: its process group {orphan} outlived the crashed daemon; "
            "stopping it") in err
    log = str(world.state / "jobs" / "job" / "1.log")
    assert sorted(runs_of(world, "job"), key=lambda r: r["run_id"]) == [
        {"harness": "job", "run_id": 1, "seq": 1, "kind": "oneshot", "trigger": "manual",
         "outcome": "interrupted", "reason": "daemon_crash", "log": log},
        {"harness": "job", "run_id": 2, "seq": 2, "kind": "oneshot", "trigger": "manual",
         "started_at": format_ns(parse_ns(issued[1]["at"])), "outcome": "skipped",
         "reason": "overlap"}]
    assert [(x["run_id"], x["type"]) for x in all_lines(world.ledger)] == [
        (1, "opened"), (2, "decided"), (1, "closed")]
    # Its log, closed like any crashed one-shot's (compressed), says what happened.
    packed = read_log(log)
    assert packed is not None and not Path(log).exists()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z " + re.escape(CRASH_NOTE)
                        + f"\nharness: stopped the orphaned process group {orphan} left by "
                        r"the crashed daemon \(SIGTERM\)\n", packed.decode()), packed
    assert "issued" not in json.loads((world.state / "state.json").read_text())
    # Ids go on above both.
    assert request(fd, "trigger", name="job")["run_id"] == 3
    seqs_in_order(world)
    verify_ok(world)


# -- REQ-13: the legacy import at a real first boot --------------------------------------

LEGACY_OUTCOMES = ["success", "failed", "timed_out", "skipped", "success", "interrupted",
                   "missed", "success", "failed", "cancelled"]


def _legacy_state(now: int) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """nightly: runs 6..25 of a keep_runs=20 history (last_run_id 25); weekly: 3 runs, the
    last one left running by the old daemon."""
    from harness.timefmt import format_ns

    nightly: dict[int, dict[str, Any]] = {}
    for i, run_id in enumerate(range(6, 26)):
        start = now - (26 - run_id) * 3600 * NS  # hourly, the newest an hour ago
        outcome = LEGACY_OUTCOMES[i % len(LEGACY_OUTCOMES)]
        e: dict[str, Any] = {"run_id": run_id, "trigger": "schedule", "outcome": outcome,
                             "started_at": format_ns(start), "window": format_ns(start)}
        if outcome in ("skipped", "missed"):
            e["reason"] = "overlap" if outcome == "skipped" else None
        else:
            e["ended_at"] = format_ns(start + 90 * NS)
            e["exit_code"] = {"success": 0, "failed": 2, "timed_out": -1,
                              "interrupted": -1, "cancelled": -1}[outcome]
            if outcome == "interrupted":
                e["reason"] = "shutdown"
            if outcome == "cancelled":
                e["reason"] = "operator"
        nightly[run_id] = e
    weekly = [
        {"run_id": 1, "trigger": "manual", "outcome": "success", "exit_code": 0,
         "started_at": format_ns(now - 50 * 3600 * NS),
         "ended_at": format_ns(now - 50 * 3600 * NS + 5 * NS)},
        {"run_id": 2, "trigger": "manual", "outcome": "failed", "exit_code": 1,
         "started_at": format_ns(now - 30 * 3600 * NS),
         "ended_at": format_ns(now - 30 * 3600 * NS + 5 * NS)},
        {"run_id": 3, "trigger": "manual", "outcome": "running",
         "started_at": format_ns(now - 2 * 3600 * NS)},
    ]
    doc = {"runs": {"nightly": {"last_run_id": 25, "runs": list(nightly.values())},
                    "weekly": {"last_run_id": 3, "runs": weekly}},
           "other_key": {"kept": True}}
    return doc, nightly


def test_legacy_state_json_is_imported_once_at_the_first_real_boot(
        world: World, fd: FaultDaemons) -> None:
    from harness.timefmt import now_ns

    doc, nightly = _legacy_state(now_ns())
    world.state.mkdir(parents=True)
    state = world.state / "state.json"
    state.write_text(json.dumps(doc))
    assert not world.ledger.exists()
    fd.write_config("""
[harness.nightly]
kind = "oneshot"
argv = ["true"]

[harness.weekly]
kind = "oneshot"
argv = ["true"]
""")
    proc = fd.start()
    fd.booted()
    assert "INFO harness.daemon: ledger import: 23 legacy run(s), 41 line(s)" in fd.stderr()
    # weekly 3 was running when the old daemon went: imported open, then closed as a crash.
    assert "run weekly/3: closed as interrupted (daemon_crash)" in fd.stderr()

    res = world.harness("runs", "nightly", "--limit", "100", "--json")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    recs = json.loads(res.stdout)
    assert [r["run_id"] for r in recs] == list(range(25, 5, -1))
    for r in recs:
        e = nightly[r["run_id"]]
        assert r["imported"] is True and r["harness"] == "nightly" and r["kind"] == "oneshot"
        assert r["outcome"] == e["outcome"] and r["trigger"] == "schedule"
        assert r["started_at"] == e["started_at"] and r["window"] == e["window"]
        assert r.get("ended_at") == e.get("ended_at")
        assert r.get("exit_code") == e.get("exit_code")
        assert r.get("reason") == e.get("reason")
        if "ended_at" in e:
            assert r["duration_ms"] == 90_000
    weekly = {r["run_id"]: r for r in runs_of(world, "weekly")}
    assert sorted(weekly) == [1, 2, 3]
    assert all(r["imported"] is True for r in weekly.values())
    assert [weekly[i]["outcome"] for i in (1, 2, 3)] == ["success", "failed", "interrupted"]
    assert weekly[3]["reason"] == "daemon_crash" and "ended_at" not in weekly[3]
    # jobs reads the ledger: nightly's last run (25) and its failure streak.
    jobs = {j["name"]: j for j in json.loads(world.harness("jobs", "--json").stdout)}
    last = nightly[25]
    assert jobs["nightly"]["last_run"] == {"run_id": 25, "outcome": last["outcome"],
                                           "started_at": last["started_at"],
                                           "ended_at": last.get("ended_at")}

    # state.json keeps only the allocators (and the keys it does not own).
    assert json.loads(state.read_text()) == {
        "runs": {"nightly": {"last_run_id": 25}, "weekly": {"last_run_id": 3}},
        "other_key": {"kept": True}}
    assert (world.ledger / ".imported").exists()

    # New run ids continue above the legacy last_run_id.
    res = world.harness("trigger", "nightly", "--wait")
    assert res.returncode == 0
    assert runs_of(world, "nightly")[0]["run_id"] == 26
    assert world.harness("trigger", "weekly").stdout.strip() == "4"
    until("weekly 4 to end", lambda: (r := record_of(world, "weekly", 4)) is not None
           and r["outcome"] == "success")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, fd.stderr()
    lines = all_lines(world.ledger)
    imported = [x for x in lines if x.get("imported")]
    assert len(imported) == 41

    # A second boot imports nothing and writes no line; of state.json it only drops the
    # entry of the last run id handed out, whose record is on disk.
    state_before = json.loads(state.read_text())
    assert [e["run_id"] for e in state_before.pop("issued")["weekly"]] == [4]
    proc = fd.start()
    fd.booted()
    assert "ledger import" not in fd.stderr()
    assert "daemon_crash" not in fd.stderr()
    assert all_lines(world.ledger) == lines
    assert json.loads(state.read_text()) == state_before
    res = world.harness("trigger", "nightly", "--wait")
    assert res.returncode == 0
    assert [r["run_id"] for r in runs_of(world, "nightly")][:3] == [27, 26, 25]
    assert len([x for x in all_lines(world.ledger) if x.get("imported")]) == 41
    doc = json.loads(state.read_text())
    assert [e["run_id"] for e in doc.pop("issued")["nightly"]] == [27]
    assert doc == {"runs": {"nightly": {"last_run_id": 27}, "weekly": {"last_run_id": 4}},
                   "other_key": {"kept": True}}
    seqs_in_order(world)
    verify_ok(world)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, fd.stderr()


# -- the scheduler on a slow disk --------------------------------------------------------


def _hourly_with_history(world: World, fd: FaultDaemons, minute: int, last: datetime) -> None:
    """`nightly` runs `true` hourly at `minute` past (UTC); its history is one record,
    run 1, a window decided at `last`."""
    ledger = RunLedger(str(world.ledger))
    try:
        w = format_ns(int(last.timestamp()) * NS)
        ledger.append({"type": "decided", "harness": "nightly", "run_id": 1, "at": w,
                       "kind": "oneshot", "trigger": "schedule", "outcome": "skipped",
                       "window": w})
    finally:
        ledger.close()
    fd.write_config(f'[harness.nightly]\nschedule = "CRON_TZ=UTC {minute} * * * *"\n'
                    'argv = ["true"]\n')


def test_a_missed_record_past_the_sync_bound_does_not_drop_the_due_window(
        world: World, fd: FaultDaemons) -> None:
    """At boot an hourly schedule has one window missed (an hour ago) and one on time
    (this minute). The missed record's sync outlasts REQ-6's 2 s bound, so its append
    fails, though its line stays queued and lands. The due window must still run: it used
    to be dropped with the failure, and no record ever named it."""
    now = datetime.now(UTC)
    if now.second > 40:  # the window must still be on time (< LATE) once the daemon is up
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    due = now.replace(second=0, microsecond=0)
    _hourly_with_history(world, fd, due.minute, due - timedelta(hours=2))
    fd.start_faulty("--slow-sync", "3")
    until("the missed record's late sync", lambda: "the missed record 2 is not durable yet"
          in fd.stderr())
    fd.faults()
    rec = until("the due window's run", lambda: (r := record_of(world, "nightly", 3))
                and r["outcome"] != "running" and r)
    iso = format_ns(int(due.timestamp()) * NS)
    assert (rec["trigger"], rec["window"], rec["outcome"]) == ("schedule", iso, "success")
    missed = record_of(world, "nightly", 2)
    assert missed is not None
    assert (missed["outcome"], missed["window"], missed["windows"]) == (
        "missed", format_ns(int((due - timedelta(hours=1)).timestamp()) * NS), 1)
    seqs_in_order(world)
    verify_ok(world)


def test_a_schedule_whose_history_cannot_be_read_is_scheduled_from_now(
        world: World, fd: FaultDaemons) -> None:
    """The ticker's first act is reading the harness's history, to catch up what was
    missed while the daemon was down. When that read fails (EIO from a day file), the
    schedule starts from now and the log says what that costs. The ticker used to die
    with the exception unlogged, and the harness never fired again."""
    now = datetime.now(UTC)
    minute = (now.minute + 30) % 60  # its windows are half an hour away from now
    _hourly_with_history(world, fd, minute, now - timedelta(hours=3))
    fd.start_faulty("--fail-query", "1")
    fd.booted()
    job = until("the next window", lambda: next(
        (j for j in request(fd, "jobs")["jobs"] if j["name"] == "nightly" and j.get("next")),
        None))
    nxt = parse_ns(job["next"])
    assert 0 < nxt - int(now.timestamp()) * NS <= 3600 * NS
    assert datetime.fromtimestamp(nxt / NS, UTC).minute == minute
    err = fd.stderr()
    assert ("harness nightly: its run history could not be read, so it is scheduled from now "
            "(windows missed while the daemon was down are neither run nor recorded missed): "
            "[Errno 5] Input/output error") in err
    assert "Traceback" not in err
    # From now: the windows of the last three hours got no missed record.
    assert [r["run_id"] for r in runs_of(world, "nightly")] == [1]


def test_a_supervisor_task_that_dies_is_logged_at_once(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    """Tickers, hours gates and restarts guard their own failures; one that escapes is a
    bug, logged with its traceback when the task ends, not when it is collected (a
    cancelled task is no death)."""
    async def main() -> None:
        async def boom() -> None:
            raise RuntimeError("a bug in a ticker")

        async def wait() -> None:
            await asyncio.sleep(60)

        died, cancelled = manager_mod._task(boom(), "ticker:a"), \
            manager_mod._task(wait(), "ticker:b")
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(died, cancelled, return_exceptions=True)
        await asyncio.sleep(0)  # done callbacks run in the next turn of the loop

    with caplog.at_level(logging.ERROR, logger=manager_mod.log.name):
        asyncio.run(main())
    got = [(r.getMessage(), r.exc_info[1] if r.exc_info else None) for r in caplog.records]
    assert [(m, str(e)) for m, e in got] == [
        ("ticker:a stopped on an unexpected error", "a bug in a ticker")]
