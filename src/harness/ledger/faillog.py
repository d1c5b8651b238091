"""How the ledger writer's failures reach the log (SPEC-0022 REQ-6: each failure is logged).

Both ledgers write through `writer.Writer`, and it tells every failure to one
`FailureLog`. A failing disk fails every retry the same way, and a closing writer
retries every 50 ms (so that a disk that comes back within the close's timeout is used
at once): a line per attempt put twenty identical lines a second in the log and buried
what mattered. So the log tells an *episode* of failures, from the first failure to the
recovery, the way a database or systemd does:

* the first failure in full: its cause, the record (harness, run_id, seq), the queue;
* a change of cause in full, after a summary of the old cause's repeats not yet told;
* repeats of the same cause counted, and told at most once every `every` seconds per
  cause, as one line: the cause, how many more times and over how long, and how many
  failures the episode has had so far;
* its end: ``writing PATH again after N failure(s) in T`` once a pass succeeds, or
  ``gave up on PATH after N failure(s) in T`` when the writer stops with lines queued.

A write or sync that hangs past its bound is a failure from the moment the bound passes
(REQ-6), while the writer thread is still stuck in it: the writer's watchdog tells it
then (`hung`), and it opens an episode like any failure. Should the operation then
return, the episode ends as any does; should it fail, its error is told in full
(`failed(told=True)`) but not counted again: it is the same failure of the same line,
and its line ends in "(already counted when it passed its bound)", not in "retrying in
order".

Invariant: each counted failure is told by exactly one line (one for a line in full, N
for a summary's "N more time(s)"), and every repeat is told by the episode's last line
at the latest, so the failures in the log add up to the writer's ``append_errors`` (less
its late syncs, which the writer logs a line each: a late sync takes the whole bound, so
they cannot flood). Problems met on the way (a failed write that cannot be cut back or
read back, a handle that fails to close) are told the same way under a topic of their
own, and not counted. Every secret is scrubbed once: the error's by `LedgerError` when
it was made, a path or a problem's text by the logger's filter (`scrub.ScrubLog`, on
"harness.ledger"), each as an argument of its own, so the line's words after a
scrubbed piece (the record, the queue) are never taken for a secret's value.

Used by the writer thread and its watchdog (`hung`), so each call runs whole under a
lock of its own, the last one taken: it takes no other inside.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from .errors import LedgerError

__all__ = ["FailureLog"]

# The topic of the counted failures: a write or sync of the queue's head.
_APPEND = "append"


@dataclass
class _Cause:
    """The cause a topic last failed with, and what of it is not yet told."""

    key: str  # what makes two failures the same cause
    text: object  # the latest failure of it, as a line tells it: a LedgerError, or text
    tail: str  # what a line about it adds after the count (the queue, the retry)
    level: int
    counted: bool
    told_at: float  # when the last line about it was logged
    repeats: int = 0  # failures of it since that line


class FailureLog:
    """One writer's failures, told to `logger` as episodes (see the module docstring)."""

    def __init__(self, logger: logging.Logger, every: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._log = logger
        self.every = every
        self._causes: dict[str, _Cause] = {}  # topic -> its current cause
        self._started: float | None = None  # when the episode under way began
        self._failures = 0  # counted failures in the episode under way
        self._path = ""  # the file of its latest counted failure

    @property
    def open(self) -> bool:
        """Whether an episode is under way (the writer asks after every clean pass)."""
        # No lock: one attribute read, on every clean pass. A hang the watchdog is telling
        # is waited for before the pass stuck in it goes on (`Writer._end_io`).
        return self._started is not None

    def failed(self, err: LedgerError, path: str, queued: int, now: float, *,
               told: bool = False) -> None:
        """A write or sync of the queue's head failed: one of REQ-6's append errors. With
        `told`, it is the operation `hung` already told and counted, failing now that it
        returns: told in full, not counted again."""
        # The cause is the operation, file, error and record: REQ-6 logs a failure with
        # its harness and seq, so a head that moves on (an earlier line landed) and fails
        # the same way gets a line of its own. Retries of one line are the repeats.
        tail = f"; {queued} line(s) queued, retrying in order"
        if told:
            tail += " (already counted when it passed its bound)"
        with self._lock:
            self._path = path
            self._note(_APPEND, str(err), err, tail, logging.ERROR, now, counted=True,
                       tally=not told)

    def hung(self, err: LedgerError, path: str, queued: int, now: float) -> None:
        """A write or sync of the queue's head has run past its bound and not returned:
        one of REQ-6's append errors, told by the watchdog while the writer is stuck."""
        with self._lock:
            self._path = path
            self._note(_APPEND, str(err), err, f"; {queued} line(s) queued behind it",
                       logging.ERROR, now, counted=True)

    def trouble(self, topic: str, text: str, now: float) -> None:
        """A problem met while handling a failure: told like one, but not counted."""
        with self._lock:
            self._note(topic, text, text, "", logging.WARNING, now, counted=False)

    def recovered(self, now: float) -> None:
        """A pass succeeded: tell the repeats not yet told, and the episode's end."""
        # A warning, not info: the CLI logs nothing below it, and a reader who saw the
        # failures must also see that they ended.
        with self._lock:
            self._finish(now, logging.WARNING, "writing %s again", "")

    def stopped(self, queued: int, now: float) -> None:
        """The writer stopped (a close's timeout passed) with the episode still open."""
        with self._lock:
            self._finish(now, logging.ERROR, "gave up on %s",
                         f"; {queued} line(s) still queued")

    def _finish(self, now: float, level: int, what: str, tail: str) -> None:
        """End the episode under way, if any: its repeats not yet told, then `what` (a
        format naming the file as %s) happened after how many failures in how long."""
        if self._started is None:
            return
        self._end(now)
        if self._failures:
            self._emit(level, f"ledger: {what} after %d failure(s) in %s%s", self._path,
                       self._failures, _secs(now - self._started), tail)
        self._reset()

    def _note(self, topic: str, key: str, text: object, tail: str, level: int, now: float,
              *, counted: bool, tally: bool = True) -> None:
        """Tell one problem of `topic`. `counted`: the topic's problems are append errors;
        `tally`: this one is counted (not a hang's error, counted when it was told)."""
        if self._started is None:
            self._started = now
        cur = self._causes.get(topic)
        if cur is not None and cur.key == key:
            self._failures += counted and tally
            cur.repeats += 1
            cur.text, cur.tail = text, tail
            if now - cur.told_at >= self.every:
                self._summarise(cur, now, cur.tail)
            return
        if cur is not None:
            # The old cause's last repeats, before the line that says it changed.
            self._summarise(cur, now, "")
        self._failures += counted and tally  # after that summary: its total is the old cause's
        self._causes[topic] = _Cause(key, text, tail, level, counted, now)
        self._emit(level, "%s%s", text, tail)

    def _summarise(self, cur: _Cause, now: float, tail: str) -> None:
        if cur.repeats:
            so_far = f", {self._failures} failure(s) so far" if cur.counted else ""
            self._emit(cur.level, "%s: %d more time(s) in %s%s%s", cur.text, cur.repeats,
                       _secs(now - cur.told_at), so_far, tail)
        cur.repeats = 0
        cur.told_at = now

    def _end(self, now: float) -> None:
        for cur in self._causes.values():
            self._summarise(cur, now, "")

    def _reset(self) -> None:
        self._causes.clear()
        self._started = None
        self._failures = 0

    def _emit(self, level: int, fmt: str, *args: object) -> None:
        # The untrusted pieces go as arguments, each scrubbed on its own by the logger's
        # filter (`scrub.ScrubLog` on "harness.ledger"), a LedgerError not again.
        self._log.log(level, fmt, *args)


def _secs(seconds: float) -> str:
    return f"{max(seconds, 0.0):.1f}s"
