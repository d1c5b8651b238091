"""The Manager: the daemon's one-shot scheduling and triggering (DESIGN.md §3 "Runs").

Owns, on one asyncio loop, the wall-clock ticker of every scheduled one-shot, the manual
trigger path, the set of live runs, and the read-only views `jobs` and `list`. Each run
goes through `runner.Run`, which owns its ledger record.

Invariants: at most one live run per harness (this slice implements ``on_overlap =
"skip"`` for every policy: a trigger while a run is live writes a synced ``decided``
skipped/overlap line instead of starting one); a schedule window fires at most once;
consecutive failures and the last run are read from the ledger only, never from memory,
so they agree with what `harness runs` shows; `shutdown` leaves no live run behind.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from ..config.model import Config, HarnessConfig
from ..config.schedule import Schedule
from ..ledger.query import Query
from ..ledger.runledger import RunLedger
from ..ledger.schema import FAILURE_OUTCOMES
from ..timefmt import format_ns
from .runner import DEFAULT_GRACE, Run, RunSpec
from .state import RunIds

log = logging.getLogger("harness.manager")

# The ticker never sleeps longer than this in one go: the wall clock is re-read after
# every sleep, so a suspend or a clock step delays a window by at most this much.
MAX_TICK = 1.0
# How far back `jobs` looks for the failure streak; a longer streak reads as this many.
STREAK_LIMIT = 1000


class UnknownHarness(KeyError):
    """No one-shot harness of that name is configured."""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _rfc3339(at: datetime) -> str:
    # Integer arithmetic on the timedelta: a float timestamp can round across a second.
    return format_ns((at - _EPOCH) // timedelta(microseconds=1) * 1000)


def _failure_streak(records: list[dict[str, Any]]) -> int:
    """REQ-5: success resets, the failure outcomes count, every other outcome is skipped."""
    n = 0
    for rec in records:  # newest first
        outcome = rec.get("outcome")
        if outcome == "success":
            break
        if outcome in FAILURE_OUTCOMES:
            n += 1
    return n


class Manager:
    """Schedules and triggers the one-shots of `config`; one per daemon."""

    def __init__(self, config: Config, ledger: RunLedger, ids: RunIds, jobs_dir: str, *,
                 grace: float = DEFAULT_GRACE) -> None:
        self.config = config
        self.ledger = ledger
        self.ids = ids
        self.jobs_dir = jobs_dir
        self.grace = grace
        self._live: dict[str, Run] = {}
        self._waiters: set[asyncio.Task[Any]] = set()
        self._tickers: list[asyncio.Task[None]] = []
        self._next: dict[str, datetime] = {}
        self._schedules: dict[str, Schedule] = {}
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Arm the ticker of every scheduled one-shot."""
        loop = asyncio.get_running_loop()
        for name, cfg in sorted(self.config.harness.items()):
            sched = cfg.parsed_schedule() if cfg.kind == "oneshot" else None
            if sched is None:
                continue
            self._schedules[name] = sched
            self._tickers.append(loop.create_task(self._tick(name, sched),
                                                  name=f"ticker:{name}"))

    async def shutdown(self) -> None:
        """Stop the tickers, then stop every live run as interrupted/shutdown."""
        self._stopping = True
        for t in self._tickers:
            t.cancel()
        await asyncio.gather(*self._tickers, return_exceptions=True)
        runs = list(self._live.values())
        results = await asyncio.gather(*(r.stop("shutdown") for r in runs),
                                       return_exceptions=True)
        for run, res in zip(runs, results, strict=True):
            if isinstance(res, BaseException):
                log.error("run %s/%s: stop failed: %s", run.spec.name, run.run_id, res)
        await asyncio.gather(*self._waiters, return_exceptions=True)

    # -- scheduling --------------------------------------------------------------------

    async def _tick(self, name: str, sched: Schedule) -> None:
        nxt = sched.next_fire(datetime.now(UTC))
        while True:
            self._next[name] = nxt
            while True:
                # Wall clock, not the loop's monotonic clock: windows are wall-clock
                # instants and a suspended machine must not shift them.
                left = (nxt - datetime.now(UTC)).total_seconds()
                if left <= 0:
                    break
                await asyncio.sleep(min(left, MAX_TICK))
            try:
                await self.trigger(name, "schedule")
            except asyncio.CancelledError:
                raise
            except Exception:
                # One failed window must not end the schedule; the next one still fires.
                log.exception("harness %s: the scheduled run could not be started", name)
            now = datetime.now(UTC)
            nxt = sched.next_fire(nxt)
            if nxt <= now:
                # Windows slept through (suspend) are not run: catch-up is out of scope.
                nxt = sched.next_fire(now)

    # -- triggering --------------------------------------------------------------------

    def _oneshot(self, name: str) -> HarnessConfig:
        cfg = self.config.harness.get(name)
        if cfg is None or cfg.kind != "oneshot":
            raise UnknownHarness(name)
        return cfg

    async def trigger(self, name: str, trigger: str = "manual") -> int:
        """Start a run of one-shot `name`; return its run id (or the skipped record's)."""
        cfg = self._oneshot(name)
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        if name in self._live:
            # queue and replace are not built yet: every policy skips on overlap.
            return await self._skip(name, trigger, "overlap")
        run = Run(RunSpec.from_config(name, cfg), self.ledger, self.ids, trigger,
                  jobs_dir=self.jobs_dir, grace=self.grace)
        # Claimed before the first await, so a concurrent trigger sees the run as live.
        self._live[name] = run
        try:
            run_id = await run.start()
        except BaseException:
            self._live.pop(name, None)
            raise
        task = asyncio.get_running_loop().create_task(self._reap(name, run))
        self._waiters.add(task)
        task.add_done_callback(self._waiters.discard)
        log.info("harness %s: run %d started (%s)", name, run_id, trigger)
        return run_id

    async def _reap(self, name: str, run: Run) -> None:
        try:
            rec = await run.wait()
            log.info("harness %s: run %s ended %s", name, run.run_id, rec.get("outcome"))
        except Exception:
            log.exception("harness %s: run %s ended with an error", name, run.run_id)
        finally:
            if self._live.get(name) is run:
                del self._live[name]

    async def _skip(self, name: str, trigger: str, reason: str) -> int:
        run_id = await asyncio.to_thread(self.ids.next, name)
        at = format_ns(self.ledger.clock())
        line = {"type": "decided", "harness": name, "run_id": run_id, "at": at,
                "kind": "oneshot", "trigger": trigger, "started_at": at,
                "outcome": "skipped", "reason": reason}
        await asyncio.to_thread(self.ledger.append, line, sync=True)
        log.info("harness %s: run %d skipped (%s)", name, run_id, reason)
        return run_id

    # -- views -------------------------------------------------------------------------

    def state_of(self, name: str) -> str:
        cfg = self.config.harness[name]
        if name in self._live:
            return "running"
        if cfg.kind == "oneshot":
            return "armed"  # ready for its schedule or a trigger
        return "stopped"  # residents are not supervised by this slice

    def list(self) -> list[dict[str, Any]]:
        return [{"name": name, "kind": cfg.kind, "state": self.state_of(name)}
                for name, cfg in sorted(self.config.harness.items())]

    # builtins.list: inside the class, `list` names the method above.
    async def jobs(self) -> builtins.list[dict[str, Any]]:
        out: builtins.list[dict[str, Any]] = []
        for name, cfg in sorted(self.config.harness.items()):
            if cfg.kind != "oneshot":
                continue
            recs, _ = await asyncio.to_thread(
                self.ledger.query, Query(names=(name,), limit=STREAK_LIMIT))
            last = next((r for r in recs if r.get("outcome") != "running"), None)
            nxt = self._next.get(name)
            out.append({
                "name": name,
                "state": self.state_of(name),
                "schedule": cfg.schedule,
                "next": _rfc3339(nxt) if nxt is not None else None,
                "last_run": None if last is None else {
                    "run_id": last["run_id"], "outcome": last.get("outcome"),
                    "ended_at": last.get("ended_at")},
                "fails": _failure_streak(recs),
            })
        return out


__all__ = ["Manager", "UnknownHarness"]
