"""`harness runs` (SPEC-0022 REQ-14, REQ-16): query the run ledger.

Asks the daemon when it is up; otherwise reads the day files directly, read-only,
marks open records ``running?`` and says on stderr that it read the ledger from
disk. Exit 0 whenever the query ran (also with no records); 1 when the ledger
could not be read; 2 for a bad flag value (listing what is valid). A value it did not
write (a file name, the ledger's path, the daemon's message, the NAME asked for) is
printed as `render.visible` spells it, on stderr as in the table: never as a control.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import click

from .. import paths
from ..config.durations import is_bare_number, parse_duration_ns, shown, shown_path
from ..control.client import Client, DaemonError, DaemonLost, DaemonUnreachable, listing
from ..ledger.dayfiles import LedgerDirError
from ..ledger.fold import LogProbe
from ..ledger.query import MAX_LIMIT, Query, QueryError
from ..ledger.reader import scan
from ..ledger.schema import OUTCOMES, TRIGGERS
from ..ledger.scrub import scrub_text
from ..timefmt import format_ns, now_ns, parse_ns
from . import render
from .output import warn_strays
from .params import INTEGER, refused

NAMED_LIMIT = 20  # SPEC-0008's `harness runs NAME`
SWEEP_LIMIT = 50  # REQ-14's every-harness listing and every other query


def _words(values: tuple[str, ...], what: str, valid: tuple[str, ...]) -> frozenset[str]:
    """The words of --outcome/--trigger (repeated, comma-separated), each one of `valid`.
    A value naming none (an unset shell variable) is refused: dropped, it would filter
    nothing. Stray commas around words are not."""
    out: set[str] = set()
    for raw in values:
        words = [w for v in raw.split(",") if (w := v.strip())]
        bad = [f"unknown {what} {shown(w)}" for w in words if w not in valid]
        if bad or not words:
            raise refused(
                f"{bad[0] if bad else f'no {what} in {shown(raw)}'} (valid: {', '.join(valid)})",
                f"--{what}")
        out.update(words)
    return frozenset(out)


def parse_since(value: str, now: int) -> int:
    """--since: a duration back from now (7d, 36h) or an RFC 3339 instant."""
    try:
        return parse_ns(value)
    except ValueError:
        pass
    if is_bare_number(value):  # DESIGN.md §2: seconds only in config
        raise refused(
            f"{shown(value)} needs a unit: a duration (e.g. 24h, 7d) or an RFC 3339 time",
            "--since")
    try:
        return now - parse_duration_ns(value)
    except ValueError as exc:
        if str(exc).startswith("must be"):  # a duration, but longer than any that is kept
            raise refused(f"duration {exc}", "--since") from None
        raise refused(
            f"{shown(value)} is neither a duration (e.g. 24h, 7d) nor an RFC 3339 time",
            "--since") from None


def build_query(names: tuple[str, ...], harness: tuple[str, ...], since: str | None,
                until: str | None, outcome: tuple[str, ...], trigger: tuple[str, ...],
                limit: int | None, now: int) -> tuple[Query, bool]:
    """The query the flags ask for, and whether it is SPEC-0008's single-NAME form."""
    outcomes = _words(outcome, "outcome", OUTCOMES)
    triggers = _words(trigger, "trigger", TRIGGERS)
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise refused(f"must be between 1 and {MAX_LIMIT}, got {limit}", "--limit")
    for given, hint in ((names, "NAME"), (harness, "--harness")):
        if "" in given:  # an unset shell variable: a name no harness has, and no filter
            raise refused("a harness name cannot be empty", hint)
    # `harness runs X X` (a name given twice, a script's list) asks for X alone.
    names = tuple(dict.fromkeys(names))
    legacy = (len(names) == 1 and not harness and since is None and until is None
              and not (outcomes or triggers))
    since_ns = parse_since(since, now) if since is not None else None
    until_ns = None
    if until is not None:
        try:
            until_ns = parse_ns(until)
        except ValueError:
            raise refused(f"{shown(until)} is not an RFC 3339 time", "--until") from None
    if legacy:
        return Query(names=tuple(names), limit=limit or NAMED_LIMIT), True
    named = tuple(dict.fromkeys(names + harness))
    if since_ns is None and not named:
        # REQ-14's sweep of every harness: the 24 hours before --until, or before now
        # without it or when it is later (no run has started after now: a --until
        # tomorrow must not hide this morning's). Named harnesses have no window, as
        # `harness runs NAME` has none.
        end = now if until_ns is None else min(until_ns, now)
        since_ns = end - 24 * 3_600_000_000_000
    try:
        q = Query(names=named, since_ns=since_ns, until_ns=until_ns, outcomes=outcomes,
                  triggers=triggers, limit=limit or SWEEP_LIMIT)
    except QueryError as exc:
        raise click.BadParameter(str(exc)) from None
    return q, False


