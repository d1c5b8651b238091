"""How the ledger writer logs failures (SPEC-0022 REQ-6, `harness.ledger.faillog`).

A failing disk fails every retry alike, and a closing writer retries every 50 ms: the
log said "retrying in order" twenty times a second. Now an episode of failures is told
as its first failure, each change of cause, a count of the repeats at most once per
`every` seconds, and its end (the recovery, or the close giving up), and the counts add
up to the writer's append errors. First the mechanism on its own with the clock given
(exact lines); then both ledgers in a real process on a disk the file layer fails, with
the log as the CLI prints it (no handler configured: Python's last resort, on stderr).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.ledger.errors import LedgerUnavailable
from harness.ledger.faillog import FailureLog
from harness.ledger.scrub import ScrubLog

TOKEN = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # the form of a GitHub token
P = "/srv/ledger/2026-12-01.jsonl"


def _err(op: str, why: str, seq: int) -> LedgerUnavailable:
    return LedgerUnavailable(f"ledger {op} of {P} failed: {why}", harness="a", run_id=1,
                             seq=seq)


def told_on(caplog: pytest.LogCaptureFixture,
            name: str) -> tuple[FailureLog, list[tuple[int, str]]]:
    """A FailureLog on logger `name`, and the (level, message) lines it tells."""
    logger = logging.getLogger(name)
    logger.filters[:] = [ScrubLog()]  # as on "harness.ledger"
    caplog.set_level(logging.DEBUG, logger=logger.name)
    lines: list[tuple[int, str]] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.levelno, record.getMessage()))

    logger.addHandler(Lines())
    return FailureLog(logger, every=10.0), lines


@pytest.fixture
def told(caplog: pytest.LogCaptureFixture) -> tuple[FailureLog, list[tuple[int, str]]]:
    return told_on(caplog, "test.faillog")


def test_an_episode_is_its_first_failure_a_bounded_count_each_change_and_its_end(
        told: tuple[FailureLog, list[tuple[int, str]]]) -> None:
    fl, lines = told
    E, W = logging.ERROR, logging.WARNING
    enospc = "No space left on device"
    fl.failed(_err("write", enospc, 5), P, 1, now=100.0)
    for i in range(1, 40):  # every 50 ms for 1.95 s: counted, not told
        fl.failed(_err("write", enospc, 5), P, 2, now=100.0 + i * 0.05)
    assert lines == [(E, f"ledger write of {P} failed: {enospc} (harness=a run_id=1 seq=5); "
                         "1 line(s) queued, retrying in order")]
    # The head moved on (seq 5 landed) and seq 6 fails the same way: REQ-6 names its seq.
    for t in (105.0, 110.0):
        fl.failed(_err("write", enospc, 6), P, 3, now=t)
    fl.failed(_err("write", enospc, 6), P, 3, now=115.0)
    fl.failed(_err("sync", "Input/output error", 6), P, 3, now=116.0)
    fl.failed(_err("sync", "Input/output error", 6), P, 3, now=117.0)
    fl.recovered(now=118.5)
    fl.recovered(now=119.0)  # no episode: nothing to say
    assert lines[1:] == [
        (E, f"ledger write of {P} failed: {enospc} (harness=a run_id=1 seq=5): 39 more "
            "time(s) in 5.0s, 40 failure(s) so far"),
        (E, f"ledger write of {P} failed: {enospc} (harness=a run_id=1 seq=6); 3 line(s) "
            "queued, retrying in order"),
        (E, f"ledger write of {P} failed: {enospc} (harness=a run_id=1 seq=6): 2 more "
            "time(s) in 10.0s, 43 failure(s) so far; 3 line(s) queued, retrying in order"),
        (E, f"ledger sync of {P} failed: Input/output error (harness=a run_id=1 seq=6); 3 "
            "line(s) queued, retrying in order"),
        (E, f"ledger sync of {P} failed: Input/output error (harness=a run_id=1 seq=6): 1 more "
            "time(s) in 2.5s, 45 failure(s) so far"),
        (W, f"ledger: writing {P} again after 45 failure(s) in 18.5s"),
    ]
    # Every failure is told once: one per line in full, N per "N more time(s)".
    assert 1 + 39 + 1 + 2 + 1 + 1 == 45

    # The next episode starts afresh, and one the writer stops in says it gave up.
    lines.clear()
    fl.failed(_err("write", enospc, 7), P, 1, now=200.0)
    fl.failed(_err("write", enospc, 7), P, 1, now=200.5)
    fl.stopped(1, now=201.0)
    fl.stopped(1, now=202.0)
    assert lines == [
        (E, f"ledger write of {P} failed: {enospc} (harness=a run_id=1 seq=7); 1 line(s) "
            "queued, retrying in order"),
        (E, f"ledger write of {P} failed: {enospc} (harness=a run_id=1 seq=7): 1 more "
            "time(s) in 1.0s, 2 failure(s) so far"),
        (E, f"ledger: gave up on {P} after 2 failure(s) in 1.0s; 1 line(s) still queued"),
    ]


def test_a_hang_is_one_failure_whether_it_then_returns_or_fails(
        told: tuple[FailureLog, list[tuple[int, str]]]) -> None:
    """A sync past its bound is told (and counted) when the bound passes; its error when it
    then fails is the same failure, told but not counted again, so the episode's count still
    adds up to the writer's append errors. One that returns just ends the episode."""
    fl, lines = told
    E, W = logging.ERROR, logging.WARNING
    hung = LedgerUnavailable(f"ledger write and sync of {P} has not returned within the 2s "
                             "bound", harness="a", run_id=1, seq=5)
    eio = "Input/output error"
    fl.hung(hung, P, 2, now=100.0)
    fl.failed(_err("sync", eio, 5), P, 3, now=117.0, told=True)
    fl.failed(_err("sync", eio, 5), P, 3, now=117.5)  # the retry: a failure of its own
    fl.recovered(now=118.0)
    fl.hung(hung, P, 1, now=200.0)
    fl.recovered(now=215.0)
    assert lines == [
        (E, f"ledger write and sync of {P} has not returned within the 2s bound (harness=a "
            "run_id=1 seq=5); 2 line(s) queued behind it"),
        (E, f"ledger sync of {P} failed: {eio} (harness=a run_id=1 seq=5); 3 line(s) queued, "
            "retrying in order (already counted when it passed its bound)"),
        (E, f"ledger sync of {P} failed: {eio} (harness=a run_id=1 seq=5): 1 more time(s) in "
            "1.0s, 2 failure(s) so far"),
        (W, f"ledger: writing {P} again after 2 failure(s) in 18.0s"),
        (E, f"ledger write and sync of {P} has not returned within the 2s bound (harness=a "
            "run_id=1 seq=5); 1 line(s) queued behind it"),
        (W, f"ledger: writing {P} again after 1 failure(s) in 15.0s"),
    ]


