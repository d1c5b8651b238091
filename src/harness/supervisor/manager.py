"""The Manager: the daemon's one-shot scheduling and triggering and its resident supervision
(DESIGN.md §3 "Runs", SPEC-0022 REQ-3/REQ-5).

Owns, on one asyncio loop, the wall-clock ticker of every scheduled one-shot, the manual
trigger path, the resident lifecycle (autostart, restart policy with crash-loop backoff,
operator start/stop/restart), the set of live runs, and the read-only views `jobs` and
`list`. Each run goes through `runner.Run`, which owns its ledger record.

Invariants: at most one live run per harness (this slice implements ``on_overlap =
"skip"`` for every policy: a trigger while a run is live writes a synced ``decided``
skipped/overlap line instead of starting one); a schedule window fires at most once;
consecutive failures and the last run are read from the ledger only, never from memory,
so they agree with what `harness runs` shows; `shutdown` leaves no live run behind.
A resident is restarted only when its process ended on its own and its policy says so:
a run the Manager ended (operator stop or restart, shutdown) never triggers a restart, and
an operator-stopped resident stays down until `start`; each spawn is a new record.
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
# Crash-loop backoff (REQ-3): a run shorter than QUICK_RUN doubles the next restart delay,
# up to MAX_BACKOFF; a run that stayed up STABLE_RUN resets it to the configured delay.
QUICK_RUN = 10.0
STABLE_RUN = 60.0
MAX_BACKOFF = 60.0


class UnknownHarness(KeyError):
    """No one-shot harness of that name is configured."""


class NotResident(ValueError):
    """The operation applies to resident harnesses only."""


def next_delay(base: float, current: float | None, up: float) -> tuple[float, float]:
    """(this restart's delay, the one after it) for a resident that stayed up `up` seconds.

    `current` is the delay the backoff had reached (None: none yet). A stable run resets it
    to `base`; a quick one doubles the next delay, capped at MAX_BACKOFF.
    """
    delay = base if up >= STABLE_RUN or current is None else current
    return delay, (min(delay * 2, MAX_BACKOFF) if up < QUICK_RUN else delay)


def _wants_restart(policy: str, outcome: str | None) -> bool:
    """Whether a resident whose process ended on its own with `outcome` is restarted."""
    if policy in ("always", "unless-stopped"):
        return True
    if policy == "on-failure":
        return outcome != "success"
    return False


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
        # Residents: operator-stopped names, pending restarts, and each one's next delay.
        self._held: set[str] = set()
        self._backoff: dict[str, asyncio.Task[None]] = {}
        self._delay: dict[str, float] = {}
        # (name, run_id) of runs the Manager itself is ending: their end is not a crash.
        self._ending: set[tuple[str, int]] = set()
        # One lifecycle change per resident at a time, so no op sees another's half-started
        # run; held across run.start() and run.stop().
        self._locks: dict[str, asyncio.Lock] = {}

    # -- lifecycle ---------------------------------------------------------------------

    async def start_residents(self) -> None:
        """Autostart every enabled resident (trigger autostart)."""
        for name, cfg in sorted(self.config.harness.items()):
            if cfg.kind == "resident" and cfg.enabled:
                try:
                    async with self._lock(name):
                        await self._spawn_resident(name, "autostart")
                except Exception:
                    log.exception("harness %s: autostart failed", name)

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
        pending = [*self._tickers, *self._backoff.values()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for run in self._live.values():
            if run.run_id is not None:
                self._ending.add((run.spec.name, run.run_id))
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

    # -- residents ---------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _resident(self, name: str) -> HarnessConfig:
        cfg = self.config.harness.get(name)
        if cfg is None:
            raise UnknownHarness(name)
        if cfg.kind != "resident":
            raise NotResident(name)
        return cfg

    async def _spawn_resident(self, name: str, trigger: str) -> int:
        """Start a run of resident `name`; the caller holds its lock."""
        cfg = self._resident(name)
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        run = Run(RunSpec.from_config(name, cfg), self.ledger, self.ids, trigger,
                  kind="resident", jobs_dir=self.jobs_dir, grace=self.grace)
        self._live[name] = run  # claimed before the first await, as in `trigger`
        try:
            run_id = await run.start()
        except BaseException:
            if self._live.get(name) is run:
                del self._live[name]
            raise
        if self._stopping:
            # The shutdown began while this run was starting and did not see it live.
            self._ending.add((name, run_id))
            await run.stop("shutdown")
            return run_id
        task = asyncio.get_running_loop().create_task(self._watch_resident(name, run, cfg))
        self._waiters.add(task)
        task.add_done_callback(self._waiters.discard)
        log.info("harness %s: resident run %d started (%s)", name, run_id, trigger)
        return run_id

    async def _watch_resident(self, name: str, run: Run, cfg: HarnessConfig) -> None:
        try:
            rec = await run.wait()
        except Exception:
            log.exception("harness %s: run %s ended with an error", name, run.run_id)
            rec = {}
        finally:
            if self._live.get(name) is run:
                del self._live[name]
        key = (name, run.run_id if run.run_id is not None else -1)
        if key in self._ending:
            self._ending.discard(key)
            return
        outcome = rec.get("outcome")
        log.info("harness %s: resident run %s ended %s", name, run.run_id, outcome)
        if self._stopping or name in self._held or not _wants_restart(cfg.restart, outcome):
            return
        up = rec.get("duration_ms", 0) / 1000
        delay, self._delay[name] = next_delay(cfg.restart_delay / 1e9, self._delay.get(name),
                                              up)
        self._backoff[name] = asyncio.get_running_loop().create_task(
            self._restart_later(name, delay), name=f"backoff:{name}")

    async def _restart_later(self, name: str, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            if self._backoff.get(name) is asyncio.current_task():
                del self._backoff[name]
        try:
            async with self._lock(name):
                # An operator's stop or start may have won the lock while we waited for it.
                if name in self._held or name in self._live or self._stopping:
                    return
                await self._spawn_resident(name, "restart")
        except Exception:
            # Not retried: a run id or an opened line that cannot be written is not a
            # crash of the resident, and looping on it would flood the log.
            log.exception("harness %s: the restart could not be started", name)

    def _cancel_backoff(self, name: str) -> None:
        task = self._backoff.pop(name, None)
        if task is not None:
            task.cancel()

    async def start_op(self, name: str) -> dict[str, Any]:
        """Operator `start`: a stopped resident starts (manual); a one-shot is triggered."""
        cfg = self.config.harness.get(name)
        if cfg is None:
            raise UnknownHarness(name)
        if cfg.kind == "oneshot":
            return {"name": name, "kind": "oneshot", "action": "triggered",
                    "run_id": await self.trigger(name, "manual")}
        async with self._lock(name):
            return await self._start_resident(name)

    async def _start_resident(self, name: str) -> dict[str, Any]:
        live = self._live.get(name)
        if live is not None and live.run_id is not None:
            return {"name": name, "kind": "resident", "action": "already_running",
                    "run_id": live.run_id}
        self._held.discard(name)
        self._cancel_backoff(name)
        self._delay.pop(name, None)  # an operator's start is a fresh start, not a retry
        return {"name": name, "kind": "resident", "action": "started",
                "run_id": await self._spawn_resident(name, "manual")}

    async def stop_op(self, name: str) -> dict[str, Any]:
        """Operator `stop`: the live run closes cancelled/operator before this returns.

        A stopped resident is held down (no restart) until it is started again.
        """
        cfg = self.config.harness.get(name)
        if cfg is None:
            raise UnknownHarness(name)
        if cfg.kind == "oneshot":
            return await self._stop_live(name, cfg.kind)
        async with self._lock(name):
            self._held.add(name)
            self._cancel_backoff(name)
            return await self._stop_live(name, cfg.kind)

    async def _stop_live(self, name: str, kind: str) -> dict[str, Any]:
        run = self._live.get(name)
        if run is None or run.run_id is None:
            return {"name": name, "kind": kind, "action": "not_running"}
        if kind == "resident":  # only a resident's watcher consumes the mark
            self._ending.add((name, run.run_id))
        rec = await run.stop("operator")
        return {"name": name, "kind": kind, "action": "stopped", "run_id": run.run_id,
                "outcome": rec.get("outcome"), "reason": rec.get("reason")}

    async def restart_op(self, name: str) -> dict[str, Any]:
        """Operator `restart`: the live run closes replaced/operator, a new one starts."""
        self._resident(name)
        async with self._lock(name):
            return await self._restart_resident(name)

    async def _restart_resident(self, name: str) -> dict[str, Any]:
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        self._held.discard(name)
        self._cancel_backoff(name)
        self._delay.pop(name, None)
        old: int | None = None
        run = self._live.get(name)
        if run is not None and run.run_id is not None:
            old = run.run_id
            self._ending.add((name, old))
            await run.stop("restart")
        new = await self._spawn_resident(name, "manual")
        return {"name": name, "kind": "resident", "action": "restarted", "replaced": old,
                "run_id": new}

    # -- views -------------------------------------------------------------------------

    def state_of(self, name: str) -> str:
        cfg = self.config.harness[name]
        if name in self._live:
            return "running"
        if cfg.kind == "oneshot":
            return "armed"  # ready for its schedule or a trigger
        if name in self._backoff:
            return "backoff"
        return "stopped"

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


__all__ = ["Manager", "NotResident", "UnknownHarness", "next_delay"]