def _ask_daemon(client: Client, q: Query, legacy: bool) -> list[dict[str, Any]]:
    if legacy:
        return listing(client.request("runs", name=q.names[0], limit=q.limit), "runs")
    args: dict[str, Any] = {"limit": q.limit}
    if q.names:
        args["names"] = list(q.names)
    if q.since_ns is not None:
        args["since"] = format_ns(q.since_ns)
    if q.until_ns is not None:
        args["until"] = format_ns(q.until_ns)
    if q.outcomes:
        args["outcomes"] = sorted(q.outcomes)
    if q.triggers:
        args["triggers"] = sorted(q.triggers)
    if q.before_seq is not None:
        args["before_seq"] = q.before_seq
    return listing(client.request("runs", **args), "runs")


def _from_daemon(socket_path: str, q: Query, legacy: bool, cut: bool
                 ) -> tuple[list[dict[str, Any]], bool]:
    """The daemon's answer to `q`, and whether more records match than it returned (asked
    only when `cut`: one more page of one record, before the oldest returned)."""
    client = Client(socket_path)
    try:
        records = _ask_daemon(client, q, legacy)
        more = False
        if cut and len(records) == q.limit:
            seqs = [r["seq"] for r in records if type(r.get("seq")) is int and r["seq"] > 0]
            if seqs:
                rest = replace(q, limit=1, before_seq=min(seqs))
                more = bool(_ask_daemon(client, rest, legacy))
    finally:
        client.close()
    return records, more


@click.command("runs")
@click.argument("names", nargs=-1)
@click.option("--harness", "harness", multiple=True, metavar="NAME",
              help="Only this harness (repeatable).")
@click.option("--since", metavar="DUR|TIME", help="Started at or after (7d, 36h, RFC 3339).")
@click.option("--until", metavar="TIME", help="Started at or before (RFC 3339).")
@click.option("--outcome", multiple=True, metavar="O[,O...]", help="Only these outcomes.")
@click.option("--trigger", multiple=True, metavar="T[,T...]", help="Only these triggers.")
@click.option("--limit", type=INTEGER, default=None, help="At most N records (1-1000).")
@click.option("--wide", is_flag=True, help="Add MODEL, TOKENS, COST and TODO.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, newest first.")
@click.pass_context
def runs_command(ctx: click.Context, names: tuple[str, ...], harness: tuple[str, ...],
                 since: str | None, until: str | None, outcome: tuple[str, ...],
                 trigger: tuple[str, ...], limit: int | None, wide: bool,
                 as_json: bool) -> None:
    """List run records, newest first (every harness, last 24h, by default)."""
    q, legacy = build_query(names, harness, since, until, outcome, trigger, limit, now_ns())
    sock = paths.socket_path((ctx.obj or {}).get("socket"))
    # REQ-14's sweep stops at 50 unless asked for more: a sweep that met more than that
    # (a crash-looping resident makes hundreds a day) is told on stderr, or a script
    # reading its JSON would take the newest 50 for every match.
    cut = limit is None and not legacy
    try:
        records, more = _from_daemon(sock, q, legacy, cut)
    except (DaemonUnreachable, DaemonError, DaemonLost) as exc:
        # What the daemon said, the ledger's path and the names of the files in it are
        # not ours: each is shown as render.visible spells it, as in the table, or an
        # escape sequence in a file name would reach the terminal and a newline in a
        # daemon's message would forge a second "harness:" line.
        why = render.visible(exc.why if isinstance(exc, DaemonUnreachable)
                             else f"failed ({exc})")
        directory = paths.ledger_dir()
        try:
            recs, _oldest, stats = scan(directory,
                                        replace(q, limit=SWEEP_LIMIT + 1) if cut else q)
        except (LedgerDirError, OSError) as err:
            # The state dir's path may hold a token (a directory named after one): the
            # path is scrubbed as every other line that names it.
            click.echo(f"harness: daemon {why}, and the run ledger could not be read: "
                       f"{render.visible(shown_path(str(err)))}", err=True)
            sys.exit(1)
        click.echo(f"harness: daemon {why}; read the ledger from disk "
                   f"({render.visible(shown_path(str(directory)))})", err=True)
        if stats.skipped or stats.torn:
            click.echo(f"harness: skipped {stats.skipped} unparseable line(s) and "
                       f"{stats.torn} torn fragment(s)", err=True)
        warn_strays(stats.strays)
        probe = LogProbe(paths.state_of_ledger(directory))
        more = cut and len(recs) > SWEEP_LIMIT
        records = [r.to_json(offline=True, probe=probe) for r in recs[:q.limit]]
    if more:
        click.echo(f"harness: more runs match than the {SWEEP_LIMIT} shown (the default "
                   f"--limit); ask for up to {MAX_LIMIT} with --limit, or page back with "
                   f"--until", err=True)
    if as_json:
        click.echo(json.dumps(records, indent=2, ensure_ascii=False))
        return
    if not records:
        click.echo(f"{render.visible(scrub_text(q.names[0])[0])} has no runs yet" if legacy
                   else "no runs match")
        return
    # Laid out for standard output's encoding (the locale's, or PYTHONIOENCODING). Where
    # that is ASCII, click takes it for a misconfigured locale and writes UTF-8: the
    # ASCII the table is then made of reads the same either way.
    encoding = getattr(sys.stdout, "encoding", None)
    click.echo(render.table(records, wide=wide, encoding=encoding))


COMMANDS = (runs_command,)