def test_problems_met_on_the_way_have_their_own_topic_are_not_counted_and_are_scrubbed(
        told: tuple[FailureLog, list[tuple[int, str]]]) -> None:
    """A read-only disk fails the write and then the cut back, alternately: neither is a
    change of the other's cause. The cut back names a path that can carry a token."""
    fl, lines = told
    E, W = logging.ERROR, logging.WARNING
    path = f"/work/{TOKEN}/.harness/runtime/ledger/r/000000.jsonl"
    cut = f"ledger: cannot cut back {path} after a failed write: [Errno 30] Read-only"
    for i in range(3):
        fl.trouble("cut write", cut, now=10.0 + i)
        fl.failed(_err("write", "Read-only file system", 1), path, 1, now=10.0 + i)
    fl.stopped(1, now=13.0)
    shown = "/work/[REDACTED]/.harness/runtime/ledger/r/000000.jsonl"
    assert lines == [
        (W, f"ledger: cannot cut back {shown} after a failed write: [Errno 30] Read-only"),
        (E, f"ledger write of {P} failed: Read-only file system (harness=a run_id=1 seq=1); "
            "1 line(s) queued, retrying in order"),
        (W, f"ledger: cannot cut back {shown} after a failed write: [Errno 30] Read-only: "
            "2 more time(s) in 3.0s"),
        (E, f"ledger write of {P} failed: Read-only file system (harness=a run_id=1 seq=1): "
            "2 more time(s) in 3.0s, 3 failure(s) so far"),
        (E, f"ledger: gave up on {shown} after 3 failure(s) in 3.0s; 1 line(s) still queued"),
    ]


# -- both ledgers, in a real process --------------------------------------------------------

