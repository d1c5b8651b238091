"""Mutation-test survivors of how the writer's failures reach the log
(`harness.ledger.faillog`): the file an episode's last line names, the pace and content
of the repeat counts, a new episode told afresh, and durations under a second."""

from __future__ import annotations

import logging

import pytest

from harness.ledger.errors import LedgerUnavailable
from harness.ledger.faillog import FailureLog
from test_faillog import told_on

E, W = logging.ERROR, logging.WARNING
P = "/srv/ledger/2026-12-01.jsonl"
Q = "/srv/ledger/2026-12-02.jsonl"


def test_an_episode_of_hangs_alone_ends_naming_the_file_that_hung(
        caplog: pytest.LogCaptureFixture) -> None:
    """The file the end of an episode names is the one its latest failure was on, a hang
    as much as a failure: not an earlier episode's file, not none."""
    logger = logging.getLogger("test.faillog_mutants")
    caplog.set_level(logging.DEBUG, logger=logger.name)
    fl = FailureLog(logger, every=10.0)

    def hung(path: str) -> LedgerUnavailable:
        return LedgerUnavailable(f"ledger sync of {path} has not returned within the 2s "
                                 "bound", harness="a", run_id=1, seq=5)

    fl.hung(hung(P), P, 1, now=100.0)
    fl.recovered(now=101.0)
    fl.failed(LedgerUnavailable(f"ledger write of {P} failed: EIO", harness="a", run_id=2,
                                seq=6), P, 1, now=200.0)
    fl.recovered(now=201.0)
    fl.hung(hung(Q), Q, 1, now=300.0)
    fl.stopped(1, now=312.0)
    ends = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ledger: ")]
    assert ends == [f"ledger: writing {P} again after 1 failure(s) in 1.0s",
                    f"ledger: writing {P} again after 1 failure(s) in 1.0s",
                    f"ledger: gave up on {Q} after 1 failure(s) in 12.0s; "
                    "1 line(s) still queued"]


def _eio(seq: int) -> LedgerUnavailable:
    return LedgerUnavailable(f"ledger write of {P} failed: EIO", harness="a", run_id=1,
                             seq=seq)


FIRST = f"ledger write of {P} failed: EIO (harness=a run_id=1 seq=5)"


def test_repeats_are_counted_once_per_interval_with_the_latest_queue(
        caplog: pytest.LogCaptureFixture) -> None:
    """A failure repeated every second for 25 s: told in full, then a count at 10 s and at
    20 s (not at every repeat once the first interval passed), each with the queue as
    the latest repeat left it."""
    fl, lines = told_on(caplog, "test.faillog_mutants.pace")
    for i in range(26):
        fl.failed(_eio(5), P, 1 + i, now=100.0 + i)
    assert lines == [
        (E, f"{FIRST}; 1 line(s) queued, retrying in order"),
        (E, f"{FIRST}: 10 more time(s) in 10.0s, 11 failure(s) so far; 11 line(s) queued, "
            "retrying in order"),
        (E, f"{FIRST}: 10 more time(s) in 10.0s, 21 failure(s) so far; 21 line(s) queued, "
            "retrying in order"),
    ]


def test_a_new_episode_tells_its_first_failure_in_full(
        caplog: pytest.LogCaptureFixture) -> None:
    """After a recovery, the same failure again opens a new episode: told in full, not
    taken for a repeat of the episode that ended. Durations under a second, and a clock
    stepped back, are told as they are (no less than 0.0s)."""
    fl, lines = told_on(caplog, "test.faillog_mutants.afresh")
    fl.failed(_eio(5), P, 1, now=100.0)
    fl.recovered(now=100.4)
    fl.failed(_eio(5), P, 1, now=200.0)
    fl.recovered(now=199.0)
    assert lines == [
        (E, f"{FIRST}; 1 line(s) queued, retrying in order"),
        (W, f"ledger: writing {P} again after 1 failure(s) in 0.4s"),
        (E, f"{FIRST}; 1 line(s) queued, retrying in order"),
        (W, f"ledger: writing {P} again after 1 failure(s) in 0.0s"),
    ]

