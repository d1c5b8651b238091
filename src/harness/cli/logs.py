"""`harness logs NAME [--run N] [--lines N]` (DESIGN.md §2): print a harness's log.

Asks the daemon's `logs` op when the daemon is up; otherwise reads the files itself,
taking the harness's kind and keep_runs from the config file and a run's record from
the ledger's day files, and says on stderr that it did. Both paths go through
`supervisor.logview` (`view_log`; `stream_log` for a whole log read from disk, which
only the daemon's answer caps), so they pick the same file, print the same text and
explain a missing log the same way.

Exit codes: 0 the log was printed; 1 no such harness, no such run, no log for that run
(pruned, skipped, never written), or the daemon answered with another error; 2 a bad flag
value, or (daemon down) a config file that does not load.
Invariants: the log's bytes go to stdout and nothing else does; every note (read from
disk, cut to the cap, a resident's shared log) goes to stderr, one line each, before the
log; a whole log read from disk is streamed, so the command's memory does not grow with
the log's size.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn, TypeVar

import click

from .. import paths
from ..config.durations import shown
from ..config.load import ConfigError, load_config
from ..config.model import HarnessConfig
from ..control.client import Client, DaemonError, DaemonLost, DaemonUnreachable, reply_object
from ..ledger.dayfiles import LedgerDirError
from ..ledger.fold import LogProbe
from ..ledger.query import Query
from ..ledger.reader import scan
from ..supervisor import logs as runlogs
from ..supervisor import logview
from ..supervisor.runner import resident_log_path
from . import render
from .output import fail, named, report, warn
from .params import INTEGER, refused

T = TypeVar("T")


def _ask_daemon(sock: str, name: str, run: int | None, lines: int | None) -> dict[str, Any]:
    client = Client(sock)
    try:
        args: dict[str, Any] = {"name": name}
        if run is not None:
            args["run"] = run
        if lines is not None:
            args["lines"] = lines
        return reply_object(client.request("logs", **args), "logs", text=str)
    finally:
        client.close()


def _disk_lookup(name: str, run_id: int) -> dict[str, Any] | None:
    """The record of (name, run_id) from the day files; None when the ledger has none
    (a missing ledger directory is an empty ledger)."""
    try:
        recs, _oldest, _stats = scan(paths.ledger_dir(), Query(names=(name,)))
    except (LedgerDirError, OSError) as exc:
        fail(named(f"{name} run {run_id} has no log, and the run ledger could not be "
                   f"read to say why: {exc}"))  # its path, scrubbed
    probe = LogProbe(paths.state_of_ledger(paths.ledger_dir()))
    return next((r.to_json(offline=True, probe=probe) for r in recs if r.run_id == run_id),
                None)


def _harness(config_path: str | None, name: str) -> HarnessConfig:
    """NAME's config, read from the files (the daemon is down); ends the command when
    the config does not load (2) or has no such harness (1)."""
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        warn(f"the config does not load, so {named(name)}'s kind is unknown:")
        report(str(exc))
        sys.exit(2)
    cfg = config.harness.get(name)
    if cfg is None:
        fail(f"no harness named {shown(name)}")
    return cfg


def _cannot_read(name: str, exc: OSError) -> NoReturn:
    fail(named(f"cannot read {name}'s log: {exc}"))  # its path, scrubbed


def _from_files(config_path: str | None, name: str, view: Callable[..., T], **how: Any) -> T:
    """`view` (logview's `view_log` or `stream_log`) of NAME's log, read from the files
    with the daemon down: its kind and keep_runs from the config, a run's record from the
    ledger's day files; a missing log or an unreadable file ends the command."""
    cfg = _harness(config_path, name)
    try:
        return view(name, cfg.kind, jobs_dir=runlogs.default_jobs_dir(),
                    resident_log=resident_log_path(name), keep_runs=cfg.keep_runs,
                    lookup=_disk_lookup, **how)
    except logview.LogError as exc:
        # Scrubbed as the daemon scrubs the same message: it may name a path.
        fail(named(exc.message))
    except OSError as exc:
        _cannot_read(name, exc)


def _read_files(config_path: str | None, name: str, run: int | None,
                lines: int | None) -> dict[str, Any]:
    view: logview.LogText = _from_files(config_path, name, logview.view_log, run=run,
                                        lines=lines)
    return view.to_json()


def _open_files(config_path: str | None, name: str, run: int | None) -> logview.LogStream:
    """The whole log, opened from the files to be streamed: it may be many GB (a
    resident's months of output), so it is never held whole."""
    stream: logview.LogStream = _from_files(config_path, name, logview.stream_log, run=run)
    return stream


def _read(name: str, pieces: Iterator[str]) -> Iterator[str]:
    """`pieces`, a read that fails ending the command as a failed open does. Only the
    read is caught: standard output refusing a write is an OSError too, and is
    output.guarded_stdout's to report."""
    while True:
        try:
            piece = next(pieces)
        except StopIteration:
            return
        except OSError as exc:
            _cannot_read(name, exc)
        yield piece


def _notes(name: str, data: dict[str, Any]) -> None:
    """The notes on stderr that come before the log's text."""
    # The path and the count are the daemon's: shown as a value is (render.visible).
    if data.get("shared") and data.get("run_id") is not None:
        warn(f"{render.visible(name)} is a resident: all its runs write one log, and runs "
             f"are not marked in it; printing it whole")
    if data.get("cut_bytes"):
        warn(f"showing the end of {render.visible(str(data.get('path')))}; the first "
             f"{render.visible(str(data['cut_bytes']))} byte(s) were left out")


def _print(pieces: Iterable[str]) -> None:
    """The log's text on stdout, as it is; a last line without its newline gets one."""
    # A reader that closes the pipe early (`| head`) ends the command quietly (output.py).
    last = ""
    for piece in pieces:
        sys.stdout.write(piece)
        last = piece or last
    if last and not last.endswith("\n"):
        sys.stdout.write("\n")


@click.command("logs")
@click.argument("name")
@click.option("--run", "run", type=INTEGER, default=None, metavar="N",
              help="That run's log (default: the newest run's).")
@click.option("--lines", "lines", type=INTEGER, default=None, metavar="N",
              help="Only the last N lines.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {name, run_id, path, text, cut_bytes, shared} as JSON.")
@click.pass_context
def logs_command(ctx: click.Context, name: str, run: int | None, lines: int | None,
                 as_json: bool) -> None:
    """Print NAME's log.

    A one-shot's newest run's log (or run N's, with --run); a resident's one durable log.
    """
    if run is not None and run < 1:
        raise refused(f"must be a positive run id, got {run}", "--run")
    if lines is not None and lines < 1:
        raise refused(f"must be at least 1, got {lines}", "--lines")
    obj = ctx.obj or {}
    sock = paths.socket_path(obj.get("socket"))
    try:
        data = _ask_daemon(sock, name, run, lines)
    except DaemonUnreachable as exc:
        from_disk = f"daemon {exc.why}; read the log from disk"
        if lines is None and not as_json:
            # The whole log, which only the daemon's answer caps: streamed, not held.
            with _open_files(obj.get("config"), name, run) as stream:
                warn(from_disk)
                _notes(name, {"shared": stream.shared, "run_id": stream.run_id})
                _print(_read(name, stream.text()))
            return
        data = _read_files(obj.get("config"), name, run, lines)
        warn(from_disk)
    except DaemonError as exc:
        fail(str(exc))
    except DaemonLost as exc:
        fail(f"lost the daemon ({exc})")
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    _notes(name, data)
    _print([data["text"]])


COMMANDS = (logs_command,)
