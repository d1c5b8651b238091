"""`harness ledger …`: checking and moving hash-chained ledgers (DESIGN.md §2).

It owns the command surface of the group: `verify` with no RUN_ID checks the daemon's run
ledger; with a RUN_ID, and for `anchor`, `fetch`, `resume`, `runs` and `gc`, it works on
the portable work ledger of a work tree (`--workdir`, default: the git top level of the
current directory).

Invariant: exit codes for the whole group are 0 ok, 1 no ledger, 2 verification failed,
3 divergence, taken from the raised `WorkLedgerError`'s ``exit_code`` and never from a
message's text; every failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from .. import paths
from ..config.durations import shown_path
from ..controls import one_line
from ..ledger.dayfiles import LedgerDirError
from ..ledger.verify import verify_run_ledger
from ..worklog import (
    EXIT_BROKEN,
    EXIT_DIVERGED,
    EXIT_NO_LEDGER,
    EXIT_OK,
    NoLedger,
    WorkLedgerError,
    os_problem,
    quoted,
    secretless,
)
from ..worklog import anchor as anchor_mod
from ..worklog.git import located_env
from ..worklog.resume import resume, survey
from ..worklog.rows import ledger_dir
from ..worklog.verify import WorkVerify, verify_dir
from . import render
from .output import fail, named, some_of, warn_strays

__all__ = ["EXIT_BROKEN", "EXIT_DIVERGED", "EXIT_NO_LEDGER", "EXIT_OK", "ledger_group"]

T = TypeVar("T")


@click.group("ledger")
def ledger_group() -> None:
    """Verify the run ledger; verify, anchor, fetch, resume and list work ledgers."""


def _die(message: str, code: int) -> NoReturn:
    # Messages from git or the OS can hold several lines; the contract is one line, and
    # one a terminal only shows (a task id or a path may carry escapes).
    fail(" ".join(str(message).split()), code)


def _guard(action: Callable[[], T]) -> T:
    """Run `action`, turning every expected failure into one stderr line and its exit code."""
    try:
        return action()
    except WorkLedgerError as exc:
        _die(str(exc), exc.exit_code)
    except OSError as exc:
        # Unreadable files, a full disk, a missing git: the operation could not be checked
        # or completed, which the group reports as a failure rather than "no ledger".
        _die(os_problem(exc), EXIT_BROKEN)
    except subprocess.SubprocessError as exc:
        _die(f"git failed: {secretless(exc)}", EXIT_BROKEN)
    except (ValueError, UnicodeError) as exc:
        _die(secretless(exc), EXIT_BROKEN)
    except RecursionError:
        # JSON nested past a decoder's depth, in a file no parser below named (each one
        # that reads another machine's data reports it as its own decode error).
        _die("cannot read a ledger file: JSON nested too deeply", EXIT_BROKEN)


def _workdir(option: str | None) -> Path:
    """The work tree: --workdir as given, else the git top level of the current directory."""
    if option is not None:
        path = Path(option).expanduser()
        if not path.is_dir():
            # A file there is named as such: "no such directory" sends the user looking
            # for a path that exists.
            why = "not a directory" if path.exists() else "no such directory"
            raise NoLedger(f"--workdir {secretless(option)}: {why}")
        return path.resolve()
    try:
        res = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            capture_output=True, timeout=60, check=False,
            # The current directory decides, as for every other git call of the group:
            # an inherited GIT_DIR or GIT_WORK_TREE would name another work tree.
            env=dict(located_env(os.environ), LC_ALL="C", GIT_TERMINAL_PROMPT="0"),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        why = os_problem(exc) if isinstance(exc, OSError) else secretless(exc)
        raise NoLedger(f"cannot find the work tree (git: {why}); pass --workdir DIR") from None
    top = res.stdout.decode("utf-8", "surrogateescape").strip()
    if res.returncode != 0 or not top:
        raise NoLedger(
            f"{secretless(os.getcwd())} is not inside a git work tree; run this in the "
            "project's work tree or pass --workdir DIR"
        )
    return Path(top)


def _print_json(obj: Any) -> None:
    # A work tree's path need not be UTF-8 (git's answer is read with surrogateescape):
    # the document must be.
    click.echo(json.dumps(paths.texts_of(obj), indent=2, sort_keys=True, ensure_ascii=False))


workdir_option = click.option(
    "--workdir", "workdir", default=None, metavar="DIR",
    help="The work tree holding .harness/runtime/ledger (default: the git top level here).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


# -- verify ---------------------------------------------------------------------------------


@ledger_group.command("verify")
@click.argument("run_id", required=False)
@click.option("--expected-head", "expected_head", default=None, metavar="HASH",
              help="Also require the work ledger's head to be HASH (a 64-hex entry_hash).")
@json_option
@workdir_option
def verify_command(run_id: str | None, expected_head: str | None, as_json: bool,
                   workdir: str | None) -> None:
    """Check a work ledger's chain (RUN_ID), or with no RUN_ID the daemon's run ledger."""
    if run_id is None:
        if expected_head is not None or workdir is not None:
            _die("--expected-head and --workdir need a RUN_ID (they apply to work ledgers)",
                 EXIT_BROKEN)
        _verify_run_ledger(as_json)
        return
    _verify_work_ledger(run_id, expected_head, as_json, workdir)


def _verify_work_ledger(run_id: str, expected_head: str | None, as_json: bool,
                        workdir: str | None) -> None:
    def check() -> tuple[Path, WorkVerify]:
        if expected_head is not None and not anchor_mod.is_hex64(expected_head):
            raise WorkLedgerError(
                f"--expected-head {quoted(expected_head)} is not a 64-character lowercase "
                "hex hash",
                EXIT_BROKEN,
            )
        directory = ledger_dir(_workdir(workdir), run_id)
        return directory, verify_dir(directory, expected_head=expected_head)

    try:
        directory, res = check()
        if res.entry_count == 0 and (res.ok or res.error_seq == 0):
            # An empty segment, or one holding only a crash's fragment of the first row:
            # no entry to verify, which anchor and resume also call no ledger. With
            # --expected-head the walk reports a head mismatch at entry 0 instead; that
            # is still no ledger, as it is when the directory is missing.
            torn = (f"; only a torn fragment of {res.torn_size} bytes"
                    if res.torn_tail is not None else "")
            raise NoLedger(f"no work ledger at {secretless(directory)} (no entries{torn})")
    except WorkLedgerError as exc:
        if as_json:
            _print_json(_unverified(run_id, str(exc), exc.exit_code))
        _die(str(exc), exc.exit_code)
    except OSError as exc:
        message = os_problem(exc)
        if as_json:
            _print_json(_unverified(run_id, message, EXIT_BROKEN))
        _die(message, EXIT_BROKEN)
    if as_json:
        _print_json({**res.to_json(run_id), "ledger": str(directory)})
    elif res.ok:
        torn = (f"; a torn trailing fragment of {res.torn_size} bytes is not part of "
                "the chain") if res.torn_tail is not None else ""
        click.echo(f"ok: work ledger {run_id}: {res.entry_count} entries verify from genesis "
                   f"to head {res.head_hash}{torn}")
    if not res.ok:
        if not as_json:
            click.echo(one_line(f"harness: work ledger {run_id} broken at "
                                       f"{res.describe()}"), err=True)
        sys.exit(EXIT_BROKEN)


def _unverified(run_id: str, reason: str, exit_code: int) -> dict[str, object]:
    """`verify RUN_ID --json` when no chain could be walked: DESIGN §2's fields all
    present (nothing verified, no head, no entry at fault), and why."""
    return {"run_id": run_id, "ok": False, "entry_count": 0, "head_hash": None,
            "head_seq": 0, "torn_tail": False, "torn_tail_bytes": 0, "seq": None,
            "file": None, "line": None, "reason": reason, "exit_code": exit_code}


def _verify_run_ledger(as_json: bool) -> None:
    directory = paths.ledger_dir()
    try:
        res = verify_run_ledger(directory)
    except (LedgerDirError, ValueError, OSError) as exc:
        _fail(as_json, directory, shown_path(str(exc)), EXIT_BROKEN)
        return
    if not res.exists or (res.ok and res.head_seq is None):
        # No complete line and no CHAIN: day files holding nothing, or only a fragment a
        # crash left, are no ledger either (the work ledger says the same of its own).
        what = f" ({res.files} day file(s), no complete line)" if res.files else ""
        _fail(as_json, directory, f"no run ledger at {shown_path(directory)}{what}",
              EXIT_NO_LEDGER)
        return
    if as_json:
        click.echo(json.dumps(paths.texts_of({"ledger": directory, **res.to_json()}), indent=2))
    else:
        warn_strays(res.strays)
    if not as_json and res.ok:
        torn = f"; {res.torn} torn fragment(s) skipped ({some_of(res.torn_at)})" \
            if res.torn else ""
        behind = f"; {res.behind} line(s) at or before CHAIN checked on their own" \
            if res.behind else ""
        click.echo(f"ok: {res.lines} lines in {res.files} file(s) verify from {res.anchor} "
                   f"to seq {res.head_seq} (head {res.head_hash}){behind}{torn}")
    if not res.ok:
        e = res.error
        assert e is not None
        if not as_json:
            at = f"seq {e.seq}" if e.seq is not None else "a line with no valid seq"
            click.echo(one_line(f"harness: ledger chain broken at {at} "
                                       f"({e.file}:{e.line}): {e.reason}"), err=True)
        sys.exit(EXIT_BROKEN)


def _fail(as_json: bool, directory: str, message: str, code: int) -> None:
    if as_json:
        # The same fields as a walked chain's result, with nothing verified.
        click.echo(json.dumps({"ledger": directory, "ok": False, "lines": 0, "entry_count": 0,
                               "head_seq": None, "head_hash": None, "torn": 0,
                               "torn_tail": False, "seq": None, "file": None, "line": None,
                               "reason": message}, indent=2))
    fail(message, code)


# -- anchor, fetch, gc ------------------------------------------------------------------------


def _warn(res: anchor_mod.AnchorResult | anchor_mod.FetchResult) -> None:
    """A result's warning (e.g. the audit mirror failed after the ref moved) on stderr."""
    if res.warning:
        click.echo(one_line(f"harness: warning: {' '.join(res.warning.split())}"),
                   err=True)


