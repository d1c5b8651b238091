"""One-shot scheduling end to end: overlap policies, missed windows and catch-up
(DESIGN.md §3 "Runs", SPEC-0022 REQ-3/REQ-5), against a real daemon process.

The window decision itself (`decide_windows`) is pinned with exact cases; the daemon tests
seed the ledger with a scheduled record from hours ago, boot the daemon, and check the
one record the gap comes to: a `missed` decided record (catch_up = false) or one run with
trigger `catch_up`; a seeded window ahead of the clock is waited for, never decided
again. Overlap: `queue` holds one firing (its run id allocated when held) and
skips the rest, `replace` closes the live run `replaced`, and `stop` cancels a held firing.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, record_of, runs_of, until
from harness.config.schedule import Windows, parse_schedule
from harness.control.client import Client
from harness.ledger.runledger import RunLedger
from harness.supervisor.manager import LATE, Decision, decide_windows
from harness.timefmt import format_ns

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize(("last", "now", "catch_up", "want"), [
    # Nothing new since the last decided window.
    (0, 9.5, False, None),
    # One window, on time: it runs.
    (0, 10.2, False, Decision(Windows(0, None, None), _at(10), "schedule")),
    # Three windows, the newest on time: the two late ones are one missed record.
    (0, 30.5, False, Decision(Windows(2, _at(10), _at(20)), _at(30), "schedule")),
    # All late: one missed record and no run.
    (0, 35, False, Decision(Windows(3, _at(10), _at(30)), None, "schedule")),
    # All late with catch_up: one run for them all, honouring the newest.
    (0, 35, True, Decision(Windows(3, _at(10), _at(30)), _at(30), "catch_up")),
    # catch_up with nothing late is an ordinary scheduled run.
    (0, 10.5, True, Decision(Windows(0, None, None), _at(10), "schedule")),
])
def test_decide_windows(last: float, now: float, catch_up: bool,
                        want: Decision | None) -> None:
    sched = parse_schedule("CRON_TZ=UTC */10 * * * *")
    got = decide_windows(sched, _at(last), _at(now), catch_up)
    assert got == want
    if got is not None and got.due is not None and not catch_up:
        assert (_at(now) - got.due).total_seconds() <= LATE


def _seed_window(world: World, name: str, window: datetime, run_id: int = 1) -> None:
    """A scheduled run of `name` that honoured `window`, closed, as the ledger holds it."""
    ledger = RunLedger(str(world.ledger))
    try:
        w = format_ns(int(window.timestamp()) * 1_000_000_000)
        ledger.append({"type": "opened", "harness": name, "run_id": run_id, "at": w,
                       "kind": "oneshot", "trigger": "schedule", "started_at": w,
                       "outcome": "running", "window": w})
        ledger.append({"type": "closed", "harness": name, "run_id": run_id, "at": w,
                       "outcome": "success", "ended_at": w, "exit_code": 0})
    finally:
        ledger.close()


def _hourly_far_from_now() -> tuple[str, datetime]:
    """An hourly UTC cron at a minute 30 away from now, and its latest past window."""
    now = datetime.now(UTC)
    minute = (now.minute + 30) % 60
    latest = now.replace(minute=minute, second=0, microsecond=0)
    if latest > now:
        latest -= timedelta(hours=1)
    return f"CRON_TZ=UTC {minute} * * * *", latest


def _rfc(at: datetime) -> str:
    return format_ns(int(at.timestamp()) * 1_000_000_000)


@pytest.mark.parametrize("catch_up", [False, True])
def test_windows_missed_while_the_daemon_was_down(world: World, daemons: Daemons,
                                                  catch_up: bool) -> None:
    sched, latest = _hourly_far_from_now()
    # The last run honoured the window three hours before the latest: three were missed.
    _seed_window(world, "nightly", latest - timedelta(hours=3))
    daemons.write_config(f"""
