"""The daily prune (housekeeping.DailyPrune, SPEC-0022 REQ-12/REQ-19) driven by a fake wall
clock: a real RunLedger in a real directory, real day files written through it, and the
task running on a real event loop with a short tick. The same fake clock is the ledger's,
so the prune's "now" is the rollover the task saw. Checked on disk: which day files are
left, and that the chain still verifies from CHAIN.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.ledger.runledger import RunLedger
from harness.ledger.verify import verify_run_ledger
from harness.supervisor import housekeeping
from harness.supervisor.housekeeping import DailyPrune
from ledgertools import DAY, OpenLedger

TICK = 0.01
DEADLINE = 20.0
MIB = 1024 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class WallClock:
    """One fake wall clock for the task (a datetime) and the ledger (epoch ns)."""

    def __init__(self, at: str) -> None:
        self.at = datetime.fromisoformat(at)

    def set(self, at: str) -> None:
        self.at = datetime.fromisoformat(at)

    def now(self) -> datetime:
        return self.at

    def ns(self) -> int:
        return (self.at - _EPOCH) // timedelta(microseconds=1) * 1000


def days_on_disk(d: Path) -> list[str]:
    return sorted(p.name.removesuffix(".jsonl") for p in d.glob("*.jsonl"))


def fill(led: RunLedger, clock: WallClock, ages: range) -> None:
    """Two decided lines on each day `ages` days before the clock's day, oldest first."""
    base = clock.at
    run = 0
    for age in ages:
        clock.at = base - timedelta(days=age)
        for i in range(2):
            run += 1
            # Only the last line waits: the writer syncs every earlier one with it.
            led.append({"type": "decided", "harness": "nightly", "run_id": run,
                        "trigger": "schedule", "outcome": "missed"},
                       sync=age == ages[-1] and i == 1)
    clock.at = base


def day_of(clock: WallClock, age: int) -> str:
    return (clock.at - timedelta(days=age)).date().isoformat()


