"""The run ledger's day files damaged at random: every reader stays total and they agree.

A real ledger is written through the engine, then its bytes are damaged the ways a disk,
an editor or a bad copy damages them (a byte changed, a file cut short, a line lost,
doubled or moved, junk between lines, a stray file). Over the damaged files:

- the offline reader, `harness ledger verify` and the daemon's boot never raise;
- the daemon's answer from memory is the answer the files give;
- a record none of whose lines was touched reads exactly as before the damage;
- the boot continues after the highest whole seq, and a chain that verified before the
  boot still verifies with the boot's new line on it;
- damage confined to the newest file's tail (a torn write) leaves the chain verifying.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.ledger.query import Query
from harness.ledger.reader import scan, valid_line
from harness.ledger.runledger import RunLedger
from harness.ledger.verify import verify_run_ledger
from harness.timefmt import format_ns
from harness.worklog import VerificationFailed
from harness.worklog.rows import ledger_dir
from harness.worklog.store import WorkLedger
from harness.worklog.verify import verify_dir
from ledgertools import DAY, HOUR, T0, Clock

# The same examples every run, so CI is never the first to meet one; HARNESS_DAMAGE_EXPLORE=1
# draws fresh ones (with --hypothesis-seed=N), as these properties were explored.
_FIXED = not os.environ.get("HARNESS_DAMAGE_EXPLORE")


def _history(d: Path) -> None:
    """Three days of runs of two harnesses: decided, closed, updated, one still open."""
    clock = Clock(T0 - 2 * DAY)
    led = RunLedger(str(d), clock=clock)
    try:
        for day in range(3):
            for h in ("nightly", "worker"):
                rid = day + 1
                clock.ns = T0 - (2 - day) * DAY + HOUR * (1 if h == "nightly" else 2)
                started = format_ns(clock.ns)
                led.append({"type": "opened", "harness": h, "run_id": rid, "kind": "oneshot",
                            "trigger": "schedule", "started_at": started})
                if (h, rid) == ("worker", 3):
                    continue  # still open
                clock.ns += 10 * 60 * 1_000_000_000
                led.append({"type": "closed", "harness": h, "run_id": rid,
                            "outcome": "success" if rid % 2 else "failed", "exit_code": rid,
                            "ended_at": format_ns(clock.ns), "duration_ms": 600_000})
                if h == "nightly":
                    led.append({"type": "updated", "harness": h, "run_id": rid,
                                "model": f"m-{rid}", "tokens": {"input": 10 * rid,
                                                                "output": rid}})
            clock.ns += HOUR
            led.append({"type": "decided", "harness": "nightly", "run_id": 100 + day,
                        "trigger": "schedule", "outcome": "missed", "windows": day + 1})
    finally:
        led.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("damaged") / "ledger"
    _history(d)
    return d


# -- damage --------------------------------------------------------------------------

_FILE = st.integers(0, 2)  # which of the three day files (oldest first)
_AT = st.floats(0, 1, allow_nan=False)  # where in it, as a fraction of its length

_OPS = st.one_of(
    st.tuples(st.just("flip"), _FILE, _AT, st.integers(0, 255)),
    st.tuples(st.just("cut"), _FILE, _AT),
    st.tuples(st.just("drop"), _FILE, _AT),
    st.tuples(st.just("double"), _FILE, _AT, _FILE, _AT),
    st.tuples(st.just("junk"), _FILE, _AT, st.binary(max_size=40)),
    # A number made one no float holds, or an integer too long to decode (the next digit
    # on from there gets it: in a string, it is just another byte changed).
    st.tuples(st.just("number"), _FILE, _AT, st.sampled_from([b"e999", b"9" * 4301])),
    # Blocks a crash left as zeros (delayed allocation: the size grew, the data never came).
    st.tuples(st.just("zeros"), _FILE, _AT, st.integers(1, 600)),
    # An editor's damage: a newline turned into a space joins two lines; a newline put in
    # front of a "{" cuts a line before a nested object (or leaves a blank line).
    st.tuples(st.just("join"), _FILE, _AT),
    st.tuples(st.just("split"), _FILE, _AT),
    st.tuples(st.just("stray"), st.sampled_from(["notes.txt", "2026-13-45.jsonl",
                                                 "2026-06-15.jsonl.bak", ".swp"])),
)


def _pick(n: int, at: float) -> int:
    return min(n - 1, int(at * n))


def _damage(d: Path, ops: list[tuple[Any, ...]]) -> None:
    days = sorted(d.glob("*.jsonl"))
    for op in ops:
        if op[0] == "stray":
            (d / op[1]).write_bytes(b"not a day file\n")
            continue
        path = days[op[1]]
        data = bytearray(path.read_bytes())
        if op[0] == "flip" and data:
            data[_pick(len(data), op[2])] = op[3]
        elif op[0] == "number":
            at = _pick(len(data) + 1, op[2])
            digit = next((i for i in range(at, len(data)) if data[i] in b"0123456789"), None)
            if digit is not None:
                data[digit + 1:digit + 1] = op[3]
        elif op[0] == "zeros":
            at = _pick(len(data) + 1, op[2])
            data[at:at + op[3]] = bytes(op[3])
        elif op[0] in ("join", "split"):
            at = data.find(b"\n" if op[0] == "join" else b"{", _pick(len(data) + 1, op[2]))
            if at >= 0:
                data[at:at + 1] = b" " if op[0] == "join" else b"\n{"
        elif op[0] == "cut":
            del data[_pick(len(data) + 1, op[2]):]
        elif op[0] in ("drop", "double", "junk"):
            lines = bytes(data).split(b"\n")
            i = _pick(len(lines), op[2])
            if op[0] == "drop":
                del lines[i]
            elif op[0] == "junk":
                lines.insert(i, op[3].replace(b"\n", b" "))
            else:
                other = days[op[3]]
                src = lines if other == path else other.read_bytes().split(b"\n")
                lines.insert(_pick(len(lines), op[4]), src[_pick(len(src), op[2])])
            data = bytearray(b"\n".join(lines))
        path.write_bytes(bytes(data))


def _is_json(raw: bytes) -> bool:
    try:
        msgspec.json.decode(raw)
    except msgspec.ValidationError:
        # A number msgspec holds no value for (1e999, 5,000 digits) stops the decoder
        # there: whether the rest is whole JSON is for a decoder that keeps it as bytes.
        try:
            msgspec.json.decode(raw, type=msgspec.Raw)
        except msgspec.DecodeError:
            return False
    except msgspec.DecodeError:
        return False
    return True


def _no_fragment(raw: bytes) -> bool:
    """Whether a complete line is whole JSON, but perhaps for bytes that are not UTF-8:
    not what a crash leaves, which is a line's first bytes."""
    return _is_json(raw.decode("utf-8", "replace").encode())


