"""Mutation-test survivors of the boot's orphan sweep (`harness.supervisor.orphans`): a
group found by the scan that has ended by the time it is signalled is reported gone, not
signalled, and gets no note. Real processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.supervisor.orphans import Orphan, kill_orphans


def test_a_group_that_ended_before_its_signal_is_gone_and_not_signalled(
        tmp_path: Path) -> None:
    """The sweep is handed a group its scan found (`found`) whose last member has since
    ended and been reaped: no signal reaches it, and the sweep says it is gone."""
    proc = subprocess.Popen(["true"], start_new_session=True)
    assert proc.wait(timeout=60) == 0
    gone = Orphan(proc.pid, "job", 1)
    got = kill_orphans(str(tmp_path), str(tmp_path / "harness.sock"), grace=0.5,
                       found=[gone])
    assert got == [Orphan(proc.pid, "job", 1, gone=True)]