async def until(what: str, probe: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while not probe():
        if loop.time() > end:
            raise AssertionError(f"timed out after {DEADLINE:g}s waiting for {what}")
        await asyncio.sleep(TICK)


async def idle(ticks: int = 30) -> None:
    """Let the task run a few dozen ticks of its loop."""
    await asyncio.sleep(ticks * TICK)


def drive(dp: DailyPrune, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        task = asyncio.get_running_loop().create_task(dp.run())
        try:
            await until("the task to arm", lambda: dp.next_at is not None)
            await scenario()
            assert not task.done()  # nothing above ended the loop
        finally:
            await housekeeping.stop(task)
        assert task.cancelled()

    asyncio.run(main())


def test_a_prune_runs_at_each_rollover_once_per_day(tmp_path: Path,
                                                    open_ledger: OpenLedger) -> None:
    d = tmp_path / "ledger"
    clock = WallClock("2026-06-15T23:59:59.500+00:00")
    led = open_ledger(d, clock=clock.ns, retention_ns=30 * DAY)
    fill(led, clock, range(44, -1, -1))
    assert len(days_on_disk(d)) == 45
    # The boot prune (daemon.py) at 23:59:59.5 on the 15th: 05-15 ended 31 days ago, goes;
    # 05-16 ended 29.99999 days ago and stays until the rollover.
    boot = led.prune()
    assert boot.deleted == [day_of(clock, age) for age in range(44, 30, -1)]
    assert days_on_disk(d)[0] == "2026-05-16"

    dp = DailyPrune(led, now=clock.now, tick=TICK)

    async def scenario() -> None:
        assert dp.next_at == datetime(2026, 6, 16, tzinfo=UTC)
        await idle()
        assert dp.count == 0  # 0.5 s before midnight: nothing yet
        clock.set("2026-06-16T00:00:00.250+00:00")
        await until("the first rollover's prune", lambda: dp.count == 1)
        assert dp.last is not None
        assert (dp.last.deleted, dp.last.carried_forward, dp.last.error) == (
            ["2026-05-16"], 0, None)
        assert days_on_disk(d) == [f"2026-{m:02d}-{dd:02d}" for m, dd in
                                   [(5, x) for x in range(17, 32)] +
                                   [(6, x) for x in range(1, 16)]]
        assert dp.next_at == datetime(2026, 6, 17, tzinfo=UTC)
        # The rest of the day, and a clock stepped back across the midnight: no second prune.
        for at in ("2026-06-16T12:00:00+00:00", "2026-06-16T23:59:59.999+00:00",
                   "2026-06-15T23:30:00+00:00", "2026-06-16T00:00:01+00:00"):
            clock.set(at)
            await idle()
            assert dp.count == 1, at
        assert days_on_disk(d)[0] == "2026-05-17"
        clock.set("2026-06-17T00:00:00+00:00")  # exactly midnight counts as the new day
        await until("the second rollover's prune", lambda: dp.count == 2)
        # ...and 05-17 ended exactly 30 days before it: not *more* than retention ago.
        assert dp.last is not None and dp.last.deleted == []
        assert dp.next_at == datetime(2026, 6, 18, tzinfo=UTC)
        await idle()
        assert dp.count == 2

    drive(dp, scenario)
    assert led.stats().pruned == 14 + 1
    res = verify_run_ledger(str(d))
    assert res.ok, res.to_json()
    assert res.lines == 2 * 30


def test_a_clock_jumping_days_ahead_prunes_once_then_waits_for_the_next_midnight(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    d = tmp_path / "ledger"
    clock = WallClock("2026-06-15T10:00:00+00:00")
    led = open_ledger(d, clock=clock.ns, retention_ns=30 * DAY)
    fill(led, clock, range(40, -1, -1))
    dp = DailyPrune(led, now=clock.now, tick=TICK)

    async def scenario() -> None:
        # A machine suspended for three days wakes up on the 18th at 09:00.
        clock.set("2026-06-18T09:00:00+00:00")
        await until("the prune after the suspend", lambda: dp.count == 1)
        assert dp.next_at == datetime(2026, 6, 19, tzinfo=UTC)
        await idle()
        assert dp.count == 1
        assert dp.last is not None
        # Ended more than 30 days before 06-18 09:00: every day up to 05-18.
        assert dp.last.deleted == [f"2026-05-{x:02d}" for x in range(6, 19)]

    drive(dp, scenario)
    assert days_on_disk(d)[0] == "2026-05-19"


def test_limits_changed_before_the_rollover_are_the_ones_applied(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    d = tmp_path / "ledger"
    clock = WallClock("2026-06-15T23:59:00+00:00")
    led = open_ledger(d, clock=clock.ns, retention_ns=90 * DAY, max_bytes=256 * MIB)
    fill(led, clock, range(44, -1, -1))
    assert led.prune().deleted == []  # 90 days: nothing is old enough at boot
    current = {"limits": (90 * DAY, 256 * MIB)}  # what a reload swaps
    dp = DailyPrune(led, limits=lambda: current["limits"], now=clock.now, tick=TICK)

    async def scenario() -> None:
        current["limits"] = (30 * DAY, 256 * MIB)  # reloaded: retention = "30d"
        assert led.retention_ns == 90 * DAY  # not applied before the prune (REQ-19)
        await idle()
        assert dp.count == 0
        clock.set("2026-06-16T00:00:00.100+00:00")
        await until("the rollover's prune", lambda: dp.count == 1)
        assert dp.last is not None
        assert dp.last.deleted == [f"2026-05-{x:02d}" for x in range(2, 17)]
        assert (led.retention_ns, led.max_bytes) == (30 * DAY, 256 * MIB)

    drive(dp, scenario)
    assert days_on_disk(d) == [f"2026-05-{x:02d}" for x in range(17, 32)] + [
        f"2026-06-{x:02d}" for x in range(1, 16)]


def test_set_limits_size_cap_applies_at_the_next_rollover(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    d = tmp_path / "ledger"
    clock = WallClock("2026-06-15T23:59:00+00:00")
    led = open_ledger(d, clock=clock.ns, retention_ns=90 * DAY, max_bytes=256 * MIB)
    fill(led, clock, range(44, -1, -1))
    newest = sorted(d.glob("*.jsonl"))[-10:]
    cap = sum(p.stat().st_size for p in newest)
    dp = DailyPrune(led, now=clock.now, tick=TICK)  # no limits callable: the ledger's own

    async def scenario() -> None:
        led.set_limits(90 * DAY, cap)  # what a reload may call directly
        await idle()
        assert dp.count == 0 and len(days_on_disk(d)) == 45
        clock.set("2026-06-16T00:00:00+00:00")
        await until("the rollover's prune", lambda: dp.count == 1)
        assert dp.last is not None and len(dp.last.deleted) == 35

    drive(dp, scenario)
    # Oldest first until the total fits: exactly the 10 newest files are left.
    assert days_on_disk(d) == sorted(p.name.removesuffix(".jsonl") for p in newest)
    with pytest.raises(ValueError, match="must not be negative"):
        led.set_limits(-1, cap)


def test_a_failed_prune_is_logged_and_the_next_day_still_prunes(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "ledger"
    clock = WallClock("2026-06-15T23:59:59+00:00")
    led = open_ledger(d, clock=clock.ns, retention_ns=90 * DAY)
    fill(led, clock, range(44, -1, -1))
    calls = []

    def limits() -> tuple[int, int]:
        calls.append(clock.at)
        if len(calls) == 1:
            raise RuntimeError("config unreadable")
        return 30 * DAY, 256 * MIB

    dp = DailyPrune(led, limits=limits, now=clock.now, tick=TICK)

    async def scenario() -> None:
        clock.set("2026-06-16T00:00:00+00:00")
        await until("the failed prune", lambda: dp.count == 1)
        await idle()
        assert dp.last is None and len(days_on_disk(d)) == 45
        clock.set("2026-06-17T00:00:00+00:00")
        await until("the next day's prune", lambda: dp.count == 2)
        assert dp.last is not None
        assert dp.last.deleted == [f"2026-05-{x:02d}" for x in range(2, 17)]

    with caplog.at_level(logging.INFO, logger="harness.housekeeping"):
        drive(dp, scenario)
    failed = [r for r in caplog.records if "daily prune failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.ERROR
    assert failed[0].exc_info is not None and str(failed[0].exc_info[1]) == "config unreadable"
    done = [r.getMessage() for r in caplog.records if "deleted" in r.getMessage()]
    assert done == ["ledger: daily prune deleted 15 day file(s): "
                    + ", ".join(f"2026-05-{x:02d}" for x in range(2, 17))
                    + " (0 open run(s) carried forward)"]


def test_config_limits_reads_the_ledger_table() -> None:
    from harness.config.model import Config

    cfg = Config.model_validate({"ledger": {"retention": "30d", "max_mb": 16}})
    assert housekeeping.config_limits(cfg) == (30 * DAY, 16 * MIB)
