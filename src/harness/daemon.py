"""`harness daemon`: boot, serve and shut down (DESIGN.md §2–§3, SPEC-0022 REQ-6/7/15/20).

Owns the daemon's lifecycle order. Signal handlers first, before any boot work. Boot:
load the config (a bad one ends the process with exit 2 before anything is created);
take the control socket (`--socket`, HARNESS_SOCKET or the XDG default; its directory
created 0700 when missing), whose lock makes this the only daemon (requests wait until
the boot is done); open the ledger, import the legacy history, remove the temporary files
of state.json's and the logs' replacements that a killed daemon left half made, give
every run id state.json names without a record its record (`history.settle_firings`: a
run whose process outlived the daemon as opened, closed by the next step), close what a
crash left open (REQ-7, before any run starts) and stop every process an earlier daemon
of the state directory left running (orphans.py), prune, then start the Manager
(schedules armed, enabled residents autostarted but for the unless-stopped ones an
operator stopped), the prune at each UTC midnight (housekeeping.py) and answer requests.
SIGHUP, like the `reload` op, loads the config again and applies it through the
Manager; a config that fails to load leaves the running one in force (one during the
boot reloads once it is done), and one that loads is applied whole (`Reloader`).
Shutdown on SIGTERM/SIGINT: stop accepting, stop live runs (residents too, without
restarting them), close anything still open, drain the ledger. One during the boot lets
the crash recovery finish (an orphan's kill, its grace included) and skips the rest of
the boot.

Invariants: no run starts before reconciliation; every run id an earlier daemon handed
out has a record once it is done (unless the disk refuses the line: then the next boot);
once reconciliation is done, every process an earlier daemon of the state directory
spawned is stopped before any run starts, whatever signal comes; every record opened by
this process is closed before `main` returns 0; the socket this daemon serves is the
HARNESS_SOCKET of every run it starts, and its state directory (procs.state_marker) the
HARNESS_STATE_DIR; logs never carry an env_file value (only names, ids, outcomes and
paths are logged).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import __version__, paths
from .config.load import ConfigError, load_config
from .config.model import Config
from .control import path_problem
from .control.ops import logs_op, pending_op, require_name, runs_op
from .control.server import ControlServer, Handler, OpError, SocketInUse
from .controls import one_line
from .ledger.errors import LedgerError
from .ledger.files import make_private_dir
from .ledger.logref import log_file
from .ledger.runledger import RunLedger
from .ledger.scrub import ScrubLog, scrub_message
from .supervisor import housekeeping, logs
from .supervisor.history import (
    close_open_on_shutdown,
    import_legacy,
    reconcile,
    settle_firings,
)
from .supervisor.manager import Manager, NotResident, ReloadIncomplete, UnknownHarness
from .supervisor.orphans import find_orphans, kill_orphans
from .supervisor.state import RunIds, StateError, StateFile
from .timefmt import format_ns

log = logging.getLogger("harness.daemon")

LEDGER_CLOSE_TIMEOUT = 10.0
_STATS = ("next_seq", "queued", "append_errors", "degraded", "skipped", "torn", "truncated",
          "redactions", "pruned", "carried_forward", "bytes", "oldest_day",
          "records_in_memory")


class OneLineFormatter(logging.Formatter):
    """The daemon's log lines: each message on one line, its controls spelled out.

    A message quotes paths, config keys, file names and OS errors; a newline in one (an
    XDG_RUNTIME_DIR, a drop-in's name) would otherwise start a line of its own that
    reads as the daemon's ("... ERROR harness.daemon: ..."), and an escape sequence act
    on the terminal. A ScrubLog has scrubbed the message already (the ledger's logger's
    for the engine's warnings, else the handler's): secrets are known as they are
    written, not as their escapes spell them. A traceback keeps its lines, each with its
    controls spelled out.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return "\n".join(one_line(line) for line in super().formatException(ei).splitlines())

    def formatStack(self, stack_info: str) -> str:
        return "\n".join(one_line(line) for line in stack_info.splitlines())


def _say(message: str, *args: object) -> None:
    """One `harness: …` line on stderr, outside the log: `message % args` scrubbed as a
    log message is (each path or OS error on its own, a ledger error as it was made),
    then spelled out on one line, as the CLI's `fail` shows one."""
    print(f"harness: {one_line(scrub_message(message, args))}", file=sys.stderr)


def _setup_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        # Every component's paths and errors, scrubbed; the ledger's own warnings were
        # scrubbed by its logger's ScrubLog, and pass this one as they are.
        handler.addFilter(ScrubLog())
        root.addHandler(handler)
    root.setLevel(logging.INFO)


OPS = ("list", "daemon_info", "runs", "trigger", "jobs", "start", "stop", "restart",
       "logs", "reload", "pending")


def _handlers(manager: Manager, ledger: RunLedger, info: dict[str, Any],
              reload: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Handler]:
    async def list_op(req: dict[str, Any]) -> dict[str, Any]:
        return {"harnesses": manager.list()}

    async def daemon_info(req: dict[str, Any]) -> dict[str, Any]:
        stats = await asyncio.to_thread(ledger.stats)
        return {**info, "ledger": {k: getattr(stats, k) for k in _STATS}}

    async def reload_op(req: dict[str, Any]) -> dict[str, Any]:
        return await reload()

    async def jobs(req: dict[str, Any]) -> dict[str, Any]:
        return {"jobs": await manager.jobs()}

    def by_name(op: str, call: Callable[[str], Awaitable[dict[str, Any]]],
                what: str = "harness") -> Handler:
        """The handler of an op on one named harness (`what` names the kind it needs)."""
        async def handler(req: dict[str, Any]) -> dict[str, Any]:
            name = require_name(req)
            try:
                return await call(name)
            except UnknownHarness:
                raise OpError("not_found", f"no {what} named {name!r}"[:300]) from None
            except NotResident:
                raise OpError("bad_request",
                              f"{op} applies to resident harnesses; {name!r} is a one-shot"
                              [:300]) from None
            except (RuntimeError, LedgerError, StateError) as exc:
                # A shutdown in progress, or a line or run id the disk did not take.
                raise OpError("unavailable", str(exc)) from None
        return handler

    async def trigger(req: dict[str, Any]) -> dict[str, Any]:
        over = req.get("over_budget", False)
        if type(over) is not bool:
            raise OpError("bad_request", "over_budget must be true or false")
        return await by_name("trigger", lambda n: manager.fire(n, "manual", override=over),
                             "one-shot harness")(req)

    return {"list": list_op, "daemon_info": daemon_info, "runs": runs_op(ledger),
            "trigger": trigger,
            "jobs": jobs, "start": by_name("start", manager.start_op),
            "stop": by_name("stop", manager.stop_op),
            "restart": by_name("restart", manager.restart_op),
            "logs": logs_op(lambda: manager.config, ledger, manager.jobs_dir),
            "reload": reload_op, "pending": pending_op(ledger)}


class Reloader:
    """One config reload at a time, from the `reload` op or SIGHUP (REQ-19).

    A config that fails to load changes nothing: the last good one stays in force
    (``bad_config``). One that loads is put in force and applied whole, as a systemd or
    nginx reload is once begun (`Manager.reload`): a client that goes away meanwhile does
    not cut it short. A harness whose step failed leaves the rest applied and the new
    config in force, which is also what the next boot reads from the file; the reply is
    ``incomplete``, naming each such harness and its error. ``unavailable``: the daemon
    is shutting down, and nothing was changed. The [ledger] limits are read by the next
    prune from the Manager's config, so they apply then, without reopening the ledger.
    """

    def __init__(self, manager: Manager, config_path: str | None) -> None:
        self.manager = manager
        self.config_path = config_path
        self._lock = asyncio.Lock()

    async def __call__(self) -> dict[str, Any]:
        async with self._lock:
            try:
                new = await asyncio.to_thread(load_config, self.config_path)
            except ConfigError as exc:
                # One log line per problem (each one line already: Problem.__str__).
                log.error("reload failed; the last good config stays in force:")
                for problem in exc.problems:
                    log.error("%s", problem)
                raise OpError("bad_config", str(exc)) from None
            try:
                return await self.manager.reload(new)
            except RuntimeError as exc:
                raise OpError("unavailable", str(exc)) from None
            except ReloadIncomplete as exc:
                raise OpError("incomplete", str(exc)) from None

    def on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self._quiet())
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _quiet(self) -> None:
        try:
            await self()
        except OpError:
            pass  # logged above
        except Exception:
            log.exception("reload failed")


