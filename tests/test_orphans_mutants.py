"""Mutation-test survivors of the boot's orphan sweep (`harness.supervisor.orphans`): a
group found by the scan that has ended by the time it is signalled is reported gone, not
signalled; a group SIGKILLed after the grace is gone with no error line, and one whose
run has a record without a log gets no note and stops the sweep for nothing. Real
processes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

import pytest

from daemons import DEADLINE, comm, until
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


def test_a_stubborn_group_whose_record_has_no_log_is_killed_without_a_word_of_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A group that ignores SIGTERM is SIGKILLed after the grace and is gone: no line
    says it is still running. Its run's record (closed by this boot) names no log, so
    there is nothing to note it in."""
    state = tmp_path / "state"
    state.mkdir()
    sock = str(tmp_path / "harness.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env.update(HARNESS_SOCKET=sock, HARNESS_NAME="nightly", HARNESS_RUN_ID="7",
               HARNESS_RUN_TRIGGER="schedule", HARNESS_STATE_DIR=str(state))
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 300"], env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        until(f"pid {proc.pid} to exec sleep", lambda: comm(proc.pid) == "sleep")
        with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
            [o] = kill_orphans(str(state), sock, [{"harness": "nightly", "run_id": 7}],
                               grace=0.5)
        assert (o.pgid, o.signalled, o.killed, o.gone) == (proc.pid, True, True, True)
        assert proc.wait(timeout=DEADLINE) == -signal.SIGKILL
        assert [r.levelname for r in caplog.records if r.name == "harness.supervisor"] == [
            "WARNING"]  # the one line saying it is being stopped
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=DEADLINE)
