"""Mutation-test survivors of the daemon's supervisor (`harness.supervisor.manager`) on the
side of overlaps, residents, operating hours and reloads: the trigger, window and
--over-budget a held scheduled firing runs with, and the window a skipped one is recorded
under (where a booted ticker resumes); a held firing replaced once a reload made the
policy ``replace``; the restart table (no / always / on-failure / unless-stopped against a
clean and a failed exit, read off `list` as backoff or stopped), a zero restart_delay and a
crash loop doubling its delay;
the state `list` shows of each kind of harness (an operator's stop outside the hours reads
stopped, not off-hours); an operator's start outside the hours that its policy's restarts
carry on until the stop; an hours opening that releases only an enabled resident nobody
stopped; a reload's reply and what it starts, stops and leaves down (operator stops and
starts, a backoff, a resident removed and added back, the hours of an operator-stopped
resident, a changed schedule starting from now); the not-on-disk word of a stop and a
replace on a hung disk; and which budget or cap takes a harness out of REQ-6's exception
(`unbudgeted`). Exact values through the public API and a real Manager over a real ledger
and real processes in a tmp dir; the hung disk is the FaultyFiles layer."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.config.load import load_config
from harness.config.model import Config
from harness.ledger.files import FaultyFiles
from harness.ledger.runledger import RunLedger
from harness.supervisor.manager import Manager, unbudgeted
from harness.supervisor.state import RunIds, StateFile
from test_hours_e2e import next_minute

WINDOW = "2026-11-30T12:00:00.000000000Z"
DEADLINE = 60.0  # generous: a loaded 2-core machine
MINUTE_WAIT = 150.0  # a minute boundary of operating hours, and the same slack


def _config(world: World, text: str, name: str = "harness.toml") -> Config:
    path = world.root / name
    path.write_text(text)
    return load_config(str(path))


def _manager(world: World, open_ledger: Callable[..., RunLedger], text: str,
             **kw: Any) -> Manager:
    jobs_dir = world.state / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    led = open_ledger(world.root / "ledger", **kw)
    ids = RunIds(StateFile(str(world.root / "state.json")), led, str(jobs_dir))
    return Manager(_config(world, text), led, ids, str(jobs_dir))


def _state_json(world: World) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((world.root / "state.json").read_text())
    return data


async def _until(what: str, check: Callable[[], Any], wait: float = DEADLINE) -> Any:
    """Poll `check` on the loop until it returns something truthy; that value."""
    deadline = time.monotonic() + wait
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return got


def _closed(led: RunLedger, name: str, run_id: int) -> Callable[[], Any]:
    def check() -> Any:
        rec = led.get(name, run_id)
        return rec if rec is not None and rec["outcome"] != "running" else None
    return check


def _run(manager: Manager, body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        try:
            await body()
        finally:
            await manager.shutdown()
    asyncio.run(main())


def _gated(name: str, policy: str, gate: Path) -> str:
    return (f'[harness.{name}]\nkind = "oneshot"\non_overlap = "{policy}"\n'
            f'argv = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n')


# -- overlap: what a skipped or held firing keeps ------------------------------------------


def test_a_held_scheduled_firing_runs_with_its_trigger_window_and_override(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """A firing held behind the live run is started, when that run ends, as the firing it
    was: trigger schedule, its window (where a booted ticker resumes from) and the
    --over-budget it was admitted with, under the run id it was told; state.json names
    the window while it is held, and a third firing meanwhile is skipped with its own."""
    gate = tmp_path / "gate"
    manager = _manager(world, open_ledger, _gated("q", "queue", gate))
    led = manager.ledger
    other = "2026-11-30T13:00:00.000000000Z"

    async def body() -> None:
        assert await manager.fire("q") == {"decision": "started", "run_id": 1}
        assert await manager.fire("q", "schedule", window=WINDOW, override=True) == {
            "decision": "queued", "run_id": 2}
        held = _state_json(world)["held"]["q"]
        assert [{k: v for k, v in e.items() if k != "at"} for e in held] == [
            {"run_id": 2, "trigger": "schedule", "window": WINDOW}]
        assert (await manager.jobs())[0]["queued"] == 2
        assert await manager.fire("q", "schedule", window=other) == {
            "decision": "skipped", "run_id": 3}
        gate.touch()
        two = await _until("run 2 to end", _closed(led, "q", 2))
        assert (two["trigger"], two["window"], two["outcome"]) == (
            "schedule", WINDOW, "success")
        assert two.get("override") is True
        one = led.get("q", 1)
        assert one is not None and "override" not in one and "window" not in one
        assert two["started_at"] >= one["ended_at"]
        await _until("the held entry to go", lambda: "held" not in _state_json(world))
        [job] = await manager.jobs()
        assert job["queued"] is None and job["last_run"]["run_id"] == 2
        # Nothing is held any more: the next firing starts.
        assert await manager.fire("q") == {"decision": "started", "run_id": 4}
        await _until("run 4 to end", _closed(led, "q", 4))

    _run(manager, body)
    skipped = led.get("q", 3)
    assert skipped is not None
    assert {k: skipped.get(k) for k in ("trigger", "window", "outcome", "reason")} == {
        "trigger": "schedule", "window": other, "outcome": "skipped", "reason": "overlap"}


def test_a_skipped_scheduled_firing_is_recorded_with_its_window(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """on_overlap = "skip": the scheduled firing that overlaps is recorded skipped/overlap
    under its window, so the window counts as decided (a booted ticker resumes after it)."""
    gate = tmp_path / "gate"
    manager = _manager(world, open_ledger, _gated("s", "skip", gate))
    led = manager.ledger

    async def body() -> None:
        assert await manager.fire("s") == {"decision": "started", "run_id": 1}
        assert await manager.fire("s", "schedule", window=WINDOW) == {
            "decision": "skipped", "run_id": 2}
        gate.touch()
        await _until("run 1 to end", _closed(led, "s", 1))

    _run(manager, body)
    rec = led.get("s", 2)
    assert rec is not None
    assert {k: rec.get(k) for k in ("trigger", "window", "outcome", "reason", "kind")} == {
        "trigger": "schedule", "window": WINDOW, "outcome": "skipped", "reason": "overlap",
        "kind": "oneshot"}


def test_a_firing_held_under_queue_is_replaced_once_a_reload_makes_it_replace(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """A reload turned queue into replace while a firing was held: the next firing closes
    the held one replaced (no reason, not cancelled) along with the live run, and starts."""
    gate = tmp_path / "gate"
    manager = _manager(world, open_ledger, _gated("q", "queue", gate))
    led = manager.ledger

    async def body() -> None:
        assert await manager.fire("q") == {"decision": "started", "run_id": 1}
        assert await manager.fire("q") == {"decision": "queued", "run_id": 2}
        new = _config(world, _gated("q", "replace", gate), "replace.toml")
        assert await manager.reload(new) == {"added": [], "removed": [], "changed": ["q"],
                                             "unchanged": 0}
        assert await manager.fire("q") == {"decision": "started", "run_id": 3}
        assert (await manager.jobs())[0]["queued"] is None
        gate.touch()
        await _until("run 3 to end", _closed(led, "q", 3))

    _run(manager, body)
    held, live = led.get("q", 2), led.get("q", 1)
    assert held is not None and live is not None
    assert (held["outcome"], held.get("reason"), held["trigger"]) == ("replaced", None, "manual")
    assert "exit_code" not in held
    assert (live["outcome"], live.get("reason")) == ("replaced", None)
    assert "held" not in _state_json(world)


# -- residents: the restart policy ----------------------------------------------------------


@pytest.mark.parametrize(("policy", "code", "restarts"), [
    ("no", 0, False), ("no", 3, False),
    ("always", 0, True), ("always", 3, True),
    ("on-failure", 0, False), ("on-failure", 3, True),
    ("unless-stopped", 0, True), ("unless-stopped", 3, True),
])
def test_the_restart_policy_decides_whether_an_own_exit_restarts(
        world: World, open_ledger: Callable[..., RunLedger], policy: str, code: int,
        restarts: bool) -> None:
    """REQ-3's table: a resident whose process ended on its own is restarted by always
    and unless-stopped whatever the exit, by on-failure only after a failure, never by
    no. With an hour's restart_delay the decision is what `list` shows once the run has
    ended: backoff (a restart is pending) or stopped."""
    manager = _manager(world, open_ledger,
                       f'[harness.r]\nkind = "resident"\nargv = ["sh", "-c", "exit {code}"]\n'
                       f'restart = "{policy}"\nrestart_delay = "1h"\n')
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        rec = await _until("run 1 to end", _closed(led, "r", 1))
        assert (rec["trigger"], rec["outcome"]) == (
            "autostart", "success" if code == 0 else "failed")
        await _until("its watcher", lambda: manager.state_of("r") != "running")
        assert manager.list() == [{"name": "r", "kind": "resident",
                                   "state": "backoff" if restarts else "stopped"}]

    _run(manager, body)
    assert led.get("r", 2) is None


def test_a_zero_restart_delay_restarts_at_once(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """restart_delay = 0: the first restart follows the exit at once, trigger restart."""
    mark = tmp_path / "mark"
    script = f"[ -e {mark} ] && exec sleep 600; touch {mark}; exit 1"
    manager = _manager(world, open_ledger,
                       f'[harness.r]\nkind = "resident"\nargv = ["sh", "-c", "{script}"]\n'
                       'restart = "on-failure"\nrestart_delay = "0s"\n')
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        await _until("run 1 to fail", _closed(led, "r", 1))
        two = await _until("the restart", lambda: led.get("r", 2))
        assert (two["trigger"], two["outcome"]) == ("restart", "running")
        assert manager.state_of("r") == "running"

    _run(manager, body)
    two = led.get("r", 2)
    assert two is not None and (two["outcome"], two["reason"]) == ("interrupted", "shutdown")


def test_a_crash_loop_doubles_the_restart_delay(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """REQ-3's backoff: a resident that fails within QUICK_RUN seconds of its start waits
    twice as long before each next restart (a run's duration is in milliseconds in its
    record; read as seconds, a tenth of a second would count as stable and reset it)."""
    manager = _manager(world, open_ledger,
                       '[harness.r]\nkind = "resident"\nargv = ["sh", "-c", "sleep 0.1; exit 1"]\n'
                       'restart_delay = "250ms"\n')
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        await _until("run 5", lambda: led.get("r", 5))
        await manager.stop_op("r")

    _run(manager, body)
    recs = [led.get("r", n) for n in range(1, 6)]
    assert all(r is not None for r in recs)
    ends = [r["ended_at"] for r in recs[:4] if r is not None]
    starts = [r["started_at"] for r in recs[1:] if r is not None]
    for n, (end, start, delay) in enumerate(zip(ends, starts, (0.25, 0.5, 1.0, 2.0),
                                                strict=True), 1):
        waited = (datetime.fromisoformat(start[:26] + "+00:00")
                  - datetime.fromisoformat(end[:26] + "+00:00")).total_seconds()
        # A lower bound only: a loaded machine can only make the wait longer.
        assert waited >= delay - 0.001, (n, waited)


# -- what `list` shows --------------------------------------------------------------------


def test_list_shows_each_kind_of_harness_in_its_state(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """A one-shot reads armed, or running while its run is live; a resident outside its
    hours reads off-hours, running once an operator starts it there, and stopped (not
    off-hours) once the operator stops it; a disabled resident reads stopped."""
    # Open one minute of a day that is neither today nor tomorrow: closed all test long.
    closed_day = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[
        (datetime.now(UTC).weekday() + 3) % 7]
    manager = _manager(world, open_ledger, f"""