dry_run_option = click.option("--dry-run", is_flag=True,
                              help="Check and say what would be done; change nothing.")


@ledger_group.command("anchor")
@click.argument("run_id")
@dry_run_option
@json_option
@workdir_option
def anchor_command(run_id: str, dry_run: bool, as_json: bool, workdir: str | None) -> None:
    """Verify the work ledger and publish it to refs/harness/work-ledger/RUN_ID."""
    res = _guard(lambda: anchor_mod.anchor(_workdir(workdir), run_id, dry_run=dry_run))
    if as_json:
        _print_json({"run_id": run_id, **res.to_json()})
        return
    if res.dry_run and res.status != "unchanged":
        click.echo(f"dry run: would be {res.status}: refs/harness/work-ledger/{run_id} -> "
                   f"tree {res.tree} ({res.entry_count} entries, head {res.head_hash}); "
                   "nothing was written")
        return
    click.echo(f"{res.status}: refs/harness/work-ledger/{run_id} -> {res.commit} "
               f"({res.entry_count} entries, head {res.head_hash})")
    _warn(res)


@ledger_group.command("fetch")
@click.argument("run_id")
@click.option("--remote", default="origin", show_default=True, metavar="NAME",
              help="The remote to fetch refs/harness/work-ledger/RUN_ID from.")