def _whole_lines_of(p: Path) -> list[bytes]:
    """The file's complete lines, without the JSON whitespace around them: a line's
    content is what its hash covers, and canonical JSON holds no whitespace, so only a
    byte at either end of a line can become whitespace and leave the line's content."""
    parts = [x.strip(b" \t\r") for x in p.read_bytes().split(b"\n")]
    out = [x for x in parts[:-1] if x]
    if parts[-1] and _is_json(parts[-1]):
        out.append(parts[-1])  # a whole last line may lack only its newline
    return out


def _chain_intact(template: Path, d: Path) -> bool:
    """Whether the lines that hold JSON are the ledger's own: each once, in seq order
    within each file, and all of them but perhaps the newest few (what a torn or lost
    last write leaves). Which day file holds a line is not the chain's business (a clock
    step puts lines in another day's file). Fragments that are no JSON are what a crash
    leaves; verify reports them and passes."""
    orig = sorted(_whole_lines(template), key=lambda raw: json.loads(raw)["seq"])
    now: list[bytes] = []
    for p in sorted(d.glob("*.jsonl")):
        mine = [x for x in _whole_lines_of(p) if _no_fragment(x)]
        if any(x not in orig for x in mine):
            return False
        if mine != sorted(mine, key=orig.index):
            return False
        now.extend(mine)
    return sorted(now, key=orig.index) == orig[: len(now)]


def _whole_lines(d: Path) -> list[bytes]:
    return [raw for p in sorted(d.glob("*.jsonl")) for raw in _whole_lines_of(p)]


class _Seq(msgspec.Struct):
    seq: int


def _seq_of(raw: bytes) -> int | None:
    """The seq of a line that is JSON with an integer seq, whatever else it holds (the
    decoder skips the other fields unread, as the boot's tail reader does)."""
    try:
        return msgspec.json.decode(raw, type=_Seq).seq
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if valid_line(obj) else None


def _records(d: Path) -> dict[tuple[str, int], dict[str, Any]]:
    found, _, _ = scan(str(d), Query())
    return {(r.harness, r.run_id): r.to_json() for r in found}


class Boot:
    """A daemon's boot over a ledger: its answer, the files' answer, its open runs (and
    those the files hold), and the seq it issues next."""

    def __init__(self, d: Path, window: int = DAY) -> None:
        led = RunLedger(str(d), clock=Clock(T0 + HOUR), window_ns=window)
        try:
            self.mem, _ = led.query(Query(limit=1000))
            found, _, self.stats = scan(str(d), Query(limit=1000))
            self.files = [r.to_json() for r in found]
            self.files_open = {(r.harness, r.run_id) for r in found if r.opened and not r.closed}
            self.open = {(o["harness"], o["run_id"]) for o in led.open_records()}
            self.seq = led.append({"type": "opened", "harness": "after",
                                   "run_id": led.max_run_id("after") + 1, "kind": "oneshot",
                                   "trigger": "manual", "started_at": format_ns(T0 + HOUR)})
        finally:
            led.close()

    def record(self, harness: str, run_id: int) -> dict[str, Any]:
        return next(r for r in self.mem if r["harness"] == harness and r["run_id"] == run_id)


