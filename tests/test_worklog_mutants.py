"""Mutation-found gaps in the work ledger's core: chain verification
(`harness.worklog.verify`), the row contract (`harness.worklog.rows`), the writer
(`harness.worklog.store`) and the projection (`harness.worklog.replay`). Each test pins
a behaviour no other test held exactly; those under "defects" failed before the fix
they name (verify's handling of lines past CHUNK bytes, `ledger verify`'s exit code for
a ledger with no entry).

The work ledger's verifier hashes a slice of each canonical line rather than re-encoding
the row; the first tests hold that slice to the contract's document byte for byte, with
forged rows whose entry_hash is the hash of a document one byte off at each edge."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.ledger.dayfiles import CHUNK
from harness.ledger.files import FileLayer
from harness.worklog import VerificationFailed
from harness.worklog.replay import replay
from harness.worklog.rows import (
    GENESIS,
    RowRejected,
    SecretScan,
    entry_hash,
    ledger_dir,
    secret_field,
)
from harness.worklog.store import LedgerLocked, WorkLedger, cut_torn_tail
from harness.worklog.verify import (
    PARALLEL_BYTES,
    canonical_lines,
    read_chain,
    verify_continuation,
    verify_dir,
    verify_lines,
)
from ledgertools import ref_canonical

TS = "2026-11-30T08:00:00.000000000Z"


def _row(seq: int, prev: str, kind: str, task_id: str | None, payload: dict[str, Any],
         digest: str | None = None) -> tuple[bytes, str]:
    """A canonical line (stdlib-encoded) and its entry_hash; `digest` forges the hash."""
    h = digest if digest is not None else entry_hash(kind, task_id, payload, prev)
    line = ref_canonical({"seq": seq, "ts": TS, "kind": kind, "task_id": task_id,
                          "payload": payload, "prev_hash": prev, "entry_hash": h,
                          "schema_version": 1})
    return line, h


def _chain(n: int, blob: dict[int, str] | None = None) -> list[bytes]:
    prev, out = GENESIS, []
    for seq in range(1, n + 1):
        line, prev = _row(seq, prev, "goal.tick", None,
                          {"i": seq, "blob": (blob or {}).get(seq, "b")})
        out.append(line)
    return out


# -- verify: the hashed slice of a canonical line ------------------------------------

def _near_misses(line: bytes) -> list[bytes]:
    """The documents a slice of `line` one byte off at any edge would hash: the members
    "kind" … "prev_hash" and "task_id", each edge moved one byte either way."""
    a = len(b'{"entry_hash":"') + 64 + len(b'",')
    b = line.rindex(b',"prev_hash":"') + len(b',"prev_hash":"') + 64 + 1
    c = line.rindex(b',"task_id":')
    e = line.rindex(b',"ts":"')
    right = b"{" + line[a:b] + line[c:e] + b"}"
    docs = []
    for edge in range(4):
        for step in (-1, 1):
            cut = [a, b, c, e]
            cut[edge] += step
            docs.append(b"{" + line[cut[0]:cut[1]] + line[cut[2]:cut[3]] + b"}")
    assert right not in docs and len(set(docs)) == 8
    return docs


@pytest.mark.parametrize("task_id", [None, "t-1"])
@pytest.mark.parametrize("miss", range(8))
def test_an_entry_hash_of_a_document_one_byte_off_is_a_break(task_id: str | None,
                                                               miss: int) -> None:
    """Every row's entry_hash is the sha256 of its hashed document with the same edge of
    the slice moved by one byte, each row linking to the one before: a chain a verifier
    hashing that slice would pass whole. The first row is a break."""
    kind = "goal.tick" if task_id is None else "task.started"
    prev, lines = GENESIS, []
    for seq in range(1, 4):
        payload = {"attempt": seq}
        probe, _ = _row(seq, prev, kind, task_id, payload, digest="f" * 64)
        forged = hashlib.sha256(_near_misses(probe)[miss]).hexdigest()
        line, prev = _row(seq, prev, kind, task_id, payload, digest=forged)
        lines.append(line)
    res = verify_lines(lines)
    assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 1, 1, 0)
    assert (res.reason or "").startswith("entry_hash mismatch")


# -- defects ---------------------------------------------------------------------------

def test_a_line_past_chunk_bytes_is_a_break_on_both_walks(tmp_path: Path) -> None:
    """A complete row longer than CHUNK bytes is a break to the sequential walk; the
    parallel walk (automatic on a ledger of 32 MiB or more) judged the whole line and
    passed it, so `harness ledger verify` said ok (exit 0) of a chain that anchor,
    resume and a small ledger's verify call broken. Both name it, and why."""
    d = tmp_path / "long"
    d.mkdir()
    lines = _chain(8, {4: "x" * (CHUNK + 10)})
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    want = (False, 4, "000000.jsonl", 4, 3,
            f"a line longer than {CHUNK} bytes: no ledger row is that long")
    for parallel in (False, True):
        res = verify_dir(d, parallel=parallel)
        assert (res.ok, res.error_seq, res.error_file, res.error_line, res.entry_count,
                res.reason) == want, parallel


