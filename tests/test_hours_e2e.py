"""Operating hours of residents end to end (SPEC-0022 REQ-3 "An operating-hours close",
DESIGN.md §3), against a real daemon process on the real wall clock.

Hours have minute resolution, so the close-and-release test builds a window that ends at
the next minute boundary and one that opens a minute later: the run closes
cancelled/hours, `list` reads off-hours, and the opening starts a new record with trigger
release. A daemon booted outside the hours starts nothing until an operator's `start`,
and that start lasts until the operator's `stop`: a crash meanwhile is restarted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import World
from daemons import Daemons, FaultDaemons, alive, record_of, runs_of, states_of, until
from harness.control.client import Client
from ledgertools import wait_for_bytes

MINUTE_WAIT = 150.0  # two minute boundaries, and slack for a loaded machine


def _hm(at: datetime) -> str:
    return f"{at.hour:02d}:{at.minute:02d}"


def next_minute(margin: int = 20) -> datetime:
    """The next minute boundary, at least `margin` seconds away (a daemon boots before
    it); the test is skipped when it or the minute after it would cross midnight."""
    now = datetime.now(UTC)
    if now.second > 60 - margin:
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    after = boundary + timedelta(minutes=1)
    if after.date() != now.date() or (boundary.hour == 0 and boundary.minute == 0):
        pytest.skip("the windows would cross midnight")
    return boundary


def test_hours_close_the_resident_and_release_it_when_they_open(
        world: World, daemons: Daemons) -> None:
    close = next_minute()
    reopen = close + timedelta(minutes=1)
    daemons.write_config(f"""
[harness.worker]
argv = ["sleep", "600"]
operating_hours = "TZ=UTC Mon-Sun 00:00-{_hm(close)}; Mon-Sun {_hm(reopen)}-24:00"
hours_shutdown = "immediate"
""")
    daemons.start()
    first = until("the autostarted run", lambda: record_of(world, "worker", 1))
    assert (first["trigger"], first["outcome"]) == ("autostart", "running")
    closed = until("the hours close",
                    lambda: (r := record_of(world, "worker", 1)) and r["outcome"] != "running"
                    and r, deadline=MINUTE_WAIT)
    assert (closed["outcome"], closed["reason"], closed["exit_code"]) == (
        "cancelled", "hours", -1)
    assert closed["ended_at"] >= close.strftime("%Y-%m-%dT%H:%M:%S")
    assert states_of(world)["worker"] == "off-hours"
    released = until("the release", lambda: record_of(world, "worker", 2),
                      deadline=MINUTE_WAIT)
    assert (released["trigger"], released["outcome"]) == ("release", "running")
    assert released["started_at"] >= reopen.strftime("%Y-%m-%dT%H:%M:%S")
    assert [r["run_id"] for r in runs_of(world, "worker")] == [2, 1]  # no restart between


# A worker that takes its time to finish once told to stop: on SIGTERM it waits for the
# test's `finish` file, as a graceful shutdown that outlasts the hours' closed minute.
SLOW_TO_STOP = """
import os, signal, sys, time
root = sys.argv[1]
def term(*_):
    while not os.path.exists(os.path.join(root, "finish")):
        time.sleep(0.05)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
with open(os.path.join(root, "worker.pids"), "a") as f:
    f.write(f"{os.getpid()}\\n")
while True:
    time.sleep(1)
"""


def test_hours_that_open_while_the_graceful_close_is_still_running_release_after_it(
        world: World, daemons: Daemons) -> None:
    """A graceful hours close (SIGTERM, then up to 15 min to finish) is still running when
    the hours open again. The opening found the old run live and started nothing, and
    the end of that run, being the hours' doing, restarted nothing either: the resident
    stayed down through its open hours until they closed and opened again. The old run
    now finishes its close (cancelled/hours) and the release starts as it ends."""
    close = next_minute()
    reopen = close + timedelta(minutes=1)
    worker = world.root / "worker.py"
    worker.write_text(SLOW_TO_STOP)
    daemons.write_config(f"""
