"""`harness daemon`, `trigger`, `jobs`, `list`, `start`, `stop` and `restart` (DESIGN.md §2):
the daemon and its clients.

Owns the commands that need a running daemon (everything but `daemon` itself) and the
mapping of a finished run to `trigger --wait`'s exit code. Invariant: when the daemon
cannot be reached, or answers with an error, a command prints one line on stderr and
exits 1 — never a traceback — and `trigger --wait` exits with exactly DESIGN §2's code
for the run it started, found by seq however many records of the harness follow it,
and only once that record is durable (the `runs` op shows nothing else). While it is
not, and the daemon (`pending` op) says a line of it waits on a failing ledger, the wait
says so once on stderr, with the daemon's reason, and goes on: Ctrl-C ends it (130).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from .. import paths
from ..control.client import (
    Client,
    DaemonError,
    DaemonLost,
    DaemonUnreachable,
    listing,
    reply_object,
)
from ..ledger.logref import log_file
from ..ledger.query import MAX_LIMIT
from ..ledger.scrub import scrub_text
from ..supervisor.logview import LogFollower
from . import render
from .output import fail, warn, warn_not_durable

WAIT_POLL = 0.2
EXIT_TIMED_OUT = 124
EXIT_SKIPPED = 75
EXIT_FAILED = 1


def exit_code_of(rec: dict[str, Any]) -> int:
    """DESIGN §2: the run's exit code, 124 timed_out, 75 skipped, 1 other failure, 0 success."""
    outcome = rec.get("outcome")
    if outcome == "timed_out":
        return EXIT_TIMED_OUT
    if outcome == "skipped":
        return EXIT_SKIPPED
    code = rec.get("exit_code")
    # A successful record always exits 0; a failure never does, whatever it exited
    # (-1, a signal death, is not an exit status and reads as a plain failure).
    if (isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255
            and (code == 0) == (outcome == "success")):
        return code
    return 0 if outcome == "success" else EXIT_FAILED


def _call(ctx: click.Context, fn: Callable[[Client], Any], acts_on: str | None = None) -> Any:
    """Run `fn` against the daemon; any way it cannot be reached ends the command (exit 1).
    Only the client's failures are the daemon's: standard output refusing what `fn`
    prints is reported as that (output.guarded_stdout), not as a daemon lost after it
    took the request (a user told so might trigger the run again).

    `acts_on` names the harness a request changes (a trigger, a stop): a daemon lost
    after the request was sent may have carried it out, and the user is told where to
    look before asking again."""
    sock = paths.socket_path((ctx.obj or {}).get("socket"))
    try:
        client = Client(sock)
    except DaemonUnreachable as exc:
        fail(exc.advice())
    try:
        return fn(client)
    except DaemonError as exc:
        fail(f"{exc} ({exc.code})")
    except DaemonLost as exc:
        if acts_on is None:
            fail(f"lost the daemon ({exc})")
        fail(f"lost the daemon ({exc}); it may have taken the request: `harness list` "
             f"and `harness runs {render.visible(acts_on)}` show what it did")
    finally:
        client.close()


@click.command("daemon")
@click.pass_context
def daemon_command(ctx: click.Context) -> None:
    """Run the daemon in the foreground until SIGTERM or Ctrl-C."""
    from ..daemon import main as daemon_main  # the daemon's imports are not every command's

    obj = ctx.obj or {}
    sys.exit(asyncio.run(daemon_main(obj.get("config"), obj.get("socket"))))


@click.command("trigger")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait for the run and exit with its exit code.")
@click.option("--over-budget", is_flag=True,
              help="Admit this one run over the harness's budget (recorded as override).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the daemon's answer as JSON; with --wait, the run's record "
                   "instead of its output.")