[harness.nightly]
schedule = "{sched}"
catch_up = {"true" if catch_up else "false"}
argv = ["sh", "-c", "echo caught up"]
""")
    daemons.start()
    rec = until("the gap's record", lambda: record_of(world, "nightly", 2))
    if catch_up:
        rec = until("the catch-up run to end",
                     lambda: (r := record_of(world, "nightly", 2)) and r["outcome"] != "running"
                     and r)
        assert (rec["trigger"], rec["outcome"], rec["window"]) == (
            "catch_up", "success", _rfc(latest))
        assert "windows" not in rec
    else:
        assert (rec["trigger"], rec["outcome"], rec["window"], rec["first_window"],
                rec["windows"]) == ("schedule", "missed", _rfc(latest),
                                    _rfc(latest - timedelta(hours=2)), 3)
        assert "exit_code" not in rec and "ended_at" not in rec
    # Decided once: a restart does not decide the same windows again.
    with Client(str(daemons.socket)) as c:
        c.request("daemon_info")
    daemons.procs[-1].terminate()
    assert daemons.procs[-1].wait(timeout=60) == 0
    daemons.start()
    with Client(str(daemons.socket)) as c:
        jobs = c.request("jobs")["jobs"]
    assert [r["run_id"] for r in runs_of(world, "nightly")] == [2, 1]
    assert jobs[0]["name"] == "nightly" and jobs[0]["catch_up"] is catch_up
    nxt = datetime.fromisoformat(jobs[0]["next"])
    assert nxt == latest + timedelta(hours=1)


def test_the_latest_window_decided_is_resumed_not_the_newest_record(
        world: World, daemons: Daemons) -> None:
    """A queued firing's record is written after the records of later windows it outlived
    (here: window -3h recorded after the skipped -2h). The restart resumes from -2h:
    one missed record for -1h and the latest, never -2h again."""
    sched, latest = _hourly_far_from_now()
    ledger = RunLedger(str(world.ledger))
    try:
        w2 = _rfc(latest - timedelta(hours=2))
        ledger.append({"type": "decided", "harness": "nightly", "run_id": 2, "at": w2,
                       "kind": "oneshot", "trigger": "schedule", "outcome": "skipped",
                       "reason": "overlap", "window": w2})
    finally:
        ledger.close()
    _seed_window(world, "nightly", latest - timedelta(hours=3))
    daemons.write_config(f"""
[harness.nightly]
schedule = "{sched}"
argv = ["sh", "-c", "true"]
""")
    daemons.start()
    rec = until("the gap's record", lambda: record_of(world, "nightly", 3))
    assert (rec["outcome"], rec["first_window"], rec["window"], rec["windows"]) == (
        "missed", _rfc(latest - timedelta(hours=1)), _rfc(latest), 2)


def test_a_window_of_another_schedule_starts_the_new_one_from_now(
        world: World, daemons: Daemons) -> None:
    """The last window recorded is not one of the schedule now in force (it was changed
    by a reload, or while the daemon was down): a changed schedule starts from now, so
    none of its earlier windows is reported missed."""
    sched, latest = _hourly_far_from_now()
    _seed_window(world, "nightly", latest - timedelta(hours=5, minutes=7))
    daemons.write_config(f"""
[harness.nightly]
schedule = "{sched}"
argv = ["sh", "-c", "true"]
""")
    daemons.start()

    def next_known() -> str | None:
        with Client(str(daemons.socket)) as c:
            nxt: str | None = c.request("jobs")["jobs"][0]["next"]
        return nxt

    assert datetime.fromisoformat(until("the schedule's next window", next_known)) == (
        latest + timedelta(hours=1))
    assert [r["run_id"] for r in runs_of(world, "nightly")] == [1]


def test_a_window_in_an_hour_fall_back_repeats_is_resumed_from(
        world: World, daemons: Daemons) -> None:
    """The ledger's last window is New York's 01:30 EDT on the latest fall-back night,
    in the hour that night repeats. It is a window of the schedule in force, so the
    windows since are reported missed. Compared as a time of New York against the UTC
    of the ledger, it was never equal (PEP 495), read as a changed schedule, and the
    windows missed while the daemon was down went unrecorded."""
    ny = ZoneInfo("America/New_York")
    day = datetime.now(UTC).astimezone(ny).date() - timedelta(days=2)
    while (datetime.combine(day, dtime(0, 0), ny).utcoffset()
           == datetime.combine(day + timedelta(days=1), dtime(0, 0), ny).utcoffset()
           or datetime.combine(day, dtime(0, 0), ny).dst() == timedelta(0)):
        day -= timedelta(days=1)  # to the last day that ends on standard time
    seeded = datetime.combine(day, dtime(1, 30), ny)  # fold=0: the first pass, EDT
    assert seeded.dst() != timedelta(0) and seeded.replace(fold=1).dst() == timedelta(0)
    _seed_window(world, "nightly", seeded.astimezone(UTC))
    # Kept however long ago that night was (a year at most).
    daemons.write_config("""
