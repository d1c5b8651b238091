"""How a command ends on an error: one `harness: …` line on stderr, then its exit code;
and how any of its lines quotes a path or a name (`named`: scrubbed, then escaped).

Every command but `ledger`'s (which first folds a multi-line message from git or the OS
into one line) fails through `fail`, so the prefix and the stream are the same
everywhere and no error ever reaches the user as a traceback. That includes standard
output refusing what a command prints (`harness runs > /dev/full`): `guarded_stdout`
makes such a write raise `OutputError`, which the entry point reports like any failure,
and writes a character the locale cannot encode as its backslash escape (the `runs`
table, which must fit 80 columns, does that itself before it lays out its columns).
"""

from __future__ import annotations

import io
import os
import select
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import click

from ..config.durations import shown_path
from ..controls import one_line


def warn(message: str) -> None:
    """One `harness: …` line on stderr; the command goes on."""
    # A message quotes paths, names and what a daemon or git said: none of it may reach
    # the terminal as a control, an escape sequence or a second "harness:" line.
    click.echo(f"harness: {one_line(message)}", err=True)


def warn_not_durable(reply: object, *, but: tuple[str, int] | None = None) -> None:
    """One line on stderr for each record a daemon's reply says is not on disk yet
    (``not_durable``: the op did its job, REQ-6's 2 s bound passed with the line still
    queued in the daemon); the command goes on and succeeds. `but`: the (harness, run id)
    the command waits for and speaks of itself."""
    entries = reply.get("not_durable") if isinstance(reply, dict) else None
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or (e.get("harness"), e.get("run_id")) == but:
            continue
        warn(f"{named(str(e.get('harness')))} run {named(str(e.get('run_id')))}'s "
             f"{named(str(e.get('line')))} line is not on disk yet: the ledger's disk is "
             "failing; the line stays queued and is written once the disk takes it")


def fail(message: str, code: int = 1) -> NoReturn:
    warn(message)
    sys.exit(code)


def report(text: str) -> None:
    """A report of several lines (a config's problems, one per line) on stderr, each line
    shown as `fail` shows a message: a key or value from a file cannot act on the
    terminal."""
    click.echo("\n".join(one_line(line) for line in text.splitlines()), err=True)


def named(text: str) -> str:
    """A path, a name or a daemon's word as any line of a command quotes it, a refusal
    and a success alike: its secrets scrubbed (a directory may be named after a token),
    then on one line as `fail` shows a message (a control or an escape sequence spelled
    out, a backslash left as it is). One helper for both, so a success line cannot show
    what the refusal for the same path would have hidden. Scrubbed first: the scrubber
    knows secrets as they are written, not as their escapes spell them."""
    return one_line(shown_path(text))


def some_of(items: list[str], shown: int = 10) -> str:
    """The first `shown` of `items`, comma-separated, and how many more there are: a
    one-line report stays one line when a directory of stray files or a file of garbage
    lines gives thousands (--json, where a command has it, lists them all)."""
    named = ", ".join(items[:shown])
    return named + (f", and {len(items) - shown} more" if len(items) > shown else "")


def warn_strays(strays: list[str]) -> None:
    """Say which names in the ledger directory no reader of day files takes (a stray
    file, a directory or FIFO under a day file's name): `runs` and `ledger verify` alike,
    so a day file a reader passed over is never silent."""
    if strays:
        warn(f"ignored file(s) that are not day files: {some_of(strays)}")


class OutputError(OSError):
    """Standard output refused a write: a full disk, a failing device. (A reader that
    closed the pipe is a BrokenPipeError as before: nothing to report.)"""


class _Stdout(io.FileIO):
    """Standard output's descriptor, written whole or not at all. A short write is
    retried here, not left to the buffered layer: once part of a large write has gone
    out, that layer returns the count and drops what stopped the rest, so a disk that
    filled mid-output left a cut file, and a non-blocking pipe (some CI runners hand
    one over) that filled kept 64 KiB of the output, both with exit 0."""

    def write(self, b: object) -> int:  # type: ignore[override]
        view = memoryview(b).cast("B")  # type: ignore[arg-type]
        done = 0
        try:
            while done < len(view):
                n = super().write(view[done:])
                if n is None:  # a non-blocking descriptor that is full: wait for room
                    select.select([], [self.fileno()], [])
                    continue
                done += n
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.errno, exc.strerror) from None
        return done


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """Run the command with `sys.stdout` writing through `_Stdout`, flushed before the
    command's exit code stands: output still in the buffer would otherwise fail only in
    the interpreter's last flush, which can neither say so nor change the exit code."""
    old = sys.stdout if isinstance(sys.stdout, io.TextIOWrapper) else None
    try:
        fd = old.fileno() if old is not None else -1
    except (OSError, ValueError):
        fd = -1
    if old is None or fd < 0:  # no stdout (closed at start), or one that is no file
        yield
        return
    # A character the locale's encoding lacks is written as its escape, not a traceback:
    # in --json output that escape is the same string. (The runs table escapes such
    # characters itself, and puts ASCII for its own marks, before it counts widths.)
    errors = "backslashreplace" if old.errors == "strict" else old.errors
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(_Stdout(fd, "w", closefd=False)), encoding=old.encoding,
        errors=errors, line_buffering=old.line_buffering, write_through=old.write_through)
    try:
        try:
            yield
        finally:
            sys.stdout.flush()
    except (BrokenPipeError, OutputError) as exc:
        # Point the descriptor at /dev/null: what is still buffered must not fail again
        # in the interpreter's last flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
        if isinstance(exc, OutputError):
            fail(f"cannot write standard output: {exc.strerror}")
        # The reader stopped reading (`harness runs | head`): end quietly, with the 1
        # click gives when the pipe closes mid-command and Python's docs advise.
        sys.exit(1)


__all__ = ["OutputError", "fail", "guarded_stdout", "named", "some_of", "warn"]
