"""How a command ends on an error: one `harness: …` line on stderr, then its exit code.

Every command but `ledger`'s (which first folds a multi-line message from git or the OS
into one line) fails through `fail`, so the prefix and the stream are the same
everywhere and no error ever reaches the user as a traceback.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"harness: {message}", err=True)
    sys.exit(code)


__all__ = ["fail"]
