"""The click parameter types the commands share.

`INTEGER` is every integer flag's type (`runs --limit`, `logs --run`, `logs --lines`).
Invariant: it accepts exactly what click's INT accepts for an ASCII value (a sign,
surrounding spaces) and nothing more: no non-ASCII digit, no underscore. Bounds stay
each command's own check, with its own wording.

`refused` is every check of our own that refuses a value: it names the option or
argument as click names it in its own refusals (`Invalid value for '--limit'`), so a
script or a reader meets one spelling whichever side found the value wrong.
"""

from __future__ import annotations

from typing import Any

import click


class _AsciiInt(click.ParamType):
    """click's INT without what Python's int() adds to it. int() reads full-width and
    other Unicode digits and `1_000`: `--lines ３` or `--limit 1_0` was taken as 3 or 10,
    where a script or a paste error should have been told, and no other tool reading
    the same argument (a shell's arithmetic, a config's number) agrees."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):  # a default
            return value
        if isinstance(value, str) and value.isascii() and "_" not in value:
            try:
                return int(value)
            except ValueError:
                pass
        # click's own words for a value that is no integer, so every such refusal reads
        # alike (and is scrubbed alike by the entry point).
        self.fail(f"{value!r} is not a valid integer.", param, ctx)


INTEGER = _AsciiInt()


def refused(message: str, name: str) -> click.BadParameter:
    """The usage error (exit 2) for a value of the option or argument `name` (`--since`,
    `NAME`) that a command's own check refused. click quotes each name of a hint given as
    a sequence, as it quotes the names in the refusals it makes itself."""
    return click.BadParameter(message, param_hint=[name])


__all__ = ["INTEGER", "refused"]
