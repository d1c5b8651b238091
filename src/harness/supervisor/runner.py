"""One process run of a harness, from admission to its closed record (SPEC-0022 REQ-3, REQ-5,
REQ-6, REQ-17; DESIGN.md §3 "Runs").

`Run` owns a single spawn: it allocates the run id, writes the ``opened`` line, spawns
``argv`` (exec, no shell) in its own process group with output to the per-run log, ends it
on timeout or `stop`, writes the ``closed`` line and then compresses and prunes the logs.
`run_once` is the whole of that for a one-shot. A resident's spawns all append to one durable
log, ``$XDG_STATE_HOME/harness/logs/<harness>.log``, which is never compressed or pruned.
A run whose log cannot be created fails, and `LogFailures` (the Manager's, shared by its
runs) says why in the daemon's log once per episode.
Everything runs on one asyncio loop; the ledger's and the filesystem's blocking calls go
through `asyncio.to_thread`.

Invariants: the opened line is durable before the process is spawned, or its sync passed
REQ-6's 2 s bound for a harness under no budget (`admit_unsynced`), or it is a resident's
own-exit restart (`nowait_open`) — then the line stays queued in order and state.json's
``issued`` entry, written with the run id, lets the next boot record the run if the daemon
dies first; every started `Run` writes exactly one closed line, whichever way it ends, and
it is durable before `wait` or `stop` return the record (but a resident's own exit,
`nowait_close`, and a closed line past the bound, which stay queued in order); a run ends
with its process group, as systemd's KillMode=control-group ends a unit with its cgroup:
when the process exits on its own, what it left running in its group is stopped before the
record closes, and a timeout or stop ends the group and, found by the run's identity in
their environment (procs.py), the descendants that left it (setsid) — each group SIGTERMed,
then SIGKILLed after the grace; a descendant that left the group outlives only a run that
ended on its own, until the next daemon's boot (orphans.py); env_file values reach the
child's environment and nowhere else — no ledger line and no line we write to a log ever
holds one (errors name the file and line, never the text). A daemon shutting down calls
``stop("shutdown")``; a loop torn down without that cancels the supervision task, which
still ends the group and closes the record as interrupted/shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import paths
from ..config.durations import shown_path
from ..ledger.errors import LedgerError
from ..ledger.files import make_private_dir, open_regular, why_unreadable
from ..ledger.runledger import RunLedger
from ..timefmt import format_ns
from . import logs
from .procs import (
    ENV_NAME,
    ENV_RUN_ID,
    ENV_SOCKET,
    ENV_STATE_DIR,
    ENV_TRIGGER,
    find_marked,
    live_groups,
    signal_group,
    state_marker,
)
from .state import RunIds, issued_entry

if TYPE_CHECKING:
    from ..config.model import HarnessConfig

log = logging.getLogger("harness.supervisor")

DEFAULT_GRACE = 5.0
# Why a run was stopped → (outcome, reason) of its record (REQ-5).
STOP_REASONS: dict[str, tuple[str, str | None]] = {
    "operator": ("cancelled", "operator"),
    "hours": ("cancelled", "hours"),
    "reload": ("cancelled", "reload"),
    "replace": ("replaced", None),
    # An operator's `harness restart` is a deliberate stop: REQ-5's cancelled covers any
    # (replaced is on_overlap's, a newer run of the schedule taking the place).
    "restart": ("cancelled", "operator"),
    "shutdown": ("interrupted", "shutdown"),
}
# The most an env_file may hold: far more than any set of variables, and a bound on what a
# mistaken path (a log, an image) costs the daemon to read.
ENV_FILE_MAX = 1024 * 1024
ENV_FILE_MAX_TEXT = "1 MiB"
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_POLL = 0.05


def resident_log_path(harness: str) -> str:
    """The durable log every run of resident `harness` appends to."""
    return paths.resident_log_path(harness)


def open_resident_log(path: str) -> int:
    """An append fd on the durable log, creating it 0600 in a 0700 directory if missing.

    No O_EXCL, unlike a per-run log: each spawn of the resident continues the same file.
    """
    make_private_dir(os.path.dirname(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    return os.open(path, flags, 0o600)


class LogFailures:
    """Why each harness's last run could not create its log (directory and error), as
    logged: the memory that says it once per episode.

    The reason is nowhere else (the note that says why goes into that log), yet a
    resident restarting in a loop, or a schedule, fails the same way run after run; a
    harness is logged again only once a run got its log or the reason changed. The
    memory belongs to what outlives the runs, the Manager (one per daemon), so two
    daemons or Managers in one process each say their own failures; a `Run` made alone
    gets a memory of its own.
    """

    def __init__(self) -> None:
        self._said: dict[str, tuple[str, str]] = {}

    def failed(self, name: str, run_id: int, path: str, exc: OSError, error: str) -> None:
        """Run `run_id` of `name` fails for want of its log: said unless already said."""
        why = (os.path.dirname(path), exc.strerror or str(exc))
        if self._said.get(name) == why:
            return
        self._said[name] = why
        log.warning("run %s/%s: failed to start: %s (its later runs that fail the same "
                    "way are not logged again)", name, run_id, error)

    def created(self, name: str) -> None:
        """A run of `name` got its log: the episode is over."""
        self._said.pop(name, None)


class SpawnError(Exception):
    """The process could not be started; the message is safe to log (it holds no env value).

    It names the file that failed (argv[0], the workdir, an env_file), and a path can
    carry a secret: a project's directory named after a token is its harnesses' workdir.
    So the message is scrubbed here, once, as `harness up` scrubs that path in every line.
    (Its controls are spelled out where it is shown: the run log's note, `append_note`,
    and the daemon's log formatter.)
    """

    def __init__(self, message: str) -> None:
        super().__init__(shown_path(message))


@dataclass(frozen=True)
class RunSpec:
    """What a run needs of a harness's config; `timeout` in seconds, None for none."""

    name: str
    argv: Sequence[str]
    workdir: str | None = None
    env_file: str | Sequence[str] | None = None
    timeout: float | None = None
    keep_runs: int = 20

    @classmethod
    def from_config(cls, name: str, cfg: HarnessConfig) -> RunSpec:
        # A resident is meant to stay up: `timeout` bounds a one-shot's run only.
        timeout = (cfg.timeout / 1e9 if cfg.timeout is not None and cfg.kind == "oneshot"
                   else None)
        return cls(name=name, argv=tuple(cfg.argv), workdir=cfg.workdir,
                   env_file=tuple(cfg.env_file) if cfg.env_file else None,
                   timeout=timeout, keep_runs=cfg.keep_runs)


def read_env_files(env_file: str | Sequence[str] | None) -> dict[str, str]:
    """The KEY=VALUE pairs of the env files, later files winning; SpawnError when one is bad.

    Blank lines and ``#`` comments are skipped; a value may be wrapped in one pair of
    matching quotes. An error names the file and line number only, since the line itself
    may be a secret with a typo.

    Only a regular file of at most ENV_FILE_MAX bytes is read (a symlink is followed to
    it): a FIFO would block the spawn for ever (past the run's timeout, and a daemon's
    shutdown waits for the thread), and /dev/zero would be read until memory ran out.
    """
    if env_file is None:
        return {}
    files = [env_file] if isinstance(env_file, str) else list(env_file)
    out: dict[str, str] = {}
    for path in files:
        try:
            with open_regular(path, follow=True) as f:
                raw = f.read(ENV_FILE_MAX + 1)
        except OSError as exc:
            raise SpawnError(f"env_file {path}: cannot read: {why_unreadable(path, exc)}") \
                from None
        if len(raw) > ENV_FILE_MAX:
            raise SpawnError(f"env_file {path}: larger than {ENV_FILE_MAX_TEXT}, the most "
                             "an env file may hold")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SpawnError(f"env_file {path}: not valid UTF-8") from None
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            key = key.strip()
            if not sep or not _ENV_KEY.match(key):
                raise SpawnError(f"env_file {path}:{n}: not a KEY=VALUE line")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            if "\0" in value:
                raise SpawnError(f"env_file {path}:{n}: the value holds a NUL byte")
            out[key] = value
    return out


@dataclass
class Run:
    """One spawn of `spec`: `start`, then `wait` for its end or `stop` it."""

    spec: RunSpec
    ledger: RunLedger
    ids: RunIds
    trigger: str
    kind: str = "oneshot"
    env_extra: Mapping[str, str] | None = None
    jobs_dir: str = field(default_factory=logs.default_jobs_dir)
    grace: float = DEFAULT_GRACE
    base_env: Mapping[str, str] | None = None  # the daemon's env; None means os.environ
    # Set by the Manager: an id it already allocated (a queued firing), the schedule window
    # the run honours, and REQ-6's one exception (an unbudgeted resident's restart opened
    # line, and its own-exit closed line, are queued without waiting for the sync).
    preallocated: int | None = None
    window: str | None = None
    override: bool = False  # admitted with --over-budget (SPEC-0021 REQ-15): on the record
    nowait_open: bool = False
    nowait_close: bool = False
    admit_unsynced: bool = False  # spawn even when the opened line's sync fails (REQ-6)
    # The Manager's, shared by all its runs; a Run made alone has its own.
    log_failures: LogFailures = field(default_factory=LogFailures)

    run_id: int | None = field(default=None, init=False)
    log_path: str | None = field(default=None, init=False)
    error: str | None = field(default=None, init=False)  # a spawn failure, safe to show
    # The closed line was not durable when the run ended (a failing disk): it is queued
    # and written when the disk takes it. An operator's stop says so.
    close_queued: bool = field(default=False, init=False)
    pid: int | None = field(default=None, init=False)
    _proc: asyncio.subprocess.Process | None = field(default=None, init=False, repr=False)
    _started_ns: int = field(default=0, init=False, repr=False)  # the wall clock's
    _started_mono: int = field(default=0, init=False, repr=False)  # time.monotonic_ns()
    _end: tuple[str, str | None] | None = field(default=None, init=False, repr=False)
    _stop: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _task: asyncio.Task[dict[str, Any]] | None = field(default=None, init=False, repr=False)
    _closing: bool = field(default=False, init=False, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)
    _kill_by: float | None = field(default=None, init=False, repr=False)
    _marker: str = field(default="", init=False, repr=False)  # its ENV_STATE_DIR

    # -- start -------------------------------------------------------------------------

    async def start(self) -> int:
        """Allocate the id, make the opened line durable, spawn; return the run id.

        A spawn failure is not raised: the run closes failed/spawn and `wait` returns that
        record. StateError (no run id could be persisted) and a ledger failure on the opened
        line are raised, with nothing spawned.
        """
        if self._task is not None:
            raise RuntimeError("a Run is started once")
        name = self.spec.name
        # A preallocated id's firing is named in state.json already (held); a new one is
        # named with its allocation, so a crash before its opened line is on disk still
        # leaves the next boot what to record it by (`history.settle_firings`).
        self.run_id = (self.preallocated if self.preallocated is not None
                       else await asyncio.to_thread(
                           self.ids.next, name,
                           issued_entry(self.trigger, self.window,
                                        format_ns(self.ledger.clock()), self.kind)))
        resident = self.kind == "resident"
        path = (resident_log_path(name) if resident
                else logs.run_log_path(self.jobs_dir, name, self.run_id))
        fd: int | None
        try:
            fd = await asyncio.to_thread(
                open_resident_log if resident else logs.create_run_log, path)
            self.log_path = path
            self.log_failures.created(name)
        except OSError as exc:
            fd = None
            self.error = f"cannot create the run log {path}: {exc.strerror or exc}"
            self.log_failures.failed(name, self.run_id, path, exc, self.error)
        try:
            self._started_ns = self.ledger.clock()
            self._started_mono = time.monotonic_ns()
            at = format_ns(self._started_ns)
            opened: dict[str, Any] = {"type": "opened", "harness": name, "run_id": self.run_id,
                                      "at": at, "kind": self.kind, "trigger": self.trigger,
                                      "started_at": at, "outcome": "running"}
            if self.log_path is not None:
                opened["log"] = paths.as_text(self.log_path)
            if self.window is not None:
                opened["window"] = self.window
            if self.override:
                opened["override"] = True
            # Raises only when nothing was queued (the ledger is closed, the line refused).
            entry = self.ledger.enqueue(opened, sync=True)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        if not self.nowait_open:
            # nowait_open: queued in order behind the previous run's closed line, which
            # the writer syncs and retries, logging and counting a late sync (REQ-6).
            try:
                await asyncio.to_thread(self.ledger.wait, entry)
            except LedgerError as exc:
                # The line stays queued and will be written in order. A harness under no
                # budget is admitted anyway, since a slow or failing disk must not stall
                # supervision (REQ-6); any other is not started, and closes failed/spawn
                # behind its opened line, so the record never reads running for ever.
                if self.admit_unsynced:
                    log.error("run %s/%s: opened line not yet durable, starting anyway: %s",
                              name, self.run_id, exc)
                else:
                    self.error = f"not started: the opened line is not durable ({exc})"
        if fd is not None:
            try:
                if self.error is None:
                    await self._spawn(fd)
            except SpawnError as exc:
                self.error = str(exc)
            finally:
                os.close(fd)  # the child holds its own copy
        if self.error is not None:
            self._end = ("failed", "spawn")
            if self.log_path is not None:
                await asyncio.to_thread(logs.append_note, self.log_path,
                                        f"spawn failed: {self.error}")
        self._task = asyncio.get_running_loop().create_task(self._supervise())
        return self.run_id

    async def _spawn(self, fd: int) -> None:
        """Spawn the process; any failure to prepare or start it is a SpawnError (the run
        closes failed/spawn), never an exception that leaves its record open."""
        try:
            await self._exec(fd)
        except SpawnError:
            raise
        except Exception as exc:
            # A ValueError ("embedded null byte" in argv, the workdir or an env value), or
            # anything else: its text may quote an env value, so only its kind is told.
            why = ("a NUL character in its argv, workdir or environment"
                   if isinstance(exc, ValueError) and "null byte" in str(exc)
                   else type(exc).__name__)
            raise SpawnError(f"cannot start the command: {why}") from None

    async def _exec(self, fd: int) -> None:
        env = dict(os.environ if self.base_env is None else self.base_env)
        env.update(await asyncio.to_thread(read_env_files, self.spec.env_file))
        if self.env_extra:
            env.update(self.env_extra)
        # Last, so no env file can change them: the run's descendants are found by them, at
        # its end (`_kill_group`) and by the next daemon's boot (orphans.py).
        self._marker = state_marker(self.ledger.state_dir)
        env.update({ENV_NAME: self.spec.name, ENV_RUN_ID: str(self.run_id),
                    ENV_TRIGGER: self.trigger, ENV_SOCKET: paths.socket_path(),
                    ENV_STATE_DIR: self._marker})
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.spec.argv, cwd=self.spec.workdir, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd,
                start_new_session=True)
        except OSError as exc:
            # strerror + filename: the argv[0] or workdir, never the environment.
            what = exc.filename if exc.filename is not None else self.spec.argv[0]
            raise SpawnError(f"{what}: {exc.strerror or exc}") from None
        self.pid = self._proc.pid

    # -- end ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether `start` has returned (a run still starting cannot be stopped yet)."""
        return self._task is not None

    @property
    def ended(self) -> bool:
        """Whether the run's processes are gone and only the closed line is still being
        written."""
        return self._closing

    async def wait(self) -> dict[str, Any]:
        """The closed record, once the run has ended and its closed line is durable."""
        if self._task is None:
            raise RuntimeError("the Run was not started")
        # Shielded: a caller giving up on waiting must not abandon the run unclosed.
        return await asyncio.shield(self._task)

    async def stop(self, reason: str, grace: float | None = None) -> dict[str, Any]:
        """End the run for `reason` (operator, hours, reload, replace, shutdown) and wait.

        SIGTERM goes to the group, SIGKILL after `grace` (default: the run's). A run that
        already ended, or is already being stopped, keeps the outcome it had; a second stop
        can only bring the SIGKILL closer (a shutdown during a graceful hours close).
        """
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r} "
                             f"(valid: {', '.join(STOP_REASONS)})")
        if self._end is None:
            self._end = STOP_REASONS[reason]
        self._stopped = True
        by = asyncio.get_running_loop().time() + (self.grace if grace is None else grace)
        self._kill_by = by if self._kill_by is None else min(self._kill_by, by)
        self._stop.set()
        return await self.wait()

    async def _supervise(self) -> dict[str, Any]:
        try:
            return await self._watch()
        except asyncio.CancelledError:
            # The loop is going away (a shutdown that did not stop us first): end the run
            # as a shutdown would rather than leave a live group and an open record.
            if not self._closing:
                if self._end is None:
                    self._end = STOP_REASONS["shutdown"]
                proc = self._proc
                exit_code: int | None = None
                if proc is not None:
                    waiter = asyncio.ensure_future(proc.wait())
                    await self._kill_group(proc.pid, waiter, stopped=True)
                    await waiter
                    rc = proc.returncode
                    exit_code = None if rc is None else (-1 if rc < 0 else rc)
                await self._close(exit_code)
            raise

    async def _watch(self) -> dict[str, Any]:
        proc = self._proc
        exit_code: int | None = None
        if proc is not None:
            waiter = asyncio.ensure_future(proc.wait())
            stopper = asyncio.ensure_future(self._stop.wait())
            try:
                done, _ = await asyncio.wait({waiter, stopper}, timeout=self.spec.timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if waiter in done:
                    if self._end is None:
                        # Its own end, settled now: a stop while what it left is being
                        # stopped below cannot change the outcome.
                        self._end = ("success", None) if waiter.result() == 0 else (
                            "failed", None)
                elif stopper not in done:
                    self._end = ("timed_out", None)
                    await self._note(f"timed out after {self.spec.timeout:g}s; "
                                     "stopping the process group")
                await self._kill_group(proc.pid, waiter,
                                       stopped=waiter not in done or self._stopped)
            finally:
                stopper.cancel()
            rc = await waiter
            exit_code = -1 if rc < 0 else rc
        return await self._close(exit_code)

    async def _kill_group(self, pgid: int, waiter: asyncio.Future[int], *,
                          stopped: bool) -> None:
        """End the run's process group `pgid`: SIGTERM, then SIGKILL to whatever of it is
        left after the grace. `stopped` (a timeout or stop, not the process's own exit):
        the groups of the descendants that left it (setsid) are ended alike.

        The leader exiting is not enough: a descendant that ignores SIGTERM, or one put
        in the background, would outlive the run, so the groups themselves are polled
        until empty or the grace runs out. A process that exited on its own and left
        nothing running (the usual end) costs one kill(2) and no signal.
        """
        loop = asyncio.get_running_loop()
        groups = {pgid}
        if not stopped:
            if not live_groups(groups):
                return
            await self._note("the process exited and left others running in its process "
                             "group; stopping them")
        signal_group(pgid, signal.SIGTERM)
        began = loop.time()
        if stopped:  # the run's own group first: the look at /proc is not instant
            await self._term_escaped(pgid, groups)
        if self._kill_by is None:  # a timeout or its own exit, not a stop
            self._kill_by = began + self.grace
        # Re-read each turn: a later stop may bring the deadline closer.
        while loop.time() < self._kill_by:
            if waiter.done() and not live_groups(groups):
                # Empty groups are not the end of a stopped run: a descendant may have
                # left the group since the last look (a helper daemonized in answer to
                # the SIGTERM), and it would outlive the run.
                if not stopped or not await self._term_escaped(pgid, groups):
                    return
                continue
            await asyncio.sleep(_POLL)
        if stopped:  # a descendant may have left the group during the grace
            groups |= await self._escaped(pgid)
        left = live_groups(groups)
        if left:
            for g in left:
                signal_group(g, signal.SIGKILL)
            await self._note(f"still running {loop.time() - began:.3g}s after SIGTERM; "
                             "sent SIGKILL")

    async def _term_escaped(self, pgid: int, groups: set[int]) -> bool:
        """SIGTERM the groups of the run's descendants that left its group `pgid` and are
        not yet in `groups`, say so in the log and add them; whether there were any."""
        escaped = await self._escaped(pgid) - groups
        if escaped:
            await self._note("also stopping the process group(s) "
                             f"{', '.join(map(str, sorted(escaped)))} that its "
                             "descendants started (setsid)")
            for g in escaped:
                signal_group(g, signal.SIGTERM)
            groups |= escaped
        return bool(escaped)

    async def _escaped(self, pgid: int) -> set[int]:
        """The process groups, other than the run's `pgid`, of the processes that carry
        this run's identity: its descendants that left its group (setsid)."""
        if not self._marker or self.run_id is None:
            return set()  # never spawned: nothing carries the identity
        found = await asyncio.to_thread(find_marked, self._marker,
                                        run=(self.spec.name, self.run_id))
        return {m.pgid for m in found} - {pgid}

    async def _note(self, text: str) -> None:
        if self.log_path is not None:
            await asyncio.to_thread(logs.append_note, self.log_path, text)

    async def _close(self, exit_code: int | None) -> dict[str, Any]:
        assert self.run_id is not None and self._end is not None
        self._closing = True
        name = self.spec.name
        # The duration is the monotonic clock's: a wall clock stepped back (NTP) or
        # forward during the run must not make it 0 or hours. The stamps are the wall
        # clock's, but the end is never earlier than the start plus that duration: a
        # record whose ended_at precedes its started_at is one no reader can use.
        elapsed = max(0, time.monotonic_ns() - self._started_mono)
        end_ns = self.ledger.clock()
        outcome, reason = self._end
        line: dict[str, Any] = {"type": "closed", "harness": name, "run_id": self.run_id,
                                "at": format_ns(end_ns), "outcome": outcome,
                                "ended_at": format_ns(max(end_ns, self._started_ns + elapsed)),
                                "duration_ms": elapsed // 1_000_000}
        if reason is not None:
            line["reason"] = reason
        if exit_code is not None:
            line["exit_code"] = exit_code
        try:
            if self.nowait_close and not self._stopped and outcome in ("success", "failed"):
                # REQ-6's exception: a resident's own exit is queued, not waited for.
                self.ledger.enqueue(line, sync=True)
            else:
                await asyncio.to_thread(self.ledger.append, line, sync=True)
        except LedgerError as exc:
            # The writer keeps the line queued and retries it in order (REQ-6).
            log.error("run %s/%s: closed line not yet durable: %s", name, self.run_id, exc)
            self.close_queued = True
        # The durable log of a resident outlives its runs: no compression, no keep_runs.
        if self.log_path is not None and self.kind != "resident":
            await asyncio.to_thread(logs.finish_log, self.jobs_dir, name, self.run_id,
                                    self.spec.keep_runs)
        rec = await asyncio.to_thread(self.ledger.get, name, self.run_id)
        if rec is None or rec.get("outcome") == "running":
            # The closed line is still queued (REQ-6's exception, or a failing disk): the
            # record as it will read once it is written.
            rec = {**(rec or {}), **{k: v for k, v in line.items() if k not in ("type", "at")}}
        return rec


async def run_once(spec: RunSpec, ledger: RunLedger, ids: RunIds, *, trigger: str,
                   kind: str = "oneshot", env_extra: Mapping[str, str] | None = None,
                   jobs_dir: str | None = None, grace: float = DEFAULT_GRACE,
                   ) -> dict[str, Any]:
    """Run `spec` once to its end and return its closed record (the ledger's fold)."""
    run = Run(spec, ledger, ids, trigger, kind, env_extra,
              jobs_dir if jobs_dir is not None else logs.default_jobs_dir(), grace)
    await run.start()
    return await run.wait()


__all__ = ["DEFAULT_GRACE", "ENV_FILE_MAX", "STOP_REASONS", "LogFailures", "Run", "RunSpec",
           "SpawnError", "open_resident_log", "read_env_files", "resident_log_path", "run_once"]
