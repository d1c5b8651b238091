"""The `harness` entry point: global options and the command groups.

Invariant: every failure a user can cause ends in a one-line message on stderr and
the command's documented exit code, never a traceback.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from .daemon import COMMANDS as DAEMON_COMMANDS
from .ledger import ledger_group
from .logs import logs_command
from .projects import COMMANDS as PROJECT_COMMANDS
from .runs import runs_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="harness")
@click.option("--socket", "socket_path", envvar="HARNESS_SOCKET", default=None,
              help="Control socket path (default: $XDG_RUNTIME_DIR/harness.sock).")
@click.option("--config", "config_path", envvar="HARNESS_CONFIG", default=None,
              help="Global config file (default: $XDG_CONFIG_HOME/harness/harness.toml).")
@click.pass_context
def cli(ctx: click.Context, socket_path: str | None, config_path: str | None) -> None:
    """Supervise AI coding agents and commands; keep a durable history of every run."""
    ctx.obj = {"socket": socket_path, "config": config_path}


cli.add_command(runs_command)
cli.add_command(ledger_group)
cli.add_command(logs_command)
for _cmd in (*DAEMON_COMMANDS, *PROJECT_COMMANDS):
    cli.add_command(_cmd)


def main() -> None:
    try:
        cli.main(prog_name="harness")
    except KeyboardInterrupt:
        sys.exit(130)