[ledger]
retention = "400d"

[harness.nightly]
schedule = "CRON_TZ=America/New_York 30 1 * * *"
argv = ["true"]
""")
    daemons.start()
    rec = until("the gap's record", lambda: record_of(world, "nightly", 2))
    first = datetime.combine(day + timedelta(days=1), dtime(1, 30), ny).astimezone(UTC)
    assert (rec["trigger"], rec["outcome"], rec["first_window"]) == (
        "schedule", "missed", _rfc(first))


def test_a_window_in_the_ledger_ahead_of_the_clock_is_waited_for(
        world: World, daemons: Daemons) -> None:
    """The ledger's newest window is ahead of the daemon's clock, as when the clock was
    stepped back while the daemon was down. The booted ticker used to start from now, so
    every window between now and that one was decided a second time; it now waits for the
    clock to pass it, as a running ticker does, and decides the window after it first."""
    every = 5
    # 15 to 20 s ahead: the daemon boots well before it, so the windows between now and
    # it come while the ticker runs.
    ahead = datetime.fromtimestamp((time.time_ns() // 10**9 // every + 4) * every, UTC)
    after = ahead + timedelta(seconds=every)
    _seed_window(world, "tick", ahead)
    daemons.write_config(f"""
[harness.tick]
schedule = "@every {every}s"
argv = ["true"]
""")
    daemons.start()

    def next_known() -> str | None:
        with Client(str(daemons.socket)) as c:
            nxt: str | None = c.request("jobs")["jobs"][0]["next"]
        return nxt

    assert datetime.fromisoformat(until("the schedule's next window", next_known)) == after
    first = until("the first window after the ledger's to run",
                  lambda: (r := record_of(world, "tick", 2)) and r["outcome"] != "running"
                  and r, deadline=3 * DEADLINE)
    assert (first["trigger"], first["outcome"], first["window"]) == (
        "schedule", "success", _rfc(after))
    # Windows are decided in order: with run 2 on the window after the seeded one, none
    # at or before it got a record, and no window has two.
    runs = sorted(runs_of(world, "tick"), key=lambda r: r["run_id"])
    assert [(r["run_id"], r["window"]) for r in runs[:2]] == [(1, _rfc(ahead)),
                                                            (2, _rfc(after))]
    assert len({r["window"] for r in runs}) == len(runs)
    assert (f"harness tick: the newest window in the ledger, {_rfc(ahead)}, is ahead of "
            "the clock; no window up to it is decided again") in daemons.stderr()


def _oneshot(name: str, policy: str, script: str) -> str:
    return f"""
