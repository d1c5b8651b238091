"""A really full disk under the run ledger: a small tmpfs, filled up, then freed.

FaultyFiles injects ENOSPC exactly where a test asks; here the kernel decides. A write
into the last free page comes back short or fails outright, whichever the kernel picks,
and the writer must cut back, keep the lines queued, fail its callers within the bound,
and write everything once, in seq order, when space comes back. Needs a tmpfs mount
(root with CAP_SYS_ADMIN, as CI runs); elsewhere the tests skip and say why.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import World
from daemons import Daemons, runs_of, until
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.query import Query
from harness.ledger.reader import scan
from harness.ledger.runledger import RunLedger
from harness.ledger.verify import verify_run_ledger
from ledgertools import T0, Clock, verify_ok

WAIT = 30.0  # generous: a loaded machine must not make these flaky


def _mounted(mnt: Path, size: str) -> Iterator[Path]:
    mnt.mkdir(parents=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                          str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip() or res.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs of our own, unmounted afterwards."""
    yield from _mounted(tmp_path / "mnt", "256k")


@pytest.fixture
def full_state(world: World) -> Iterator[Path]:
    """The world's XDG state dir on a 1 MiB tmpfs of its own."""
    yield from _mounted(world.root / "state", "1m")


def _fill(mnt: Path) -> Path:
    """Take every free byte of the file system; return the file that holds them."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"x" * 512)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return filler
    finally:
        os.close(fd)


def _decided(run_id: int) -> dict[str, object]:
    return {"type": "decided", "harness": "full", "run_id": run_id, "trigger": "schedule",
            "outcome": "missed", "reason": "r" * 200}


def test_a_full_disk_fails_callers_and_loses_nothing(small_fs: Path) -> None:
    d = small_fs / "ledger"
    led = RunLedger(str(d), clock=Clock(T0), sync_timeout=0.5, retry_min=0.05,
                    retry_max=0.2)
    try:
        acked = [led.append(_decided(i)) for i in range(1, 4)]
        assert acked == [1, 2, 3]
        filler = _fill(small_fs)

        # The day file's last page still has room for a few lines; then the kernel
        # says ENOSPC (or writes short), and each synced append fails within the bound.
        run_id = 3
        failed: list[str] = []
        while len(failed) < 3:
            run_id += 1
            assert run_id < 100, "the disk never filled"
            try:
                acked.append(led.append(_decided(run_id)))
            except LedgerUnavailable as exc:
                failed.append(str(exc))
        assert any("No space left on device" in m for m in failed), failed
        assert led.stats().append_errors >= 1
        assert led.stats().queued == 3

        filler.unlink()  # space again: the writer's retry writes the queue in order
        deadline = time.monotonic() + WAIT
        while led.stats().queued and time.monotonic() < deadline:
            time.sleep(0.05)
        assert led.stats().queued == 0
        last = run_id + 1
        assert led.append(_decided(last)) == last
    finally:
        led.close()

    assert acked == list(range(1, len(acked) + 1))
    raw = (d / "2026-06-15.jsonl").read_bytes()
    lines = [json.loads(x) for x in raw.split(b"\n") if x.startswith(b"{")]
    # Every line, the acknowledged and the failed-then-retried, once and in order.
    assert [o["seq"] for o in lines] == list(range(1, last + 1))
    assert [o["run_id"] for o in lines] == list(range(1, last + 1))
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.head_seq, res.lines, res.torn) == (True, last, last, 0), res.error
    found, _, _ = scan(str(d), Query(limit=1000))
    assert sorted(r.run_id for r in found) == list(range(1, last + 1))


def test_a_full_disk_at_boot_still_opens_and_recovers(small_fs: Path) -> None:
    """The daemon restarts onto a full disk: the ledger opens (reading needs no space),
    appends fail within the bound, and the first free byte lets them through."""
    d = small_fs / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    led.append(_decided(1))
    led.close()
    filler = _fill(small_fs)
    led = RunLedger(str(d), clock=Clock(T0), sync_timeout=0.5, retry_min=0.05,
                    retry_max=0.2)
    try:
        assert led.query(Query(limit=5))[0][0]["run_id"] == 1
        run_id = 1
        while True:  # the page the file ends in takes a few lines more
            run_id += 1
            assert run_id < 100, "the disk never filled"
            try:
                led.append(_decided(run_id))
            except LedgerUnavailable:
                break
        filler.unlink()
        deadline = time.monotonic() + WAIT
        while led.stats().queued and time.monotonic() < deadline:
            time.sleep(0.05)
        assert led.append(_decided(run_id + 1)) == run_id + 1
    finally:
        led.close()
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.head_seq, res.lines) == (True, run_id + 1, run_id + 1), res.error


def test_the_daemon_on_a_full_disk_refuses_runs_cleanly_and_goes_on(
        world: World, full_state: Path, daemons: Daemons) -> None:
    """The whole state dir full (state.json, logs and ledger): a trigger is refused
    with the disk's reason, not an internal error, and the daemon logs one line, no
    traceback; once space is back the next trigger runs, with the next run id."""
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n\n'
                         '[harness.tick]\nkind = "oneshot"\nargv = ["true"]\n'
                         'schedule = "@every 1s"\n')
    daemons.start()
    assert world.harness("trigger", "ok", "--wait").returncode == 0
    filler = _fill(full_state)
    res = world.harness("trigger", "ok")
    assert res.returncode == 1
    assert res.stderr.endswith("cannot write: No space left on device (unavailable)\n"), \
        res.stderr
    until("a scheduled window to fail", lambda: "harness tick: no record for the window(s) "
          "up to " in daemons.stderr())
    filler.unlink()
    res = world.harness("trigger", "ok", "--wait")
    assert (res.returncode, res.stderr) == (0, "ok run 2: success\n")  # the run had no output
    assert [(r["run_id"], r["outcome"]) for r in runs_of(world, "ok")] == [
        (2, "success"), (1, "success")]
    verify_ok(world)
    assert "Traceback" not in daemons.stderr()


def test_a_window_the_full_disk_refused_runs_late_once_space_is_back(
        world: World, full_state: Path, daemons: Daemons) -> None:
    """A scheduled window that could get no run id (state.json on a full disk) is not
    dropped: it is decided again 5 s later, and with space back by then it runs late
    under its own window. It used to leave no record at all: the ticker moved past it."""
    daemons.write_config('[harness.tick]\nkind = "oneshot"\nargv = ["true"]\n'
                         'schedule = "@every 10s"\n')
    daemons.start()
    filler = _fill(full_state)
    refused = until("a window to be refused", lambda: re.search(
        r"harness tick: no record for the window\(s\) up to (\S+) yet, deciding them again "
        r"in 5s: .*: cannot write: No space left on device\n", daemons.stderr()))
    filler.unlink()  # well within the 5 s, and the next window is 10 s on
    window = refused.group(1)
    rec = until("the refused window's run to end", lambda: next(
        (r for r in runs_of(world, "tick")
         if r.get("window") == window and r["outcome"] != "running"), None), WAIT)
    assert (rec["trigger"], rec["outcome"], rec["exit_code"]) == ("schedule", "success", 0)
    assert rec["started_at"] > window  # late, not at its window
    verify_ok(world)
    assert "Traceback" not in daemons.stderr()


def test_a_resident_whose_restart_got_no_run_id_comes_back_once_space_is_back(
        world: World, full_state: Path, daemons: Daemons) -> None:
    """A resident that exits while state.json cannot take the next run id is tried again
    after 5 s (doubling) instead of staying down for good, and comes back with the next id
    once space is back. The failed tries take no id."""
    go = world.root / "go"
    daemons.write_config(f'[harness.w]\nkind = "resident"\nrestart = "always"\n'
                         f'restart_delay = "100ms"\n'
                         f'argv = ["sh", "-c", "while [ ! -e {go} ]; do sleep 0.05; done"]\n')
    daemons.start()
    until("run 1 up", lambda: [(r["run_id"], r["outcome"]) for r in runs_of(world, "w")]
          == [(1, "running")])
    filler = _fill(full_state)
    go.touch()  # run 1 exits; its restart needs run id 2
    until("the restart to be refused", lambda: "harness w: the restart got no run id, trying "
          "again in 5s: " in daemons.stderr())
    go.unlink()
    filler.unlink()
    rec = until("run 2", lambda: next((r for r in runs_of(world, "w") if r["run_id"] == 2),
                                      None), WAIT)
    assert (rec["trigger"], rec["outcome"]) == ("restart", "running")
    assert [r["run_id"] for r in runs_of(world, "w")] == [2, 1]
    verify_ok(world)
    assert "Traceback" not in daemons.stderr()


def test_a_resident_whose_autostart_got_no_run_id_starts_once_space_is_back(
        world: World, full_state: Path, daemons: Daemons) -> None:
    """The daemon boots on a full disk: the resident's autostart gets no run id, is tried
    again, and starts (trigger autostart, run 1) once space is back. It used to stay down
    until an operator started it."""
    daemons.write_config('[harness.w]\nkind = "resident"\nargv = ["sleep", "600"]\n')
    (full_state / "harness").mkdir(mode=0o700)  # the daemon's dirs, before the disk fills
    filler = _fill(full_state)
    daemons.start()
    until("the autostart to be refused", lambda: "harness w: the autostart got no run id, "
          "trying again in 5s: " in daemons.stderr())
    assert runs_of(world, "w") == []
    filler.unlink()
    rec = until("run 1", lambda: next(iter(runs_of(world, "w")), None), WAIT)
    assert (rec["run_id"], rec["trigger"], rec["outcome"]) == (1, "autostart", "running")
    verify_ok(world)
    assert "Traceback" not in daemons.stderr()


def test_a_resident_whose_release_got_no_run_id_starts_once_space_is_back(
        world: World, full_state: Path, daemons: Daemons) -> None:
    """Operating hours open at the next minute while the disk is full: the release gets
    no run id and is tried again, so the resident starts (trigger release) once space is
    back. It used to stay down for the whole open window. Hours have minute resolution:
    this waits for one boundary."""
    now = datetime.now(UTC)
    if now.second > 45:  # the daemon boots and the disk fills before the boundary
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    opens = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if opens.date() != now.date():
        pytest.skip("the window would open at midnight")
    daemons.write_config('[harness.w]\nkind = "resident"\nargv = ["sleep", "600"]\n'
                         f'operating_hours = "TZ=UTC Mon-Sun {opens:%H:%M}-24:00"\n')
    daemons.start()
    filler = _fill(full_state)
    until("the release to be refused", lambda: "harness w: the release got no run id, "
          "trying again in 5s: " in daemons.stderr(), 120)
    assert runs_of(world, "w") == []
    filler.unlink()
    rec = until("run 1", lambda: next(iter(runs_of(world, "w")), None), WAIT)
    assert (rec["run_id"], rec["trigger"], rec["outcome"]) == (1, "release", "running")
    assert rec["started_at"] >= f"{opens:%Y-%m-%dT%H:%M:%S}"
    verify_ok(world)
    assert "Traceback" not in daemons.stderr()


def test_a_prune_on_a_full_disk_keeps_every_file_and_finishes_once_space_is_back(
        small_fs: Path) -> None:
    """Retention due on a full disk: the open run in the oldest file must be carried into
    today's file before that file goes, and that write cannot land. The prune keeps the
    file (and every later one), changes no run, fails within the writer's bound, and the
    next prune, once space is back, carries the run and deletes the file."""
    d = small_fs / "ledger"
    clock = Clock(T0 - 3 * 86_400 * 10**9)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "w", "run_id": 1, "kind": "resident",
                "trigger": "autostart"})
    led.append(_decided(1))
    led.close()
    old = sorted(p.name for p in d.glob("*.jsonl"))
    filler = _fill(small_fs)
    led = RunLedger(str(d), clock=Clock(T0), retention_ns=86_400 * 10**9,
                    sync_timeout=0.5, retry_min=0.05, retry_max=0.2)
    try:
        res = led.prune()
        assert res.deleted == [] and res.carried_forward == 0
        assert res.error is not None and "No space left on device" in res.error, res.error
        assert (d / old[0]).exists() and not (d / "CHAIN").exists()
        assert led.stats().queued == 1  # the carried line, written once space is back
        assert [(o["harness"], o["run_id"]) for o in led.open_records()] == [("w", 1)]

        filler.unlink()
        deadline = time.monotonic() + WAIT
        while led.stats().queued and time.monotonic() < deadline:
            time.sleep(0.05)
        res = led.prune()
        assert (res.error, res.deleted) == (None, [old[0][:10]])
        assert [(o["harness"], o["run_id"]) for o in led.open_records()] == [("w", 1)]
    finally:
        led.close()
    # Carried once: the line queued by the failed prune; the second prune sees the run's
    # newest opened line outside the doomed file and writes no second one.
    today = [json.loads(x) for x in (d / "2026-06-15.jsonl").read_bytes().splitlines()]
    assert [(o["seq"], o["type"], o["harness"], o["run_id"]) for o in today] == [
        (3, "opened", "w", 1)]
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.anchor) == (True, "CHAIN seq 2"), res.error
    found, _, _ = scan(str(d), Query(limit=10))
    assert [(r.harness, r.run_id, r.opened, r.closed) for r in found] == [
        ("w", 1, True, False)]