def test_a_segment_ending_in_a_long_run_without_newline_is_a_break(tmp_path: Path) -> None:
    """An interior segment that ends unterminated is judged like a line; when that run
    is longer than CHUNK bytes, only its last CHUNK bytes were judged, so a row exactly
    CHUNK bytes long with bytes glued before it verified, garbage and all."""
    d = tmp_path / "glued"
    d.mkdir()
    probe = _chain(2, {2: ""})[1]
    lines = _chain(3, {2: "x" * (CHUNK - len(probe))})
    assert len(lines[1]) == CHUNK
    (d / "000000.jsonl").write_bytes(lines[0] + b"\nNOT A ROW " + lines[1])
    (d / "000001.jsonl").write_bytes(lines[2] + b"\n")
    for parallel in (False, True):
        res = verify_dir(d, parallel=parallel)
        assert (res.ok, res.error_seq, res.error_file, res.error_line, res.entry_count) == (
            False, 2, "000000.jsonl", 2, 1), parallel
        assert res.reason == f"a line longer than {CHUNK} bytes: no ledger row is that long"
    assert not verify_lines(read_chain(d).lines).ok
    # The row alone, unterminated at the end of its segment, is a row.
    (d / "000000.jsonl").write_bytes(lines[0] + b"\n" + lines[1])
    res = verify_dir(d)
    assert (res.ok, res.entry_count) == (True, 3)


def test_cli_exit_code_for_a_line_past_chunk_bytes(world: World, tmp_path: Path) -> None:
    """Through the real CLI, on a ledger large enough (32 MiB) that `verify` walks it on
    every core when the machine has more than one: exit 2 and the place, in JSON."""
    d = tmp_path / ".harness" / "runtime" / "ledger" / "long"
    d.mkdir(parents=True)
    big = {seq: "y" * (CHUNK - 400) for seq in range(1, 10)}
    big[5] = "y" * (CHUNK + 1)
    lines = _chain(10, big)
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    assert (d / "000000.jsonl").stat().st_size >= PARALLEL_BYTES
    proc = world.harness("ledger", "verify", "long", "--workdir", str(tmp_path), "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["entry_count"]) == (
        False, 5, "000000.jsonl", 5, 4)


@pytest.mark.parametrize("content", [b"", b'{"seq":1,"ts":"2026'])
@pytest.mark.parametrize("head", ["a" * 64, GENESIS])
def test_no_entry_is_no_ledger_whatever_head_is_expected(world: World, tmp_path: Path,
                                                         content: bytes, head: str) -> None:
    """An empty segment (or one holding only a crash's fragment) is no ledger: exit 1,
    as without --expected-head and as for a missing directory. A head other than genesis
    was reported as a broken chain "at entry 0 (line 0)", exit 2."""
    d = tmp_path / ".harness" / "runtime" / "ledger" / "empty"
    d.mkdir(parents=True)
    (d / "000000.jsonl").write_bytes(content)
    proc = world.harness("ledger", "verify", "empty", "--workdir", str(tmp_path),
                         "--expected-head", head)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"harness: no work ledger at {d} (no entries")
    proc = world.harness("ledger", "verify", "empty", "--workdir", str(tmp_path),
                         "--expected-head", head, "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["ok"], data["entry_count"], data["seq"], data["line"], data["exit_code"]) == (
        False, 0, None, None, 1)