_background: set[asyncio.Task[Any]] = set()


def clear_leftovers(state: StateFile, jobs_dir: str) -> None:
    """Remove the temporary files of state.json's and the logs' replacements that a daemon
    killed inside one left half made. This daemon owns both alone (the socket's lock), and
    neither is written before the manager starts: no live replacement is among them."""
    try:
        left = state.clear_leftovers() + logs.clear_compress_leftovers(jobs_dir)
    except OSError as exc:
        log.warning("cannot clear what a killed daemon left half made: %s", exc)
        return
    if left:
        log.warning("removed %s, left half made by a daemon that was killed", ", ".join(left))


def settle_heap() -> int:
    """Move everything the boot built out of the cyclic collector's reach; return how many
    objects that was.

    The index (7 days of records), the config and the imported history live as long as
    the daemon, yet every full collection would walk them again: 35–70 ms with a
    70,000-record index, a stall of the event loop and of any synced append that lands
    in it. Frozen objects are still freed by reference counting when the index trims
    them; only a cycle among them would outlive the daemon's need for it, and the index
    holds none.
    """
    gc.collect()  # the boot's own garbage goes first, or it would be frozen with the rest
    gc.freeze()
    return gc.get_freeze_count()


def _gated(table: dict[str, Handler], ready: asyncio.Event) -> dict[str, Handler]:
    """Handlers that wait for the boot to finish, then answer from `table`."""

    def one(op: str) -> Handler:
        async def handler(req: dict[str, Any]) -> Any:
            await ready.wait()
            return await table[op](req)
        return handler

    return {op: one(op) for op in OPS}


