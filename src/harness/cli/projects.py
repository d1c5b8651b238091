"""`harness reload`, `harness up [DIR] [--name NAME]` and `harness down [DIR]` (DESIGN.md §2-§3):
apply the config files to a running daemon, and register or unregister a project.

A project is a directory with its own ``harness.toml`` whose harnesses are named
``PROJECT/NAME`` (the registry and its rules are `config.load`'s). `up` checks the whole
config the project would join before registering it; `up` and `down` then ask a running
daemon to `reload`, and a stopped daemon simply reads the registry at its next start.

Exit codes: `reload` 0 applied, 2 the daemon refused the new config (``bad_config``: it
keeps the last good one), 1 the daemon cannot be reached or failed otherwise (among
them ``incomplete``: the new config is in force, but a harness it names could not be
fully applied). `up` 0
registered (whether or not a daemon was running), 2 the config with the project in it does
not load, or a bad ``--name`` (the registry is then unchanged), 1 the directory cannot be
registered (no harness.toml, name taken, registry unreadable) or the running daemon's
reload failed for another reason. `down` 0 unregistered, 1 the directory was not
registered (or the registry cannot be read), and the reload codes above after it.
Invariants: the registry is changed only after the check passed, and only through
`register_project`/`unregister_project`; every path, name or daemon's word a line quotes,
on stdout or stderr, success or refusal, is shown through `output.named` (scrubbed of
secrets, then escaped), so no line repeats a token a directory is named after.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from .. import paths
from ..config.durations import shown
from ..config.load import (
    ConfigError,
    Project,
    RegistryError,
    list_projects,
    load_config,
    project_name_problem,
    register_project,
    registered_at,
    unregister_project,
)
from ..control.client import Client, DaemonError, DaemonLost, DaemonUnreachable, reply_object
from .output import fail, named, report, warn_not_durable
from .params import refused

EXIT_BAD_CONFIG = 2


def _request_reload(ctx: click.Context) -> dict[str, Any] | DaemonUnreachable:
    """The daemon's answer to `reload`, or why no daemon took it.

    A refused config exits 2 with the daemon's error text; any other failure exits 1.
    """
    sock = paths.socket_path((ctx.obj or {}).get("socket"))
    try:
        client = Client(sock)
    except DaemonUnreachable as exc:
        return exc
    try:
        return reply_object(client.request("reload"), "reload")
    except DaemonError as exc:
        if exc.code == "bad_config":
            click.echo("harness: the daemon refused the new config and keeps its last good "
                       "one:", err=True)
            report(str(exc))
            sys.exit(EXIT_BAD_CONFIG)
        if exc.code == "incomplete":
            fail(f"reload incomplete: {exc}")  # applied, but for what it names
        fail(f"reload failed: {exc} ({exc.code})")
    except DaemonLost as exc:
        fail(f"lost the daemon during the reload ({exc})")
    finally:
        client.close()


def _names(data: dict[str, Any], key: str) -> list[str]:
    v = data.get(key)
    return sorted(named(str(n)) for n in v) if isinstance(v, list) else []


def describe_reload(data: dict[str, Any]) -> str:
    """One line saying what a reload changed, e.g. ``reloaded: added p/a; 2 unchanged``;
    each value the daemon sent as `named` shows it."""
    parts = [f"{key} {', '.join(names)}" for key in ("added", "removed", "changed")
             if (names := _names(data, key))]
    unchanged = named(str(data.get("unchanged", 0)))
    if not parts:
        return f"reloaded: no changes ({unchanged} unchanged)"
    return f"reloaded: {'; '.join(parts)}; {unchanged} unchanged"


@click.command("reload")
@click.option("--json", "as_json", is_flag=True,
              help="Print {added, removed, changed, unchanged} as JSON.")
@click.pass_context
def reload_command(ctx: click.Context, as_json: bool) -> None:
    """Re-read the config files.

    Harnesses the new config adds start, removed ones stop, changed ones restart; the
    rest are left alone. A config with errors is refused, and the old one stays.
    """
    data = _request_reload(ctx)
    if isinstance(data, DaemonUnreachable):
        fail(data.advice())
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        click.echo(describe_reload(data))
    warn_not_durable(data)  # applied; only records of what it stopped wait for the disk


def _after_change(ctx: click.Context, later: str) -> None:
    """Tell a running daemon about the registry change, or say when it will see it."""
    data = _request_reload(ctx)
    if isinstance(data, DaemonUnreachable) and data.absent:
        click.echo(f"the daemon is not running; {later} at its next start")
    elif isinstance(data, DaemonUnreachable):
        # Registered all the same; a daemon that holds the socket but does not answer
        # takes the change only when it is reloaded or started again.
        click.echo(f"the daemon is {named(data.why)} ({named(data.sock)}); "
                   f"{later} when it is reloaded or started again")
    else:
        click.echo(describe_reload(data))
        warn_not_durable(data)


def _registered() -> list[Project]:
    try:
        return list_projects()
    except RegistryError as exc:
        fail(str(exc))


@click.command("up")
@click.argument("directory", default=".", metavar="[DIR]")
@click.option("--name", "name", default=None,
              help="The project's name (default: the directory's name).")
@click.pass_context
def up_command(ctx: click.Context, directory: str, name: str | None) -> None:
    """Register a project directory.

    DIR (default: here) holds its own harness.toml, whose harnesses become PROJECT/NAME.
    """
    real = os.path.realpath(directory)
    if not os.path.isdir(real):
        fail(f"{named(directory)}: not a directory")
    if not os.path.isfile(os.path.join(real, "harness.toml")):
        fail(f"{named(real)}: no harness.toml in this directory")
    projects = _registered()
    current = next((p for p in projects if p.dir == real), None)
    # Already registered and no --name: `up` again keeps the name it has.
    pname = name or (current.name if current else os.path.basename(real))
    problem = project_name_problem(pname)
    if problem:
        raise (refused(problem, "--name") if name else refused(
            f"{problem} (the project takes DIR's name; pass --name to give it another)", "DIR"))
    clash = next((p for p in projects if p.name == pname and p.dir != real), None)
    if clash is not None:
        # Said before the load, which would only report the harness names clashing.
        fail(f"{named(real)}: project name {shown(pname)} is already taken by "
             f"{named(clash.dir)}")
    # The whole config the daemon would load next, so a clash with the global file or
    # another project is found now, not at the reload.
    joined = [p for p in projects if p.dir != real] + [Project(pname, real)]
    try:
        config = load_config((ctx.obj or {}).get("config"), projects=joined)
    except ConfigError as exc:
        report(str(exc))
        fail(f"{named(real)} was not registered", EXIT_BAD_CONFIG)
    try:
        project = register_project(real, pname)
    except RegistryError as exc:
        fail(str(exc))
    mine = sorted(named(n) for n in config.harness if n.startswith(f"{project.name}/"))
    # The directory's name is anyone's (a control, a token): shown as the refusals
    # above show it, never as a control or a secret.
    click.echo(f"project {named(project.name)} registered ({named(project.dir)}): "
               + (", ".join(mine) if mine else "no harnesses"))
    _after_change(ctx, "the project loads")


@click.command("down")
@click.argument("directory", default=".", metavar="[DIR]")
@click.pass_context
def down_command(ctx: click.Context, directory: str) -> None:
    """Unregister a project directory.

    DIR defaults to here; a running daemon stops the project's harnesses.
    """
    real = os.path.realpath(directory)
    project = registered_at(directory, _registered())
    try:
        gone = unregister_project(directory)
    except RegistryError as exc:
        fail(str(exc))
    if not gone:
        fail(f"{named(real)} is not a registered project")
    # The name as the registry holds it (a hand edit is never checked), or the
    # directory's own: either may read as a token.
    pname = project.name if project is not None else os.path.basename(real)
    click.echo(f"project {named(pname)} unregistered "
               f"({named(project.dir if project is not None else real)})")
    _after_change(ctx, "its harnesses are gone")


COMMANDS = (reload_command, up_command, down_command)
