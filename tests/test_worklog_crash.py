"""The work ledger under real crashes and real contention.

Child processes append through `WorkLedger` and are SIGKILLed at random moments
(fixed seeds); the parent then reopens (a torn tail is cut), appends and verifies,
and checks that every row a child saw acknowledged survived. Two processes race to
open one run: exactly one writes, and the other's refusal names the winner's pid.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.ledger.files import FaultyFiles, FileLayer
from harness.worklog import WorkLedgerError
from harness.worklog import resume as resume_mod
from harness.worklog.replay import replay
from harness.worklog.rows import ledger_dir
from harness.worklog.store import WorkLedger
from harness.worklog.verify import verify_dir

_APPENDER = r"""
import random, sys
from harness.worklog.store import WorkLedger
workdir, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
with WorkLedger(workdir, "crash") as wl:
    print("ready", wl.head[0], flush=True)
    n = 0
    while True:
        n += 1
        # Mostly small rows; now and then a large one, whose write(2) a SIGKILL can
        # cut short (the kernel checks for fatal signals between pages).
        size = rng.choice([0, 0, 0, 10, 200, 300_000, 900_000])
        row = wl.record("task.started", f"t{n % 7}", {"attempt": n, "blob": "x" * size})
        print("acked", row["seq"], row["entry_hash"], flush=True)
"""


def _acked(out: str) -> list[tuple[int, str]]:
    acks = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "acked":
            acks.append((int(parts[1]), parts[2]))
    return acks


def test_sigkill_mid_append_then_recover_append_verify(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    total_acked = 0
    torn_seen = 0
    for rnd in range(8):
        child = subprocess.Popen(
            [sys.executable, "-c", _APPENDER, str(tmp_path), str(rng.randrange(1 << 30))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        ready = child.stdout.readline()
        assert ready.startswith("ready"), child.stderr.read() if child.stderr else ready
        time.sleep(rng.uniform(0.02, 0.35))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        acks = _acked(out)
        total_acked += len(acks)

        d = ledger_dir(tmp_path, "crash")
        res = verify_dir(d)
        assert res.ok, res.describe()
        if rnd == 3 and res.torn_tail is None:
            # Make sure this round exercises recovery of a fragment even if the kill
            # happened to land between writes: a crash mid-write leaves exactly this.
            # (A kill that landed mid-write left its own fragment: that one is recovered.)
            seg = d / "000000.jsonl"
            with open(seg, "ab") as f:
                f.write(b'{"entry_hash":"' + b"e" * 30)
            res = verify_dir(d)
            assert res.ok and res.torn_tail == b'{"entry_hash":"' + b"e" * 30
        if res.torn_tail is not None:
            torn_seen += 1
        # Every acknowledged row is in the chain, with the hash the child was given.
        rows_before = None
        with WorkLedger(tmp_path, "crash") as wl:
            assert wl.recovered_tail == res.torn_tail
            assert wl.head == (res.entry_count, res.head_hash)
            rows_before = wl.rows()
            for seq, digest in acks:
                assert rows_before[seq - 1]["entry_hash"] == digest
            row = wl.record("run.resumed", None, {"round": rnd})
        assert row["seq"] == res.entry_count + 1
        after = verify_dir(d)
        assert (after.ok, after.entry_count, after.torn_tail, after.head_hash) == (
            True, res.entry_count + 1, None, row["entry_hash"])
        assert replay(rows_before).resumes == rnd
    assert total_acked > 8  # the children did real work before each kill
    assert torn_seen >= 1


_CUTTER = r"""
import os, signal, sys
from harness.ledger.files import FileLayer
from harness.worklog.store import WorkLedger
workdir, nth, cut = sys.argv[1], int(sys.argv[2]), sys.argv[3]

class KillMidWrite(FileLayer):
    # The nth write puts only part of its bytes down and the process dies on the spot:
    # the on-disk state of a crash inside write(2), made deterministic.
    writes = 0

    def write(self, fd, data):
        KillMidWrite.writes += 1
        if KillMidWrite.writes == nth:
            keep = {"one": 1, "half": len(data) // 2, "no-newline": len(data) - 1,
                    "whole": len(data)}[cut]
            os.write(fd, data[:keep])
            os.kill(os.getpid(), signal.SIGKILL)
        return super().write(fd, data)