# -- the property -----------------------------------------------------------------------

@settings(max_examples=150, deadline=None, derandomize=_FIXED,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(ops=st.lists(_OPS, min_size=1, max_size=4), window=st.sampled_from([1, DAY, 7 * DAY]))
# The closed line of worker 1 joined to the next line, and nightly 1's updated line cut in
# front of its `tokens` object, in one block of an old file: a stream decoder read the
# three lines as three objects, and the boot took worker 1 for closed.
@example(ops=[("join", 0, 0.84), ("split", 0, 0.47)], window=1)
# A crash fragment holding a number no float holds: whole JSON to a decoder that stops at
# the number, as the oracle's was (seed 9 found it; verify was right).
@example(ops=[("number", 2, 0.234375, b"e999"), ("cut", 2, 0.5), ("cut", 2, 0.5)], window=1)
def test_damaged_day_files(template: Path, ops: list[tuple[Any, ...]], window: int) -> None:
    base_lines = _whole_lines(template)
    base = _records(template)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ledger"
        shutil.copytree(template, d)
        _damage(d, ops)

        # Totality: the two readers of the files answer, whatever the bytes.
        after = _records(d)
        before_boot = verify_run_ledger(str(d), parallel=False)
        assert before_boot.exists
        # verify passes exactly when the ledger's own lines are all there, in place.
        assert before_boot.ok == _chain_intact(template, d), (ops, before_boot.error)

        # An untouched record reads as before: all of its lines are still there, once
        # each and whole, and no other whole line claims its key.
        lines_now = _whole_lines(d)
        now = [_parse(raw) for raw in lines_now]
        count = {raw: lines_now.count(raw) for raw in base_lines}
        touched = {(o["harness"], o["run_id"]) for raw, o in zip(lines_now, now, strict=True)
                   if o is not None and raw not in count}
        for raw in base_lines:
            o = json.loads(raw)
            if count[raw] != 1:
                touched.add((o["harness"], o["run_id"]))
        for key, rec in base.items():
            if key not in touched:
                assert after.get(key) == rec, (key, ops)

        # The boot: total, agrees with the files, and issues no seq that a line readers
        # keep holds, nor any beyond the highest seq of a line that is JSON at all.
        top = max((o["seq"] for o in now if o is not None), default=0)
        seqs = [x for x in map(_seq_of, lines_now) if x is not None]
        boot = Boot(d, window)
        assert boot.mem == boot.files, ops
        assert boot.open == boot.files_open, ops
        seq = boot.seq
        assert top < seq <= max(seqs, default=0) + 1, (ops, top, seqs)
        after_boot = verify_run_ledger(str(d), parallel=False)
        if before_boot.ok:
            assert after_boot.ok, (ops, after_boot.error)
            assert after_boot.head_seq == seq

        # Retention over the damaged files: the oldest day goes, its open runs are
        # carried forward, and a chain that verified still verifies from CHAIN.
        led = RunLedger(str(d), clock=Clock(T0 + HOUR), window_ns=window,
                        retention_ns=DAY)
        try:
            open_before = {(o["harness"], o["run_id"]) for o in led.open_records()}
            res = led.prune()
            assert res.error is None, (ops, res.error)
            assert res.deleted == ["2026-06-13"], ops
            open_after = {(o["harness"], o["run_id"]) for o in led.open_records()}
            # A line copied into another day's file outlives its record's other lines:
            # that run reads open again (REQ-7 closes it at the next boot). Otherwise
            # the prune changes no run's state.
            moved = any(op[0] == "double" and op[1] != op[3] for op in ops)
            assert open_after >= open_before if moved else open_after == open_before, ops
            mem, _ = led.query(Query(limit=1000))
            found, _, _ = scan(str(d), Query(limit=1000))
            assert mem == [r.to_json() for r in found], ops
            assert {(r.harness, r.run_id) for r in found
                    if r.opened and not r.closed} == open_after, ops
        finally:
            led.close()
        if after_boot.ok:
            pruned = verify_run_ledger(str(d), parallel=False)
            assert pruned.ok, (ops, pruned.error)


@pytest.mark.parametrize("keep", [0, 1, 40, -1])
def test_a_torn_tail_of_the_newest_file_verifies(template: Path, tmp_path: Path,
                                                 keep: int) -> None:
    d = tmp_path / "ledger"
    shutil.copytree(template, d)
    newest = sorted(d.glob("*.jsonl"))[-1]
    data = newest.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1  # start of the newest line
    newest.write_bytes(data[: last + (keep if keep >= 0 else len(data) - last - 2)])
    res = verify_run_ledger(str(d), parallel=False)
    assert res.ok, res.error
    lines = sum(1 for _ in _whole_lines(template))
    assert res.lines == lines - 1
    assert res.torn == (0 if keep == 0 else 1)


# -- the cases the property found, each pinned -------------------------------------------

def _rewrite(path: Path, edit: Any) -> None:
    lines = path.read_bytes().split(b"\n")[:-1]
    edit(lines)
    path.write_bytes(b"".join(x + b"\n" for x in lines))


def test_an_unreadable_closed_line_in_an_old_file_leaves_the_run_open(
        template: Path, tmp_path: Path) -> None:
    """A byte that is not UTF-8, in a field the envelope does not hold, makes the whole
    line unreadable to every reader: the boot too must see the run as still open (REQ-7
    then closes it), not closed by a line `harness runs` cannot read."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)
    oldest = sorted(d.glob("*.jsonl"))[0]

    def spoil(lines: list[bytes]) -> None:
        i = next(i for i, x in enumerate(lines) if b'"closed"' in x and b'"worker"' in x)
        lines[i] = lines[i].replace(b'"ended_at":"2026', b'"ended_at":"\xff026')

    _rewrite(oldest, spoil)
    boot = Boot(d)
    assert boot.open == boot.files_open == {("worker", 1), ("worker", 3)}
    assert boot.mem == boot.files
    assert boot.record("worker", 1) == {
        "harness": "worker", "run_id": 1, "seq": 4, "kind": "oneshot",
        "trigger": "schedule", "started_at": "2026-06-13T14:00:00.000000000Z",
        "outcome": "running"}


@pytest.mark.parametrize("copied", [1, 16])
def test_a_line_copied_below_later_ones_does_not_make_the_boot_reuse_seqs(
        template: Path, tmp_path: Path, copied: int) -> None:
    """The newest file's last line is a copy of seq 1 (or of seq 16): the tails alone say
    the head is seq 12 (or 16), but seqs up to 17 are on disk. The boot continues after
    17, linked to it, and memory answers what the files answer."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)
    days = sorted(d.glob("*.jsonl"))
    line = next(x for x in _whole_lines(d) if json.loads(x)["seq"] == copied)
    with days[-1].open("ab") as f:
        f.write(line + b"\n")
    boot = Boot(d)
    assert boot.seq == 18
    assert boot.mem == boot.files
    assert [(r["harness"], r["run_id"], r["seq"]) for r in boot.mem[:3]] == [
        ("nightly", 102, 17), ("worker", 3, 16), ("nightly", 3, 13)]
    lines = [json.loads(x) for x in _whole_lines(d)]
    # The copy twice, nothing else: no seq was issued again.
    assert sorted(x["seq"] for x in lines) == sorted([copied, *range(1, 19)])
    # The boot's line links to seq 17, the line it continues after, not to the copy
    # the file ends in, nor to nothing.
    (seventeen,) = (x for x in lines if x["seq"] == 17)
    (eighteen,) = (x for x in lines if x["seq"] == 18)
    assert eighteen["prev"] == seventeen["hash"]


@pytest.mark.parametrize("edit", ["outcome", "long"])
def test_a_line_one_reader_would_skip_is_skipped_by_all(template: Path, tmp_path: Path,
                                                        edit: str) -> None:
    """A closed line whose outcome is not a string, or that is over 16 KiB: `harness
    runs` skips it, and so must the boot, or the daemon answers a record the files do
    not have."""
    def spoil(lines: list[bytes]) -> None:
        i = next(i for i, x in enumerate(lines) if b'"closed"' in x and b'"nightly"' in x)
        if edit == "outcome":
            lines[i] = lines[i].replace(b'"outcome":"success"', b'"outcome":7')
        else:
            lines[i] = lines[i].replace(b'"outcome"', b'"pad":"' + b"x" * 17_000
                                        + b'","outcome"')

    for window in (1, 7 * DAY):
        d = tmp_path / f"ledger-{window}"
        shutil.copytree(template, d)
        _rewrite(sorted(d.glob("*.jsonl"))[-1], spoil)
        boot = Boot(d, window)
        assert boot.stats.skipped == 1
        assert boot.mem == boot.files
        assert boot.open == boot.files_open == {("nightly", 3), ("worker", 3)}
        assert boot.record("nightly", 3)["outcome"] == "running"


def test_a_last_line_with_a_damaged_hash_keeps_its_seq(template: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A byte that is not UTF-8 inside the newest line's hash: the line reads for no one,
    but seq 17 was issued and is on disk. The boot goes on from 18, and verify names the
    damaged line, not the boot's."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)

    def spoil(lines: list[bytes]) -> None:
        at = lines[-1].index(b'"hash":"') + 12
        lines[-1] = lines[-1][:at] + b"\xff" + lines[-1][at + 1:]

    _rewrite(sorted(d.glob("*.jsonl"))[-1], spoil)
    boot = Boot(d)
    assert boot.seq == 18
    assert "the line of seq 17 has a damaged hash; continuing after it" in caplog.text
    assert boot.mem == boot.files
    assert ("nightly", 102) not in {(r["harness"], r["run_id"]) for r in boot.mem}
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.error and (res.error.seq, res.error.line)) == (False, (17, 5))


@pytest.mark.parametrize("digits", [4301, 16_000])
def test_a_last_line_whose_hash_grew_is_not_linked_to(template: Path, tmp_path: Path,
                                                      digits: int) -> None:
    """Digits inserted into the newest line's hash (one of 16,000 makes the line too long
    for any reader). The boot continues after it with the zero hash for `prev`: carried
    on, that "hash" made the boot's next line, and every line after, too long to write."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)

    def spoil(lines: list[bytes]) -> None:
        lines[-1] = lines[-1].replace(b'"hash":"', b'"hash":"' + b"9" * digits)

    _rewrite(sorted(d.glob("*.jsonl"))[-1], spoil)
    boot = Boot(d)
    assert boot.seq == 18
    assert boot.mem == boot.files
    new = json.loads(sorted(d.glob("*.jsonl"))[-1].read_bytes().split(b"\n")[-2])
    assert (new["seq"], new["prev"]) == (18, "0" * 64)


@pytest.mark.parametrize("edit", ["no-newline", "copy-at-end"])
def test_a_pruned_file_anchors_the_chain_at_its_highest_line(template: Path, tmp_path: Path,
                                                             edit: str) -> None:
    """The oldest file ends in its last line without the newline (read as a line by
    every reader), or in a copy of its first line: CHAIN must still hold seq 6, the line
    the next file links to, or verify fails after the prune and memory keeps records
    whose lines are gone."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)
    oldest = sorted(d.glob("*.jsonl"))[0]
    data = oldest.read_bytes()
    if edit == "no-newline":
        oldest.write_bytes(data[:-1])
    else:
        oldest.write_bytes(data + data.split(b"\n")[0] + b"\n")
    led = RunLedger(str(d), clock=Clock(T0 + HOUR), retention_ns=DAY)
    try:
        assert led.prune().deleted == ["2026-06-13"]
        mem, _ = led.query(Query(limit=1000))
        found, _, _ = scan(str(d), Query(limit=1000))
        assert mem == [r.to_json() for r in found]
        assert {(r["harness"], r["run_id"]) for r in mem} == {
            ("nightly", 2), ("nightly", 3), ("nightly", 101), ("nightly", 102),
            ("worker", 2), ("worker", 3)}
    finally:
        led.close()
    assert json.loads((d / "CHAIN").read_bytes())["seq"] == 6
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.anchor, res.head_seq) == (True, "CHAIN seq 6", 17)