[harness.a_shot]
kind = "oneshot"
argv = ["sleep", "600"]
[harness.b_closed]
kind = "resident"
argv = ["sleep", "600"]
operating_hours = "TZ=UTC {closed_day} 00:00-00:01"
[harness.c_off]
kind = "resident"
argv = ["sleep", "600"]
enabled = false
""")
    led = manager.ledger

    def states() -> dict[str, str]:
        return {e["name"]: e["state"] for e in manager.list()}

    async def body() -> None:
        await manager.start_residents()
        assert manager.list() == [
            {"name": "a_shot", "kind": "oneshot", "state": "armed"},
            {"name": "b_closed", "kind": "resident", "state": "off-hours"},
            {"name": "c_off", "kind": "resident", "state": "stopped"}]
        assert await manager.fire("a_shot") == {"decision": "started", "run_id": 1}
        assert await manager.start_op("b_closed") == {
            "name": "b_closed", "kind": "resident", "action": "started", "run_id": 1}
        assert states() == {"a_shot": "running", "b_closed": "running", "c_off": "stopped"}
        out = await manager.stop_op("b_closed")
        assert out == {"name": "b_closed", "kind": "resident", "action": "stopped",
                       "run_id": 1, "outcome": "cancelled", "reason": "operator"}
        out = await manager.stop_op("a_shot")
        assert out == {"name": "a_shot", "kind": "oneshot", "action": "stopped",
                       "run_id": 1, "outcome": "cancelled", "reason": "operator"}
        assert states() == {"a_shot": "armed", "b_closed": "stopped", "c_off": "stopped"}

    _run(manager, body)
    assert led.get("c_off", 1) is None


# -- unbudgeted -----------------------------------------------------------------------------


@pytest.mark.parametrize(("table", "line"), [
    ("harness.h", "max_runs_per_day = 3"),
    ("harness.h", "max_cost_usd = 1.5"),
    ("harness.h", "max_tokens = 1000"),
    ("harness.h", "daily_cost_usd = 2.0"),
    ("budget", "daily_cost_usd = 2.0"),
    ("budget", "max_concurrent = 2"),
])
def test_any_budget_or_cap_takes_a_harness_out_of_the_unbudgeted_exception(
        world: World, table: str, line: str) -> None:
    """REQ-6's exception (a run admitted with its opened line unsynced) is for a harness
    under no budget and no admission cap at all: any one of them, its own or the
    daemon's, takes it away."""
    base = '[harness.h]\nkind = "oneshot"\nargv = ["true"]\n'
    plain = _config(world, base, "plain.toml")
    assert unbudgeted(plain.harness["h"], plain) is True
    text = f"{base}[budget]\n{line}\n" if table == "budget" else f"{base}{line}\n"
    capped = _config(world, text, "capped.toml")
    assert unbudgeted(capped.harness["h"], capped) is False