@click.pass_context
def trigger_command(ctx: click.Context, name: str, wait: bool, over_budget: bool,
                    as_json: bool) -> None:
    """Start a run of the one-shot NAME now."""

    def go(client: Client) -> int:
        first_seq = 1
        if wait:
            # Every line written after this answer has at least this seq, the run's first
            # line included: where the search for its record can stop.
            info = reply_object(client.request("daemon_info"), "daemon_info", ledger=dict)
            first_seq = reply_object(info["ledger"], "daemon_info ledger",
                                     next_seq=int)["next_seq"]
        extra = {"over_budget": True} if over_budget else {}
        data = reply_object(client.request("trigger", name=name, **extra), "trigger",
                            run_id=int)
        run_id = data["run_id"]
        decision = data.get("decision", "started")
        if decision != "started":
            # stdout stays the bare run id, for scripts; the decision is for the reader.
            click.echo(f"{render.visible(name)}: run {run_id} {_shown(decision)}"
                       + (" until the live run ends" if decision == "queued" else ""),
                       err=True)
        # A skip's record, or a replaced run's, the disk has not taken yet; the wait
        # below speaks of its own run's record itself.
        warn_not_durable(data, but=(name, run_id) if wait else None)
        if not wait:
            click.echo(_json(data) if as_json else str(run_id))
            return 0
        follower: LogFollower | None = None
        unreadable = False  # the run's log would not read: its end is waited for without it
        out = sys.stdout.buffer
        seq: int | None = None
        ask = True  # whether to ask the daemon why the record is not durable yet
        while True:
            rec = _run_record(client, name, run_id, seq, first_seq)
            if rec is not None and isinstance(rec.get("seq"), int):
                seq = rec["seq"]
            if ask and (rec is None or rec.get("outcome") == "running"):
                ask, why = _stuck(client, name, run_id)
                if why is not None:
                    # Said once. The wait goes on until the record is durable (only a
                    # durable outcome is ever reported); Ctrl-C ends it with 130.
                    warn(f"{render.visible(name)} run {run_id}: its record is not durable "
                         f"yet, the run ledger cannot write it ({_shown(why)}); still "
                         "waiting (Ctrl-C stops the wait, not the run)")
                    ask = False
            if (follower is None and not unreadable and not as_json and rec is not None
                    and rec.get("log")):
                # The log file, not the field: a path the ledger stored cut names another
                # file. Found under this CLI's state dir, which is the daemon's unless the
                # two were started apart; then it cannot be told, and is not followed. One
                # kept whole is the daemon's own, whichever state dir this CLI has.
                path = log_file(rec, paths.state_dir(), live=True)
                if path is not None:
                    follower = LogFollower(path)
                else:
                    warn(f"cannot tell where {render.visible(name)} run {run_id}'s log is "
                         "(its path is cut in the run ledger, and not under this state "
                         "directory); waiting for the run to end without it")
                    unreadable = True
            done = rec is not None and rec.get("outcome") != "running"
            if follower is not None:
                # The run's output as it comes; the rest once closed, from the plain log
                # or the .zst the daemon compressed it to.
                try:
                    got = follower.rest() if done else follower.new()
                except OSError as exc:  # damaged .zst data too (logview.unzst)
                    warn(f"cannot read the log of {name} run {run_id} ({exc}); waiting for "
                         f"the run to end without it")
                    follower, unreadable = None, True
                else:
                    out.write(got)
                    out.flush()
            if rec is not None and done:
                if rec.get("reason") == "spawn" and not rec.get("log"):
                    # Why it failed is in the note of its log; with no log, only the
                    # daemon's own log says (a logs/ or jobs/ directory it cannot write).
                    warn(f"{render.visible(name)} run {run_id} got no log; the daemon's "
                         "log says why")
                click.echo(f"{render.visible(name)} run {run_id}: {_shown(rec.get('outcome'))}"
                           + (f" ({_shown(rec['reason'])})" if rec.get("reason") else ""),
                           err=True)
                if as_json:  # the record, in place of the output it did not stream
                    click.echo(_json(rec))
                return exit_code_of(rec)
            time.sleep(WAIT_POLL)

    sys.exit(_call(ctx, go, acts_on=name))


def _stuck(client: Client, name: str, run_id: int) -> tuple[bool, str | None]:
    """(whether to ask again, why the daemon cannot make the run's record durable now, or
    None when nothing of it waits on a failing ledger). A daemon older than the `pending`
    op is not asked again: the wait goes on, silent, as it did before the op."""
    try:
        data = reply_object(client.request("pending", name=name, run_id=run_id), "pending")
    except DaemonError as exc:
        if exc.code == "unknown_op":
            return False, None
        raise
    why = data.get("stuck")
    if why is not None and not isinstance(why, str):
        raise DaemonError("bad_reply", "the daemon's pending reply holds a stuck that is "
                                       "neither null nor a string")
    # Scrubbed here too, as DaemonError scrubs what a daemon says: whatever the other end
    # sent, a credential never reaches the terminal.
    return True, scrub_text(why)[0] if why else None


def _run_record(client: Client, name: str, run_id: int, seq: int | None,
                first_seq: int) -> dict[str, Any] | None:
    """The record of `name`'s run `run_id`, or None while it has none (a queued firing).

    Found by seq, not among the newest records: runs skipped while it is live (a
    schedule firing every second) may bury it under any number of newer ones. `seq` is
    the record's once known; before that, the search pages back to `first_seq`.
    """
    if seq is not None:
        # The newest record below seq + 1 is the one at seq.
        runs = listing(client.request("runs", names=[name], before_seq=seq + 1, limit=1),
                       "runs")
        if runs and runs[0].get("run_id") == run_id:
            return runs[0]
    before: int | None = None
    while True:
        args: dict[str, Any] = {"names": [name], "limit": MAX_LIMIT}
        if before is not None:
            args["before_seq"] = before
        page = client.request("runs", **args)
        runs = listing(page, "runs")
        found = next((r for r in runs if r.get("run_id") == run_id), None)
        if found is not None:
            return found
        oldest = page.get("oldest_seq") if isinstance(page, dict) else None
        if len(runs) < MAX_LIMIT or not isinstance(oldest, int) or oldest <= first_seq:
            return None
        before = oldest


