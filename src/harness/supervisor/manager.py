"""The Manager: the daemon's one-shot scheduling and triggering, its resident supervision and
its config reload (DESIGN.md §3 "Runs", SPEC-0022 REQ-3/REQ-5/REQ-6).

Owns, on one asyncio loop, the wall-clock ticker of every scheduled one-shot (missed windows
and catch-up included), the trigger path with its overlap policy, the resident lifecycle
(autostart, restart policy with crash-loop backoff, operating hours, operator
start/stop/restart), the set of live runs, the reload that swaps in a new config, the
read-only views `jobs` and `list`, and the memory of which harnesses' runs could not create
their logs (`runner.LogFailures`: each Manager says its own once per episode). Each run
goes through `runner.Run`, which owns its ledger record.

Invariants:
- at most one live run per harness; on overlap a trigger is skipped (a synced ``decided``
  skipped/overlap line), held (``queue``: at most one firing, its run id allocated when it is
  held, so a held firing that never runs still gets a record) or replaces the live run;
- a schedule window is decided at most once, across restarts too: the newest ``window`` in
  the ledger is where a booted ticker resumes (one ahead of a clock stepped back is waited
  for, as a running ticker waits), and it is synced before the run it accounts for starts;
  a window first evaluated more than LATE seconds late is missed;
- consecutive failures and the last run are read from the ledger only, never from memory;
- a resident is restarted only when its process ended on its own and its policy says so: a
  run the Manager ended (operator, hours, reload, shutdown) never triggers a restart; an
  operator-stopped resident stays down until `start`, an hours-closed one until its hours
  open (trigger ``release``) -- or, when they open while its close is still running,
  until that run has ended;
- an operator's start outside a resident's hours lasts until the operator stops it or
  the hours next open (then they govern as usual): the restart policy's restarts in
  between are part of that start, as a started unit with Restart=on-failure is
  restarted, so a crash there restarts it (trigger ``restart``) and `list` never shows a
  backoff whose restart would be refused;
- an operator's stop is saved in state.json before the run is stopped, and forgotten
  before a `start` or `restart` spawns: an ``unless-stopped`` resident an operator stopped
  stays down across daemon restarts (a crash or a kill of the daemon included) until
  `start`, while every other resident autostarts at boot as `enabled` says (``always``:
  whatever an operator did before);
- a reload undoes no operator's action: a changed resident that was up (started by an
  operator while disabled or outside its hours included) is started again under the new
  config (trigger manual: the reload is an operator's), and one an operator stopped stays
  down;
- a reload, once begun, is applied to every harness it changes, one reload at a time,
  whoever asked for it goes away meanwhile; a harness whose step failed is named, and
  the new config stays in force (`ReloadIncomplete`); nothing is armed once the shutdown
  has begun;
- a start (run id, opened line, spawn, its watcher) is not cut in half by a cancellation:
  a reload or shutdown cancelling the ticker, hours gate, restart or request in it waits
  for it, then finds the run live and stops it, so no id goes without a record and no
  opened line without its closed one;
- `shutdown` leaves no live run and no held firing without a closed record;
- every run id handed out is named in state.json from the write that persists it (``held``
  for a held firing, ``issued`` for a start, a skip or missed windows) until its record
  is on disk, and such an entry costs no write of its own (a later allocation drops it):
  a run admitted with its opened line queued (REQ-6) and lost with a killed daemon still
  has a record after the next boot, as does a held firing started so;
- a record the disk does not take within REQ-6's 2 s bound (a held firing's decided
  line, a stopped run's closed line) never keeps a stop, reload, replace or shutdown from
  stopping the live run: the line stays queued in the writer, a held firing stays in
  state.json until its line is on disk (the next boot records it if it never lands), and
  the op's reply names the record as not durable instead of failing.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypeVar

from ..config.load import diff_configs
from ..config.model import Config, HarnessConfig
from ..config.schedule import OperatingHours, Schedule, Windows
from ..ledger.errors import LedgerError, LedgerUnavailable
from ..ledger.query import Query
from ..ledger.runledger import RunLedger
from ..ledger.schema import FAILURE_OUTCOMES
from ..timefmt import format_ns, parse_ns
from .runner import DEFAULT_GRACE, LogFailures, Run, RunSpec
from .state import RunIds, StateError, issued_entry

log = logging.getLogger("harness.manager")
T = TypeVar("T")

# The ticker never sleeps longer than this in one go: the wall clock is re-read after
# every sleep, so a suspend or a clock step delays a window by at most this much.
MAX_TICK = 1.0
# The finest step between two instants a window can be told apart by (datetime's).
_TICK = timedelta(microseconds=1)
# A window first evaluated more than this many seconds after it came is missed.
LATE = 60.0
# Windows whose record could not be given a run id (state.json on a full or read-only
# disk) are decided again after this long, doubling up to DECIDE_RETRY_MAX; so is a
# resident's autostart or restart.
DECIDE_RETRY = 5.0
DECIDE_RETRY_MAX = 300.0
# How far back `jobs` looks for the failure streak; a longer streak reads as this many.
STREAK_LIMIT = 1000
# Crash-loop backoff (REQ-3): a run shorter than QUICK_RUN doubles the next restart delay,
# up to MAX_BACKOFF (or the configured delay, if longer); a run that stayed up STABLE_RUN
# resets it to the configured delay.
QUICK_RUN = 10.0
STABLE_RUN = 60.0
MAX_BACKOFF = 60.0
# With restart_delay = 0 the first restart is immediate, and a loop still escalates from here.
MIN_BACKOFF = 0.1
# hours_shutdown = "graceful": SIGTERM, then this long to finish before SIGKILL.
HOURS_GRACE = 15 * 60.0


def _log_failure(what: str, exc: Exception,
                 expected: tuple[type[Exception], ...] = (StateError, LedgerError)) -> None:
    """A step that failed: what the disk can cause (by default a run id or an opened line
    a full or read-only disk did not take) is said in one line; anything else is a bug
    and gets its traceback."""
    if isinstance(exc, expected):
        log.error("%s: %s", what, exc)
    else:
        log.error("%s", what, exc_info=exc)


def _task(coro: Any, name: str) -> asyncio.Task[None]:
    """A ticker, hours gate or restart as a task whose unexpected end is logged at once:
    each of them guards its own failures, so one that escapes is a bug, and unlogged it
    would surface only as "exception never retrieved" when the task is collected, while
    the schedule or worker it kept stayed silently stopped."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    task.add_done_callback(_report_end)
    return task


def _report_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("%s stopped on an unexpected error", task.get_name(), exc_info=exc)


class _Undecided(Exception):
    """No run id could be persisted for a decision's windows (StateError): nothing was
    recorded or started for them from `done` on (the newest window accounted for)."""

    def __init__(self, done: datetime, cause: StateError) -> None:
        super().__init__(str(cause))
        self.done = done


