"""The `harness` entry point: global options and the command groups.

Invariant: every failure a user can cause ends in a one-line message on stderr and
the command's documented exit code, never a traceback. A bad flag or argument gets
click's form, as most command lines do: the usage line and where help is, then one
`Error:` line, exit 2.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from .. import __version__
from ..controls import one_line
from ..ledger.scrub import scrub_text
from .output import guarded_stdout
from .params import refused

EXIT_INTERRUPTED = 130  # 128 + SIGINT

# Each command and the module of this package that defines it (in its COMMANDS). A
# command's module is imported only when that command runs (or help lists them): a
# `harness runs` need not load the daemon's config models or the work ledger's git code,
# which took half its start-up.
_COMMANDS = {
    "runs": "runs", "ledger": "ledger", "logs": "logs",
    **dict.fromkeys(("daemon", "trigger", "jobs", "list", "start", "stop", "restart"), "daemon"),
    **dict.fromkeys(("reload", "up", "down"), "projects"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is None:
            return None
        commands = importlib.import_module(f"{__package__}.{module}").COMMANDS
        return next(c for c in commands if c.name == cmd_name)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            raise _scrubbed(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        # Ctrl-C exits 130, as a shell reports a command SIGINT ended, and says nothing
        # more. Left to click, it printed "Aborted!" and exited 1: the ledger group's "no
        # ledger", so a script could not tell an interrupted `ledger verify` from that.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as exc:  # a command's own flags and arguments
            raise _scrubbed(exc) from None


def _scrubbed(exc: click.ClickException) -> click.ClickException:
    """`exc` with its message scrubbed of secrets, then its controls spelled out.

    A bad flag or argument is quoted back in click's `Error:` line, ours (a --since that
    is no time) and click's own ("'…' is not a valid integer", "No such command '…'")
    alike: a token pasted into the wrong argument must not be echoed to the terminal (or
    a CI log) in full, and a value cannot act on the terminal."""
    # Line by line: the message of a bare `harness` is the whole help. Set through
    # setattr: click declares the attribute Final, yet every format_message reads it.
    lines = scrub_text(exc.message)[0].split("\n")
    setattr(exc, "message", "\n".join(one_line(line) for line in lines))  # noqa: B010
    return exc


def _a_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An empty path (`--config "$CFG"` with CFG unset) is refused: taken as no option at
    all, the daemon ran on the default config, or a client asked another daemon, without
    a word. (An empty environment variable is unset to click, as to most tools.)"""
    if value == "":
        raise refused("an empty path names no file; leave the option out for the default",
                      param.opts[0])
    return value


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="harness")
@click.option("--socket", "socket_path", envvar="HARNESS_SOCKET", default=None,
              callback=_a_path,
              help="Control socket path (default: $XDG_RUNTIME_DIR/harness.sock).")
@click.option("--config", "config_path", envvar="HARNESS_CONFIG", default=None,
              callback=_a_path,
              help="Global config file (default: $XDG_CONFIG_HOME/harness/harness.toml).")
@click.pass_context
def cli(ctx: click.Context, socket_path: str | None, config_path: str | None) -> None:
    """Supervise AI coding agents and commands; keep a durable history of every run."""
    ctx.obj = {"socket": socket_path, "config": config_path}


def _std_fds_open() -> None:
    """Put /dev/null on whichever of descriptors 0, 1 and 2 the process was started
    without (`harness daemon >&- 2>&-`). Otherwise the next files opened take them (the
    daemon's epoll and a socket did), and a write meant for a terminal lands there: C
    code or faulthandler writing to 2, a library writing to 1. open() returns the lowest
    free descriptor, and those below `fd` are open by then: it lands on `fd`.

    Python left the stream of such a descriptor None (`harness logs NAME >&-`): it gets
    one on /dev/null too, so that every command can write to `sys.stdout` as to a file."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
        if getattr(sys, name) is None:  # kept for the process's life: no `with`
            stream = open(fd, "r" if fd == 0 else "w", closefd=False,  # noqa: SIM115
                          errors="backslashreplace")
            setattr(sys, name, stream)


def main() -> None:
    _std_fds_open()
    try:
        with guarded_stdout():
            cli.main(prog_name="harness")
    except KeyboardInterrupt:  # before or after the command
        sys.exit(EXIT_INTERRUPTED)