# -- verify: the strict path (lines not in canonical form) -----------------------------

def _loose(line: bytes) -> bytes:
    """The row of `line` as json.dumps spells it by default (spaces): a line a person or
    another tool may write, which verify must check by the contract's letter."""
    return json.dumps(json.loads(line)).encode()


def test_a_hand_spelled_chain_with_a_row_removed_duplicated_or_reordered_breaks() -> None:
    """Each hand-spelled row hashes right on its own; only the seq and prev_hash links
    tell that the chain around it was changed."""
    lines = [_loose(x) for x in _chain(5)]
    assert verify_lines(lines).ok and verify_lines(lines).unproven == [0, 1, 2, 3, 4]
    cases = {
        "removed": ([*lines[:2], *lines[3:]], 3, "seq mismatch (expected 3, got 4)"),
        "duplicated": ([*lines[:3], lines[2], *lines[3:]], 4, "seq mismatch (expected 4, got 3)"),
        "reordered": ([*lines[:2], lines[3], lines[2], lines[4]], 3,
                      "seq mismatch (expected 3, got 4)"),
    }
    for name, (changed, seq, reason) in cases.items():
        res = verify_lines(changed)
        assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (
            False, seq, seq, seq - 1), name
        assert (res.reason or "").startswith(reason), (name, res.reason)
    # Renumbered so the seqs run on: the prev_hash link still tells.
    rows = [json.loads(x) for x in lines]
    del rows[2]
    for seq, row in enumerate(rows, 1):
        row["seq"] = seq
    res = verify_lines([json.dumps(r).encode() for r in rows])
    assert (res.ok, res.error_seq, res.error_line) == (False, 3, 3)
    assert (res.reason or "").startswith("prev_hash mismatch")


@pytest.mark.parametrize("ts", ["yesterday", "2026-11-30 08:00:00", "2026-02-30T08:00:00Z", ""])
def test_a_hand_spelled_row_whose_ts_is_no_rfc3339_time_breaks(ts: str) -> None:
    """ts is metadata outside the hash, so only its own check can refuse it: on the
    strict path as on the canonical one."""
    rows = [json.loads(x) for x in _chain(3)]
    rows[1]["ts"] = ts
    for spell in (json.dumps, ref_canonical):
        res = verify_lines([_bytes(spell(r)) for r in rows])
        assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 2, 2, 1)
        assert res.reason == f"ts {ts!r} is not an RFC 3339 time", res.reason


def _bytes(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("task_id", 5, "task_id must be a string or null, got 5"),
    ("task_id", ["t1"], "task_id must be a string or null, got ['t1']"),
    ("task_id", False, "task_id must be a string or null, got False"),
    ("kind", 7, "kind must be a string, got 7"),
    ("kind", None, "kind must be a string, got None"),
    ("payload", [1, 2], "payload must be an object, got [1, 2]"),
    ("payload", "text", "payload must be an object, got 'text'"),
    ("payload", None, "payload must be an object, got None"),
])
def test_a_row_of_the_wrong_shape_breaks_though_its_hash_is_right(
        field: str, value: Any, reason: str) -> None:
    """Row 2's field has a type the contract does not allow, and its entry_hash is the
    right hash of the row as it stands (stdlib-computed): only the shape check can tell,
    in either spelling of the line."""
    rows = [json.loads(x) for x in _chain(3)]
    rows[1][field] = value
    doc = {k: rows[1][k] for k in ("kind", "payload", "prev_hash", "task_id")}
    rows[1]["entry_hash"] = hashlib.sha256(ref_canonical(doc)).hexdigest()
    rows[2]["prev_hash"] = rows[1]["entry_hash"]
    doc = {k: rows[2][k] for k in ("kind", "payload", "prev_hash", "task_id")}
    rows[2]["entry_hash"] = hashlib.sha256(ref_canonical(doc)).hexdigest()
    for spell in (json.dumps, ref_canonical):
        res = verify_lines([_bytes(spell(r)) for r in rows])
        assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 2, 2, 1)
        assert res.reason == reason