def _last(job: dict[str, Any]) -> str | None:
    """`#ID OUTCOME` and, when the daemon sent it, when that run started, as `harness
    runs` shows STARTED (REQ-13: the row shows the last run's id, time and outcome)."""
    last = job.get("last_run")
    if not isinstance(last, dict) or not last:
        return None
    cell = f"#{_text(last.get('run_id'), '?')} {_text(last.get('outcome'), '?')}"
    when = render.started(last)
    return cell if when == render.UNICODE.none else f"{cell} {when}"


def _text(value: Any, none: str) -> str:
    """A cell for whatever the daemon sent: `none` for no value, JSON for a non-string."""
    if value is None or value == "":
        return none
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _shown(value: Any) -> str:
    """A value the daemon sent, in a line of ours: as a cell reads, never a control."""
    return render.visible(_text(value, "?"))


def _json(value: Any) -> str:
    """What `--json` prints: the daemon's data as it sent it (scrubbed at its source)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def _show(ctx: click.Context, op: str, as_json: bool, empty: str, header: list[str],
          row: Callable[[dict[str, Any]], list[Any]], key: str | None = None) -> None:
    """Ask the daemon for a listing op and print it as JSON or as a table.

    The table is built from whatever the reply holds: a field missing or of another
    type shows as a value, never a traceback, and each cell is escaped and laid out
    for standard output's encoding like `harness runs`'s."""
    items = _call(ctx, lambda c: listing(c.request(op), key or op))
    if as_json:
        click.echo(_json(items))
    elif not items:
        click.echo(empty)
    else:
        encoding = getattr(sys.stdout, "encoding", None)
        marks = render.marks_for(encoding)
        body = [[render.visible(_text(v, marks.none), encoding) for v in row(i)]
                for i in items]
        click.echo(render.grid(header, body, more=marks.more))


@click.command("jobs")
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as a JSON array.")
@click.pass_context
def jobs_command(ctx: click.Context, as_json: bool) -> None:
    """One-shot harnesses: state, schedule, next fire, last run, consecutive failures."""
    _show(ctx, "jobs", as_json, "no one-shot harnesses configured",
          ["NAME", "STATE", "SCHEDULE", "NEXT", "LAST RUN", "FAILS"],
          # NEXT in local time, as the runs table shows STARTED; a value that is no
          # instant (a daemon of another make) as it came.
          lambda j: [j.get("name"), j.get("state"), j.get("schedule"),
                     render.local_time(j.get("next")) or j.get("next"), _last(j),
                     j.get("fails", 0)])


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the harnesses as a JSON array.")
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Every configured harness with its kind and state."""
    _show(ctx, "list", as_json, "no harnesses configured", ["NAME", "KIND", "STATE"],
          lambda h: [h.get("name"), h.get("kind"), h.get("state")], key="harnesses")


def _describe(name: str, data: dict[str, Any]) -> str:
    """One line saying what a start/stop/restart of `name` did, from the daemon's reply."""
    name, action, run = render.visible(name), data["action"], _shown(data.get("run_id"))
    if action == "started":
        return f"{name}: started (run {run})"
    if action == "triggered":
        return f"{name}: triggered (run {run})"
    if action == "already_running":
        return f"{name}: already running (run {run})"
    if action == "stopped":
        reason = f"/{_shown(data['reason'])}" if data.get("reason") else ""
        return f"{name}: stopped run {run} ({_shown(data.get('outcome'))}{reason})"
    if action == "not_running":
        return f"{name}: not running"
    if action == "restarted":
        old = data.get("replaced")
        was = f"replaced run {_shown(old)}, " if old is not None else ""
        return f"{name}: restarted ({was}new run {run})"
    return f"{name}: {_shown(action)}"


def _lifecycle(op: str, doc: str) -> click.Command:
    @click.command(op, help=doc)
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True,
                  help="Print the daemon's answer (action, run_id, ...) as JSON.")
    @click.pass_context
    def command(ctx: click.Context, name: str, as_json: bool) -> None:
        data = _call(ctx, lambda c: reply_object(c.request(op, name=name), op, action=str),
                     acts_on=name)
        click.echo(_json(data) if as_json else _describe(name, data))
        # The stop is done; only its records wait for the disk (REQ-6's bound passed).
        if "not_durable" in data:
            warn_not_durable(data)
        elif data.get("durable") is False:  # a daemon that names only the run it stopped
            warn(f"{render.visible(name)} run {_shown(data.get('run_id'))}'s closed line "
                 "is not on disk yet: the ledger's disk is failing; the line stays queued "
                 "and is written once the disk takes it")

    return command


start_command = _lifecycle(
    "start", "Start the stopped resident NAME (a one-shot NAME is triggered).")
stop_command = _lifecycle(
    "stop", "Stop NAME's live run; a stopped resident is not restarted until started.")
restart_command = _lifecycle(
    "restart", "Replace the resident NAME's live run with a new one.")

COMMANDS = (daemon_command, trigger_command, jobs_command, list_command, start_command,
            stop_command, restart_command)