with WorkLedger(workdir, "cut", files=KillMidWrite()) as wl:
    for n in range(1, 100):
        row = wl.record("task.completed", f"t{n}", {"n": n, "commit": "ab" * 20})
        print("acked", row["seq"], row["entry_hash"], flush=True)
"""


@pytest.mark.parametrize("cut", ["one", "half", "no-newline", "whole"])
def test_sigkill_inside_write_leaves_a_tail_that_recovery_cuts(tmp_path: Path, cut: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CUTTER, str(tmp_path), "5", cut],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    acks = _acked(out.stdout)
    assert [s for s, _ in acks] == [1, 2, 3, 4]
    d = ledger_dir(tmp_path, "cut")
    res = verify_dir(d)
    assert res.ok, res.describe()
    if cut in ("whole", "no-newline"):
        # Written but never synced or acknowledged: a whole row is still a row, with or
        # without its newline (no crash leaves a whole row it did not write in full).
        assert (res.entry_count, res.torn_tail) == (5, None)
    else:
        assert res.entry_count == 4 and res.head_hash == acks[-1][1]
        assert res.torn_tail is not None and not res.torn_tail.endswith(b"\n")
    size_before = (d / "000000.jsonl").stat().st_size
    with WorkLedger(tmp_path, "cut") as wl:
        assert wl.recovered_tail == res.torn_tail
        row = wl.record("run.resumed", None, {"after": cut})
    assert row["seq"] == res.entry_count + 1
    after = verify_dir(d)
    assert (after.ok, after.entry_count, after.torn_tail) == (True, res.entry_count + 1, None)
    torn = len(res.torn_tail or b"")
    terminated = 1 if cut == "no-newline" else 0  # the writer first ends the whole row
    assert (d / "000000.jsonl").stat().st_size == size_before - torn + terminated + len(
        json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)) + 1


_RACER = r"""
import json, os, sys, time
from pathlib import Path
from harness.worklog.store import LedgerLocked, WorkLedger
workdir, go, release = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
print("waiting", flush=True)
while not go.exists():
    time.sleep(0.001)
try:
    wl = WorkLedger(workdir, "race")
except LedgerLocked as exc:
    print(json.dumps({"ok": False, "pid": os.getpid(), "error": str(exc),
                      "holder": exc.holder}), flush=True)
    sys.exit(3)
with wl:
    wl.record("run.open", None, {"holder": os.getpid()})
    print(json.dumps({"ok": True, "pid": os.getpid()}), flush=True)
    # Hold the run until the parent has heard from both racers.
    while not release.exists():
        time.sleep(0.005)