def test_nan_in_a_row_is_refused_by_name() -> None:
    """NaN is no JSON value: the line is unparseable, said so, whatever the hash."""
    line = _chain(1)[0].replace(b'"i":1', b'"i":NaN')
    res = verify_lines([line])
    assert (res.ok, res.error_seq, res.reason) == (
        False, 1, "not a parseable ledger row (NaN is not JSON)")


@pytest.mark.parametrize("count", [-1, 0])
def test_redactions_below_one_breaks_in_canonical_form(count: int) -> None:
    """redactions is a positive count when present; the line is otherwise canonical
    and its hash right (redactions is not hashed)."""
    rows = [json.loads(x) for x in _chain(3)]
    rows[1]["redactions"] = count
    res = verify_lines([ref_canonical(r) for r in rows])
    assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 2, 2, 1)
    assert res.reason == f"redactions must be a positive integer when present, got {count}"


# -- verify: segments, long runs, the parallel walk's stitching -------------------------

def test_only_segment_files_are_read(tmp_path: Path) -> None:
    """Names that only look like segments (another separator, a suffix) are not part of
    the chain. (A segment's own name on a directory is refused: see
    test_worklog_spec_conformance.)"""
    d = tmp_path / "strays"
    d.mkdir()
    lines = _chain(3)
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    (d / "000001xjsonl").write_bytes(b"junk\n")
    (d / "000001.jsonl.bak").write_bytes(b"junk\n")
    (d / "000001.jsonl.d").mkdir()
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.head_hash) == (True, 3, json.loads(lines[2])[
        "entry_hash"])


def test_rows_of_exactly_chunk_bytes_are_rows_and_a_longer_tail_is_torn(
        tmp_path: Path) -> None:
    """A complete row of exactly CHUNK bytes is a row. An unterminated run longer than
    CHUNK at the end of the ledger is a torn tail, all of it, even when its last CHUNK
    bytes would read as a row."""
    d = tmp_path / "edge"
    d.mkdir()
    probe = _chain(2, {2: ""})[1]
    lines = _chain(3, {2: "x" * (CHUNK - len(probe))})
    assert len(lines[1]) == CHUNK
    seg = d / "000000.jsonl"
    seg.write_bytes(b"".join(x + b"\n" for x in lines))
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.torn_tail) == (True, 3, None)
    seg.write_bytes(lines[0] + b"\n" + b"Z" * 10 + lines[1])
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.torn_tail, res.torn_size) == (
        True, 1, lines[1], CHUNK + 10)
    assert read_chain(d).lines == [lines[0]]


def _rechained(lines: list[bytes], at: int, change: str) -> list[bytes]:
    """`lines` with row `at` (0-based) broken at its link, every row after it rehashed
    so that the chain links again from there: only row `at`'s link tells."""
    rows = [json.loads(x) for x in lines]
    if change == "prev":
        rows[at]["prev_hash"] = "e" * 64
    else:
        for r in rows[at:]:
            r["seq"] += 1
    for i in range(at, len(rows)):
        if i > at:
            rows[i]["prev_hash"] = rows[i - 1]["entry_hash"]
        doc = {k: rows[i][k] for k in ("kind", "payload", "prev_hash", "task_id")}
        rows[i]["entry_hash"] = hashlib.sha256(ref_canonical(doc)).hexdigest()
    return [ref_canonical(r) for r in rows]


@pytest.mark.parametrize("change", ["prev", "seq"])
def test_the_parallel_walk_checks_the_link_where_its_ranges_meet(tmp_path: Path,
                                                                  change: str) -> None:
    """Each range of the parallel walk trusts its first row's link and the stitching
    checks it. A break at any row (so at the first row of some range, however many
    ranges there are, and inside the last one, which holds the small rows at the end)
    is found, and named as the sequential walk names it."""
    d = tmp_path / "stitch"
    d.mkdir()
    good = _chain(24, {seq: "x" * 2000 for seq in range(1, 17)})
    for at in range(1, 24):
        (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in _rechained(good, at,
                                                                                change)))
        par, seq = verify_dir(d, parallel=True), verify_dir(d, parallel=False)
        assert par == seq, at
        assert (seq.ok, seq.error_seq, seq.error_line) == (False, at + 1, at + 1), at