[harness.{name}]
kind = "oneshot"
on_overlap = "{policy}"
argv = ["sh", "-c", "{script}"]
"""


def _fire(c: Client, name: str) -> dict[str, Any]:
    data: dict[str, Any] = c.request("trigger", name=name)
    return data


def _state(world: World) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((world.state / "state.json").read_text())
    return doc


def _held_entry(world: World, key: str = "held") -> dict[str, Any]:
    """state.json's held firings (or its table `key`), each one's time checked and taken
    out; empty when there is no such table."""
    held: dict[str, Any] = _state(world).get(key, {})
    for entry in (e for entries in held.values() for e in entries):
        at = datetime.fromisoformat(entry.pop("at"))
        assert abs((datetime.now(UTC) - at).total_seconds()) < 600
    return held


def test_queue_holds_one_firing_and_skips_the_rest(world: World, daemons: Daemons,
                                                   tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    daemons.write_config(_oneshot("q", "queue", f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    daemons.start()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "q") == {"decision": "started", "run_id": 1}
        # Every id is named with the write that persists it, until its record is on disk.
        assert _held_entry(world, "issued") == {"q": [{"run_id": 1, "trigger": "manual",
                                                       "window": None, "kind": "oneshot"}]}
        assert _fire(c, "q") == {"decision": "queued", "run_id": 2}
        # Persisted with its id: the next boot records it if this daemon dies first. Run
        # 1's entry went in the same write: its opened line is on disk.
        assert _held_entry(world) == {"q": [{"run_id": 2, "trigger": "manual",
                                             "window": None}]}
        assert "issued" not in _state(world)
        assert _fire(c, "q") == {"decision": "skipped", "run_id": 3}
        assert c.request("jobs")["jobs"][0]["queued"] == 2
    skipped = record_of(world, "q", 3)
    assert skipped is not None and (skipped["outcome"], skipped["reason"]) == (
        "skipped", "overlap")
    assert record_of(world, "q", 2) is None  # held: no record until it runs
    gate.touch()
    for run_id in (1, 2):
        rec = until(f"run {run_id} to succeed",
                     lambda r=run_id: (x := record_of(world, "q", r)) and x["outcome"] == "success"
                     and x)
        assert rec["trigger"] == "manual" and rec["exit_code"] == 0
    # The queued run started after the first ended.
    one, two = record_of(world, "q", 1), record_of(world, "q", 2)
    assert one is not None and two is not None
    assert two["started_at"] >= one["ended_at"]
    # Its record written, state.json no longer names it; the skip's entry goes with the
    # next allocation (or boot), not with a write of its own.
    assert _held_entry(world, "issued") == {"q": [{
        "run_id": 3, "trigger": "manual", "window": None, "kind": "oneshot",
        "decided": {"outcome": "skipped", "reason": "overlap"}}]}
    assert _state(world).keys() == {"runs", "issued"}
    assert _state(world)["runs"] == {"q": {"last_run_id": 3}}


def test_the_queued_run_is_held_in_the_daemons_memory(world: World, daemons: Daemons,
                                                      tmp_path: Path) -> None:
    """The queued run 2 opens after skipped run 3's line, its run id below one already
    seen. Memory took its lines for late lines of a record it had let go: it never held
    run 2, and raised its floors past it, so the daemon answered every later query from
    the day files instead of memory (REQ-15). Here the day files are set aside while the
    daemon answers: memory alone must give all three records."""
    gate = tmp_path / "gate"
    daemons.write_config(_oneshot("q", "queue", f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    daemons.start()
    with Client(str(daemons.socket)) as c:
        assert [_fire(c, "q")["decision"] for _ in range(3)] == ["started", "queued", "skipped"]
    gate.touch()
    until("run 2 to succeed", lambda: (x := record_of(world, "q", 2))
          and x["outcome"] == "success")
    aside = [p.rename(p.with_name(p.name + ".aside")) for p in world.ledger.glob("*.jsonl")]
    assert aside
    try:
        with Client(str(daemons.socket)) as c:
            info = c.request("daemon_info")
            named = c.request("runs", names=["q"], limit=10)
            swept = c.request("runs", since=format_ns(time.time_ns() - 3600 * 10**9),
                              limit=50)
    finally:
        for p in aside:
            p.rename(p.with_name(p.name.removesuffix(".aside")))
    assert info["ledger"]["records_in_memory"] == 3
    want = [(2, "success", "manual"), (3, "skipped", "manual"), (1, "success", "manual")]
    for got in (named, swept):
        assert [(r["run_id"], r["outcome"], r["trigger"]) for r in got["runs"]] == want
        assert got["oldest_seq"] == 1


def test_stop_cancels_the_held_firing(world: World, daemons: Daemons) -> None:
    daemons.write_config(_oneshot("q", "queue", "sleep 60"))
    daemons.start()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "q")["run_id"] == 1
        assert _fire(c, "q") == {"decision": "queued", "run_id": 2}
        out = c.request("stop", name="q")
    assert (out["action"], out["run_id"], out["cancelled_queued"]) == ("stopped", 1, 2)
    runs = {r["run_id"]: r for r in runs_of(world, "q")}
    assert (runs[1]["outcome"], runs[1]["reason"]) == ("cancelled", "operator")
    assert (runs[2]["outcome"], runs[2]["reason"]) == ("cancelled", "operator")
    assert "exit_code" not in runs[2] and runs[2]["ended_at"]


def test_shutdown_interrupts_the_held_firing(world: World, daemons: Daemons) -> None:
    daemons.write_config(_oneshot("q", "queue", "sleep 60"))
    proc = daemons.start()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "q")["run_id"] == 1
        assert _fire(c, "q")["decision"] == "queued"
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    runs = {r["run_id"]: r for r in json.loads(world.harness("runs", "q", "--json").stdout)}
    assert {k: (r["outcome"], r["reason"]) for k, r in runs.items()} == {
        1: ("interrupted", "shutdown"), 2: ("interrupted", "shutdown")}
    assert _state(world) == {"runs": {"q": {"last_run_id": 2}}}


def test_a_firing_held_when_the_daemon_is_killed_is_recorded_at_the_next_boot(
        world: World, daemons: Daemons) -> None:
    """The client was told run 2; only the daemon's memory held it. SIGKILL, boot: run 2
    gets its record (interrupted/daemon_crash, like the run it waited for), the entry
    goes, and the next firing takes run 3."""
    daemons.write_config(_oneshot("q", "queue", "sleep 60"))
    proc = daemons.start()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "q")["run_id"] == 1
        assert _fire(c, "q") == {"decision": "queued", "run_id": 2}
    proc.kill()
    proc.wait(timeout=60)
    daemons.start()
    with Client(str(daemons.socket)) as c:
        c.request("daemon_info")  # answered once the boot is done
    runs = {r["run_id"]: r for r in runs_of(world, "q")}
    assert sorted(runs) == [1, 2]
    assert (runs[1]["outcome"], runs[1]["reason"]) == ("interrupted", "daemon_crash")
    two = runs[2]
    assert {k: two[k] for k in ("outcome", "reason", "trigger", "kind")} == {
        "outcome": "interrupted", "reason": "daemon_crash", "trigger": "manual",
        "kind": "oneshot"}
    assert "ended_at" not in two and "exit_code" not in two  # nobody saw the daemon die
    assert "held" not in _state(world)
    assert "run q/2: the queued firing was lost with the daemon" in daemons.stderr()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "q") == {"decision": "started", "run_id": 3}
        c.request("stop", name="q")


def test_a_held_entry_whose_record_exists_is_only_dropped(world: World,
                                                          daemons: Daemons) -> None:
    """Killed after the held run's record was written, before state.json forgot it: the
    boot writes nothing for it. An entry no daemon wrote is refused by name, and the
    daemon boots."""
    daemons.write_config(_oneshot("q", "queue", "true"))
    proc = daemons.start()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "q") == {"decision": "started", "run_id": 1}
    until("run 1 to succeed", lambda: (x := record_of(world, "q", 1))
          and x["outcome"] == "success")
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    lines = sum(len(p.read_text().splitlines()) for p in world.ledger.glob("*.jsonl"))
    state = _state(world)
    state["held"] = {"q": {"run_id": 1, "trigger": "manual", "window": None,
                           "at": "2026-11-30T12:00:00.000000000Z"},
                     "other": {"run_id": "x", "trigger": "manual", "window": None,
                               "at": "2026-11-30T12:00:00.000000000Z"}}
    (world.state / "state.json").write_text(json.dumps(state))
    daemons.start()
    with Client(str(daemons.socket)) as c:
        c.request("daemon_info")  # answered once the boot is done
    assert "held" not in _state(world)
    after = sum(len(p.read_text().splitlines()) for p in world.ledger.glob("*.jsonl"))
    assert after == lines
    rec = record_of(world, "q", 1)
    assert rec is not None and rec["outcome"] == "success"
    assert "held firing other: run_id must be an integer ≥ 1, got 'x'" in daemons.stderr()


def test_replace_closes_the_live_run_replaced(world: World, daemons: Daemons) -> None:
    daemons.write_config(_oneshot("r", "replace", "sleep 60"))
    daemons.start()
    with Client(str(daemons.socket)) as c:
        assert _fire(c, "r") == {"decision": "started", "run_id": 1}
        until("run 1 to be running", lambda: (x := record_of(world, "r", 1))
               and x["outcome"] == "running")
        assert _fire(c, "r") == {"decision": "started", "run_id": 2}
        old = record_of(world, "r", 1)
        assert old is not None and old["outcome"] == "replaced" and "reason" not in old
        assert old["exit_code"] == -1  # ended by our SIGTERM
        new = record_of(world, "r", 2)
        assert new is not None and new["outcome"] == "running"
        assert c.request("stop", name="r")["outcome"] == "cancelled"


def test_a_run_that_reads_closed_no_longer_overlaps(world: World, daemons: Daemons) -> None:
    """A client that fires again as soon as the last record reads closed is not skipped:
    a run whose process is gone is not live, even while its closed line is being written."""
    daemons.write_config(_oneshot("fast", "skip", "exit 0"))
    daemons.start()
    with Client(str(daemons.socket)) as c:
        for n in range(1, 31):
            assert _fire(c, "fast") == {"decision": "started", "run_id": n}
            until(f"run {n} to read closed",
                   lambda n=n: any(r["run_id"] == n and r["outcome"] == "success"
                                   for r in c.request("runs", names=["fast"], limit=5)["runs"]))
    assert {r["outcome"] for r in runs_of(world, "fast")} == {"success"}
