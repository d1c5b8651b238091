"""Mutation-test survivors of how the writer's failures reach the log
(`harness.ledger.faillog`): the file an episode's last line names."""

from __future__ import annotations

import logging

import pytest

from harness.ledger.errors import LedgerUnavailable
from harness.ledger.faillog import FailureLog

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