class StepFailed(NamedTuple):
    """A harness a reload could not fully apply: what it was doing, and the error."""

    harness: str
    step: str
    error: str


class ReloadIncomplete(Exception):
    """A reload put its config in force, but the steps of `failed` did not complete;
    `applied` is what its reply says of the rest."""

    def __init__(self, applied: dict[str, Any], failed: list[StepFailed]) -> None:
        self.applied = applied
        self.failed = failed
        super().__init__(f"the new config is in force, but {self.describe(failed)}")

    @staticmethod
    def describe(failed: list[StepFailed]) -> str:
        steps = "; ".join(f"{f.harness}: {f.step} failed: {f.error}" for f in failed)
        return f"{len(failed)} harness(es) could not be fully applied ({steps})"


class UnknownHarness(KeyError):
    """No harness of that name (of the kind the operation needs) is configured."""


class NotResident(ValueError):
    """The operation applies to resident harnesses only."""


def next_delay(base: float, current: float | None, up: float) -> tuple[float, float]:
    """(this restart's delay, the one after it) for a resident that stayed up `up` seconds.

    `current` is the delay the backoff had reached (None: none yet). A stable run resets it
    to `base`; a quick one doubles the next delay, capped at MAX_BACKOFF -- or at `base`
    when that is longer: a backoff never restarts sooner than the configured delay.
    """
    delay = base if up >= STABLE_RUN or current is None else current
    cap = max(MAX_BACKOFF, base)
    return delay, (min(max(delay * 2, MIN_BACKOFF), cap) if up < QUICK_RUN else delay)


def _wants_restart(policy: str, outcome: str | None) -> bool:
    """Whether a resident whose process ended on its own with `outcome` is restarted."""
    if policy in ("always", "unless-stopped"):
        return True
    if policy == "on-failure":
        return outcome != "success"
    return False


