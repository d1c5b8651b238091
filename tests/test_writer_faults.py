"""The writer under random schedules of disk faults: nothing acknowledged is ever lost.

Threads append synced and buffered lines to two day files while the file layer fails
writes and syncs (EIO, ENOSPC, torn half-writes, short writes), cannot cut a torn write
back or read it back, cannot open files, runs slow past the callers' bound, and while
a day file is deleted under the writer. Then the disk heals and the writer closes.
Whatever the schedule:

- every line appended was given the next seq, and lands on disk exactly once (unless
  it was committed before its file was deleted: then it went with the file);
- each file holds its lines in seq order; with no file deleted, the chain verifies;
- commits come once per seq, in seq order, and a synced append returns only after its
  line was committed; one that fails says so within the bound and its line stays queued.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.ledger.chain import ZERO_HASH
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.files import FaultyFiles, make_private_dir
from harness.ledger.runledger import _DaySealer
from harness.ledger.verify import verify_run_ledger
from harness.ledger.writer import Entry, Writer

_FIXED = not os.environ.get("HARNESS_DAMAGE_EXPLORE")
DAYS = ("2026-11-30", "2026-12-01")
BOUND = 0.2  # the callers' sync_timeout: short, so failing schedules stay quick

_ARM = st.tuples(st.just("fault"),
                 st.sampled_from(["write", "sync", "open", "truncate", "read"]),
                 st.sampled_from(["eio", "enospc", "partial", "short", "slow"]),
                 st.one_of(st.none(), st.integers(1, 3)))
_APPEND = st.tuples(st.just("append"), st.integers(1, 4), st.booleans(), st.integers(0, 1))
_OTHER = st.one_of(st.tuples(st.just("clear")), st.tuples(st.just("delete"), st.integers(0, 1)))
# A phase arms faults, then appends under them, then perhaps clears or deletes a file.
_PHASE = st.tuples(st.lists(_ARM, max_size=2), _APPEND, st.lists(_OTHER, max_size=1)).map(
    lambda p: [*p[0], p[1], *p[2]])
_STEPS = st.lists(_PHASE, min_size=1, max_size=6).map(lambda ps: [s for p in ps for s in p])


class _Commits:
    """The writer's commits, one batch per pass, as `on_commit` reports them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seqs: list[int] = []
        self.batches: list[list[int]] = []

    def __call__(self, entries: list[Entry]) -> None:
        with self.lock:
            self.seqs.extend(e.seq for e in entries)
            self.batches.append([e.seq for e in entries])

    def upto(self, n: int) -> set[int]:
        """The seqs of the first `n` batches."""
        with self.lock:
            return {s for b in self.batches[:n] for s in b}

    def has(self, seq: int) -> bool:
        with self.lock:
            return seq in self.seqs


def _arm(files: FaultyFiles, op: str, kind: str, times: int | None) -> None:
    if kind == "slow":
        files.inject(op, delay=0.3, times=times)  # past the bound, then it succeeds
    elif kind == "short":
        files.inject(op, short=True, times=times)
    else:
        code = errno.ENOSPC if kind == "enospc" else errno.EIO
        files.inject(op, errno=code, partial=kind == "partial", times=times)


def _on_disk(directory: Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for day in DAYS:
        path = directory / f"{day}.jsonl"
        objs = []
        if path.exists():
            for raw in path.read_bytes().split(b"\n"):
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue  # a torn fragment: readers skip it, verify reports it
                objs.append(obj)
        out[day] = objs
    return out


@settings(max_examples=150 if _FIXED else 500, deadline=None, derandomize=_FIXED,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_the_writer_under_random_faults(tmp_path_factory: Any, steps: list[tuple[Any, ...]]
                                        ) -> None:
    directory = tmp_path_factory.mktemp("faults") / "ledger"
    make_private_dir(str(directory))
    files = FaultyFiles()
    commits = _Commits()
    w = Writer(_DaySealer(str(directory)), files=files, on_commit=commits, next_seq=1,
               head_hash=ZERO_HASH, sync_timeout=BOUND, retry_min=0.005, retry_max=0.05)
    w.name_check_every = 0.0
    lock = threading.Lock()
    given_seqs: list[int] = []
    day_of: dict[int, str] = {}
    deletes: list[tuple[str, int]] = []  # (day, batches committed when it was deleted)
    problems: list[str] = []
    run_id = 0
    deleted = False

    def append(rid: int, day: str, sync: bool) -> None:
        obj = {"v": 1, "type": "opened", "at": f"{day}T10:00:00.000000000Z",
               "harness": "h", "run_id": rid}
        t0 = time.monotonic()
        try:
            seq = w.append(obj, harness="h", run_id=rid, sync=sync)
        except LedgerUnavailable as exc:
            took = time.monotonic() - t0
            if took > BOUND + 1.0:  # generous: a loaded machine must not fail this
                problems.append(f"run {rid} failed after {took:.2f}s, past the bound")
            seq = exc.seq
            if seq is None:
                problems.append(f"run {rid}: LedgerUnavailable without a seq: {exc}")
                return
        else:
            if sync and not commits.has(seq):
                problems.append(f"seq {seq} acknowledged before it was committed")
        with lock:
            given_seqs.append(seq)
            day_of[seq] = day

    try:
        for step in steps:
            if step[0] == "append":
                threads = []
                for _ in range(step[1]):
                    run_id += 1
                    threads.append(threading.Thread(
                        target=append, args=(run_id, DAYS[step[3]], step[2])))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
            elif step[0] == "fault":
                _arm(files, step[1], step[2], step[3])
            elif step[0] == "clear":
                files.clear()
            else:
                path = directory / f"{DAYS[step[1]]}.jsonl"
                if path.exists():
                    path.unlink()
                    deleted = True
                    with commits.lock:
                        deletes.append((DAYS[step[1]], len(commits.batches)))
        files.clear()
        w.close(timeout=30.0)
    finally:
        files.clear()
        w.close(timeout=5.0)

    event(f"faults hit: {w.stats().append_errors > 0}, a file deleted: {deleted}")
    assert problems == [], (steps, problems)
    n = len(given_seqs)
    assert sorted(given_seqs) == list(range(1, n + 1)), steps
    assert commits.seqs == list(range(1, n + 1)), steps  # once each, in order, all of them
    disk = _on_disk(directory)
    for day, objs in disk.items():
        seqs = [o["seq"] for o in objs]
        assert seqs == sorted(set(seqs)), (steps, day, seqs)
        assert all(day_of[s] == day for s in seqs), (steps, day, seqs)
    found = sorted(o["seq"] for objs in disk.values() for o in objs)
    assert len(found) == len(set(found)), (steps, found)  # no seq twice, across files
    # Lines committed before their file was deleted went with it. So may the lines of the
    # one pass in flight at the unlink: it may have found the file still linked after its
    # sync, an instant before. Every later pass checks after the unlink and must rewrite.
    gone_ok = {s for day, k in deletes for s in commits.upto(k + 1) if day_of[s] == day}
    missing = set(range(1, n + 1)) - set(found)
    assert missing <= gone_ok, (steps, sorted(missing - gone_ok))
    if not deleted and n:
        res = verify_run_ledger(str(directory), parallel=False)
        assert (res.ok, res.head_seq) == (True, n), (steps, res.error)