class Signals:
    """SIGTERM/SIGINT (shut down) and SIGHUP (reload), taken for the daemon's whole life.

    Taken before any boot work, so a signal during the boot (an orphan's grace in
    kill_orphans) cannot kill the daemon half-way and leave the socket behind: the boot
    step under way finishes, the rest is skipped and the daemon shuts down as usual.
    """

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self._reload: Callable[[], None] | None = None
        self._hup_pending = False

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._on_hup)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)

    def reload_with(self, reload: Callable[[], None]) -> None:
        """Route SIGHUP to `reload` from now on, and once now for one the boot held."""
        self._reload = reload
        if self._hup_pending:
            self._hup_pending = False
            reload()

    def _on_hup(self) -> None:
        if self._reload is None:
            # The config being booted may predate the edit the SIGHUP announces.
            self._hup_pending = True
        else:
            self._reload()


async def main(config_path: str | None = None, socket_path: str | None = None) -> int:
    """Run the daemon until SIGTERM/SIGINT; 0 after a clean shutdown, 2 for a bad config,
    1 when it cannot boot (another daemon owns the socket, the ledger cannot be opened)
    or when ledger lines still queued at the shutdown were lost (logged).

    `socket_path` (`--socket`) overrides HARNESS_SOCKET and the XDG default.
    """
    _setup_logging()
    loop = asyncio.get_running_loop()
    signals = Signals()
    signals.install(loop)
    # Absolute: it is the HARNESS_SOCKET of runs that may chdir anywhere.
    sock = os.path.abspath(paths.socket_path(socket_path))
    paths.serve_socket(sock)
    try:
        return await _boot(config_path, sock, signals)
    finally:
        paths.serve_socket(None)
        # Kept until the shutdown is done: a second Ctrl-C must not cut it short and
        # leave runs without their closed lines.
        signals.remove(loop)


async def _boot(config_path: str | None, sock: str, signals: Signals) -> int:
    cfg_file = paths.config_path(config_path)
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        # A problem is one line with its controls spelled out, scrubbed by the loader (a
        # second scrub of the whole line would take a word after "secret:" for a value).
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    if signals.stop.is_set():
        return 0  # nothing created yet

    # The socket is taken before the ledger is touched: its flock is what makes this
    # the only daemon, and a second one must not reconcile the first one's live runs
    # as crashed. Requests wait on `ready` until the boot below is done.
    table: dict[str, Handler] = {}
    ready = asyncio.Event()
    server = ControlServer(sock, _gated(table, ready))
    if (why := path_problem(sock)) is not None:
        # Refused before its directory and lock file are made: they would be left behind.
        _say("cannot serve the control socket %s: %s", sock, why)
        return 1
    try:
        # The lock file lives beside the socket: on a first boot without XDG_RUNTIME_DIR
        # that is the state dir, which nothing has created yet.
        make_private_dir(os.path.dirname(sock))
        await server.start()
    except (SocketInUse, OSError) as exc:
        _say("cannot serve the control socket: %s", exc)
        return 1
    try:
        ledger_dir = paths.ledger_dir()
        try:
            ledger = RunLedger(ledger_dir, retention_ns=config.ledger.retention,
                               max_bytes=config.ledger.max_mb * 1024 * 1024)
        except Exception as exc:
            _say("cannot open the ledger %s: %s", ledger_dir, exc)
            return 1
        try:
            rc = await _serve(config, cfg_file, ledger, server, table, ready, signals,
                              config_path)
        finally:
            # Inside this `finally` a raise would also hide an exception in flight.
            durable = await _close_ledger(ledger)
        return rc if durable else (rc or 1)
    finally:
        await server.close()


async def _close_ledger(ledger: RunLedger) -> bool:
    """Drain and close the ledger; False (logged, one line) when lines were still queued
    at the timeout: a disk that took no write until the end. They are lost to this
    process, and the daemon's exit says so; the line names the first of them (harness,
    run_id, seq), never its content."""
    try:
        await asyncio.to_thread(ledger.close, LEDGER_CLOSE_TIMEOUT)
    except LedgerError as exc:
        log.error("ledger: %s; they are lost", exc)
        return False
    return True