def unbudgeted(cfg: HarnessConfig, config: Config) -> bool:
    """Whether no budget or admission cap applies to the harness (REQ-6's exception)."""
    return (cfg.max_runs_per_day is None and cfg.max_cost_usd is None
            and cfg.max_tokens is None and cfg.daily_cost_usd is None
            and config.budget.daily_cost_usd is None and config.budget.max_concurrent is None)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _rfc3339(at: datetime) -> str:
    # Integer arithmetic on the timedelta: a float timestamp can round across a second.
    return format_ns((at - _EPOCH) // timedelta(microseconds=1) * 1000)


def _from_rfc3339(text: str) -> datetime:
    return _EPOCH + timedelta(microseconds=parse_ns(text) // 1000)


@dataclass(frozen=True)
class Decision:
    """What the windows due at one tick come to (see `decide_windows`)."""

    missed: Windows  # windows more than LATE late: one missed record, or one catch-up run
    due: datetime | None  # the newest window, when one run honours the due windows
    trigger: str  # the trigger of that run: schedule, or catch_up


def decide_windows(sched: Schedule, last: datetime, now: datetime, catch_up: bool,
                   late: float = LATE) -> Decision | None:
    """The decision for the windows in (last, now]; None when none came.

    Windows more than `late` seconds old are missed: with catch_up they and any on-time
    window are honoured by one run (trigger catch_up); without, they make one missed record
    and an on-time window still runs (trigger schedule). Several on-time windows (a
    sub-minute schedule on a stalled loop) are honoured by one run.
    """
    every = sched.windows_between(last, now)
    if every.count == 0 or every.last is None:
        return None
    # Late is strictly more than `late`: windows_between counts up to and including its
    # end, so it ends a tick before the cutoff (a window exactly `late` old is on time).
    cutoff = now - timedelta(seconds=late) - _TICK
    missed = sched.windows_between(last, cutoff) if cutoff > last else Windows(0, None, None)
    if missed.count and catch_up:
        return Decision(missed, every.last, "catch_up")
    on_time = every.count - missed.count
    return Decision(missed, every.last if on_time else None, "schedule")


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


@dataclass(frozen=True)
class Held:
    """A firing held by ``on_overlap = "queue"`` until the live run ends."""

    run_id: int
    trigger: str
    window: str | None
    override: bool = False


class Dropped(NamedTuple):
    """A held firing closed with a decided record, and whether that line is on disk."""

    run_id: int
    durable: bool


def _queued_line(name: str, run_id: int, line: str) -> dict[str, Any]:
    """A reply's word on a record whose `line` (closed, decided) is not on disk yet: the
    op did its job, and REQ-6's 2 s bound passed with the line still queued."""
    return {"harness": name, "run_id": run_id, "line": line}


def _with_queued(out: dict[str, Any], queued: list[dict[str, Any]]) -> dict[str, Any]:
    """`out`, saying (``durable: false`` and ``not_durable``) which of its records are not
    on disk yet; unchanged when all are."""
    if queued:
        out["durable"] = False
        out.setdefault("not_durable", []).extend(queued)
    return out


class Manager:
    """Schedules, triggers and supervises the harnesses of `config`; one per daemon."""

    def __init__(self, config: Config, ledger: RunLedger, ids: RunIds, jobs_dir: str, *,
                 grace: float = DEFAULT_GRACE) -> None:
        self.config = config
        self.ledger = ledger
        self.ids = ids
        self.jobs_dir = jobs_dir
        self.grace = grace
        self._live: dict[str, Run] = {}
        self._waiters: set[asyncio.Task[Any]] = set()
        self._tickers: dict[str, asyncio.Task[None]] = {}
        self._gates: dict[str, asyncio.Task[None]] = {}
        self._next: dict[str, datetime] = {}
        self._held_firing: dict[str, Held] = {}
        self._started = False
        self._stopping = False
        # Residents: operator-stopped names (state.json keeps them too, for the next
        # boot), pending restarts, and each one's next delay.
        self._held: set[str] = set()
        self._backoff: dict[str, asyncio.Task[None]] = {}
        self._id_retry: dict[str, float] = {}  # the next delay of a start that got no run id
        self._delay: dict[str, float] = {}
        # Residents outside their operating hours, and those an operator started anyway
        # (that start, its policy's restarts included, lasts until the operator stops
        # them or the hours next open).
        self._closed: set[str] = set()
        self._override: set[str] = set()
        # (name, run_id) of runs the Manager itself is ending, and who ended it last
        # (hours, operator, restart, reload, shutdown): their end is not a crash.
        self._ending: dict[tuple[str, int], str] = {}
        # Which harnesses' runs could not create their logs, said once per episode: this
        # daemon's memory, not the process's.
        self._log_failures = LogFailures()
        # One lifecycle change per harness at a time, so no op sees another's half-started
        # run; held across run.start() and run.stop().
        self._locks: dict[str, asyncio.Lock] = {}
        # One reload at a time, held by the reload's own task: a caller that went away
        # must not let the next reload diff against a config half applied.
        self._reloading = asyncio.Lock()

    # -- lifecycle ---------------------------------------------------------------------

    async def start_residents(self) -> None:
        """Autostart every enabled resident that is inside its operating hours, but for
        an ``unless-stopped`` one an operator stopped before this daemon booted."""
        for name in sorted(self.ids.state.stopped()):
            cfg = self.config.harness.get(name)
            if cfg is not None and cfg.kind == "resident" and cfg.restart == "unless-stopped":
                self._held.add(name)
                log.info("harness %s: stopped by the operator before the daemon started; "
                         "stays stopped until started (restart = \"unless-stopped\")", name)
                continue
            # `always` (any policy but unless-stopped) comes back up at boot, and a name
            # no longer configured as a resident has no stop to keep.
            try:
                await self._save_stop(name, False)
            except StateError as exc:
                # Only a boot reads the list, and the next one tries again.
                log.error("harness %s: its stop before the boot could not be forgotten: %s",
                          name, exc)
        for name, cfg in sorted(self.config.harness.items()):
            if cfg.kind == "resident":
                await self._arm_resident(name, cfg, "autostart")

    async def _save_stop(self, name: str, stopped: bool) -> None:
        """Save in state.json whether an operator holds resident `name` stopped; raise
        StateError when the disk does not take it."""
        await asyncio.to_thread(self.ids.state.set_stopped, name, stopped)

    async def _arm_resident(self, name: str, cfg: HarnessConfig, trigger: str, *,
                            up: bool = False) -> None:
        """Arm resident `name`'s hours gate and start it if `enabled` and its hours say so.

        `up`: it was up when a reload changed it, so it starts whatever `enabled` says
        (which governs autostart, not an operator's start), and outside its hours too if
        an operator started it there (`_override`).
        """
        if self._stopping:
            return  # a reload the shutdown overtook: nothing is armed after its disarm
        hours = cfg.parsed_hours()
        if hours is not None:
            if not hours.is_open(datetime.now(UTC)):
                self._closed.add(name)
            self._gates[name] = _task(self._gate(name, hours), f"hours:{name}")
        if (not (cfg.enabled or up) or name in self._held
                or (name in self._closed and name not in self._override)):
            return
        try:
            async with self._lock(name):
                await self._spawn_resident(name, trigger)
        except StateError as exc:
            self._retry_start(name, trigger, exc)
        except Exception:
            log.exception("harness %s: %s failed", name, trigger)

    def start(self) -> None:
        """Arm the ticker of every scheduled one-shot."""
        self._started = True
        for name, cfg in sorted(self.config.harness.items()):
            self._arm_ticker(name, cfg, resume=True)

    def _arm_ticker(self, name: str, cfg: HarnessConfig, *, resume: bool) -> None:
        sched = cfg.parsed_schedule() if cfg.kind == "oneshot" else None
        if sched is None or self._stopping:  # see _arm_resident
            return
        self._tickers[name] = _task(self._tick(name, sched, resume=resume), f"ticker:{name}")

    def _disarm(self, name: str) -> list[asyncio.Task[None]]:
        """Cancel the ticker, hours gate and pending restart of `name`; return them."""
        tasks = [t for t in (self._tickers.pop(name, None), self._gates.pop(name, None),
                             self._backoff.pop(name, None)) if t is not None]
        self._id_retry.pop(name, None)
        for t in tasks:
            t.cancel()
        self._next.pop(name, None)
        return tasks

    async def shutdown(self) -> None:
        """Stop the tickers, then stop every live run as interrupted/shutdown."""
        self._stopping = True
        names = {*self._tickers, *self._gates, *self._backoff}
        pending = [t for name in names for t in self._disarm(name)]
        await asyncio.gather(*pending, return_exceptions=True)
        # The held firings' records alongside the live runs' stops: a disk that keeps a
        # decided line waiting out its 2 s bound must not hold back the SIGTERMs.
        dropping = asyncio.gather(*(self._drop_held(name, "interrupted", "shutdown")
                                    for name in list(self._held_firing)),
                                  return_exceptions=True)
        # A run still starting is left to its starter, which sees _stopping and stops it.
        runs = [r for r in self._live.values() if r.started]
        for run in runs:
            if run.run_id is not None:
                self._ending[(run.spec.name, run.run_id)] = "shutdown"
        results = await asyncio.gather(*(r.stop("shutdown", self.grace) for r in runs),
                                       return_exceptions=True)
        for run, res in zip(runs, results, strict=True):
            if isinstance(res, BaseException):
                log.error("run %s/%s: stop failed: %s", run.spec.name, run.run_id, res)
        for failed in await dropping:
            if isinstance(failed, BaseException):  # a bug: _drop_held raises no disk error
                log.error("a queued firing could not be closed", exc_info=failed)
        await asyncio.gather(*self._waiters, return_exceptions=True)

    # -- scheduling --------------------------------------------------------------------

    async def _last_window(self, name: str) -> datetime | None:
        """The latest window the ledger says was decided for `name` (None: none known).

        The latest window, not the newest record's: a queued firing's record (opened
        when the live run ends, or closed by a shutdown) is written after the records of
        later windows it outlived, so the newest record can name an older window.
        """
        recs, _ = await asyncio.to_thread(
            self.ledger.query, Query(names=(name,), limit=STREAK_LIMIT))
        latest: datetime | None = None
        for rec in recs:
            w = rec.get("window")
            if isinstance(w, str):
                try:
                    at = _from_rfc3339(w)
                except ValueError:
                    continue
                if latest is None or at > latest:
                    latest = at
        return latest

    async def _history_window(self, name: str) -> datetime | None:
        """`_last_window`, or None when the ledger cannot be read (a day file that will
        not open: EIO, EMFILE): the schedule then starts from now rather than not at all,
        and the log says what that costs."""
        try:
            return await self._last_window(name)
        except Exception as exc:
            _log_failure(f"harness {name}: its run history could not be read, so it is "
                         "scheduled from now (windows missed while the daemon was down are "
                         "neither run nor recorded missed)", exc, (OSError, LedgerError))
        return None

    async def _tick(self, name: str, sched: Schedule, *, resume: bool) -> None:
        now = datetime.now(UTC)
        last = await self._history_window(name) if resume else None
        # Compared in UTC: a window in an hour fall-back repeats is never equal to a
        # time of another zone (PEP 495), so it would read as a changed schedule.
        if last is not None and sched.next_fire(last - _TICK).astimezone(UTC) != last:
            # Not a window of this schedule: it was changed since (by a reload, or while
            # the daemon was down), and a changed schedule starts from now; its windows
            # before now were never due.
            last = None
        if last is None:
            # No history: nothing can have been missed.
            last = now
        elif last > now:
            # The clock was stepped back past it (while the daemon was down, say): the
            # windows up to it were decided, so this ticker waits for the clock to pass it,
            # as a running one does after a step back. From now, it would decide them twice.
            log.warning("harness %s: the newest window in the ledger, %s, is ahead of the "
                        "clock; no window up to it is decided again", name, _rfc3339(last))
        retry = DECIDE_RETRY
        while True:
            now = datetime.now(UTC)
            decision = decide_windows(sched, last, now, self.config.harness[name].catch_up)
            again: datetime | None = None
            if decision is not None:
                try:
                    last = await self._decide(name, decision, last)
                    retry = DECIDE_RETRY
                except asyncio.CancelledError:
                    raise
                except _Undecided as exc:
                    # Windows with no record are decided again once the disk takes a run
                    # id: then run late, or recorded missed when over LATE (or caught up).
                    last = exc.done
                    again = now + timedelta(seconds=retry)
                    log.error("harness %s: no record for the window(s) up to %s yet, "
                              "deciding them again in %gs: %s", name,
                              _rfc3339(decision.due or decision.missed.last or now),
                              retry, exc)
                    retry = min(retry * 2, DECIDE_RETRY_MAX)
                except Exception as exc:
                    # One failed window must not end the schedule; the next one still fires.
                    _log_failure(f"harness {name}: the scheduled run could not be started", exc)
                    last = decision.due or decision.missed.last or last
            nxt = sched.next_fire(max(last, now))
            self._next[name] = nxt
            # While windows wait for a run id only the retry wakes the ticker: a window
            # that came meanwhile would fail the same way, and every decision counts the
            # windows from the first one waiting (a month of minutes: 0.4 s).
            wake = nxt if again is None else again
            while True:
                # Wall clock, not the loop's monotonic clock: windows are wall-clock
                # instants and a suspended machine must not shift them.
                left = (wake - datetime.now(UTC)).total_seconds()
                if left <= 0:
                    break
                await asyncio.sleep(min(left, MAX_TICK))

    async def _decide(self, name: str, d: Decision, last: datetime) -> datetime:
        """Record the missed windows and fire the due one; return the newest window now
        accounted for. `_Undecided` when a run id could not be persisted, with what was
        accounted for before that."""
        done = last
        m = d.missed
        try:
            if m.count and d.trigger != "catch_up" and m.first is not None \
                    and m.last is not None:
                await self._unbroken(self._missed(name, m.first, m.last, m.count))
                done = m.last
            if d.due is not None:
                # A task of its own, shielded and tracked: a shutdown cancelling the ticker
                # must not cut a start in half (a spawned process nobody supervises); the
                # shutdown waits for it instead, and the start, seeing the shutdown, stops
                # its run.
                await asyncio.shield(self._watch(self.fire(name, d.trigger,
                                                           window=_rfc3339(d.due))))
                done = d.due
        except StateError as exc:
            raise _Undecided(done, exc) from exc
        return done

    async def _missed(self, name: str, first: datetime, last: datetime, count: int) -> None:
        """Give the missed windows a run id and its decided line (one `_unbroken` step)."""
        missed = {"outcome": "missed", "first_window": _rfc3339(first), "windows": count}
        run_id = await asyncio.to_thread(self.ids.next, name,
                                         self._issued("schedule", _rfc3339(last), missed))
        try:
            # Not durable yet (logged): queued, written in order once the disk takes it.
            # The due window still fires either way (it used to be dropped with no
            # record at all).
            await self._decided(name, run_id, "schedule", "missed", None,
                                window=_rfc3339(last), first_window=_rfc3339(first),
                                windows=count)
        except LedgerError as exc:
            # A ledger that took nothing (closed, the line refused): the due window
            # still fires.
            log.error("harness %s: the missed record %d could not be written: %s",
                      name, run_id, exc)
        log.warning("harness %s: %d window(s) missed, up to %s", name, count,
                    _rfc3339(last))

    # -- triggering --------------------------------------------------------------------

    def _oneshot(self, name: str) -> HarnessConfig:
        cfg = self.config.harness.get(name)
        if cfg is None or cfg.kind != "oneshot":
            raise UnknownHarness(name)
        return cfg

    async def fire(self, name: str, trigger: str = "manual", *,
                   window: str | None = None, override: bool = False) -> dict[str, Any]:
        """Fire one-shot `name`: ``{"decision": started|queued|skipped, "run_id": N}``.
        `override` (--over-budget) is recorded on the run it starts, now or when queued."""
        cfg = self._oneshot(name)
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        async with self._lock(name):
            # Again under the lock: a reload may have removed it, or a shutdown begun,
            # while this waited for the lock; no id is handed out after either.
            cfg = self._oneshot(name)
            if self._stopping:
                raise RuntimeError("the daemon is shutting down")
            live = self._live.get(name)
            held = name in self._held_firing
            queued: list[dict[str, Any]] = []  # records of replaced runs not on disk yet
            # A run whose process is gone does not overlap (its record may already read
            # closed to the client that fires next). A held firing always does, live run
            # or not: it is next in line, and the reaper that starts it releases the
            # ended run before it gets this lock, so a firing in between must not start.
            if held or (live is not None and not live.ended):
                if cfg.on_overlap == "queue" and not held:
                    run_id = await self._unbroken(self._hold(name, trigger, window,
                                                             override))
                    log.info("harness %s: run %d queued behind run %s", name, run_id,
                             None if live is None else live.run_id)
                    return {"decision": "queued", "run_id": run_id}
                if cfg.on_overlap != "replace":
                    run_id, durable = await self._skip(name, trigger, "overlap", window)
                    return _with_queued({"decision": "skipped", "run_id": run_id},
                                       [] if durable else
                                       [_queued_line(name, run_id, "decided")])
                # A firing held while the policy was queue (a reload changed it since)
                # is replaced along with the live run.
                dropped = await self._drop_held(name, "replaced", None)
                if dropped is not None and not dropped.durable:
                    queued.append(_queued_line(name, dropped.run_id, "decided"))
                if live is not None and live.run_id is not None:
                    await live.stop("replace")
                    if live.close_queued:
                        queued.append(_queued_line(name, live.run_id, "closed"))
                    # The reaper may not have run yet; the new run takes the slot now.
                    self._release(name, live)
            return _with_queued({"decision": "started",
                                "run_id": await self._start_oneshot(name, cfg, trigger, window,
                                                                    override=override)},
                               queued)

    async def _start_oneshot(self, name: str, cfg: HarnessConfig, trigger: str,
                             window: str | None, run_id: int | None = None, *,
                             override: bool = False) -> int:
        run = Run(RunSpec.from_config(name, cfg), self.ledger, self.ids, trigger,
                  jobs_dir=self.jobs_dir, grace=self.grace, preallocated=run_id,
                  window=window, override=override, log_failures=self._log_failures,
                  admit_unsynced=unbudgeted(cfg, self.config))
        return await self._unbroken(self._start_oneshot_run(name, run, trigger))

    async def _start_oneshot_run(self, name: str, run: Run, trigger: str) -> int:
        started = await self._start_claimed(name, run)
        if self._stopping:
            # The shutdown began while this run was starting and did not see it live.
            await run.stop("shutdown", self.grace)
            return started
        self._watch(self._reap(name, run))
        log.info("harness %s: run %d started (%s)", name, started, trigger)
        return started

    async def _unbroken(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` to its end even when the caller is cancelled meanwhile, and only then
        let the cancellation through.

        For the steps that hand out a run id or write an opened line (a start, a skip, a
        held firing): cut at an await, they would leave an id with no record, or an opened
        line nobody closes and a process nobody supervises (REQ-3, REQ-5). A reload or a
        shutdown cancels the ticker, hours gate, restart or control request that is in such
        a step; the caller keeps its lock until the step is done, so whoever cancelled it
        finds a run that is either not started or started, live and supervised, and stops
        it (cancelled/reload, interrupted/shutdown). The step is one of the shutdown's
        waiters, so the ledger is not closed under it either.
        """
        task = self._watch(coro)
        cancelled = False
        while True:
            try:
                result = await asyncio.shield(task)
                break
            except asyncio.CancelledError:
                if task.cancelled():
                    raise  # the step itself was cancelled: the loop is going away
                cancelled = True  # the caller's: deferred until the step is done
            except Exception as exc:
                if not cancelled:
                    raise
                # The caller wants to end; it is told so, and the step's failure is logged
                # here, since no one else will read it.
                _log_failure("a run's start or record, its caller cancelled meanwhile, failed", exc)
                break
        if cancelled:
            raise asyncio.CancelledError
        return result

    async def _start_claimed(self, name: str, run: Run) -> int:
        """Start `run` as `name`'s live run. It is claimed before the first await, so a
        concurrent trigger sees it live, and released again if the start fails."""
        self._live[name] = run
        try:
            return await run.start()
        except BaseException:
            self._release(name, run)
            raise

    def _release(self, name: str, run: Run) -> None:
        """Forget `run` as `name`'s live run, unless another has taken its place."""
        if self._live.get(name) is run:
            del self._live[name]

    def _watch(self, coro: Any) -> asyncio.Task[Any]:
        """Run `coro` as a task the shutdown waits for."""
        task = asyncio.get_running_loop().create_task(coro)
        self._waiters.add(task)
        task.add_done_callback(self._waiters.discard)
        return task

    async def _reap(self, name: str, run: Run) -> None:
        try:
            rec = await run.wait()
            log.info("harness %s: run %s ended %s", name, run.run_id, rec.get("outcome"))
        except Exception:
            log.exception("harness %s: run %s ended with an error", name, run.run_id)
        finally:
            self._release(name, run)
        if self._stopping or name not in self._held_firing:
            return
        async with self._lock(name):
            held = self._held_firing.get(name)
            cfg = self.config.harness.get(name)
            if held is None or name in self._live or self._stopping:
                return
            if cfg is None or cfg.kind != "oneshot":  # removed by a reload meanwhile
                await self._drop_held(name, "cancelled", "reload")
                return
            del self._held_firing[name]
            try:
                await self._start_oneshot(name, cfg, held.trigger, held.window, held.run_id,
                                          override=held.override)
            except Exception as exc:
                _log_failure(f"harness {name}: the queued run {held.run_id} could not be "
                             "started", exc)
                return
            # Its entry stays while the opened line is queued (REQ-6: admitted anyway):
            # it ran, and the boot after a crash records it so; the next allocation drops
            # it once the line lands.
            if await asyncio.to_thread(self.ledger.recorded, name, held.run_id):
                await self._unhold(name, held.run_id)

    async def _decided(self, name: str, run_id: int, trigger: str, outcome: str,
                       reason: str | None, **fields: Any) -> bool:
        """A synced ``decided`` line: a record that started no process. False (logged)
        when the sync did not end within REQ-6's bound: the line stays queued and the
        writer retries it in order, so what decided it goes on (an operator's stop, a
        reload, the shutdown) and says the record is not on disk yet. Any other ledger
        failure (closed, the line refused: nothing queued) is raised."""
        at = format_ns(self.ledger.clock())
        line: dict[str, Any] = {"type": "decided", "harness": name, "run_id": run_id,
                                "at": at, "kind": "oneshot", "trigger": trigger,
                                "started_at": at, "outcome": outcome}
        if outcome not in ("skipped", "missed"):
            line["ended_at"] = at
        if reason is not None:
            line["reason"] = reason
        line.update({k: v for k, v in fields.items() if v is not None})
        try:
            await asyncio.to_thread(self.ledger.append, line, sync=True)
        except LedgerUnavailable as exc:
            log.error("harness %s: the %s record %d is not durable yet: %s", name, outcome,
                      run_id, exc)
            return False
        return True

    def _issued(self, trigger: str, window: str | None, decided: dict[str, Any]
                ) -> dict[str, Any]:
        """The ``issued`` entry of a one-shot firing decided now (a skip, missed windows),
        with its decided line's fields."""
        return issued_entry(trigger, window, format_ns(self.ledger.clock()), "oneshot",
                            decided)

    async def _skip(self, name: str, trigger: str, reason: str,
                    window: str | None = None) -> tuple[int, bool]:
        """(the skip's run id, whether its record is on disk)."""
        skipped = await self._unbroken(self._skip_step(name, trigger, reason, window))
        log.info("harness %s: run %d skipped (%s)", name, skipped[0], reason)
        return skipped

    async def _skip_step(self, name: str, trigger: str, reason: str,
                         window: str | None) -> tuple[int, bool]:
        """The run id of a skip and its decided line (one `_unbroken` step: a request
        cancelled by the shutdown must not leave the id without its record)."""
        run_id = await asyncio.to_thread(
            self.ids.next, name,
            self._issued(trigger, window, {"outcome": "skipped", "reason": reason}))
        return run_id, await self._decided(name, run_id, trigger, "skipped", reason,
                                           window=window)

    async def _hold(self, name: str, trigger: str, window: str | None,
                    override: bool) -> int:
        """Hold a firing behind the live run: its run id at once (one `_unbroken` step),
        persisted with the firing, so a boot after a crash can record it."""
        held = {"trigger": trigger, "window": window, "at": format_ns(self.ledger.clock())}
        run_id = await asyncio.to_thread(self.ids.next, name, held, held=True)
        self._held_firing[name] = Held(run_id, trigger, window, override)
        if self._stopping:
            # The shutdown began while the id was being persisted, and may have closed
            # the held firings already: this one gets its record here.
            await self._drop_held(name, "interrupted", "shutdown")
        return run_id

    async def _drop_held(self, name: str, outcome: str, reason: str | None
                         ) -> Dropped | None:
        """Close the firing held for `name`, if any, with a decided record.

        Never raises for the disk: every caller goes on to stop a live run (an operator's
        stop, a reload, a replace, the shutdown), which a record the disk is slow to take
        must not prevent. A line not on disk yet keeps the firing's entry in state.json,
        so if the line never lands (the daemon stops with it still queued) the next
        boot's `history.settle_firings` records the firing; once it lands, that boot only
        drops the entry.
        """
        held = self._held_firing.pop(name, None)
        if held is None:
            return None
        try:
            durable = await self._decided(name, held.run_id, held.trigger, outcome, reason,
                                          window=held.window)
        except LedgerError as exc:
            log.error("harness %s: the queued run %d could not be recorded %s; state.json "
                      "keeps it for the next boot: %s", name, held.run_id, outcome, exc)
            durable = False
        if durable:
            await self._unhold(name, held.run_id)
        return Dropped(held.run_id, durable)

    async def _unhold(self, name: str, run_id: int) -> None:
        """Forget the held firing's entry in state.json once its record is written. A
        failure costs nothing durable: the boot after finds the record and only drops it."""
        try:
            await asyncio.to_thread(self.ids.state.forget_firings, [(name, run_id)])
        except StateError as exc:
            log.warning("harness %s: the queued run %d is recorded, but state.json still "
                        "names it: %s", name, run_id, exc)

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

    async def _spawn_resident(self, name: str, trigger: str, *, nowait: bool = False) -> int:
        """Start a run of resident `name`; the caller holds its lock.

        `nowait`: REQ-6's exception, a restart after the resident's own exit whose opened
        line is queued behind that exit's closed line rather than waited for.
        """
        cfg = self._resident(name)
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        exempt = unbudgeted(cfg, self.config)
        run = Run(RunSpec.from_config(name, cfg), self.ledger, self.ids, trigger,
                  kind="resident", jobs_dir=self.jobs_dir, grace=self.grace,
                  nowait_open=nowait and exempt, nowait_close=exempt,
                  admit_unsynced=exempt, log_failures=self._log_failures)
        return await self._unbroken(self._spawn_resident_run(name, run, cfg, trigger))

    async def _spawn_resident_run(self, name: str, run: Run, cfg: HarnessConfig,
                                  trigger: str) -> int:
        run_id = await self._start_claimed(name, run)
        if self._stopping:
            # The shutdown began while this run was starting and did not see it live.
            self._ending[(name, run_id)] = "shutdown"
            await run.stop("shutdown")
            return run_id
        self._id_retry.pop(name, None)
        self._watch(self._watch_resident(name, run, cfg))
        log.info("harness %s: resident run %d started (%s)", name, run_id, trigger)
        return run_id

    async def _watch_resident(self, name: str, run: Run, cfg: HarnessConfig) -> None:
        try:
            rec = await run.wait()
        except Exception:
            log.exception("harness %s: run %s ended with an error", name, run.run_id)
            rec = {}
        finally:
            self._release(name, run)
        key = (name, run.run_id if run.run_id is not None else -1)
        ender = self._ending.pop(key, None)
        if ender == "hours":
            # Its hours may have opened again while it was ending (a graceful close
            # takes up to HOURS_GRACE): the opening found it still live and started
            # nothing, so the release is due now. Nothing starts while they are closed.
            await self._restart_now(name, "release")
            return
        if ender is not None:
            return
        outcome = rec.get("outcome")
        log.info("harness %s: resident run %s ended %s", name, run.run_id, outcome)
        cfg = self.config.harness.get(name, cfg)  # a reload may have changed the policy
        if (self._stopping or name in self._held or cfg.kind != "resident"
                or (name in self._closed and name not in self._override)
                or not _wants_restart(cfg.restart, outcome)):
            return
        # An operator's start outside the hours (_override) is kept: this restart is part
        # of it, and _restart_now would refuse it without it.
        up = rec.get("duration_ms", 0) / 1000
        delay, self._delay[name] = next_delay(cfg.restart_delay / 1e9, self._delay.get(name),
                                              up)
        if delay <= 0:
            # No delay: the restart follows at once, its opened line queued behind the
            # closed line just queued (REQ-6's exception), so a slow disk stalls nothing.
            await self._restart_now(name)
            return
        self._backoff[name] = _task(self._restart_later(name, delay), f"backoff:{name}")

    async def _restart_later(self, name: str, delay: float, trigger: str = "restart") -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            if self._backoff.get(name) is asyncio.current_task():
                del self._backoff[name]
        await self._restart_now(name, trigger)

    async def _restart_now(self, name: str, trigger: str = "restart") -> None:
        try:
            async with self._lock(name):
                # An operator's stop or start, an hours close or a reload may have won the
                # lock while we waited for it.
                cfg = self.config.harness.get(name)
                if (name in self._held or name in self._live or self._stopping
                        or cfg is None or cfg.kind != "resident"
                        or (name in self._closed and name not in self._override)
                        # A release follows the hours, which start only what `enabled`
                        # lets autostart (an operator's start outlives them: _override).
                        or (trigger == "release" and not cfg.enabled)):
                    return
                await self._spawn_resident(name, trigger, nowait=trigger == "restart")
        except StateError as exc:
            self._retry_start(name, trigger, exc)
        except Exception as exc:
            # Not retried: anything else is no passing state of the disk (a line refused,
            # the ledger closed), and looping on it would flood the log.
            _log_failure(f"harness {name}: the {trigger} could not be started", exc)

    def _retry_start(self, name: str, trigger: str, exc: StateError) -> None:
        """Try a resident's start again that got no run id (state.json on a full or
        read-only disk): a worker must not stay down for good because the disk was full
        for a while. The delay doubles, so a long outage logs a line every 5 min."""
        if self._stopping:
            return
        delay = self._id_retry.get(name, DECIDE_RETRY)
        self._cancel_backoff(name)
        self._id_retry[name] = min(delay * 2, DECIDE_RETRY_MAX)
        log.error("harness %s: the %s got no run id, trying again in %gs: %s", name, trigger,
                  delay, exc)
        self._backoff[name] = _task(self._restart_later(name, delay, trigger),
                                    f"backoff:{name}")

    def _cancel_backoff(self, name: str) -> None:
        """Cancel the pending restart (a stop, a start, hours closing): the next start
        that gets no run id retries after DECIDE_RETRY again, not after the last delay."""
        task = self._backoff.pop(name, None)
        self._id_retry.pop(name, None)
        if task is not None:
            task.cancel()

    # -- operating hours ---------------------------------------------------------------

    async def _gate(self, name: str, hours: OperatingHours) -> None:
        """Close resident `name` when its hours end and release it when they open again."""
        while True:
            await asyncio.sleep(MAX_TICK)  # wall clock re-read every tick: suspend-safe
            now_open = hours.is_open(datetime.now(UTC))
            try:
                if not now_open and name not in self._closed:
                    await self._close_hours(name)
                elif now_open and name in self._closed:
                    await self._open_hours(name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("harness %s: the operating-hours change failed", name)

    async def _close_hours(self, name: str) -> None:
        cfg = self._resident(name)
        async with self._lock(name):
            self._closed.add(name)
            self._override.discard(name)
            self._cancel_backoff(name)
            run = self._live.get(name)
            if run is None or run.run_id is None:
                return
            self._ending[(name, run.run_id)] = "hours"
        grace = 0.0 if cfg.hours_shutdown == "immediate" else HOURS_GRACE
        log.info("harness %s: operating hours closed; stopping run %s (%s)", name,
                 run.run_id, cfg.hours_shutdown)
        # Not under the lock: a graceful close may take minutes, and an operator's stop
        # or a shutdown meanwhile only brings the SIGKILL closer.
        self._watch(run.stop("hours", grace))

    async def _open_hours(self, name: str) -> None:
        cfg = self._resident(name)
        try:
            async with self._lock(name):
                self._closed.discard(name)
                self._override.discard(name)
                if not cfg.enabled or name in self._held or self._stopping:
                    return
                live = self._live.get(name)
                if live is not None:
                    if self._ending.get((name, live.run_id or -1)) == "hours":
                        # Its watcher starts the release once it has ended.
                        log.info("harness %s: operating hours open; run %s is still ending "
                                 "from their close, the next starts when it has", name,
                                 live.run_id)
                    return
                log.info("harness %s: operating hours open", name)
                await self._spawn_resident(name, "release")
        except StateError as exc:
            self._retry_start(name, "release", exc)

    # -- operator ----------------------------------------------------------------------

    async def start_op(self, name: str) -> dict[str, Any]:
        """Operator `start`: a stopped resident starts (manual); a one-shot is fired."""
        cfg = self.config.harness.get(name)
        if cfg is None:
            raise UnknownHarness(name)
        if cfg.kind == "oneshot":
            fired = await self.fire(name, "manual")
            return {"name": name, "kind": "oneshot", "action": "triggered", **fired}
        async with self._lock(name):
            return await self._start_resident(name)

    async def _start_resident(self, name: str) -> dict[str, Any]:
        live = self._live.get(name)
        if live is not None and live.run_id is not None:
            return {"name": name, "kind": "resident", "action": "already_running",
                    "run_id": live.run_id}
        # Forgotten on disk first: a start that cannot say so fails and changes nothing,
        # rather than leave a stop the next boot would still keep.
        await self._save_stop(name, False)
        self._held.discard(name)
        self._cancel_backoff(name)
        self._delay.pop(name, None)  # an operator's start is a fresh start, not a retry
        if name in self._closed:
            # Outside its hours until the operator stops it or they next open, restarts
            # by its policy included.
            self._override.add(name)
        return {"name": name, "kind": "resident", "action": "started",
                "run_id": await self._spawn_resident(name, "manual")}

    async def stop_op(self, name: str) -> dict[str, Any]:
        """Operator `stop`: the live run closes cancelled/operator before this returns.

        A stopped resident is held down (no restart, no release) until it is started again;
        a one-shot's held firing is cancelled with it.
        """
        cfg = self.config.harness.get(name)
        if cfg is None:
            raise UnknownHarness(name)
        async with self._lock(name):
            if cfg.kind == "oneshot":
                dropped = await self._drop_held(name, "cancelled", "operator")
                out = await self._stop_live(name, cfg.kind)
                if dropped is not None:
                    out["cancelled_queued"] = dropped.run_id
                    if not dropped.durable:
                        _with_queued(out, [_queued_line(name, dropped.run_id, "decided")])
                return out
            try:
                await self._save_stop(name, True)
            except StateError as exc:
                # The stop goes ahead: the operator wants the resident down now, and this
                # daemon keeps it down; only the next boot may not know of it.
                log.error("harness %s: the stop is not saved, so an unless-stopped "
                          "resident would start again when the daemon restarts: %s",
                          name, exc)
            self._held.add(name)
            self._override.discard(name)
            self._cancel_backoff(name)
            return await self._stop_live(name, cfg.kind)

    async def _stop_live(self, name: str, kind: str) -> dict[str, Any]:
        run = self._live.get(name)
        if run is None or run.run_id is None:
            return {"name": name, "kind": kind, "action": "not_running"}
        if kind == "resident":  # only a resident's watcher consumes the mark
            self._ending[(name, run.run_id)] = "operator"
        rec = await run.stop("operator")
        out = {"name": name, "kind": kind, "action": "stopped", "run_id": run.run_id,
               "outcome": rec.get("outcome"), "reason": rec.get("reason")}
        # REQ-6: returned at the sync's bound, the line queued.
        return _with_queued(out, [_queued_line(name, run.run_id, "closed")]
                           if run.close_queued else [])

    async def restart_op(self, name: str) -> dict[str, Any]:
        """Operator `restart`: the live run closes cancelled/operator, a new one starts."""
        self._resident(name)
        async with self._lock(name):
            return await self._restart_resident(name)

    async def _restart_resident(self, name: str) -> dict[str, Any]:
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        await self._save_stop(name, False)  # as a start: before anything changes
        self._held.discard(name)
        self._cancel_backoff(name)
        self._delay.pop(name, None)
        if name in self._closed:
            self._override.add(name)
        old: int | None = None
        run = self._live.get(name)
        if run is not None and run.run_id is not None:
            old = run.run_id
            self._ending[(name, old)] = "restart"
            await run.stop("restart")
        new = await self._spawn_resident(name, "manual")
        # No word on the replaced run's closed line: the new run's opened line, synced
        # before its spawn, comes after it, so a restart that returns has both on disk.
        return {"name": name, "kind": "resident", "action": "restarted", "replaced": old,
                "run_id": new}

    # -- reload ------------------------------------------------------------------------

    async def reload(self, new: Config) -> dict[str, Any]:
        """Swap in `new`: start what it adds, stop what it removes (cancelled/reload), and
        re-apply what it changes; a harness whose config is unchanged is not touched.

        A changed one-shot keeps its live run (it finishes under the config it started
        with) and keeps its schedule's phase unless the schedule itself changed; a changed
        resident's live run is stopped (cancelled/reload) and started again under the new
        config (trigger manual), as is one waiting out a restart's backoff, whatever
        `enabled` says and outside its hours too if an operator started it there; a changed
        resident that was down starts (trigger autostart) only if `enabled` and its hours
        say so, and one an operator stopped stays stopped. A harness that changes kind is
        removed and added.

        Once begun, a reload is applied whole, in a task of its own: a caller cancelled
        meanwhile (a control client that went away) is let go at once, and the next reload
        waits for this one. Each harness is applied on its own, so a step that fails (a
        bug: each step absorbs the disk's failures itself) is logged and costs only that
        harness; `new` stays in force and `ReloadIncomplete` names what was not done.
        RuntimeError: the daemon is shutting down, and nothing was changed.
        """
        if self._stopping:
            raise RuntimeError("the daemon is shutting down")
        applied = await asyncio.shield(self._watch(self._apply(new)))
        if applied is None:
            raise RuntimeError("the daemon is shutting down")
        out, failed = applied
        if failed:
            raise ReloadIncomplete(out, failed)
        return out

    async def _apply(self, new: Config
                     ) -> tuple[dict[str, Any], builtins.list[StepFailed]] | None:
        """`reload`'s work: (its reply, the harnesses whose step failed); None when the
        shutdown began before it could start. Never raises for one harness's failure,
        since no one may be left to retrieve it."""
        async with self._reloading:
            if self._stopping:
                return None
            old = self.config
            added, removed, changed, unchanged = diff_configs(old, new)
            for name in sorted(changed):
                if old.harness[name].kind != new.harness[name].kind:
                    changed.discard(name)
                    removed.add(name)
                    added.add(name)
            self.config = new
            # Before the first await: no ticker or gate of a removed harness may wake up to
            # a config that no longer has it.
            disarmed = [t for name in removed for t in self._disarm(name)]
            await asyncio.gather(*disarmed, return_exceptions=True)
            queued: builtins.list[dict[str, Any]] = []  # records it ended, not on disk yet
            failed: builtins.list[StepFailed] = []

            async def step(name: str, what: str,
                           work: Coroutine[Any, Any, builtins.list[dict[str, Any]]]) -> None:
                try:
                    queued.extend(await work)
                except Exception as exc:
                    _log_failure(f"reload: harness {name}: {what} failed", exc)
                    failed.append(StepFailed(name, what, str(exc) or type(exc).__name__))

            for name in sorted(removed):
                await step(name, "removing it", self._remove(name))
            for name in sorted(changed):
                await step(name, "applying its change",
                           self._change(name, old.harness[name], new.harness[name]))
            for name in sorted(added):
                await step(name, "adding it", self._add(name, new.harness[name]))
            log.info("reload: %d added, %d removed, %d changed, %d unchanged", len(added),
                     len(removed), len(changed), len(unchanged))
            if failed:
                log.error("reload: the new config is in force, but %s",
                          ReloadIncomplete.describe(failed))
            return _with_queued({"added": sorted(added), "removed": sorted(removed),
                                "changed": sorted(changed), "unchanged": len(unchanged)},
                               queued), failed

    async def _add(self, name: str, cfg: HarnessConfig) -> builtins.list[dict[str, Any]]:
        """Arm added harness `name`: a one-shot's schedule, a resident's autostart."""
        if cfg.kind == "oneshot":
            if self._started:
                self._arm_ticker(name, cfg, resume=True)
        else:
            await self._arm_resident(name, cfg, "autostart")
        return []

    async def _stop_for_reload(self, name: str, run: Run) -> list[dict[str, Any]]:
        """Stop `name`'s live `run` cancelled/reload; the caller holds its lock. Returns
        its closed line's word when that is not on disk yet."""
        assert run.run_id is not None
        self._ending[(name, run.run_id)] = "reload"
        await run.stop("reload")
        return [_queued_line(name, run.run_id, "closed")] if run.close_queued else []

    async def _remove(self, name: str) -> list[dict[str, Any]]:
        """Forget removed harness `name`: its held firing and live run end
        cancelled/reload. Returns the records of them not on disk yet."""
        queued: list[dict[str, Any]] = []
        async with self._lock(name):
            dropped = await self._drop_held(name, "cancelled", "reload")
            if dropped is not None and not dropped.durable:
                queued.append(_queued_line(name, dropped.run_id, "decided"))
            if name in self._held:
                try:
                    await self._save_stop(name, False)
                except StateError as exc:
                    # The next boot forgets it anyway if the name is still gone then.
                    log.error("harness %s: removed, but its stop is still saved: %s",
                              name, exc)
            for s in (self._held, self._closed, self._override):
                s.discard(name)
            self._delay.pop(name, None)
            run = self._live.get(name)
            if run is not None and run.run_id is not None:
                queued += await self._stop_for_reload(name, run)
        return queued

    async def _change(self, name: str, before: HarnessConfig, after: HarnessConfig
                      ) -> list[dict[str, Any]]:
        """Apply `name`'s changed config; returns the records of the runs it stopped that
        are not on disk yet."""
        queued: list[dict[str, Any]] = []
        if after.kind == "oneshot":
            if before.schedule != after.schedule:
                await asyncio.gather(*self._disarm(name), return_exceptions=True)
                if self._started:
                    # A new schedule starts from now: its windows before now were never due.
                    self._arm_ticker(name, after, resume=False)
            return queued
        # Up: a live run, or a restart waiting out its backoff (the disarm cancels it).
        # Such a resident comes back up under the new config, an operator's start of a
        # disabled one included; a change of config undoes no operator's action.
        up = name in self._backoff
        await asyncio.gather(*self._disarm(name), return_exceptions=True)
        async with self._lock(name):
            up = up or name in self._backoff  # one the run's exit may have armed meanwhile
            self._cancel_backoff(name)
            self._delay.pop(name, None)
            self._closed.discard(name)
            run = self._live.get(name)
            if run is not None and run.run_id is not None:
                up = True
                queued += await self._stop_for_reload(name, run)
            if not up:
                # An operator's start outside the hours lasts until the operator stops it
                # or they next open, restarts included; one that is down all the same
                # (its run ended for good, or never started) has nothing left of that
                # start for a reload to carry on, so it comes up only as its hours say.
                self._override.discard(name)
        # An operator-stopped one stays down under the new config too (`_arm_resident`
        # starts no held resident), but its hours gate is armed again all the same: the
        # operator's next start must run under its hours, not outside them for good.
        # One that was up is started again by the operator's reload, as `harness restart`
        # starts it: manual, whatever `enabled` says. Not "autostart" (what `enabled`
        # governs, which a disabled one never does) nor "restart" (the policy's restart
        # after an exit, REQ-3). One that was down comes up as `enabled` autostarts it.
        await self._arm_resident(name, after, "manual" if up else "autostart", up=up)
        return queued

    # -- views -------------------------------------------------------------------------

    def state_of(self, name: str) -> str:
        cfg = self.config.harness[name]
        if name in self._live:
            return "running"
        if cfg.kind == "oneshot":
            return "armed"  # ready for its schedule or a trigger
        if name in self._backoff:
            return "backoff"
        if name in self._held:
            return "stopped"
        if name in self._closed:
            return "off-hours"
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
            held = self._held_firing.get(name)
            out.append({
                "name": name,
                "state": self.state_of(name),
                "schedule": cfg.schedule,
                "next": _rfc3339(nxt) if nxt is not None else None,
                "catch_up": cfg.catch_up,
                "on_overlap": cfg.on_overlap,
                "queued": None if held is None else held.run_id,
                # started_at too: a record closed by a crash or decided has no ended_at,
                # and the row must still say when the last run was (REQ-13).
                "last_run": None if last is None else {
                    "run_id": last["run_id"], "outcome": last.get("outcome"),
                    "started_at": last.get("started_at"), "ended_at": last.get("ended_at")},
                "fails": _failure_streak(recs),
            })
        return out


__all__ = ["Decision", "Manager", "NotResident", "ReloadIncomplete", "StepFailed",
           "UnknownHarness", "decide_windows", "next_delay", "unbudgeted"]