def test_a_break_on_the_last_line_of_a_segment_is_named_in_that_segment(
        tmp_path: Path) -> None:
    """Lines read from every segment first (as anchor and resume read them), then
    verified: a break on a segment's last line is that segment's, not line 0 of the next.
    A head mismatch with an empty segment after the last row is the last row's."""
    d = tmp_path / "edges"
    d.mkdir()
    lines = _chain(6)
    broken = [*lines[:3], lines[3].replace(b'"i":4', b'"i":5'), *lines[4:]]
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in broken[:4]))
    (d / "000001.jsonl").write_bytes(b"".join(x + b"\n" for x in broken[4:]))
    read = read_chain(d)
    res = verify_lines(read.lines, starts=read.starts)
    assert (res.error_seq, res.error_file, res.error_line) == (4, "000000.jsonl", 4)
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    (d / "000001.jsonl").write_bytes(b"")
    for res in (verify_dir(d, expected_head="a" * 64),
                verify_lines(read_chain(d).lines, "a" * 64, starts=read_chain(d).starts)):
        assert (res.ok, res.error_seq, res.error_file, res.error_line) == (
            False, 6, "000000.jsonl", 6)


def test_many_segments_are_read_in_name_order_whatever_the_directory_order(
        tmp_path: Path) -> None:
    """Twelve segments of one row each, created last name first: read in name order
    (the order a directory lists them in is the file system's, not the chain's)."""
    d = tmp_path / "many"
    d.mkdir()
    lines = _chain(12)
    for i in reversed(range(12)):
        (d / f"{i:06d}.jsonl").write_bytes(lines[i] + b"\n")
    res = verify_dir(d)
    assert (res.ok, res.entry_count) == (True, 12)
    assert read_chain(d).lines == lines


def test_a_continuation_counts_lines_from_the_start_of_the_chain() -> None:
    """Verifying only what follows an already verified prefix: the lines it could not
    prove canonical, the rows it shows an observer and a break are all numbered in the
    whole chain, as anchoring uses them."""
    lines = _chain(6)
    loose = [*lines[:4], _loose(lines[4]), lines[5]]
    head4 = json.loads(lines[3])["entry_hash"]
    seen: list[int] = []
    res = verify_continuation(loose, 4, head4, observe=lambda first, rows, _: seen.append(first))
    assert (res.ok, res.entry_count, res.unproven, seen) == (True, 6, [4], [5])
    assert canonical_lines(loose, res.unproven) == lines
    broken = [*lines[:5], lines[5].replace(b'"i":6', b'"i":7')]
    res = verify_continuation(broken, 4, head4)
    assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 6, 6, 5)


# -- rows: what the writer refuses, and what a chain it did not write may hold ----------

LOWER_SECRET = "sk-ant-api03-" + "zx9" * 12  # a valid kind by its letters


def test_the_writer_refuses_ids_and_accepts_the_longest_task_id(tmp_path: Path) -> None:
    """Refused: a kind not starting with a letter, a kind or task id holding a secret
    (never echoed), a task id holding DEL or a C1 control. Accepted: a 128-character
    task id. A refusal consumes no seq."""
    with WorkLedger(tmp_path, "ids") as wl:
        wl.record("run.open", None, {})
        refused: list[tuple[str, str | None, str]] = [
            ("1goal.tick", None, "is not a valid kind"),
            (LOWER_SECRET, None, "kind looks like it holds a secret; refusing to record it"),
            ("task.started", LOWER_SECRET,
             "task_id looks like it holds a secret; refusing to record it"),
            ("task.started", "a\x7fb", "contains a control character"),
            ("task.started", "a\x85b", "contains a control character"),
            ("task.started", "a\x9fb", "contains a control character"),
        ]
        for kind, task_id, message in refused:
            with pytest.raises(RowRejected) as ei:
                wl.record(kind, task_id, {})
            assert message in str(ei.value), (kind, task_id, str(ei.value))
            assert LOWER_SECRET not in str(ei.value)
        row = wl.record("task.started", "t" * 128, {})
        assert (row["seq"], row["task_id"]) == (2, "t" * 128)
        assert wl.record("task.started", "a\xa0b", {})["seq"] == 3  # past C1: text
    assert LOWER_SECRET.encode() not in (ledger_dir(tmp_path, "ids") / "000000.jsonl").read_bytes()