# -- reload -------------------------------------------------------------------------------


_BEFORE = """
[harness.gone]
kind = "resident"
argv = ["sleep", "600"]
[harness.stays]
kind = "oneshot"
argv = ["true"]
[harness.edit]
kind = "resident"
argv = ["sleep", "600"]
[harness.held]
kind = "resident"
argv = ["sleep", "600"]
[harness.flip]
kind = "oneshot"
argv = ["sleep", "600"]
[harness.manual]
kind = "resident"
argv = ["sleep", "600"]
enabled = false
[harness.down]
kind = "resident"
argv = ["sleep", "600"]
enabled = false
[harness.bo]
kind = "resident"
argv = ["sh", "-c", "exit 1"]
enabled = false
restart_delay = "1h"
[harness.sched]
kind = "oneshot"
argv = ["true"]
schedule = "CRON_TZ=UTC 0 0 1 1 *"
"""

_AFTER = """
[harness.stays]
kind = "oneshot"
argv = ["true"]
[harness.edit]
kind = "resident"
argv = ["sleep", "601"]
[harness.held]
kind = "resident"
argv = ["sleep", "601"]
[harness.flip]
kind = "resident"
argv = ["sleep", "600"]
[harness.manual]
kind = "resident"
argv = ["sleep", "601"]
enabled = false
[harness.down]
kind = "resident"
argv = ["sleep", "601"]
enabled = false
[harness.bo]
kind = "resident"
argv = ["sleep", "600"]
enabled = false
restart_delay = "1h"
[harness.sched]
kind = "oneshot"
argv = ["true"]
schedule = "CRON_TZ=UTC 0 0 1 2 *"
[harness.new]
kind = "oneshot"
argv = ["true"]
schedule = "CRON_TZ=UTC 0 0 1 3 *"
[harness.newres]
kind = "resident"
argv = ["sleep", "600"]
"""


