"""The ledger's error types: the sentinels of SPEC-0022 REQ-20 and their context.

Every error raised across the ledger boundary is a `LedgerError`, carries the
harness, run_id and seq it concerns when they are known, and renders them in its
message, so a log line or a CLI error names the record without a traceback. A message
quotes what was refused, so it passes the secret scrubber first: an error, like a
ledger line, never carries a credential into a log. It is scrubbed there, once (a
`scrub.Scrubbed`): a log line that quotes it does not scrub it again.
"""

from __future__ import annotations

from .scrub import Scrubbed, scrub_text


class LedgerError(Scrubbed, Exception):
    """Base of every ledger failure; `str()` names the record it concerns."""

    def __init__(
        self,
        message: str,
        *,
        harness: str | None = None,
        run_id: int | None = None,
        seq: int | None = None,
    ) -> None:
        self.message = scrub_text(message)[0]
        self.harness = harness
        self.run_id = run_id
        self.seq = seq
        super().__init__(self.message)

    # A property, not a plain attribute: code that names the record after the fact
    # (`exc.harness = ...` where the error was raised without it) must not be able to
    # put an unscrubbed name into the message.
    @property
    def harness(self) -> str | None:
        return self._harness

    @harness.setter
    def harness(self, value: str | None) -> None:
        self._harness = value if value is None else scrub_text(value)[0]

    def __str__(self) -> str:
        ctx = []
        if self.harness is not None:
            ctx.append(f"harness={self.harness}")
        if self.run_id is not None:
            ctx.append(f"run_id={self.run_id}")
        if self.seq is not None:
            ctx.append(f"seq={self.seq}")
        return f"{self.message} ({' '.join(ctx)})" if ctx else self.message


class LedgerUnavailable(LedgerError):
    """The line could not be made durable in time; it stays queued and is retried in order."""


class LedgerInUse(LedgerUnavailable):
    """Another process holds the ledger for writing (a second daemon on the same state
    directory): SPEC-0022 allows one writer, and two would issue the same seqs."""


class LedgerCorrupt(LedgerError):
    """Data that breaks the ledger's format or chain, on disk or offered for append."""


class LineRejected(LedgerCorrupt, ValueError):
    """A line refused at append (unknown field, bad type, over 16 KiB): a caller's bug.

    Nothing of it was queued or written.
    """


class LineTooLong(LineRejected):
    """A line whose sealed bytes, with their "\\n", exceed the line limit."""


class LedgerClosed(LedgerError):
    """The ledger was closed; no more appends are accepted."""