def test_secret_field_names_the_id_that_holds_a_secret() -> None:
    assert secret_field(LOWER_SECRET, None, {}) == "kind"
    assert secret_field("task.started", LOWER_SECRET, {}) == "task_id"
    assert secret_field("task.started", "t1", {"env": {"API_KEY": "hunter2hunter2"}}) == (
        "payload.env.API_KEY")
    assert secret_field("task.started", "t1", {"argv": ["x", LOWER_SECRET]}) == (
        "payload.argv[1]")
    assert secret_field("task.started", "t1", {"a b": [LOWER_SECRET]}) == (
        "payload['a b'][0]")
    assert secret_field("task.started", "t1", {"ok": {LOWER_SECRET: 1}}) == (
        "a key of payload.ok")
    assert secret_field("task.started", "t1", {"argv": ["x"]}) is None
    # A path past 200 characters is cut there, visibly.
    assert secret_field("task.started", "t1", {"k" * 300: LOWER_SECRET}) == (
        "payload." + "k" * 191 + "…")


def test_the_secret_scan_names_the_first_of_two_far_apart_in_one_batch() -> None:
    """Rows 4 and 1001 of one batch of 1,024 hold a secret: the scan names row 4, the
    first in the chain (whatever order a set of their indices would list them in)."""
    lines = _chain(1024, {4: LOWER_SECRET, 1001: LOWER_SECRET})
    scan = SecretScan()
    res = verify_lines(lines, observe=scan)
    assert res.ok and res.unproven == []
    assert scan.first(lines, res.unproven) == (3, "payload.blob")


def test_a_run_id_holding_a_secret_is_refused_unechoed(tmp_path: Path) -> None:
    with pytest.raises(RowRejected) as ei:
        WorkLedger(tmp_path, LOWER_SECRET)
    assert str(ei.value).startswith("run id looks like it holds a secret")
    assert LOWER_SECRET not in str(ei.value)
    assert not (tmp_path / ".harness").exists()


# -- store: the lock, recovery on open, appending -------------------------------------

@pytest.mark.parametrize("content", [b"not json at all", b"[1, 2]", b'"a string"'])
def test_a_lock_whose_identity_cannot_be_read_is_still_refused_by_name(
        tmp_path: Path, content: bytes) -> None:
    """Another open file description holds the lock and its file holds no identity: the
    refusal says so (rather than "has not recorded its pid yet", or a traceback)."""
    d = ledger_dir(tmp_path, "held")
    d.mkdir(parents=True)
    (d / ".lock").write_bytes(content)
    fd = os.open(d / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LedgerLocked) as ei:
            WorkLedger(tmp_path, "held")
        assert str(ei.value) == (f"work ledger 'held' is held by another process (its identity "
                                 f"in {d / '.lock'} cannot be read); only one writer may hold "
                                 "a run")
        assert ei.value.holder == {} and ei.value.exit_code == 2
        (d / ".lock").write_bytes(b"")
        with pytest.raises(LedgerLocked, match="it has not recorded its pid yet"):
            WorkLedger(tmp_path, "held")
    finally:
        os.close(fd)


def test_the_holder_is_recorded_in_a_private_lock_file_and_rows_start_empty(
        tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "fresh") as wl:
        lock = wl.dir / ".lock"
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        assert json.loads(lock.read_bytes())["pid"] == os.getpid()
        assert wl.rows() == [] and wl.head == (0, GENESIS)
        row = wl.record("run.open", None, {"n": 1})
        assert wl.rows() == [row]
    assert lock.read_bytes() == b""