async def _serve(config: Config, cfg_file: str, ledger: RunLedger, server: ControlServer,
                 table: dict[str, Handler], ready: asyncio.Event, signals: Signals,
                 config_path: str | None = None) -> int:
    stop = signals.stop
    state_path = os.path.join(paths.state_dir(), "state.json")
    jobs_dir = logs.default_jobs_dir()
    imported = await asyncio.to_thread(import_legacy, ledger, state_path)
    if imported.ran:
        log.info("ledger import: %d legacy run(s), %d line(s)", imported.records, imported.lines)
    # The processes an earlier daemon left running: stopped below, and first the proof
    # that a run whose opened line that daemon lost did run.
    found = await asyncio.to_thread(find_orphans, ledger.state_dir, server.path)
    state = StateFile(state_path)
    try:
        await asyncio.to_thread(state.load)
    except StateError:
        pass  # said, and the boot ended, once the crash recovery below is done
    else:
        await asyncio.to_thread(clear_leftovers, state, jobs_dir)
        # Every run id handed out gets its record, before the pass below closes what is
        # open (a run that ran included) and before any start; crash recovery, so not
        # skipped by a SIGTERM meanwhile (the next boot would find no process of it).
        await asyncio.to_thread(settle_firings, ledger, state, ledger.clock(),
                                {(o.harness, o.run_id) for o in found})
    # REQ-7: every record a crash left open is closed before anything can start a run.
    # Not skipped by a SIGTERM meanwhile: the shutdown would close them as its own.
    crashed = await asyncio.to_thread(reconcile, ledger, ledger.clock())
    for rec in crashed:
        log.warning("run %s/%s: closed as interrupted (daemon_crash)", rec["harness"],
                    rec["run_id"])
    # Every process an earlier daemon of this state directory spawned outlived it: end
    # them before any run starts (no twins), whatever the ledger says of their runs (a
    # closed line the disk refused, an opened line lost with the daemon, a boot killed
    # during this very step), a SIGTERM meanwhile or not: their records say they ended.
    orphans = await asyncio.to_thread(lambda: kill_orphans(
        ledger.state_dir, server.path, crashed, ledger.get, found=found))
    # A one-shot's per-run log is closed now, like any other run's (a resident's durable
    # log goes on): compressed only here, once no orphan can still be writing to it (one
    # a boot killed during the sweep left plain, too). The file is the record's log file,
    # not its field, which the ledger may have cut.
    ended: list[Mapping[str, Any]] = [*crashed]
    ended += (o.record for o in orphans if o.record is not None and not o.crashed
              and o.record.get("outcome") != "running")
    for done in ended:
        path = log_file(done, ledger.state_dir)
        if done.get("kind") == "oneshot" and path is not None:
            await asyncio.to_thread(logs.compress_log, path)
    manager: Manager | None = None
    if not stop.is_set():
        pruned = await asyncio.to_thread(ledger.prune)
        if pruned.deleted:
            log.info("ledger: pruned %d day file(s)", len(pruned.deleted))
        try:
            state.load()
        except StateError as exc:
            _say("%s", exc)
            return 1
        ids = RunIds(state, ledger, jobs_dir)
        manager = Manager(config, ledger, ids, jobs_dir)
    loop = asyncio.get_running_loop()
    daily: asyncio.Task[None] | None = None
    try:
        if manager is not None and not stop.is_set():
            info = {"pid": os.getpid(), "version": __version__,
                    "started_at": format_ns(ledger.clock()), "config": cfg_file,
                    "ledger_dir": ledger.directory}
            reloader = Reloader(manager, config_path)
            table.update(_handlers(manager, ledger, info, reloader))
            manager.start()
            await manager.start_residents()
            settle_heap()
            ready.set()
            signals.reload_with(reloader.on_sighup)
            daily = loop.create_task(housekeeping.DailyPrune(
                ledger, limits=lambda: housekeeping.config_limits(manager.config)).run())
            log.info("daemon %s up: pid %d, %d harness(es), socket %s", __version__,
                     os.getpid(), len(config.harness), server.path)
        await stop.wait()
        log.info("shutting down" if ready.is_set() else "shutting down during the boot")
        # The socket goes first so no trigger can start a run the shutdown would miss.
        await server.close()
        await housekeeping.stop(daily)
        if manager is not None:
            await manager.shutdown()
        left = await asyncio.to_thread(close_open_on_shutdown, ledger, ledger.clock())
        if left:
            log.warning("closed %d open record(s) as interrupted (shutdown)", len(left))
    finally:
        await housekeeping.stop(daily)  # no-op after a clean shutdown
    return 0


__all__ = ["main"]