def test_a_pruned_files_highest_line_without_its_hash_still_goes_from_memory(
        template: Path, tmp_path: Path) -> None:
    """The oldest file's last line (seq 6, nightly/100) lost its `hash` key to a flipped
    byte: readers still read it. The prune took CHAIN, and with it what memory forgets,
    from the highest line with a hash (seq 5), so memory kept nightly/100 after its only
    line was deleted. CHAIN now names seq 6, with no hash to link to."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)

    def spoil(lines: list[bytes]) -> None:
        lines[-1] = lines[-1].replace(b'"hash":', b'"ha h":')

    _rewrite(sorted(d.glob("*.jsonl"))[0], spoil)
    led = RunLedger(str(d), clock=Clock(T0 + HOUR), retention_ns=DAY)
    try:
        assert led.get("nightly", 100) is not None
        assert led.prune().deleted == ["2026-06-13"]
        mem, _ = led.query(Query(limit=1000))
        found, _, _ = scan(str(d), Query(limit=1000))
        assert mem == [r.to_json() for r in found]
        assert led.get("nightly", 100) is None
    finally:
        led.close()
    assert json.loads((d / "CHAIN").read_bytes()) == {"seq": 6, "hash": "0" * 64}


def test_a_pruned_file_whose_highest_line_has_a_damaged_hash(template: Path,
                                                             tmp_path: Path) -> None:
    """The oldest file's last line has four bytes more in its hash. CHAIN written from it
    would be no anchor, and every later boot would stop on it (LedgerCorrupt). It anchors
    seq 6 with no hash instead: the boot works, and verify names the line whose link
    fails, as it named the damaged line before the prune."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)

    def spoil(lines: list[bytes]) -> None:
        lines[-1] = lines[-1].replace(b'"hash":"', b'"hash":"e999')

    _rewrite(sorted(d.glob("*.jsonl"))[0], spoil)
    before = verify_run_ledger(str(d), parallel=False)
    assert (before.ok, before.error and before.error.seq) == (False, 6)
    led = RunLedger(str(d), clock=Clock(T0 + HOUR), retention_ns=DAY)
    try:
        assert led.prune().deleted == ["2026-06-13"]
    finally:
        led.close()
    assert json.loads((d / "CHAIN").read_bytes()) == {"seq": 6, "hash": "0" * 64}
    after = verify_run_ledger(str(d), parallel=False)
    assert (after.ok, after.error and (after.error.seq, after.error.file)) == (
        False, (7, "2026-06-14.jsonl"))
    assert Boot(d).seq == 18


