"""Daily housekeeping: the run ledger's prune at every UTC day rollover (SPEC-0022 REQ-12,
REQ-19).

The daemon prunes once at boot (daemon.py); `DailyPrune` owns every prune after that. It
sleeps until the next UTC midnight by re-reading the wall clock at least every `tick`
seconds (as the Manager's schedule ticker does), so a suspended machine or a stepped
clock delays the prune by at most one tick and never makes it skip the day. At the
rollover it takes the current limits (`limits()`, when given, so a reload's [ledger]
retention and max_mb apply at the next prune) and runs `RunLedger.prune` in a thread.

Invariants: at most one prune per UTC day — after a prune the next one waits for the
midnight after the day it ran on, even if the clock then steps back; a failed prune (or
a failing `limits`) is logged and the loop goes on to the next day; a prune that has
started is never abandoned half-way: cancelling the task waits for the prune's thread to
return before the cancellation propagates, so the ledger is never closed under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta

from ..config.model import Config
from ..ledger.retention import PruneResult
from ..ledger.runledger import RunLedger

log = logging.getLogger("harness.housekeeping")

# The longest single sleep: the wall clock is re-read after each one.
MAX_TICK = 1.0
MIB = 1024 * 1024


def utc_now() -> datetime:
    return datetime.now(UTC)


def config_limits(config: Config) -> tuple[int, int]:
    """(retention_ns, max_bytes) of a config's [ledger] table."""
    return config.ledger.retention, config.ledger.max_mb * MIB


def _midnight_after(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)


class DailyPrune:
    """Prune `ledger` at each UTC midnight; `run` until cancelled.

    `now` is the wall clock (an aware datetime) and `tick` the longest sleep, both
    injectable so a test can drive a rollover. `count`, `last` and `next_at` say what
    the task has done and what it waits for.
    """

    def __init__(self, ledger: RunLedger, *,
                 limits: Callable[[], tuple[int, int]] | None = None,
                 now: Callable[[], datetime] = utc_now, tick: float = MAX_TICK) -> None:
        if tick <= 0:
            raise ValueError(f"tick must be positive, got {tick}")
        self.ledger = ledger
        self.limits = limits
        self.now = now
        self.tick = tick
        self.count = 0  # prunes finished, failed ones included
        self.last: PruneResult | None = None
        self.next_at: datetime | None = None

    def _today(self) -> date:
        return self.now().astimezone(UTC).date()

    async def run(self) -> None:
        self.next_at = _midnight_after(self._today())
        while True:
            while (left := (self.next_at - self.now()).total_seconds()) > 0:
                await asyncio.sleep(min(left, self.tick))
            # The day this prune stands for: the rollover's, or a later one when the
            # clock jumped (or the machine slept) across several midnights.
            day = max(self.next_at.date(), self._today())
            await self._prune_once()
            self.next_at = _midnight_after(day)

    async def _prune_once(self) -> None:
        fut = asyncio.ensure_future(asyncio.to_thread(self._prune))
        try:
            res = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The thread cannot be stopped: let it finish so the daemon does not close the
            # ledger under a prune that is deleting files and carrying runs forward.
            with contextlib.suppress(Exception):
                await fut
            raise
        except Exception:
            self.count += 1
            log.exception("ledger: the daily prune failed; retrying at the next rollover")
            return
        self.last = res
        self.count += 1
        if res.deleted:
            log.info("ledger: daily prune deleted %d day file(s): %s (%d open run(s) "
                     "carried forward)", len(res.deleted), ", ".join(res.deleted),
                     res.carried_forward)
        else:
            log.info("ledger: daily prune: nothing to delete")
        if res.error is not None:
            log.error("ledger: daily prune stopped early: %s", res.error)

    def _prune(self) -> PruneResult:
        if self.limits is not None:
            self.ledger.set_limits(*self.limits())
        return self.ledger.prune()


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel a housekeeping task and wait for it (a running prune finishes first)."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait({task})  # never raises the task's error; our own cancel propagates
    if not task.cancelled() and task.exception() is not None:
        log.error("housekeeping ended with an error: %r", task.exception())


__all__ = ["MAX_TICK", "DailyPrune", "config_limits", "stop", "utc_now"]