_SCRIPT = r"""
import errno, json, sys
from pathlib import Path
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.files import FaultyFiles
from harness.ledger.runledger import RunLedger
from harness.worklog import WorkLedgerError
from harness.worklog.store import WorkLedger

which, where, faults, times, close_after = sys.argv[1:6]
files = FaultyFiles()
if which == "run":
    led = RunLedger(where, files=files, sync_timeout=0.3)
    led.append({"type": "opened", "harness": "a", "run_id": 1})
    path = sorted(Path(where).glob("*.jsonl"))[0]
else:
    led = WorkLedger(where, "r", files=files, sync_timeout=0.3)
    path = led.segment
before = dict(files.calls)
for op, code in json.loads(faults).items():
    files.inject(op, errno=getattr(errno, code), times=int(times) or None)
try:
    if which == "run":
        led.append({"type": "closed", "harness": "a", "run_id": 1, "outcome": "success"})
    else:
        led.record("run.open", None, {})
    print("unexpected: the append succeeded", file=sys.stderr)
except (LedgerUnavailable, WorkLedgerError):
    pass
stats = (led.stats() if which == "run" else led._writer.stats())
try:
    led.close(float(close_after))
    closed = "drained"
except (LedgerUnavailable, WorkLedgerError) as exc:
    closed = str(exc)
writes = files.calls["write"] - before["write"]
errors = (led.stats() if which == "run" else led._writer.stats()).append_errors
print(json.dumps({"path": str(path), "writes": writes, "append_errors": errors,
                  "closed": closed}))
"""


def _run(tmp_path: Path, which: str, faults: dict[str, str], times: int,
         close_after: float) -> tuple[dict[str, Any], list[str]]:
    where = tmp_path / TOKEN / which  # a path that carries a secret
    where.mkdir(parents=True)
    res = subprocess.run([sys.executable, "-c", _SCRIPT, which, str(where), json.dumps(faults),
                          str(times), str(close_after)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert TOKEN not in res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    # Durations vary with the machine; everything else is exact.
    return out, [re.sub(r"\d+\.\ds\b", "T", ln) for ln in res.stderr.splitlines()]


def _record(which: str, seq: int) -> str:
    return f"(harness=a run_id=1 seq={seq})" if which == "run" else f"(seq={seq})"


@pytest.mark.parametrize("which", ["run", "work"])
def test_a_close_on_a_read_only_disk_logs_the_cause_once_a_count_and_that_it_gave_up(
        tmp_path: Path, which: str) -> None:
    """The close retries every 50 ms for its whole timeout: some twenty failures, each
    a line of its own before. Now one line in full, one count, and the end."""
    out, err = _run(tmp_path, which, {"write": "EROFS", "truncate": "EROFS"}, 0, 1.0)
    n = out["writes"]
    assert n >= 3 and out["append_errors"] == n  # each write attempt one failure
    path = out["path"].replace(TOKEN, "[REDACTED]")
    seq = 2 if which == "run" else 1
    cut = (f"ledger: cannot cut back {path} after a failed write: [Errno 30] Read-only file "
           "system (injected on truncate)")
    failed = (f"ledger write of {path} failed: Read-only file system (injected on write) "
              f"{_record(which, seq)}")
    assert err == [
        cut,
        f"{failed}; 1 line(s) queued, retrying in order",
        f"{cut}: {n - 1} more time(s) in T",
        f"{failed}: {n - 1} more time(s) in T, {n} failure(s) so far",
        f"ledger: gave up on {path} after {n} failure(s) in T; 1 line(s) still queued",
    ]
    assert "closed with 1 line(s) still queued (not durable)" in out["closed"]


@pytest.mark.parametrize("which", ["run", "work"])
def test_a_disk_that_recovers_during_the_close_is_logged_with_the_count(
        tmp_path: Path, which: str) -> None:
    out, err = _run(tmp_path, which, {"write": "ENOSPC"}, 5, 60.0)
    assert (out["writes"], out["append_errors"], out["closed"]) == (6, 5, "drained")
    path = out["path"].replace(TOKEN, "[REDACTED]")
    failed = (f"ledger write of {path} failed: No space left on device (injected on write) "
              f"{_record(which, 2 if which == 'run' else 1)}")
    assert err == [
        f"{failed}; 1 line(s) queued, retrying in order",
        f"{failed}: 4 more time(s) in T, 5 failure(s) so far",
        f"ledger: writing {path} again after 5 failure(s) in T",
    ]