[harness.worker]
argv = ["{sys.executable}", "{worker}", "{world.root}"]
restart = "always"
operating_hours = "TZ=UTC Mon-Sun 00:00-{_hm(close)}; Mon-Sun {_hm(reopen)}-24:00"
hours_shutdown = "graceful"
""")
    daemons.start()
    pids = world.root / "worker.pids"
    until("run 1 up", lambda: pids.exists() and pids.read_text().strip()
          and (r := record_of(world, "worker", 1)) and r["outcome"] == "running")
    (first_pid,) = map(int, pids.read_text().split())
    # A few seconds into the open hours, its close is still running: the daemon's gate,
    # which looks every second, has seen the hours open while run 1 was live.
    time.sleep(max(0.0, (reopen - datetime.now(UTC)).total_seconds()) + 5)
    rec = record_of(world, "worker", 1)
    assert rec is not None and rec["outcome"] == "running" and alive(first_pid)
    (world.root / "finish").touch()
    closed = until("run 1 to close", lambda: (r := record_of(world, "worker", 1))
                   and r["outcome"] != "running" and r)
    assert (closed["outcome"], closed["reason"], closed["exit_code"]) == (
        "cancelled", "hours", 0)
    released = until("the release", lambda: record_of(world, "worker", 2))
    assert (released["trigger"], released["outcome"]) == ("release", "running")
    assert released["started_at"] >= closed["ended_at"]  # one worker at a time
    assert [r["run_id"] for r in runs_of(world, "worker")] == [2, 1]
    until("run 2's process", lambda: len(pids.read_text().split()) == 2)
    second_pid = int(pids.read_text().split()[1])
    assert not alive(first_pid) and alive(second_pid)
    assert states_of(world)["worker"] == "running"


def test_booted_outside_hours_nothing_starts_until_an_operator_starts_it(
        world: World, daemons: Daemons) -> None:
    now = datetime.now(UTC)
    opens = now + timedelta(hours=3)
    ends = opens + timedelta(minutes=1)
    daemons.write_config(f"""
[harness.worker]
argv = ["sleep", "600"]
operating_hours = "TZ=UTC Mon-Sun {_hm(opens)}-{_hm(ends)}"
""")
    daemons.start()
    assert states_of(world)["worker"] == "off-hours"
    assert runs_of(world, "worker") == []
    with Client(str(daemons.socket)) as c:
        out = c.request("start", name="worker")
        assert (out["action"], out["run_id"]) == ("started", 1)
        # The operator's start outlives the next gate tick: it is not closed again.
        time.sleep(2.5)
        rec = record_of(world, "worker", 1)
        assert rec is not None and (rec["trigger"], rec["outcome"]) == ("manual", "running")
        assert c.request("stop", name="worker")["reason"] == "operator"
    assert states_of(world)["worker"] == "stopped"


def test_a_crash_after_an_operators_start_outside_the_hours_is_restarted(
        world: World, daemons: Daemons, tmp_path: Path) -> None:
    """`harness start` outside the hours lasts until `harness stop` or the hours next open,
    restarts by the policy included (as a started unit with Restart=on-failure): the
    worker's crash there is restarted (trigger restart) and `list` reads running. It
    used to read backoff for the restart_delay, and then the restart was refused."""
    closed_day = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[
        (datetime.now(UTC).weekday() + 3) % 7]  # neither today nor tomorrow
    mark = tmp_path / "crashed"
    daemons.write_config(f"""
