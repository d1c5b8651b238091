"""Mutation-test survivors of the daemon's supervisor (`harness.supervisor.manager`): the
window decision at its edges (a window exactly LATE seconds old, which the contract calls
on time; a sub-minute schedule whose last decided window is under LATE ago, with and
without catch_up), the crash-loop backoff at a run of exactly QUICK_RUN seconds, and the
failure streak and last run that `jobs` reads from the ledger (REQ-5: success resets, the
failure outcomes count, every other outcome is passed over). Exact values through the
public functions and a real Manager over a real ledger in a tmp dir."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conftest import World
from harness.config.load import load_config
from harness.config.schedule import Windows, parse_schedule
from harness.ledger.runledger import RunLedger
from harness.supervisor.manager import (
    LATE,
    MAX_BACKOFF,
    QUICK_RUN,
    Decision,
    Manager,
    decide_windows,
    next_delay,
)
from harness.supervisor.state import RunIds, StateFile
from harness.timefmt import format_ns

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- decide_windows ----------------------------------------------------------------------


@pytest.mark.parametrize("catch_up", [False, True])
def test_a_window_exactly_late_seconds_old_is_on_time(catch_up: bool) -> None:
    """Only a window MORE than LATE seconds late is missed: one evaluated exactly LATE
    after it came runs as scheduled (it was recorded missed and never run)."""
    sched = parse_schedule("CRON_TZ=UTC */10 * * * *")
    window = _s(600)
    got = decide_windows(sched, T0, window + timedelta(seconds=LATE), catch_up)
    assert got == Decision(Windows(0, None, None), window, "schedule")
    # A microsecond later it is late: missed, or caught up.
    later = window + timedelta(seconds=LATE, microseconds=1)
    got = decide_windows(sched, T0, later, catch_up)
    assert got == Decision(Windows(1, window, window), window if catch_up else None,
                           "catch_up" if catch_up else "schedule")


@pytest.mark.parametrize("catch_up", [False, True])
def test_a_sub_minute_window_after_a_recent_one_runs_on_time(catch_up: bool) -> None:
    """The last decided window under LATE ago (an ``@every`` finer than a minute): the
    next window is on time whatever catch_up says, with nothing missed."""
    sched = parse_schedule("@every 20s")
    got = decide_windows(sched, _s(0), _s(25), catch_up)
    assert got == Decision(Windows(0, None, None), _s(20), "schedule")
    # Two windows came while the loop stalled, both on time: one run, the newest.
    got = decide_windows(sched, _s(0), _s(45), catch_up)
    assert got == Decision(Windows(0, None, None), _s(40), "schedule")


# -- crash-loop backoff --------------------------------------------------------------------


def test_a_run_of_exactly_quick_run_seconds_is_not_quick() -> None:
    """REQ-3: a run SHORTER than QUICK_RUN doubles the next delay; one of exactly
    QUICK_RUN holds it."""
    assert next_delay(1.0, 8.0, QUICK_RUN) == (8.0, 8.0)
    assert next_delay(1.0, 8.0, QUICK_RUN - 0.001) == (8.0, 16.0)
    assert next_delay(1.0, 40.0, QUICK_RUN - 0.001) == (40.0, MAX_BACKOFF)


# -- jobs: the failure streak and the last run, read from the ledger -----------------------


def _jobs(world: World, open_ledger: Callable[..., RunLedger],
          outcomes: list[str]) -> dict[str, Any]:
    """`jobs` of one-shot "j" over a ledger holding a record per outcome, oldest first."""
    cfg_file = world.root / "harness.toml"
    # A resident beside it: `jobs` lists one-shots only.
    cfg_file.write_text('[harness.j]\nkind = "oneshot"\nargv = ["true"]\n'
                        '[harness.r]\nkind = "resident"\nargv = ["true"]\n')
    config = load_config(str(cfg_file))
    jobs_dir = world.state / "jobs"
    jobs_dir.mkdir(parents=True)
    led = open_ledger(world.root / "ledger")
    for run_id, outcome in enumerate(outcomes, 1):
        at = format_ns(led.clock())
        line: dict[str, Any] = {"harness": "j", "run_id": run_id, "at": at,
                                "kind": "oneshot", "trigger": "manual", "started_at": at}
        if outcome == "running":
            led.append({"type": "opened", **line, "outcome": "running"})
        else:
            led.append({"type": "decided", **line, "outcome": outcome, "ended_at": at},
                       sync=True)
    ids = RunIds(StateFile(str(world.root / "state.json")), led, str(jobs_dir))
    manager = Manager(config, led, ids, str(jobs_dir))
    [job] = asyncio.run(manager.jobs())
    return job


@pytest.mark.parametrize(("outcomes", "fails", "last"), [
    # Success resets; failed and timed_out count; skipped, missed, cancelled pass over.
    (["failed", "success", "failed", "skipped", "timed_out", "missed", "cancelled"], 2, 7),
    # No success at all: every failure outcome counts, whatever lies between.
    (["budget_exceeded", "interrupted", "model_mismatch", "model_unattested"], 3, 4),
    # The newest is a success: no streak, however many failures came before.
    (["failed", "failed", "success"], 0, 3),
    # A run still running is not the last run, nor part of the streak.
    (["failed", "success", "failed", "running"], 1, 3),
])
def test_jobs_failure_streak_and_last_run(world: World, open_ledger: Callable[..., RunLedger],
                                          outcomes: list[str], fails: int, last: int) -> None:
    job = _jobs(world, open_ledger, outcomes)
    assert job["fails"] == fails
    ended = job["last_run"].pop("ended_at")
    assert isinstance(ended, str) and ended.endswith("Z")
    assert job["last_run"].pop("started_at") == ended  # each record started as it ended
    assert job == {"name": "j", "state": "armed", "schedule": None, "next": None,
                   "catch_up": False, "on_overlap": "skip", "queued": None,
                   "last_run": {"run_id": last, "outcome": outcomes[last - 1]},
                   "fails": fails}


# -- a booted ticker: the windows it resumes from and records -------------------------------


def test_a_booted_ticker_records_the_missed_windows_and_shows_the_next(
        world: World, open_ledger: Callable[..., RunLedger]) -> None:
    """The newest window in the ledger is read back to the microsecond, the windows after
    it that are more than LATE late make one missed record naming the first and the last
    exactly, and `jobs` shows the next window as the stamp of that instant."""
    now = datetime.now(UTC)
    minute = (now.minute + 30) % 60  # no window within half an hour of now
    latest = now.replace(minute=minute, second=0, microsecond=0)
    if latest > now:
        latest -= timedelta(hours=1)
    seeded = latest - timedelta(hours=3)

    def stamp(at: datetime) -> str:
        return format_ns(int(at.timestamp()) * 1_000_000_000)

    cfg_file = world.root / "harness.toml"
    cfg_file.write_text(f'[harness.h]\nkind = "oneshot"\nargv = ["true"]\n'
                        f'schedule = "CRON_TZ=UTC {minute} * * * *"\n')
    config = load_config(str(cfg_file))
    jobs_dir = world.state / "jobs"
    jobs_dir.mkdir(parents=True)
    led = open_ledger(world.root / "ledger")
    w = stamp(seeded)
    led.append({"type": "decided", "harness": "h", "run_id": 1, "at": w, "kind": "oneshot",
                "trigger": "schedule", "started_at": w, "outcome": "success", "ended_at": w,
                "window": w}, sync=True)
    ids = RunIds(StateFile(str(world.root / "state.json")), led, str(jobs_dir))
    manager = Manager(config, led, ids, str(jobs_dir))

    async def main() -> tuple[dict[str, Any] | None, dict[str, Any]]:
        manager.start()
        deadline = time.monotonic() + 60
        try:
            while (rec := led.get("h", 2)) is None or not (await manager.jobs())[0]["next"]:
                assert time.monotonic() < deadline, "no missed record"
                await asyncio.sleep(0.05)
            [job] = await manager.jobs()
            return rec, job
        finally:
            await manager.shutdown()

    rec, job = asyncio.run(main())
    assert rec is not None
    assert (rec["outcome"], rec["trigger"], rec["windows"]) == ("missed", "schedule", 3)
    assert rec["first_window"] == stamp(seeded + timedelta(hours=1))
    assert rec["window"] == stamp(latest)
    assert job["next"] == stamp(latest + timedelta(hours=1))
    assert job["fails"] == 0 and job["last_run"]["run_id"] == 2
    assert led.get("h", 3) is None  # nothing ran