@dry_run_option
@json_option
@workdir_option
def fetch_command(run_id: str, remote: str, dry_run: bool, as_json: bool,
                  workdir: str | None) -> None:
    """Fetch an anchored work ledger, verify it, and bring the local ledger up to it."""
    res = _guard(lambda: anchor_mod.fetch(_workdir(workdir), run_id, remote=remote,
                                          dry_run=dry_run))
    # A remote given as a URL may carry a token: a success shows it as a refusal would.
    remote = secretless(remote)
    if as_json:
        _print_json({"run_id": run_id, "remote": remote, **res.to_json()})
        return
    if res.dry_run:
        click.echo(f"dry run: the local ledger of {run_id} would be {res.status} from {remote} "
                   f"({res.new_entries} new entries; anchored entry_count {res.entry_count}, "
                   f"head_hash {res.head_hash}); nothing was written")
        return
    click.echo(f"{res.status}: work ledger {run_id} from {remote} "
               f"(entry_count {res.entry_count}, head_hash {res.head_hash})")
    _warn(res)


@ledger_group.command("gc")
@click.argument("run_id")
@dry_run_option
@json_option
@workdir_option
def gc_command(run_id: str, dry_run: bool, as_json: bool, workdir: str | None) -> None:
    """Squash the anchor history of RUN_ID into one commit with the same tree."""
    res = _guard(lambda: anchor_mod.gc(_workdir(workdir), run_id, dry_run=dry_run))
    if as_json:
        # Structured: "result" keeps the sentence the plain output prints.
        _print_json(res.to_json())
        return
    click.echo(res.message)


# -- resume ---------------------------------------------------------------------------------