[harness.worker]
argv = ["sh", "-c", "[ -e {mark} ] && exec sleep 600; touch {mark}; exit 1"]
restart_delay = "500ms"
operating_hours = "TZ=UTC {closed_day} 00:00-00:01"
""")
    daemons.start()
    assert states_of(world)["worker"] == "off-hours"
    with Client(str(daemons.socket)) as c:
        out = c.request("start", name="worker")
        assert (out["action"], out["run_id"]) == ("started", 1)
        restarted = until("the restart", lambda: record_of(world, "worker", 2))
        assert (restarted["trigger"], restarted["outcome"]) == ("restart", "running")
        failed = record_of(world, "worker", 1)
        assert failed is not None and (failed["trigger"], failed["outcome"]) == (
            "manual", "failed")
        until("list to read running", lambda: states_of(world)["worker"] == "running")
        out = c.request("stop", name="worker")
        assert (out["run_id"], out["reason"]) == (2, "operator")
    assert states_of(world)["worker"] == "stopped"
    assert [r["run_id"] for r in runs_of(world, "worker")] == [2, 1]


def test_a_reload_during_the_release_closes_the_run_it_started(
        world: World, fd: FaultDaemons) -> None:
    """Two residents' hours open while the disk syncs slowly, so each gate is inside the
    release's start (its opened line written, the sync pending) when a reload removes one
    and changes the other. The reload used to cancel the gates there: the opened lines
    stayed `running` with no process and nobody to close them, and the changed resident
    got a second `running` record beside the orphaned one. The start now runs to its end
    first, and the reload stops the run it produced (cancelled/reload)."""
    opens = next_minute()

    def resident(name: str, note: str = "") -> str:
        return f"""
[harness.{name}]
argv = ["sleep", "600{note}"]
operating_hours = "TZ=UTC Mon-Sun {_hm(opens)}-24:00"
"""
    fd.write_config(resident("gone") + resident("kept"))
    fd.start_faulty()
    fd.booted()
    assert states_of(world) == {"gone": "off-hours", "kept": "off-hours"}
    # Each sync outlasts REQ-6's 2 s bound: the release's start waits that long on it.
    fd.faults(sync={"delay": 5.0})
    wait_for_bytes(world.ledger, b'"trigger":"release"', timeout=MINUTE_WAIT)
    fd.write_config(resident("kept", ".5"))
    with Client(str(fd.socket), timeout=60.0) as c:
        # Every sync outlasts the bound: the reload says its runs' records are not on
        # disk yet (they land once the disk is back).
        assert c.request("reload") == {
            "added": [], "removed": ["gone"], "changed": ["kept"], "unchanged": 0,
            "durable": False, "not_durable": [
                {"harness": "gone", "run_id": 1, "line": "closed"},
                {"harness": "kept", "run_id": 1, "line": "closed"}]}
    fd.faults()
    gone = until("gone's record to close",
                 lambda: (r := runs_of(world, "gone")) and r[0]["outcome"] != "running" and r)
    assert [(r["run_id"], r["trigger"], r["outcome"], r.get("reason")) for r in gone] == [
        (1, "release", "cancelled", "reload")]
    kept = until("kept's first record to close",
                 lambda: (r := runs_of(world, "kept")) and len(r) == 2
                 and r[1]["outcome"] != "running" and r)
    assert [(r["run_id"], r["trigger"], r["outcome"], r.get("reason")) for r in kept] == [
        (2, "manual", "running", None), (1, "release", "cancelled", "reload")]
    ids = json.loads((world.state / "state.json").read_text())["runs"]
    assert {n: ids[n]["last_run_id"] for n in ("gone", "kept")} == {"gone": 1, "kept": 2}
    assert states_of(world) == {"kept": "running"}
    assert _processes_of(world, "gone") == []


def _processes_of(world: World, name: str) -> list[int]:
    """The pids of this world's live processes that run harness `name`."""
    mark = [os.fsencode(f"XDG_STATE_HOME={world.env['XDG_STATE_HOME']}"),
            os.fsencode(f"HARNESS_NAME={name}")]
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if all(m in env for m in mark) and alive(int(entry)):
            out.append(int(entry))
    return out