def test_a_run_whose_opened_line_sits_in_another_days_file_is_carried(
        template: Path, tmp_path: Path) -> None:
    """The only line of an open run lies in the oldest file though its `at` names the next
    day (the files were edited). The prune carries it by the file's content, not by
    `at`: the run is still open afterwards, on disk and in memory."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)
    days = sorted(d.glob("*.jsonl"))
    middle = days[1].read_bytes().split(b"\n")
    assert json.loads(middle[0])["run_id"] == 2 and json.loads(middle[0])["type"] == "opened"
    days[0].write_bytes(middle[0] + b"\n" + days[0].read_bytes())
    days[1].write_bytes(b"")
    led = RunLedger(str(d), clock=Clock(T0 + HOUR), retention_ns=DAY)
    try:
        assert {(o["harness"], o["run_id"]) for o in led.open_records()} == {
            ("nightly", 2), ("worker", 3)}
        res = led.prune()
        assert (res.deleted, res.carried_forward) == (["2026-06-13"], 1)
        assert {(o["harness"], o["run_id"]) for o in led.open_records()} == {
            ("nightly", 2), ("worker", 3)}
        found, _, _ = scan(str(d), Query(names=("nightly",), limit=1000))
        assert [(r.harness, r.run_id, r.opened, r.closed) for r in found
                if r.run_id == 2] == [("nightly", 2, True, False)]
    finally:
        led.close()


def test_an_open_run_with_damaged_fields_is_still_carried(template: Path,
                                                          tmp_path: Path) -> None:
    """worker/1's closed line is unreadable (so the run is open), and its opened line's
    started_at is no time and its kind no kind. The writer refuses such values, so a
    carried line copying them failed, and the oldest file was never pruned again (disk
    use past max_mb for good). The carried line keeps what the writer accepts, and takes
    the start readers used: the first line's `at`."""
    d = tmp_path / "ledger"
    shutil.copytree(template, d)

    def spoil(lines: list[bytes]) -> None:
        lines[3] = lines[3].replace(b'"started_at":"2026-06-13T14:0',
                                    b'"started_at":"2026-06-13T14:0e999')
        lines[3] = lines[3].replace(b'"kind":"oneshot"', b'"kind":"oneshoX"')
        lines[4] = lines[4].replace(b'"ended_at":"2026', b'"ended_at":"\xff026')

    _rewrite(sorted(d.glob("*.jsonl"))[0], spoil)
    led = RunLedger(str(d), clock=Clock(T0 + HOUR), retention_ns=DAY)
    try:
        res = led.prune()
        assert (res.error, res.deleted, res.carried_forward) == (None, ["2026-06-13"], 1)
        mem, _ = led.query(Query(names=("worker",), limit=1000))
        found, _, _ = scan(str(d), Query(names=("worker",), limit=1000))
        assert mem == [r.to_json() for r in found]
        assert [r for r in mem if r["run_id"] == 1] == [{
            "harness": "worker", "run_id": 1, "seq": 18, "trigger": "schedule",
            "started_at": "2026-06-13T14:00:00.000000000Z", "outcome": "running"}]
    finally:
        led.close()
    assert verify_run_ledger(str(d), parallel=False).ok