def test_a_torn_tail_longer_than_chunk_is_cut_whole_on_open(tmp_path: Path) -> None:
    """A crash can leave megabytes of zeroed blocks after the last row: recovery cuts
    all of them (not only the last CHUNK bytes it kept to compare), so the next row
    follows the last verified one directly."""
    d = ledger_dir(tmp_path, "zeros")
    d.mkdir(parents=True)
    lines = _chain(2)
    seg = d / "000000.jsonl"
    seg.write_bytes(b"".join(x + b"\n" for x in lines) + b"\0" * (CHUNK + 4096))
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.torn_size) == (True, 2, CHUNK + 4096)
    with WorkLedger(tmp_path, "zeros") as wl:
        assert wl.recovered_tail == b"\0" * CHUNK
        row = wl.record("goal.tick", None, {"i": 3})
    assert seg.read_bytes() == b"".join(x + b"\n" for x in [*lines, ref_canonical(row)])
    assert verify_dir(d).entry_count == 3


class _Ops(FileLayer):
    """The real file layer, noting the writes, truncations and syncs it makes, in order."""

    def __init__(self) -> None:
        self.ops: list[str] = []

    def write(self, fd: int, data: bytes) -> int:
        self.ops.append("write")
        return super().write(fd, data)

    def truncate(self, fd: int, size: int) -> None:
        self.ops.append(f"truncate {size}")
        super().truncate(fd, size)

    def sync(self, fd: int) -> None:
        self.ops.append("sync")
        super().sync(fd)


def test_the_cut_of_a_torn_tail_is_synced_before_the_first_append(tmp_path: Path) -> None:
    d = ledger_dir(tmp_path, "cut")
    d.mkdir(parents=True)
    lines = _chain(2)
    kept = b"".join(x + b"\n" for x in lines)
    (d / "000000.jsonl").write_bytes(kept + lines[0][:30])
    layer = _Ops()
    with WorkLedger(tmp_path, "cut", files=layer) as wl:
        assert layer.ops[:2] == [f"truncate {len(kept)}", "sync"]
        wl.record("goal.tick", None, {"i": 3})
    assert layer.ops[2] == "write"


def test_cutting_a_torn_tail_refuses_when_the_file_no_longer_ends_in_it(
        tmp_path: Path) -> None:
    """What was read as the fragment must still be the file's end, or nothing is cut."""
    seg = tmp_path / "000000.jsonl"
    body = b"".join(x + b"\n" for x in _chain(2))
    seg.write_bytes(body + b"FRAGMENT")
    for torn, size in ((b"FRAGMENX", 8), (b"FRAGMENT", len(body) + 100), (b"FRAGMENT", 7)):
        with pytest.raises(VerificationFailed, match="changed while its torn tail was being cut"):
            cut_torn_tail(seg, torn, size)
        assert seg.read_bytes() == body + b"FRAGMENT"
    assert cut_torn_tail(seg, b"MENT", 8) == len(body)
    assert seg.read_bytes() == body


def test_the_row_returned_is_the_row_read_back_with_one_redaction(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "one") as wl:
        row = wl.record("goal.note", None, {"auth": "token=abcdef123456"})
        assert row["redactions"] == 1
        assert wl.rows() == [row]


def test_the_writer_continues_in_the_last_segment(tmp_path: Path) -> None:
    """A ledger already in two segments (by another writer, or by hand): new rows go to
    the last one, after the head, never into an earlier segment."""
    d = ledger_dir(tmp_path, "two")
    d.mkdir(parents=True)
    lines = _chain(4)
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines[:2]))
    # ... with a torn tail there, which is what recovery cuts.
    (d / "000001.jsonl").write_bytes(b"".join(x + b"\n" for x in lines[2:]) + lines[0][:9])
    with WorkLedger(tmp_path, "two") as wl:
        assert (wl.segment, wl.recovered_tail) == (d / "000001.jsonl", lines[0][:9])
        row = wl.record("goal.tick", None, {"i": 5})
    assert (d / "000000.jsonl").read_bytes() == b"".join(x + b"\n" for x in lines[:2])
    assert (d / "000001.jsonl").read_bytes() == b"".join(
        x + b"\n" for x in [*lines[2:], ref_canonical(row)])
    assert (verify_dir(d).ok, verify_dir(d).entry_count) == (True, 5)