async def _nexts(manager: Manager, *names: str) -> dict[str, str]:
    """The next window `jobs` shows for each one-shot, once each of `names` has one."""
    deadline = time.monotonic() + DEADLINE
    while True:
        got = {j["name"]: j["next"] for j in await manager.jobs()}
        if all(got.get(n) for n in names):
            return got
        assert time.monotonic() < deadline, f"no next window for {names}"
        await asyncio.sleep(0.02)


def test_a_reload_adds_removes_and_reapplies_exactly_what_changed(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """The reply names what was added, removed and changed (a harness that changed kind
    is removed and added) and counts the rest. A removed resident's run ends
    cancelled/reload; an added resident autostarts and an added schedule is armed; a
    changed resident that was up (autostarted, started by an operator while disabled, or
    waiting out a restart's backoff) starts again under the new config (trigger
    manual: the reload is the operator's act), one that was down or that an operator
    stopped stays down; a changed schedule is armed anew."""
    manager = _manager(world, open_ledger, _BEFORE)
    led = manager.ledger

    async def body() -> None:
        manager.start()
        await manager.start_residents()
        assert (await manager.start_op("manual"))["run_id"] == 1
        assert (await manager.start_op("bo"))["run_id"] == 1
        await _until("bo's backoff", lambda: manager.state_of("bo") == "backoff")
        assert (await manager.stop_op("held"))["action"] == "stopped"
        before = await _nexts(manager, "sched")
        assert before["sched"].endswith("-01-01T00:00:00.000000000Z")
        out = await manager.reload(_config(world, _AFTER, "after.toml"))
        assert out == {"added": ["flip", "new", "newres"], "removed": ["flip", "gone"],
                       "changed": ["bo", "down", "edit", "held", "manual", "sched"],
                       "unchanged": 1}
        nexts = await _nexts(manager, "sched", "new")
        assert nexts["sched"].endswith("-02-01T00:00:00.000000000Z")
        assert nexts["new"].endswith("-03-01T00:00:00.000000000Z")
        assert {e["name"]: e["state"] for e in manager.list()} == {
            "bo": "running", "down": "stopped", "edit": "running", "flip": "running",
            "held": "stopped", "manual": "running", "new": "armed", "newres": "running",
            "sched": "armed", "stays": "armed"}

    _run(manager, body)

    def rec(name: str, run_id: int) -> tuple[Any, ...] | None:
        r = led.get(name, run_id)
        return None if r is None else (r["trigger"], r["outcome"], r.get("reason"))

    assert rec("gone", 1) == ("autostart", "cancelled", "reload")
    assert rec("edit", 1) == ("autostart", "cancelled", "reload")
    assert rec("edit", 2) == ("manual", "interrupted", "shutdown")
    assert rec("manual", 1) == ("manual", "cancelled", "reload")
    assert rec("manual", 2) == ("manual", "interrupted", "shutdown")
    assert rec("bo", 1) == ("manual", "failed", None)
    assert rec("bo", 2) == ("manual", "interrupted", "shutdown")
    assert rec("held", 1) == ("autostart", "cancelled", "operator")
    assert rec("held", 2) is None
    assert rec("down", 1) is None
    assert rec("flip", 1) == ("autostart", "interrupted", "shutdown")
    assert rec("newres", 1) == ("autostart", "interrupted", "shutdown")
    assert led.get("gone", 2) is None and led.get("edit", 3) is None


# -- operating hours: what the opening releases ------------------------------------------------


# A worker slow to stop: on SIGTERM it waits for the test's `finish` file, so an hours
# close still runs when the hours open again.
_SLOW_TO_STOP = """
import os, signal, sys, time
def term(*_):
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(1)
"""


def test_the_hours_opening_releases_only_an_enabled_resident_nobody_stopped(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """Hours close at the next minute and open a minute later. The opening releases an
    enabled resident (trigger release), but not a disabled one an operator had started
    (`enabled` governs what the hours start; an operator's start lasted until the close),
    whether its close ended before the opening or was still running at it, nor one an
    operator stopped."""
    close = next_minute(margin=15)
    reopen = close + timedelta(minutes=1)
    hours = (f'operating_hours = "TZ=UTC Mon-Sun 00:00-{close:%H:%M}; '
             f'Mon-Sun {reopen:%H:%M}-24:00"\n')
    worker = tmp_path / "worker.py"
    worker.write_text(_SLOW_TO_STOP)
    finish = tmp_path / "finish"
    manager = _manager(world, open_ledger, f"""
[harness.on]
kind = "resident"
argv = ["sleep", "600"]
hours_shutdown = "immediate"
{hours}
[harness.dis_quick]
kind = "resident"
argv = ["sleep", "600"]
enabled = false
hours_shutdown = "immediate"
{hours}
[harness.dis_slow]
kind = "resident"
argv = ["{sys.executable}", "{worker}", "{finish}"]
enabled = false
hours_shutdown = "graceful"
{hours}
[harness.opstop]
kind = "resident"
argv = ["sleep", "600"]
hours_shutdown = "immediate"
{hours}
""")
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        for name in ("dis_quick", "dis_slow"):
            assert (await manager.start_op(name))["run_id"] == 1
        assert (await manager.stop_op("opstop"))["reason"] == "operator"
        closed = await _until("the close", _closed(led, "dis_quick", 1), MINUTE_WAIT)
        assert (closed["outcome"], closed["reason"]) == ("cancelled", "hours")
        two = await _until("the release", lambda: led.get("on", 2), MINUTE_WAIT)
        assert two["trigger"] == "release"
        # Every gate looks once a second: three ticks past the opening, each has seen it.
        await asyncio.sleep(3.0)
        assert manager.state_of("dis_slow") == "running"  # its close still running
        finish.touch()
        slow = await _until("dis_slow's close", _closed(led, "dis_slow", 1))
        assert (slow["outcome"], slow["reason"], slow["exit_code"]) == (
            "cancelled", "hours", 0)
        await _until("dis_slow's watcher", lambda: manager.state_of("dis_slow") != "running")
        assert {e["name"]: e["state"] for e in manager.list()} == {
            "dis_quick": "stopped", "dis_slow": "stopped", "on": "running",
            "opstop": "stopped"}

    _run(manager, body)
    # Anything the opening or dis_slow's end had started would have a record by now.
    for name in ("dis_quick", "dis_slow", "opstop"):
        assert led.get(name, 2) is None, name
    on = led.get("on", 1)
    assert on is not None and (on["outcome"], on["reason"]) == ("cancelled", "hours")


# -- reload: operator actions and hours ---------------------------------------------------


def _closed_day() -> str:
    """A weekday that is neither today nor tomorrow (UTC): its hours are closed all test."""
    return ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[
        (datetime.now(UTC).weekday() + 3) % 7]


def _worker(argv: str, extra: str = "") -> str:
    return (f'[harness.w]\nkind = "resident"\nargv = {argv}\n'
            f'operating_hours = "TZ=UTC {_closed_day()} 00:00-00:01"\n{extra}')


def test_a_reloaded_operator_stopped_resident_keeps_its_hours(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """An operator-stopped resident with operating hours, changed by a reload, stays
    down, and its hours still hold once the operator starts it outside them: when that
    start is over (its run failed, and restart = "no") the resident reads off-hours, not
    stopped. The reload used to skip re-arming its hours, so it ran as if it had none."""
    fail = '["sh", "-c", "exit 1"]'
    manager = _manager(world, open_ledger,
                       _worker('["sleep", "600"]', 'restart = "no"\n'))
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        assert manager.state_of("w") == "off-hours"
        assert (await manager.stop_op("w"))["action"] == "not_running"
        assert manager.state_of("w") == "stopped"
        new = _config(world, _worker(fail, 'restart = "no"\n'), "after.toml")
        assert (await manager.reload(new))["changed"] == ["w"]
        assert manager.state_of("w") == "stopped"
        assert (await manager.start_op("w"))["run_id"] == 1
        rec = await _until("run 1 to fail", _closed(led, "w", 1))
        assert (rec["trigger"], rec["outcome"]) == ("manual", "failed")
        await _until("its watcher", lambda: manager.state_of("w") != "running")
        assert manager.state_of("w") == "off-hours"

    _run(manager, body)
    assert led.get("w", 2) is None


def test_a_reload_does_not_start_a_resident_whose_operator_start_has_ended(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """An operator's start outside the hours lasts until the operator stops it or the
    hours next open, but a resident that is down all the same (its run ended on its own
    and restart = "no") has nothing of it left: a reload changing it starts nothing."""
    manager = _manager(world, open_ledger, _worker('["true"]', 'restart = "no"\n'))
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        assert (await manager.start_op("w"))["run_id"] == 1
        await _until("run 1 to end", _closed(led, "w", 1))
        await _until("its watcher", lambda: manager.state_of("w") != "running")
        assert manager.state_of("w") == "off-hours"
        new = _config(world, _worker('["sleep", "600"]', 'restart = "no"\n'), "after.toml")
        assert (await manager.reload(new))["changed"] == ["w"]
        assert manager.state_of("w") == "off-hours"

    _run(manager, body)
    assert led.get("w", 2) is None


@pytest.mark.parametrize("policy", ["on-failure", "always"])
def test_an_operators_start_outside_the_hours_restarts_by_its_policy(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path,
        policy: str) -> None:
    """An operator's start outside the hours lasts until the operator stops the resident
    or the hours next open, its policy's restarts included (as a started unit with
    Restart=on-failure is restarted): a crash there is restarted, trigger restart, and
    the stop ends it for good. The watcher used to drop the start at the crash and then
    arm a restart the hours refused when it came due: `list` read backoff, and nothing
    ever started."""
    mark = tmp_path / "crashed"
    script = f"[ -e {mark} ] && exec sleep 600; touch {mark}; exit 1"
    manager = _manager(world, open_ledger, _worker(
        f'["sh", "-c", "{script}"]', f'restart = "{policy}"\nrestart_delay = "200ms"\n'))
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        assert manager.state_of("w") == "off-hours"
        assert (await manager.start_op("w"))["run_id"] == 1
        one = await _until("run 1 to fail", _closed(led, "w", 1))
        assert (one["trigger"], one["outcome"]) == ("manual", "failed")
        two = await _until("the restart", lambda: led.get("w", 2))
        assert (two["trigger"], two["outcome"]) == ("restart", "running")
        await _until("its run", lambda: manager.state_of("w") == "running")
        assert manager.list() == [{"name": "w", "kind": "resident", "state": "running"}]
        out = await manager.stop_op("w")
        assert (out["run_id"], out["reason"]) == (2, "operator")
        assert manager.state_of("w") == "stopped"

    _run(manager, body)
    assert led.get("w", 3) is None


def test_a_resident_removed_and_added_again_is_a_new_one(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """A removed resident is forgotten whole: the operator's stop of it included, so the
    same name added back by a later reload autostarts as any added resident does."""
    text = '[harness.r]\nkind = "resident"\nargv = ["sleep", "600"]\n'
    other = '[harness.o]\nkind = "oneshot"\nargv = ["true"]\n'
    manager = _manager(world, open_ledger, text + other)
    led = manager.ledger

    async def body() -> None:
        await manager.start_residents()
        assert (await manager.stop_op("r"))["reason"] == "operator"
        gone = await manager.reload(_config(world, other, "gone.toml"))
        assert gone == {"added": [], "removed": ["r"], "changed": [], "unchanged": 1}
        back = await manager.reload(_config(world, text + other, "back.toml"))
        assert back == {"added": ["r"], "removed": [], "changed": [], "unchanged": 1}
        two = await _until("the autostart", lambda: led.get("r", 2))
        assert (two["trigger"], two["outcome"]) == ("autostart", "running")
        assert manager.state_of("r") == "running"

    _run(manager, body)
    assert manager.ids.state.stopped() == set()


def test_a_reloaded_schedule_starts_from_now(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """A changed schedule's windows before the reload were never due: even when the last
    decided window (New Year's midnight) is a window of the new hourly schedule too, the
    hours since are not recorded missed; the ticker only waits for the next hour."""
    text = '[harness.j]\nkind = "oneshot"\nargv = ["true"]\nschedule = "CRON_TZ=UTC {}"\n'
    manager = _manager(world, open_ledger, text.format("0 0 1 1 *"))
    led = manager.ledger
    year = datetime.now(UTC).year
    window = f"{year}-01-01T00:00:00.000000000Z"
    led.append({"type": "decided", "harness": "j", "run_id": 1, "at": window,
                "kind": "oneshot", "trigger": "schedule", "started_at": window,
                "outcome": "success", "ended_at": window, "window": window}, sync=True)

    async def body() -> None:
        manager.start()
        nxt = (await _nexts(manager, "j"))["j"]
        assert nxt == f"{year + 1}-01-01T00:00:00.000000000Z"
        new = _config(world, text.format("0 * * * *"), "hourly.toml")
        assert (await manager.reload(new))["changed"] == ["j"]
        nxt = (await _nexts(manager, "j"))["j"]
        assert nxt.endswith(":00:00.000000000Z")
        left = datetime.fromisoformat(nxt[:19] + "+00:00") - datetime.now(UTC)
        assert timedelta(0) < left <= timedelta(hours=1)  # the next hour

    _run(manager, body)
    assert led.get("j", 2) is None


# -- replies: which records are not on disk yet -------------------------------------------------


def test_a_stop_names_every_record_it_closed_that_is_not_on_disk_yet(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """An operator's stop of a one-shot with a held firing, while the disk's syncs hang:
    both records it closed (the live run's closed line, the held firing's decided line)
    stay queued past REQ-6's 2 s bound, and the reply says so of each (``durable:
    false``, both named in ``not_durable``) instead of failing; once the disk is back
    both land."""
    gate = tmp_path / "gate"
    files = FaultyFiles()
    manager = _manager(world, open_ledger, _gated("q", "queue", gate), files=files)
    led = manager.ledger

    async def body() -> None:
        assert await manager.fire("q") == {"decision": "started", "run_id": 1}
        assert await manager.fire("q") == {"decision": "queued", "run_id": 2}
        files.inject("sync", hang=True)
        try:
            out = await manager.stop_op("q")
        finally:
            files.clear("sync")
        assert out == {"name": "q", "kind": "oneshot", "action": "stopped", "run_id": 1,
                       "outcome": "cancelled", "reason": "operator", "cancelled_queued": 2,
                       "durable": False, "not_durable": [
                           {"harness": "q", "run_id": 1, "line": "closed"},
                           {"harness": "q", "run_id": 2, "line": "decided"}]}
        for run_id in (1, 2):
            rec = await _until(f"run {run_id}'s record", _closed(led, "q", run_id))
            assert (rec["outcome"], rec["reason"]) == ("cancelled", "operator")

    _run(manager, body)


def test_a_replace_names_the_replaced_runs_record_that_is_not_on_disk_yet(
        world: World, open_ledger: Callable[..., RunLedger], tmp_path: Path) -> None:
    """on_overlap = "replace" while the disk's syncs hang: the new run starts (REQ-6's
    exception for an unbudgeted harness) and the reply names the replaced run's closed
    line as not on disk yet; once the disk is back it lands, replaced."""
    gate = tmp_path / "gate"
    files = FaultyFiles()
    manager = _manager(world, open_ledger, _gated("r", "replace", gate), files=files)
    led = manager.ledger

    async def body() -> None:
        assert await manager.fire("r") == {"decision": "started", "run_id": 1}
        files.inject("sync", hang=True)
        try:
            out = await manager.fire("r")
        finally:
            files.clear("sync")
        assert out == {"decision": "started", "run_id": 2, "durable": False,
                       "not_durable": [{"harness": "r", "run_id": 1, "line": "closed"}]}
        rec = await _until("run 1's record", _closed(led, "r", 1))
        assert rec["outcome"] == "replaced"
        gate.touch()
        await _until("run 2 to end", _closed(led, "r", 2))

    _run(manager, body)