"""


@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_race_to_open(tmp_path: Path, attempt: int) -> None:
    go, release = tmp_path / f"go-{attempt}", tmp_path / f"release-{attempt}"
    kids = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path), str(go), str(release)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for k in kids:
            assert k.stdout is not None and k.stdout.readline() == "waiting\n"
        go.touch()
        said = []
        for k in kids:
            assert k.stdout is not None
            line = k.stdout.readline()
            assert line, k.stderr.read() if k.stderr else "no output"
            said.append(json.loads(line))
    finally:
        release.touch()
        codes = [k.wait(timeout=60) for k in kids]
        for k in kids:
            for pipe in (k.stdout, k.stderr):
                if pipe is not None:
                    pipe.close()
    winners = [r for r in said if r["ok"]]
    losers = [(rc, r) for rc, r in zip(codes, said, strict=True) if not r["ok"]]
    assert len(winners) == 1 and len(losers) == 1, said
    win_pid = winners[0]["pid"]
    rc, loser = losers[0]
    assert rc == 3 and sorted(codes) == [0, 3]
    assert f"held by pid {win_pid} on " in loser["error"]
    assert loser["holder"]["pid"] == win_pid
    with WorkLedger(tmp_path, "race") as wl:
        rows = wl.rows()
    assert [r["payload"] for r in rows] == [{"holder": win_pid}]
    assert verify_dir(ledger_dir(tmp_path, "race")).entry_count == 1


def test_sync_failure_is_a_work_ledger_error_and_the_row_lands_later(tmp_path: Path) -> None:
    faulty = FaultyFiles()
    with WorkLedger(tmp_path, "eio", files=faulty, sync_timeout=5.0) as wl:
        faulty.inject("sync", errno=errno.EIO, times=1)
        with pytest.raises(WorkLedgerError, match="not confirmed durable") as ei:
            wl.record("run.open", None, {"n": 1})
        assert ei.value.exit_code == 2
        # The writer keeps the line queued and retries it in order (with backoff);
        # once it is down, the next row follows it.
        deadline = time.monotonic() + 10
        while wl.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert wl.pending() == 0
        row = wl.record("task.scheduled", "t1", {"deps": []})
        assert row["seq"] == 2
    res = verify_dir(ledger_dir(tmp_path, "eio"))
    assert (res.ok, res.entry_count) == (True, 2)


def test_lock_of_a_killed_holder_is_free(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(tmp_path), "7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().startswith("ready")
    lock = ledger_dir(tmp_path, "crash") / ".lock"
    assert json.loads(lock.read_bytes())["pid"] == child.pid
    os.kill(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)
    with WorkLedger(tmp_path, "crash") as wl:
        assert json.loads(lock.read_bytes())["pid"] == os.getpid()
        wl.record("run.resumed", None, {})


# -- a resume that cannot write all it must -------------------------------------------------

RESUME_GOAL: list[tuple[str, str | None, dict[str, object]]] = [
    ("run.open", None, {}),
    ("task.scheduled", "t1", {"deps": []}),
    ("task.scheduled", "t2", {"deps": []}),
    ("task.started", "t1", {}),
]


class FullOn(FileLayer):
    """ENOSPC on every write whose bytes hold `marker` (the first `times` of them, or all):
    a disk that fills up exactly under one file."""

    def __init__(self, marker: bytes, times: int | None = None) -> None:
        self.marker = marker
        self.times = times
        self.failed = 0

    def write(self, fd: int, data: bytes) -> int:
        if self.marker in data and (self.times is None or self.failed < self.times):
            self.failed += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)


def _resumed_once(tmp_path: Path) -> tuple[Path, dict[str, bytes], bytes]:
    """A run resumed once (signals t1, t2 on disk); its signal files and ledger bytes."""
    with WorkLedger(tmp_path, "rs") as wl:
        for kind, task, payload in RESUME_GOAL:
            wl.record(kind, task, payload)
    first = resume_mod.resume(tmp_path, "rs")
    assert first.frontier == ["t1", "t2"] and first.resume_seq == 5
    sig = resume_mod.resume_dir(tmp_path)
    return sig, {p.name: p.read_bytes() for p in sig.iterdir()}, \
        (ledger_dir(tmp_path, "rs") / "000000.jsonl").read_bytes()


def test_a_resume_whose_signal_cannot_be_written_records_nothing(tmp_path: Path) -> None:
    sig, before, ledger = _resumed_once(tmp_path)
    # t1's signal is replaced first, then the disk is full under t2's.
    full = FullOn(b'"task_id":"t2"')
    with pytest.raises(WorkLedgerError) as ei:
        resume_mod.resume(tmp_path, "rs", files=full)
    assert full.failed == 1
    assert ei.value.exit_code == 2
    assert str(ei.value) == (
        f"cannot write resume signal {sig / 'rs__t2.signal'}: No space left on device; the "
        "resume was not recorded and the signals it wrote were removed")
    # No row, and the signal directory is as the first resume left it (t1's restored).
    assert (ledger_dir(tmp_path, "rs") / "000000.jsonl").read_bytes() == ledger
    assert {p.name: p.read_bytes() for p in sig.iterdir()} == before
    assert json.loads(before["rs__t1.signal"])["resume_seq"] == 5


def test_a_resume_whose_row_cannot_be_written_removes_its_signals(tmp_path: Path) -> None:
    sig, before, ledger = _resumed_once(tmp_path)
    (sig / "rs__t1.signal").unlink()  # a watcher took t1's signal
    before.pop("rs__t1.signal")
    full = FullOn(b'"kind":"run.resumed"')
    with pytest.raises(WorkLedgerError) as ei:
        resume_mod.resume(tmp_path, "rs", files=full, sync_timeout=1.0)
    assert full.failed >= 1
    segment = ledger_dir(tmp_path, "rs") / "000000.jsonl"
    message = str(ei.value)
    assert message.startswith("work ledger 'rs': run.resumed row was not confirmed durable: ")
    assert message.endswith(f"; the resume was not recorded in {segment} and the signals it "
                            "wrote were removed")
    assert segment.read_bytes() == ledger
    assert {p.name: p.read_bytes() for p in sig.iterdir()} == before
    assert verify_dir(ledger_dir(tmp_path, "rs")).entry_count == 5


class FullUnderAStrayLine(FullOn):
    """`FullOn` for the run.resumed row, while something outside the writer's lock (a hand
    edit, a broken tool) appends a complete line nested past any JSON decoder's depth each
    time the writer cuts its failed write back: the last line the resume then reads to
    learn whether its row landed."""

    STRAY = b"[" * 100_000 + b"\n"

    def __init__(self, segment: Path) -> None:
        super().__init__(b'"kind":"run.resumed"')
        self.segment = segment

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        with open(self.segment, "ab") as fh:
            fh.write(self.STRAY)


def test_a_resume_that_finds_a_deeply_nested_last_line_removes_its_signals(
        tmp_path: Path) -> None:
    """The resume's row was not confirmed, and the ledger's last line is nested too
    deeply to decode: that is not the row, so the resume reports it was not recorded,
    naming the segment, and removes its signals (a RecursionError escaped the resume,
    leaving the signals of an unrecorded resume behind)."""
    sig, before, ledger = _resumed_once(tmp_path)
    segment = ledger_dir(tmp_path, "rs") / "000000.jsonl"
    full = FullUnderAStrayLine(segment)
    with pytest.raises(WorkLedgerError) as ei:
        resume_mod.resume(tmp_path, "rs", files=full, sync_timeout=1.0)
    assert full.failed >= 1
    assert ei.value.exit_code == 2
    message = str(ei.value)
    assert message.startswith("work ledger 'rs': run.resumed row was not confirmed durable: ")
    assert message.endswith(f"; the resume was not recorded in {segment} and the signals it "
                            "wrote were removed")
    assert segment.read_bytes() == ledger + full.STRAY
    assert {p.name: p.read_bytes() for p in sig.iterdir()} == before


def test_a_row_that_lands_late_keeps_its_signals(tmp_path: Path) -> None:
    """The writer keeps a row it could not write and retries it: when the row lands (while
    `record` waits, or as the ledger closes), the resume stands, signals and all."""
    sig, _, _ = _resumed_once(tmp_path)
    full = FullOn(b'"kind":"run.resumed"', times=1)
    res = resume_mod.resume(tmp_path, "rs", files=full, sync_timeout=30.0)
    assert full.failed == 1
    rows = [json.loads(x) for x in
            (ledger_dir(tmp_path, "rs") / "000000.jsonl").read_bytes().splitlines()]
    assert [r["kind"] for r in rows[-2:]] == ["run.resumed", "run.resumed"]
    assert (res.resume_seq, res.resumed_head) == (6, rows[-1]["entry_hash"])
    signals = {p.name: json.loads(p.read_bytes()) for p in sig.iterdir()}
    assert sorted(signals) == ["rs__t1.signal", "rs__t2.signal"]
    assert {(s["resume_seq"], s["head_hash"]) for s in signals.values()} == {
        (6, rows[-1]["entry_hash"])}


def test_signals_name_the_row_recorded_after_them(tmp_path: Path) -> None:
    sig, before, _ = _resumed_once(tmp_path)
    rows = [json.loads(x) for x in
            (ledger_dir(tmp_path, "rs") / "000000.jsonl").read_bytes().splitlines()]
    assert rows[-1]["kind"] == "run.resumed"
    for body in before.values():
        signal_row = json.loads(body)
        assert (signal_row["resume_seq"], signal_row["head_hash"]) == (
            rows[-1]["seq"], rows[-1]["entry_hash"])
    assert [p.name for p in sig.iterdir() if p.name.startswith(".")] == []