# -- the work ledger: strict, never a traceback ------------------------------------------
#
# The work ledger refuses to extend a broken chain (the durable-work-ledger spec): any
# damage but a torn tail makes verify fail and the ledger refuse to open, untouched.

@pytest.fixture(scope="module")
def work_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("work")
    with WorkLedger(work, "goal") as wl:
        wl.record("run.open", None, {"goal": "ship"})
        for t in ("t1", "t2", "t3"):
            wl.record("task.scheduled", t, {"deps": [] if t == "t1" else ["t1"]})
        wl.record("task.started", "t1", {"attempt": 1, "note": "naïve café"})
        wl.record("task.completed", "t1", {"note": "done"})
        wl.record("task.started", "t2", {"attempt": 1})
    return work


_WORK_OPS = st.one_of(
    st.tuples(st.just("flip"), st.just(0), _AT, st.integers(0, 255)),
    st.tuples(st.just("cut"), st.just(0), _AT),
    st.tuples(st.just("drop"), st.just(0), _AT),
    st.tuples(st.just("double"), st.just(0), _AT, st.just(0), _AT),
    st.tuples(st.just("junk"), st.just(0), _AT, st.binary(max_size=40)),
    st.tuples(st.just("number"), st.just(0), _AT, st.sampled_from([b"e999", b"9" * 4301])),
    st.tuples(st.just("zeros"), st.just(0), _AT, st.integers(1, 600)),
)


_UNHASHED = ("ts", "redactions")


def _only_metadata_differs(rows: list[bytes], orig: list[bytes]) -> bool:
    """Whether `rows` are `orig`'s first rows but for fields entry_hash does not cover."""
    if len(rows) > len(orig):
        return False
    for raw, want in zip(rows, orig, strict=False):
        if raw == want:
            continue
        try:
            got = json.loads(raw)
        except ValueError:
            return False
        was = json.loads(want)
        if not isinstance(got, dict) or {k: v for k, v in got.items() if k not in _UNHASHED
                                         } != {k: v for k, v in was.items() if k not in _UNHASHED}:
            return False
    return True