@ledger_group.command("resume")
@click.argument("run_id")
@click.option("--dry-run", is_flag=True, help="Print the projected state; change nothing.")
@json_option
@workdir_option
def resume_command(run_id: str, dry_run: bool, as_json: bool, workdir: str | None) -> None:
    """Continue RUN_ID from its verified chain: record the resume, signal the frontier."""
    res = _guard(lambda: resume(_workdir(workdir), run_id, dry_run=dry_run))
    if as_json:
        _print_json(res.to_json())
        return
    st = res.state
    summary = (f"{len(st.finished)} finished, {len(st.in_flight)} in flight, "
               f"{len(st.scheduled)} scheduled, {len(st.failed)} failed, "
               f"{len(st.abandoned)} abandoned")
    head = f"{res.entry_count} entries, head {res.head_hash}"
    if res.status == "closed":
        click.echo(f"run {run_id} is closed ({head}); nothing to resume, nothing was written")
        return
    # Task ids come from a chain that may have been fetched from another machine; the
    # reader refuses ids the writer would, and this keeps any that slip past that from
    # reaching the terminal as escapes or line breaks.
    frontier = ", ".join(render.visible(t) for t in res.frontier) or "nothing"
    # A task whose deps cannot be read, or name a task the chain never schedules, is
    # in no frontier and gets no signal: say so, or it would silently never run.
    held = st.held
    if held:
        summary += f", {len(held)} held"
    for h in held:
        at = f" (entry {h['seq']})" if h["seq"] is not None else ""
        click.echo(one_line(f"harness: warning: run {run_id}: task "
                            f"{render.visible(str(h['task_id']))}{at} is held, not resumed: "
                            f"{h['reason']}"), err=True)
    if res.dry_run:
        click.echo(f"dry run: {run_id} ({head}): {summary}; "
                   f"prior resumes {st.resumes}; would resume: {frontier}")
        return
    click.echo(f"resumed {run_id} at entry {res.resume_seq} (head {res.resumed_head}); "
               f"{summary}; frontier: {frontier}")
    if res.signals:
        # The work tree's path, shown as a refusal would show it (a token, an escape).
        click.echo(f"wrote {len(res.signals)} signal(s) to "
                   f"{named(str(Path(res.signals[0]).parent))}")
    click.echo(f"anchor the resume so others see it: harness ledger anchor {run_id}")


# -- runs -----------------------------------------------------------------------------------


@ledger_group.command("runs")
@json_option
@workdir_option
def runs_command(as_json: bool, workdir: str | None) -> None:
    """List every work ledger of the work tree, local or anchored."""
    rows = _guard(lambda: survey(_workdir(workdir)))
    if as_json:
        _print_json({"runs": rows})
        return
    if not rows:
        click.echo("no work ledgers")
        return
    # Run ids come from directory and ref names, which may hold characters a terminal
    # acts on (a C1 control, a right-to-left override): shown as escapes.
    body = [[render.visible(c) for c in (
        str(r["run_id"]), str(r.get("entry_count", 0)), str(r.get("state") or "-"),
        str(r.get("last_activity") or "-"), str(r.get("head_hash") or "-")[:16],
        _sync_text(r))] for r in rows]
    click.echo(render.grid(["RUN", "ENTRIES", "STATE", "LAST ACTIVITY", "HEAD",
                            "LOCAL / ANCHORED"], body, right=frozenset({1})))


def _sync_text(r: dict[str, Any]) -> str:
    # A fetched anchor ahead of the local chain makes resume refuse whatever the side
    # ref says: said after it, by the most entries any such anchor holds past the chain.
    ahead = [int(a["ahead_by"]) for a in r.get("fetched_ahead") or []]
    text = _side_ref_text(r)
    return f"{text}, fetched ahead by {max(ahead)}" if ahead else text


def _side_ref_text(r: dict[str, Any]) -> str:
    agreement = str(r.get("agreement") or "-")
    if agreement.startswith("diverged"):
        return agreement  # even with no side ref: a fetched anchor is the other lineage
    if not r.get("anchored"):
        return "local only"
    if not r.get("local"):
        return "anchored only"
    if agreement == "identical":
        return "in sync"
    if agreement in ("local_ahead", "anchored_ahead"):
        n = abs(int(r.get("local_entry_count", 0)) - int(r.get("anchored_entry_count", 0)))
        side = agreement.split("_", 1)[0]
        return f"{side} ahead by {n}"
    return agreement


COMMANDS = (ledger_group,)
