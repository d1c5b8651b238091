"""More tests that kill mutants of harness.ledger.runledger the other tests let live: the
ledger's defaults, its lock on the lowest free descriptor (fd 0, as a daemon whose stdin is
closed gets it), a failed open on a file system that cannot lock, and the retention guard
`_quiet`. Exact answers of the real RunLedger over real day files."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harness.ledger.retention as retention_mod
import harness.ledger.runledger as runledger_mod
from harness.ledger.errors import LedgerCorrupt
from harness.ledger.runledger import RunLedger
from ledgertools import DAY, T0, Clock, OpenLedger, day, decided, lines_of, open_fds


@contextlib.contextmanager
def fd0_free() -> Iterator[None]:
    """Close fd 0 for the block, so the next descriptor opened is 0; restored after."""
    saved = os.dup(0)
    os.close(0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


# -- defaults --------------------------------------------------------------------------


def test_a_prune_applies_90_days_and_256_mib_unless_told_otherwise(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []
    real = runledger_mod.prune

    def spy(directory: str, now: int, retention_ns: int, max_bytes: int, *a: Any) -> Any:
        seen.append((retention_ns, max_bytes))
        return real(directory, now, retention_ns, max_bytes, *a)

    monkeypatch.setattr(runledger_mod, "prune", spy)
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert led.prune().deleted == []
    assert seen == [(90 * DAY, 256 * 1024 * 1024)]


def test_memory_keeps_the_newest_20_records_of_a_harness_past_the_window_by_default(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """The day rolls over: the daily trim drops closed records older than the window
    beyond each harness's tail, 20 unless told otherwise."""
    clock = Clock(T0 - 10 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    for i in range(1, 26):
        led.append(decided("a", i), sync=False)
    led.flush()
    led.append(decided("a", 26))
    assert led.stats().records_in_memory == 26
    clock.ns = T0
    led.append(decided("b", 1))
    assert led.stats().records_in_memory == 20 + 1


# -- the directory lock on fd 0 ----------------------------------------------------------


def test_a_lock_held_on_fd_0_is_a_lock(ledger_dir: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """A daemon with stdin closed gets fd 0 for the lock: it is held like any other (no
    "cannot be locked" warning), leftovers are cleared, and close releases it (a second
    ledger on the directory opens)."""
    ledger_dir.mkdir(mode=0o700, parents=True)
    (ledger_dir / ".CHAIN.4242.139872.tmp").write_bytes(b'{"hash": "')
    with fd0_free():
        with caplog.at_level(logging.WARNING, logger="harness.ledger"):
            led = RunLedger(str(ledger_dir), clock=Clock(T0))
        try:
            assert led._held == 0  # the precondition: the lock is on fd 0
            assert [r.getMessage() for r in caplog.records] == [
                "ledger: removed .CHAIN.4242.139872.tmp, left half made by a process that "
                "was killed"]
            assert sorted(p.name for p in ledger_dir.iterdir()) == []
            assert led.append(decided("a", 1)) == 1
        finally:
            led.close()
        # Still inside: fd 0 must have been closed, or this process holds the lock yet.
        second = RunLedger(str(ledger_dir), clock=Clock(T0))
        second.close()


def test_a_failed_open_that_locked_on_fd_0_lets_go_of_the_directory(
    ledger_dir: Path
) -> None:
    ledger_dir.mkdir(mode=0o700, parents=True)
    (ledger_dir / "CHAIN").write_text("garbage")
    with fd0_free():
        with pytest.raises(LedgerCorrupt):
            RunLedger(str(ledger_dir))
        (ledger_dir / "CHAIN").unlink()
        led = RunLedger(str(ledger_dir))  # not refused as held: fd 0 was closed
        led.close()


def test_a_failed_open_where_nothing_could_be_locked_raises_its_own_error(
    ledger_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On NFS nothing is held (-1): a failed open closes no descriptor, and the error
    the caller sees is the ledger's, not EBADF from closing -1."""
    ledger_dir.mkdir(mode=0o700, parents=True)
    (ledger_dir / "CHAIN").write_text("garbage")
    monkeypatch.setattr(runledger_mod, "hold_dir", lambda path: -1)
    with pytest.raises(LedgerCorrupt, match=r"CHAIN: unreadable chain anchor"):
        RunLedger(str(ledger_dir))



def test_leftovers_that_cannot_be_cleared_are_reported_and_the_ledger_opens(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    def unreadable(directory: str, names: str) -> list[str]:
        raise PermissionError(13, "Permission denied", directory)

    monkeypatch.setattr(runledger_mod, "clear_leftovers", unreadable)
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        led = open_ledger(ledger_dir, clock=Clock(T0))
    assert [r.getMessage() for r in caplog.records] == [
        f"ledger: cannot clear leftovers in {ledger_dir}: [Errno 13] Permission denied: "
        f"'{ledger_dir}'"]
    assert led.append(decided("a", 1)) == 1

# -- retention: `_quiet` -----------------------------------------------------------------


def test_a_quiet_no_carry_forward_preceded_never_lets_a_file_go(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """`_quiet` says a file may go only when the carry that looked at it saw everything:
    with no carry having looked (a prune whose carry is not the ledger's), never. The
    file, holding a run still open, stays to the byte."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 40 * DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "a", "run_id": 1, "kind": "oneshot"})
    led.close()
    path = d / f"{day(T0 - 40 * DAY)}.jsonl"
    before = path.read_bytes()
    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)
    res = retention_mod.prune(str(d), T0, 30 * DAY, 1 << 30, lambda _day: 0, led._quiet)
    assert res.deleted == []
    assert res.error is not None and "lines kept reaching it" in res.error
    assert path.read_bytes() == before
    assert [(x["type"], x["run_id"]) for x in lines_of(path)] == [("opened", 1)]
    assert [r["run_id"] for r in led.open_records()] == [1]


# -- boot: adopting a whole last line that lacks only its newline -------------------------


def closed_run_without_its_last_newline(ledger_dir: Path, open_ledger: OpenLedger) -> Path:
    """n/1 opened and closed (seq 1-2) on T0's day, the file's final "\\n" gone."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "n", "run_id": 1, "kind": "oneshot"})
    led.append({"type": "closed", "harness": "n", "run_id": 1, "outcome": "success"})
    led.close()
    path = ledger_dir / f"{day(T0)}.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    return path


def test_the_newline_that_terminates_an_adopted_line_is_synced_and_its_fd_closed(
    ledger_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = closed_run_without_its_last_newline(ledger_dir, lambda d, **kw: RunLedger(str(d), **kw))
    synced: list[tuple[str, bytes]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        with contextlib.suppress(OSError):
            name = os.readlink(f"/proc/self/fd/{fd}")
            if name == str(path):
                synced.append((name, path.read_bytes()[-2:]))
        real_fsync(fd)

    before = open_fds()
    monkeypatch.setattr(os, "fsync", spy)
    led = RunLedger(str(ledger_dir), clock=Clock(T0))
    monkeypatch.setattr(os, "fsync", real_fsync)
    try:
        assert synced == [(str(path), b"}\n")]
    finally:
        led.close()
    assert open_fds() == before  # the descriptor that wrote the newline is closed too


def test_a_newline_that_cannot_be_written_at_the_boot_is_written_before_the_next_line(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    """The boot cannot open the file to terminate the adopted line: it says so and goes
    on; the writer starts its next line with the missing "\\n", so no line is glued."""
    path = closed_run_without_its_last_newline(ledger_dir, open_ledger)
    real_open = os.open

    def refuse(p: Any, flags: int, *a: Any, **kw: Any) -> int:
        if str(p) == str(path) and flags & os.O_APPEND and not flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, flags, *a, **kw)

    monkeypatch.setattr(os, "open", refuse)
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        led = open_ledger(ledger_dir, clock=Clock(T0))
    monkeypatch.setattr(os, "open", real_open)
    assert [r.getMessage() for r in caplog.records] == [
        f"ledger: {path} ends in a complete line without its newline; kept",
        f"ledger: cannot terminate the last line of {path}: [Errno 13] Permission denied: "
        f"'{path}'"]
    assert path.read_bytes().endswith(b"}")
    assert led.append(decided("n", 2)) == 3
    assert [(x["seq"], x["type"]) for x in lines_of(path)] == [
        (1, "opened"), (2, "closed"), (3, "decided")]