@settings(max_examples=150, deadline=None, derandomize=_FIXED,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_WORK_OPS, min_size=1, max_size=3))
@example(ops=[("flip", 0, 0.265625, 48)])  # a digit of a `ts`: CI's seed found it
def test_damaged_work_ledger(work_template: Path, ops: list[tuple[Any, ...]]) -> None:
    orig = _whole_lines_of(ledger_dir(work_template, "goal") / "000000.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(work_template, work)
        seg_dir = ledger_dir(work, "goal")
        seg = seg_dir / "000000.jsonl"
        _damage(seg_dir, ops)
        data = seg.read_bytes()
        parts = data.split(b"\n")
        rows = parts[:-1] + ([parts[-1]] if parts[-1] and _is_json(parts[-1]) else [])
        tail = parts[-1] if parts[-1] and not _is_json(parts[-1]) else None
        intact = rows == orig[: len(rows)]

        res = verify_dir(seg_dir)
        # `ts` and `redactions` are outside entry_hash by the spec: a digit changed there
        # into another real time or positive count is no break. Any other change is.
        assert res.ok == intact or _only_metadata_differs(rows, orig), (ops, res.describe())
        if not res.ok:
            with pytest.raises(VerificationFailed):
                WorkLedger(work, "goal")
            assert seg.read_bytes() == data, ops  # refused without touching the file
            return
        assert (res.entry_count, res.torn_tail) == (len(rows), tail), ops
        with WorkLedger(work, "goal") as wl:
            assert wl.recovered_tail == tail
            row = wl.record("task.failed", "t2", {"why": "after damage"})
        assert row["seq"] == len(rows) + 1
        again = verify_dir(seg_dir)
        assert (again.ok, again.entry_count, again.head_hash) == (
            True, len(rows) + 1, row["entry_hash"]), ops


def test_todays_file_deleted_under_a_running_ledger(tmp_path: Path) -> None:
    """`rm` of today's file to free space while the daemon runs: the next run is still
    on disk where `harness runs` reads, and verify names the gap the deletion made."""
    d = tmp_path / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    try:
        led.append({"type": "decided", "harness": "a", "run_id": 1, "trigger": "schedule",
                    "outcome": "missed"})
        (d / "2026-06-15.jsonl").unlink()
        seq = led.append({"type": "decided", "harness": "a", "run_id": 2,
                          "trigger": "schedule", "outcome": "missed"})
    finally:
        led.close()
    assert seq == 2
    found, _, _ = scan(str(d), Query(limit=10))
    assert [(r.harness, r.run_id, r.seq) for r in found] == [("a", 2, 2)]
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.error and (res.error.seq, res.error.file, res.error.line)) == (
        False, (2, "2026-06-15.jsonl", 1))


def test_the_ledger_directory_removed_under_a_running_ledger(tmp_path: Path) -> None:
    """`rm -rf` of the ledger directory while the daemon runs: it is made again, 0700,
    and the next runs land in a new day file, 0600, instead of failing for ever."""
    d = tmp_path / "state" / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    try:
        led.append({"type": "decided", "harness": "a", "run_id": 1, "trigger": "schedule",
                    "outcome": "missed"})
        shutil.rmtree(d)
        assert led.append({"type": "decided", "harness": "a", "run_id": 2,
                           "trigger": "schedule", "outcome": "missed"}) == 2
        assert led.append({"type": "decided", "harness": "a", "run_id": 3,
                           "trigger": "schedule", "outcome": "missed"}) == 3
    finally:
        led.close()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE((d / "2026-06-15.jsonl").stat().st_mode) == 0o600
    found, _, _ = scan(str(d), Query(limit=10))
    assert [(r.run_id, r.seq) for r in found] == [(3, 3), (2, 2)]
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.error and (res.error.seq, res.error.line)) == (False, (2, 1))


# A small process that runs a command and says its peak RSS (KiB) on stderr: a command
# forked from pytest itself would start its peak at pytest's size.
_LAUNCHER = ("import resource, subprocess, sys; "
             "p = subprocess.run(sys.argv[1:], capture_output=True); "
             "sys.stdout.buffer.write(p.stdout); "
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
             "file=sys.stderr)")
_BOOT = ("import sys; from harness.ledger.runledger import RunLedger; "
         "led = RunLedger(sys.argv[1]); "
         "print(led.append({'type': 'decided', 'harness': 'a', 'run_id': 1, "
         "'trigger': 'manual', 'outcome': 'missed'}), led.stats().torn); led.close()")


def _peak(cmd: list[str], env: dict[str, str]) -> tuple[int, str, int]:
    """(exit code, stdout, peak RSS in KiB) of `cmd`."""
    p = subprocess.run([sys.executable, "-c", _LAUNCHER, *cmd], env=env, capture_output=True,
                       timeout=600, check=True)
    rc, kib = p.stderr.split()[-2:]
    return int(rc), p.stdout.decode(), int(kib)


