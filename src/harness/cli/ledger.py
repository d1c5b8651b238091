"""`harness ledger …`: checking (and, for work ledgers, moving) hash-chained ledgers.

Exit codes for the whole group: 0 ok, 1 no ledger, 2 verification failed, 3 divergence.
"""

from __future__ import annotations

import json
import sys

import click

from .. import paths
from ..ledger.dayfiles import LedgerDirError
from ..ledger.verify import verify_run_ledger

EXIT_OK, EXIT_NO_LEDGER, EXIT_BROKEN, EXIT_DIVERGED = 0, 1, 2, 3


@click.group("ledger")
def ledger_group() -> None:
    """Verify the run ledger's hash chain."""


@ledger_group.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify_command(as_json: bool) -> None:
    """Check the run ledger's chain from CHAIN (or genesis) to the head."""
    directory = paths.ledger_dir()
    try:
        res = verify_run_ledger(directory)
    except (LedgerDirError, ValueError, OSError) as exc:
        _fail(as_json, directory, str(exc), EXIT_BROKEN)
        return
    if not res.exists or (res.files == 0 and res.head_seq is None):
        _fail(as_json, directory, f"no run ledger at {directory}", EXIT_NO_LEDGER)
        return
    if as_json:
        click.echo(json.dumps({"ledger": directory, **res.to_json()}, indent=2))
    elif res.ok:
        torn = f"; {res.torn} torn fragment(s) skipped ({', '.join(res.torn_at)})" if res.torn \
            else ""
        click.echo(f"ok: {res.lines} lines in {res.files} file(s) verify from {res.anchor} "
                   f"to seq {res.head_seq} (head {res.head_hash}){torn}")
    if not res.ok:
        e = res.error
        assert e is not None
        if not as_json:
            click.echo(f"harness: ledger chain broken at seq {e.seq} ({e.file}:{e.line}): "
                       f"{e.reason}", err=True)
        sys.exit(EXIT_BROKEN)


def _fail(as_json: bool, directory: str, message: str, code: int) -> None:
    if as_json:
        click.echo(json.dumps({"ledger": directory, "ok": False, "reason": message}, indent=2))
    click.echo(f"harness: {message}", err=True)
    sys.exit(code)