def test_a_refused_open_releases_the_lock(tmp_path: Path) -> None:
    """Opening a broken chain is refused; once it is repaired, the next open (in the
    same process) takes the lock: the refusal did not keep it."""
    d = ledger_dir(tmp_path, "mend")
    d.mkdir(parents=True)
    lines = _chain(3)
    seg = d / "000000.jsonl"
    seg.write_bytes(b"".join(x + b"\n" for x in [lines[0], lines[2], lines[1]]))
    with pytest.raises(VerificationFailed, match=r"entry 2 \(000000\.jsonl:2\)"):
        WorkLedger(tmp_path, "mend")
    seg.write_bytes(b"".join(x + b"\n" for x in lines))
    with WorkLedger(tmp_path, "mend") as wl:
        assert wl.head == (3, json.loads(lines[2])["entry_hash"])


# -- replay ----------------------------------------------------------------------------

def test_a_later_schedule_replaces_the_deps_and_names_each_once(tmp_path: Path) -> None:
    """The last task.scheduled row of a task that names deps says them: an empty list
    means none (so the task is ready), a dep named twice counts once, and a row without
    ``deps`` keeps them. (Deps that are no list of task ids are refused by the writer and
    held by replay: tests/test_worklog_spec_conformance.py.)"""
    with WorkLedger(tmp_path, "deps") as wl:
        wl.record("run.open", None, {})
        wl.record("task.scheduled", "a", {"deps": []})
        wl.record("task.scheduled", "b", {"deps": ["a", "a", "z"]})
        wl.record("task.scheduled", "c", {"deps": ["z"]})
        wl.record("task.scheduled", "d", {"deps": ["z"]})
        first = replay(wl.rows()).to_json()
        wl.record("task.scheduled", "c", {"deps": []})
        wl.record("task.scheduled", "d", {"deps": ["a"]})
        wl.record("task.scheduled", "a", {"note": "no deps key: deps kept"})
        later = replay(wl.rows()).to_json()
    assert [t["deps"] for t in first["tasks"]] == [[], ["a", "z"], ["z"], ["z"]]
    assert first["frontier"] == ["a"]
    assert [t["deps"] for t in later["tasks"]] == [[], ["a", "z"], [], ["a"]]
    assert later["frontier"] == ["a", "c"]
    assert [(t["task_id"], t["first_seq"], t["last_seq"]) for t in later["tasks"]] == [
        ("a", 2, 8), ("b", 3, 3), ("c", 4, 6), ("d", 5, 7)]


def test_a_task_row_without_a_task_id_is_carried_not_dropped() -> None:
    """A chain written by hand may hold a task.* row with a null task_id (the writer
    refuses one): replay counts and carries it like a row of an unknown kind."""
    rows: list[dict[str, Any]] = [
        {"seq": 1, "kind": "run.open", "task_id": None, "payload": {}, "entry_hash": "h1"},
        {"seq": 2, "kind": "task.started", "task_id": None, "payload": {"x": 1},
         "entry_hash": "h2"},
        {"seq": 3, "kind": "run.resumed", "task_id": None, "payload": {}, "entry_hash": "h3"},
        {"seq": 4, "kind": "run.closed", "task_id": None, "payload": {}, "entry_hash": "h4"},
    ]
    st = replay(rows)
    j = st.to_json()
    assert (j["unknown_kinds"], j["tasks"], j["entry_count"], j["head_seq"], j["head_hash"]) == (
        {"task.started": 1}, [], 4, 4, "h4")
    assert (j["opened"], j["prior_resumes"], j["closed"]) == (True, 1, True)
    assert st.unknown == [rows[1]]
    # Unknown kinds are listed by name, not in the order the chain first holds them.
    later = [{"seq": 5, "kind": k, "task_id": None, "payload": {}} for k in ("goal.z", "goal.a")]
    assert list(replay(rows + later).to_json()["unknown_kinds"]) == [
        "goal.a", "goal.z", "task.started"]