def test_a_line_of_48_mb_costs_no_reader_its_size(template: Path, tmp_path: Path) -> None:
    """A run of NUL bytes with no newline (blocks a crash left zeroed; a bad copy) as a
    line in an old file and as the newest file's tail: `harness runs`, verify and the
    boot read past it, skip it as they skip any bad line, and hold no more of it than a
    chunk. Each is measured against itself over the same ledger undamaged."""
    size = 48 << 20
    out: dict[str, dict[str, tuple[int, Any, int]]] = {}
    for kind in ("clean", "damaged"):
        state = tmp_path / kind / "state"
        d = state / "harness" / "ledger"
        shutil.copytree(template, d)
        if kind == "damaged":
            files = sorted(d.glob("*.jsonl"))
            lines = files[0].read_bytes().split(b"\n")
            files[0].write_bytes(b"\n".join([*lines[:2], b"\0" * size, *lines[2:]]))
            with files[-1].open("ab") as f:
                f.write(b"\0" * size)
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / kind),
               "XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": str(tmp_path / kind / "c"),
               "XDG_RUNTIME_DIR": str(tmp_path / kind / "r")}
        harness = [sys.executable, "-m", "harness.cli"]
        runs = _peak([*harness, "runs", "--since", "100000d", "--json"], env)
        verify = _peak([*harness, "ledger", "verify", "--json"], env)
        boot = _peak([sys.executable, "-c", _BOOT, str(d)], env)
        out[kind] = {"runs": (runs[0], json.loads(runs[1]), runs[2]),
                     "verify": (verify[0], json.loads(verify[1]), verify[2]),
                     "boot": (boot[0], boot[1].split(), boot[2])}
    clean, damaged = out["clean"], out["damaged"]
    assert damaged["runs"][:2] == clean["runs"][:2] == (0, clean["runs"][1])
    assert len(clean["runs"][1]) == 9
    v_clean, v_damaged = clean["verify"][1], damaged["verify"][1]
    assert (damaged["verify"][0], v_damaged["ok"], v_damaged["lines"], v_damaged["torn"],
            v_damaged["torn_tail"]) == (0, True, v_clean["lines"], 2, True)
    n = v_clean["lines"]
    assert clean["boot"][:2] == (0, [str(n + 1), "0"])
    assert damaged["boot"][:2] == (0, [str(n + 1), "1"])  # the tail: counted as torn
    for what in ("runs", "verify", "boot"):
        grew = damaged[what][2] - clean[what][2]
        assert grew < 24 << 10, (what, grew, clean[what][2])  # KiB; the line is 48 MiB


def test_a_work_ledger_ending_in_megabytes_of_zeroed_blocks_is_cut_whole(
        tmp_path: Path) -> None:
    """A crash can leave a segment ending in zeroed blocks with no newline: here 30 MiB,
    past the 4 MiB a reader keeps of a line, and enough to make the ledger large, so
    the open verifies it with the parallel walk. Both walks report the fragment's true
    size, and the open cuts all of it: the next row starts on a clean line and the
    chain verifies. Before, the parallel walk kept only its last 4 MiB and the open cut
    only those, gluing the next row, acknowledged, to 26 MiB of zeros: a break."""
    from harness.worklog.rows import GENESIS, entry_hash
    from ledgertools import ref_canonical

    d = ledger_dir(tmp_path, "goal")
    with WorkLedger(tmp_path, "goal") as wl:
        seg = wl.segment
    prev, rows = GENESIS, []
    for seq in range(1, 20001):
        payload = {"i": seq, "pad": "x" * 200}
        h = entry_hash("goal.tick", None, payload, prev)
        rows.append(ref_canonical({"seq": seq, "ts": "2026-11-30T08:00:00.000000000Z",
                                   "kind": "goal.tick", "task_id": None, "payload": payload,
                                   "prev_hash": prev, "entry_hash": h, "schema_version": 1}))
        prev = h
    clean = b"\n".join(rows) + b"\n"
    zeros = 30 << 20
    seg.write_bytes(clean + b"\0" * zeros)
    par, seq_walk = verify_dir(d, parallel=True), verify_dir(d, parallel=False)
    assert par == seq_walk
    assert (par.ok, par.entry_count, par.head_hash, par.torn_size) == (True, 20000, prev, zeros)
    assert par.torn_tail == b"\0" * (4 << 20)
    assert par.to_json("goal")["torn_tail_bytes"] == zeros
    with WorkLedger(tmp_path, "goal") as wl:
        assert wl.recovered_tail == b"\0" * (4 << 20)
        row = wl.record("task.failed", "t2", {"why": "after the zeros"})
    assert seg.read_bytes().startswith(clean) and seg.read_bytes().count(b"\0") == 0
    again = verify_dir(d)
    assert (again.ok, again.entry_count, again.head_hash) == (True, 20001, row["entry_hash"])
