"""The work ledger's row contract, verifier, store and replay, on real files.

Known answers are literals computed outside harness (stdlib json + hashlib, and one
cross-checked with `sha256sum`); a ledger written by hand must verify; every field
of every row of a six-row chain is bit-flipped and the verdict pinned exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.ledger.canonical import canonical
from harness.worklog import NoLedger, VerificationFailed, WorkLedgerError, verify
from harness.worklog.replay import replay
from harness.worklog.rows import (
    GENESIS,
    KINDS,
    RowRejected,
    SecretScan,
    clean_payload,
    entry_hash,
    ledger_dir,
    make_row,
    secret_field,
    validate_run_id,
)
from harness.worklog.store import LedgerLocked, WorkLedger
from harness.worklog.verify import canonical_lines, read_chain, verify_dir, verify_lines
from ledgertools import DirSyncs, ref_canonical

# --- known answers ------------------------------------------------------------------

HAND_ROWS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("run.open", None, {"goal": "demo", "commit": "0123456789abcdef0123456789abcdef01234567"}),
    ("task.scheduled", "t1", {"deps": [], "prompt": "write tests"}),
    ("task.scheduled", "t2", {"deps": ["t1"], "note": "café ☕ 🚀", "ratio": 0.5}),
    ("task.started", "t1", {"attempt": 1, "harness": "worker", "run_id": 7}),
    (
        "task.completed",
        "t1",
        {"cost_usd": 1e-05, "nested": {"b": [1, {"z": None, "a": True}], "a": -3}},
    ),
    ("goal.note", None, {"text": 'line\nbreak "quoted" back\\slash\ttab'}),
]
# Computed with json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# and hashlib; the first also with printf | sha256sum.
HAND_HASH_1 = "4f191b166106535f701b95f73e3600dd9c73016101741267ca4c01c02a21cc2d"
HAND_HEAD = "f0059117d4231168308364f29e023240349a8be5d8232617ed2cfb3444b847f5"


def _hand_rows() -> list[dict[str, Any]]:
    """The HAND_ROWS chain built with the standard library only (no harness code)."""
    prev = "0" * 64
    out = []
    for seq, (kind, task, payload) in enumerate(HAND_ROWS, 1):
        digest = hashlib.sha256(
            ref_canonical({"kind": kind, "payload": payload, "prev_hash": prev, "task_id": task})
        ).hexdigest()
        out.append(
            {
                "seq": seq,
                "ts": f"2026-11-30T08:00:0{seq}Z",
                "kind": kind,
                "task_id": task,
                "payload": payload,
                "prev_hash": prev,
                "entry_hash": digest,
                "schema_version": 1,
            }
        )
        prev = digest
    return out


def _write_hand(d: Path, dumps: Any) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    seg = d / "000000.jsonl"
    seg.write_bytes(b"".join(dumps(r) + b"\n" for r in _hand_rows()))
    return seg


def test_entry_hash_known_answer() -> None:
    kind, task, payload = HAND_ROWS[0]
    assert entry_hash(kind, task, payload, GENESIS) == HAND_HASH_1
    assert GENESIS == "0" * 64


def test_hand_written_canonical_ledger_verifies(tmp_path: Path) -> None:
    d = tmp_path / ".harness" / "runtime" / "ledger" / "hand"
    _write_hand(d, ref_canonical)
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.head_hash, res.torn_tail) == (True, 6, HAND_HEAD, None)
    assert res.to_json("hand") == {
        "run_id": "hand",
        "ok": True,
        "entry_count": 6,
        "head_hash": HAND_HEAD,
        "head_seq": 6,
        "torn_tail": False,
        "torn_tail_bytes": 0,
    }


def test_hand_written_non_canonical_ledger_verifies(tmp_path: Path) -> None:
    # Spaces, insertion key order and \u escapes: the contract hashes the canonical
    # document, not the line, so a loosely written line still verifies.
    d = tmp_path / "loose"
    _write_hand(d, lambda r: json.dumps(r).encode("ascii"))
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.head_hash) == (True, 6, HAND_HEAD)


def test_a_canonical_line_beside_a_hand_written_one_is_proven_canonical() -> None:
    # A batch holding a line spelled by hand is walked line by line, and each line of it
    # that is its row's canonical line is still proven so: only the hand-written one is
    # unproven (re-encoded for an anchor, judged row by row). Every line of the batch
    # was, when the walk compared a Raw payload with bytes, which never matched.
    rows = _hand_rows()
    lines = [ref_canonical(r) for r in rows]
    lines[1] = json.dumps(rows[1]).encode()
    res = verify_lines(lines)
    assert (res.ok, res.entry_count, res.unproven) == (True, len(rows), [1])


def test_store_appends_after_hand_written_chain(tmp_path: Path) -> None:
    _write_hand(ledger_dir(tmp_path, "hand"), ref_canonical)
    with WorkLedger(tmp_path, "hand") as wl:
        assert wl.head == (6, HAND_HEAD)
        row = wl.record("task.started", "t2", {"attempt": 1})
    assert row["seq"] == 7 and row["prev_hash"] == HAND_HEAD
    assert row["entry_hash"] == hashlib.sha256(
        ref_canonical({"kind": "task.started", "payload": {"attempt": 1}, "prev_hash": HAND_HEAD,
                       "task_id": "t2"})
    ).hexdigest()
    assert verify_dir(ledger_dir(tmp_path, "hand")).head_hash == row["entry_hash"]


def test_written_line_is_canonical_and_row_matches(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "r1") as wl:
        row = wl.record("task.scheduled", "a", {"deps": ["x"], "f": 0.1, "t": (1, 2)})
        seg = wl.segment
    line = seg.read_bytes()
    assert line == ref_canonical(row) + b"\n"
    assert row["payload"] == {"deps": ["x"], "f": 0.1, "t": [1, 2]}
    assert sorted(row) == sorted(
        ["seq", "ts", "kind", "task_id", "payload", "prev_hash", "entry_hash", "schema_version"]
    )
    assert row["ts"].endswith("Z") and len(row["ts"]) == 30
    assert oct(seg.stat().st_mode & 0o777) == "0o600"
    assert oct(seg.parent.stat().st_mode & 0o777) == "0o700"
    assert oct((seg.parent / ".lock").stat().st_mode & 0o777) == "0o600"


# --- the mutation battery -----------------------------------------------------------


def _six(tmp_path: Path) -> tuple[Path, list[bytes]]:
    with WorkLedger(tmp_path, "six") as wl:
        wl.record("run.open", None, {"note": "note-1"})
        wl.record("task.scheduled", "t1", {"deps": [], "note": "note-2"})
        wl.record("task.scheduled", "t2", {"deps": ["t1"], "note": "note-3",
                                           "auth": "token=abcdef123456"})
        wl.record("task.started", "t1", {"attempt": 1, "note": "note-4"})
        wl.record("task.completed", "t1", {"note": "note-5"})
        wl.record("task.started", "t2", {"attempt": 1, "note": "note-6"})
        seg = wl.segment
    lines = seg.read_bytes().split(b"\n")
    assert lines.pop() == b""
    assert b'"redactions":1' in lines[2] and b"abcdef123456" not in seg.read_bytes()
    return seg, lines


# field -> (key whose value is flipped, offset into the value, xor mask)
_FLIPS = {
    "kind": (b'"kind":"', 1, 0x01),
    "task_id": (b'"task_id":"', 0, 0x01),
    "payload": (b'"note":"', 0, 0x01),
    "prev_hash": (b'"prev_hash":"', 5, 0x01),
    "entry_hash": (b'"entry_hash":"', 5, 0x01),
    "seq": (b'"seq":', 0, 0x01),
    "ts_digit": (b'"ts":"', 20, 0x01),  # a fraction digit stays a digit
    "ts_form": (b'"ts":"', 10, 0x01),  # "T" becomes "U"
    "schema_version": (b'"schema_version":', 0, 0x01),
}
_EXPECT = {
    "kind": "entry_hash mismatch",
    "task_id": "entry_hash mismatch",
    "payload": "entry_hash mismatch",
    "prev_hash": "prev_hash mismatch",
    "entry_hash": "entry_hash mismatch",
    "seq": "seq mismatch",
    "ts_digit": None,  # metadata outside the hash: a still-valid stamp verifies
    "ts_form": "is not an RFC 3339 time",
    "schema_version": "schema_version must be 1",
}


def _flip(line: bytes, key: bytes, offset: int, mask: int) -> bytes:
    at = line.rindex(key) + len(key) + offset
    return line[:at] + bytes([line[at] ^ mask]) + line[at + 1 :]


@pytest.mark.parametrize(
    ("row", "field"),
    # Row 1 is run.open, whose task_id is null: there is no task_id string to flip.
    [(r, f) for r in range(1, 7) for f in _FLIPS if (r, f) != (1, "task_id")],
)
def test_bit_flip_in_every_field(tmp_path: Path, row: int, field: str) -> None:
    seg, lines = _six(tmp_path)
    key, off, mask = _FLIPS[field]
    lines[row - 1] = _flip(lines[row - 1], key, off, mask)
    seg.write_bytes(b"".join(x + b"\n" for x in lines))
    res = verify_dir(seg.parent)
    want = _EXPECT[field]
    if want is None:
        assert res.ok and res.entry_count == 6
        return
    assert not res.ok
    assert (res.error_seq, res.error_line, res.entry_count) == (row, row, row - 1)
    assert res.reason is not None and want in res.reason
    j = res.to_json("six")
    assert (j["ok"], j["seq"], j["line"]) == (False, row, row)
    with pytest.raises(VerificationFailed, match=rf"entry {row} \(000000\.jsonl:{row}\)") as ei:
        WorkLedger(tmp_path, "six")
    assert ei.value.exit_code == 2


def test_redactions_is_metadata_but_must_stay_positive(tmp_path: Path) -> None:
    seg, lines = _six(tmp_path)
    good = list(lines)
    lines[2] = lines[2].replace(b'"redactions":1', b'"redactions":3')
    seg.write_bytes(b"".join(x + b"\n" for x in lines))
    assert verify_dir(seg.parent).ok  # not hashed: a changed count is not detected
    good[2] = good[2].replace(b'"redactions":1', b'"redactions":0')
    seg.write_bytes(b"".join(x + b"\n" for x in good))
    res = verify_dir(seg.parent)
    assert (res.ok, res.error_seq, res.error_line) == (False, 3, 3)
    assert "redactions must be a positive integer" in (res.reason or "")


def _expect_break(lines: list[bytes], seq: int, line: int, reason: str) -> None:
    res = verify_lines(lines)
    assert (res.ok, res.error_seq, res.error_line) == (False, seq, line), res
    assert reason in (res.reason or ""), res.reason


def test_removed_inserted_duplicated_reordered_rows(tmp_path: Path) -> None:
    _, lines = _six(tmp_path)
    assert verify_lines(lines).ok
    _expect_break(lines[:2] + lines[3:], 3, 3, "seq mismatch (expected 3, got 4)")
    _expect_break([*lines[:4], lines[3], *lines[4:]], 5, 5, "seq mismatch (expected 5, got 4)")
    _expect_break([*lines[:3], lines[4], lines[3], *lines[5:]], 4, 4,
                  "seq mismatch (expected 4, got 5)")
    # An inserted row chained properly to row 3, with later seqs renumbered (seq is
    # not hashed): the old row 4 no longer links.
    rows = [json.loads(x) for x in lines]
    forged = dict(rows[3], kind="task.failed", seq=4, prev_hash=rows[2]["entry_hash"])
    forged["entry_hash"] = entry_hash("task.failed", "t1", forged["payload"], forged["prev_hash"])
    later = [dict(r, seq=r["seq"] + 1) for r in rows[3:]]
    _expect_break(lines[:3] + [ref_canonical(forged)] + [ref_canonical(r) for r in later], 5, 5,
                  "prev_hash mismatch")
    # Removing the newest rows is invisible without an expected head.
    assert verify_lines(lines[:5]).ok
    res = verify_lines(lines[:5], expected_head=rows[5]["entry_hash"])
    assert (res.ok, res.error_seq, res.error_line) == (False, 5, 5)
    assert "head mismatch" in (res.reason or "")


def test_rechained_edit_is_caught_only_by_expected_head(tmp_path: Path) -> None:
    seg, lines = _six(tmp_path)
    head = json.loads(lines[-1])["entry_hash"]
    rows = [json.loads(x) for x in lines]
    rows[2]["payload"]["note"] = "edited"
    prev = rows[1]["entry_hash"]
    for r in rows[2:]:
        r["prev_hash"] = prev
        r["entry_hash"] = prev = entry_hash(r["kind"], r["task_id"], r["payload"], prev)
    seg.write_bytes(b"".join(ref_canonical(r) + b"\n" for r in rows))
    assert verify_dir(seg.parent).ok
    res = verify_dir(seg.parent, expected_head=head)
    assert not res.ok and "head mismatch" in (res.reason or "")
    assert res.to_json("six")["seq"] == 6
    assert verify_dir(seg.parent, expected_head=prev).ok


def test_contract_shape_is_enforced(tmp_path: Path) -> None:
    _, lines = _six(tmp_path)
    extra = lines[1][:-1] + b',"zz":1}'
    _expect_break([lines[0], extra], 2, 2, "outside the contract: zz")
    row = json.loads(lines[1])
    del row["ts"]
    _expect_break([lines[0], ref_canonical(row)], 2, 2, "lacks field(s) ts")
    row = json.loads(lines[1])
    row["seq"] = True
    _expect_break([lines[0], ref_canonical(row)], 2, 2, "seq must be an integer")
    _expect_break([lines[0], b"[1,2]"], 2, 2, "not an object")
    _expect_break([lines[0], b""], 2, 2, "not a parseable ledger row")


def test_duplicate_key_cannot_smuggle_a_kind(tmp_path: Path) -> None:
    # A parser that keeps the last duplicate would read task.failed while the bytes
    # hashed say task.started; the verifier must not vouch for such a line.
    _, lines = _six(tmp_path)
    smuggled = lines[3][:-1] + b',"kind":"task.failed"}'
    _expect_break([*lines[:3], smuggled], 4, 4, "duplicate key 'kind'")


def test_float_spelling_must_be_canonical() -> None:
    def line(payload_text: bytes) -> bytes:
        doc = b'{"kind":"goal.note","payload":' + payload_text + (
            b',"prev_hash":"' + GENESIS.encode() + b'","task_id":null}'
        )
        digest = hashlib.sha256(doc).hexdigest().encode()
        return (
            b'{"entry_hash":"' + digest + b'","kind":"goal.note","payload":' + payload_text
            + b',"prev_hash":"' + GENESIS.encode()
            + b'","schema_version":1,"seq":1,"task_id":null,"ts":"2026-11-30T08:00:00Z"}'
        )

    for good in (b'{"x":1e-05}', b'{"x":1e+16}', b'{"x":-0.0,"y":[100000.0]}'):
        assert verify_lines([line(good)]).ok, good
    # Hashed over a spelling canonical JSON never produces: the row breaks the contract.
    for bad in (b'{"x":0.00001}', b'{"x":1E5}', b'{"x":1e16}', b'{"x":1.50}'):
        _expect_break([line(bad)], 1, 1, "entry_hash mismatch")
    _expect_break([line(b'{"x":1e999}')], 1, 1, "non-finite")


def test_ts_holding_two_stamps_cannot_shift_the_hashed_slice() -> None:
    # Hashing a slice taken at a fixed offset from the line's end is sound only when
    # ts has the fixed length; a ts of two stamps joined by a newline must not pass.
    stamp = "2026-11-30T08:00:00.000000000Z"
    row = {"seq": 1, "ts": stamp + "\n" + stamp, "kind": "goal.note", "task_id": None,
           "payload": {}, "prev_hash": GENESIS, "entry_hash": "0" * 64, "schema_version": 1}
    raw = ref_canonical(row)
    k = raw.rindex(b',"prev_hash":"') + 79
    t = raw.rindex(b',"task_id":', 0, -39)
    row["entry_hash"] = hashlib.sha256(b"{" + raw[81:k] + raw[t:-39] + b"}").hexdigest()
    res = verify_lines([ref_canonical(row)])
    assert (res.ok, res.error_seq, res.error_line) == (False, 1, 1)
    # Nor may one of 30 characters but more bytes (a non-ASCII digit is a \d too).
    row["ts"] = stamp[:20] + "\u0660" + stamp[21:]
    row["entry_hash"] = "0" * 64
    raw = ref_canonical(row)
    k = raw.rindex(b',"prev_hash":"') + 79
    t = raw.rindex(b',"task_id":', 0, -39)
    row["entry_hash"] = hashlib.sha256(b"{" + raw[81:k] + raw[t:-39] + b"}").hexdigest()
    res = verify_lines([ref_canonical(row)])
    assert (res.ok, res.error_seq, res.error_line) == (False, 1, 1)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 80), max_value=1 << 80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=20),
    lambda kids: st.lists(kids, max_size=4)
    | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), kids,
                      max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.text(max_size=6), _json, max_size=5), min_size=1,
                max_size=6))
def test_rows_are_canonical_and_verify_for_any_payload(payloads: list[dict[str, Any]]) -> None:
    # make_row assembles the line from parts; it must equal canonical(row) exactly, and
    # the verifier (fast or strict path) must accept it and agree on every hash.
    prev = GENESIS
    lines = []
    for seq, payload in enumerate(payloads, 1):
        clean, data, count = clean_payload(payload)
        row, line = make_row(seq=seq, ts_ns=1_764_489_600_000_000_000 + seq, kind="goal.x",
                             task_id=f"t{seq}", payload=clean, payload_bytes=data,
                             prev_hash=prev, redactions=count)
        assert line == ref_canonical(row)
        assert row["entry_hash"] == entry_hash("goal.x", f"t{seq}", clean, prev)
        assert json.loads(line) == row
        prev = row["entry_hash"]
        lines.append(line)
    res = verify_lines(lines)
    assert (res.ok, res.entry_count, res.head_hash) == (True, len(payloads), prev)



# --- the secret scan: shown the chain as it is verified, it judges where the gate points

# Assembled from parts, so that secret scanners run over this repository do not take
# them for leaks.
_SECRETS = ["sk-" + "ant-api03-" + "AbCdEfGhIj0123456789_-xyz", "password=" + "hunter2",
            "ghp" + "_" + "AbCdEfGhIj0123456789QRSTUVWX", "Bearer " + "abc123def456ghi",
            "https://u:" + "pw9@db.example/x", "-----BEGIN " + "PRIVATE KEY-----\nMIIEv",
            "curl -u admin:" + "hunter2", "AKIA" + "IOSFODNN7EXAMPLE"]
# What the gate points at and the writer records all the same, and plain text.
_NOISE = ["https://example.com/x", "max_tokens", "passed", "task_id", "k-means", "a\nb",
          "café", ""]
_texts = st.sampled_from(_SECRETS + _NOISE) | st.text(max_size=8)
_payloads = st.dictionaries(
    st.sampled_from(["note", "password", "url", "argv", "max_tokens", "env"]) | _texts,
    _texts | st.integers() | st.lists(_texts, max_size=3)
    | st.dictionaries(st.sampled_from(["token", "user"]) | _texts, _texts, max_size=2),
    max_size=3)
# (kind, task id, payload, whether the line is spelled otherwise than canonically)
_parts = st.tuples(st.sampled_from(["task.started", "goal.note"]) | _texts,
                   st.none() | st.sampled_from(["t1", "t2"]) | _texts, _payloads,
                   st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_parts, min_size=1, max_size=30), st.integers(1, 8))
def test_the_secret_scan_finds_the_first_row_the_writer_would_refuse(
        parts: list[tuple[str, str | None, dict[str, Any], bool]], batch: int) -> None:
    # Judged row by row by the writer's own test, the first row holding a secret is the
    # one the scan names, whatever the batches, and whether a row's line is canonical
    # (shown to the scan as verified) or spelled otherwise (judged by its canonical line).
    lines, prev = [], GENESIS
    for seq, (kind, task, payload, respelled) in enumerate(parts, 1):
        row, line = make_row(seq=seq, ts_ns=1_764_489_600_000_000_000 + seq, kind=kind,
                             task_id=task, payload=payload, payload_bytes=canonical(payload),
                             prev_hash=prev, redactions=0)
        if respelled:
            line = json.dumps(row).encode()  # spaces, another key order: verifies all the same
        lines.append(line)
        prev = row["entry_hash"]
    # (the row as the chain holds it: its payload's keys in canonical order)
    expected = next(((i, where) for i, (kind, task, payload, _) in enumerate(parts)
                     if (where := secret_field(kind, task, json.loads(canonical(payload))))
                     is not None), None)
    scan = SecretScan()
    with mock.patch.object(verify, "_CHUNK", batch):
        res = verify_lines(lines, observe=scan)
    assert res.ok and res.unproven is not None
    assert scan.first(canonical_lines(lines, res.unproven), res.unproven) == expected


def test_hostile_lines_are_breaks_not_crashes() -> None:
    deep = b'{"a":' * 3000 + b"1" + b"}" * 3000
    for line in (deep, b'{"seq":' + b"9" * 400 + b"}", b"\xff\xfe", b"NaN", b"{" * 5000):
        res = verify_lines([line])
        assert (res.ok, res.error_seq, res.error_line) == (False, 1, 1), line[:20]


# --- tails and segments -------------------------------------------------------------


def test_torn_tail_is_excluded_then_cut_on_open(tmp_path: Path) -> None:
    seg, lines = _six(tmp_path)
    fragment = lines[5][:40]
    seg.write_bytes(b"".join(x + b"\n" for x in lines[:5]) + fragment)
    res = verify_dir(seg.parent)
    assert (res.ok, res.entry_count, res.torn_tail) == (True, 5, fragment)
    assert res.to_json("six")["torn_tail"] is True
    assert read_chain(seg.parent)[:2] == (lines[:5], fragment)
    with WorkLedger(tmp_path, "six") as wl:
        assert wl.recovered_tail == fragment
        row = wl.record("task.failed", "t2", {"why": "crash"})
    assert row["seq"] == 6
    res = verify_dir(seg.parent)
    assert (res.ok, res.entry_count, res.torn_tail, res.head_hash) == (
        True, 6, None, row["entry_hash"])
    assert seg.read_bytes().endswith(ref_canonical(row) + b"\n")


def test_last_row_without_its_newline_is_a_row_not_a_tail(tmp_path: Path) -> None:
    """A hand-written ledger may lack its final newline; no crash leaves a whole row
    behind without having written all of it. Verified, kept, and appended after."""
    seg, lines = _six(tmp_path)
    seg.write_bytes(b"\n".join(lines))
    head = json.loads(lines[5])["entry_hash"]
    res = verify_dir(seg.parent, expected_head=head)
    assert (res.ok, res.entry_count, res.head_hash, res.torn_tail) == (True, 6, head, None)
    assert verify_dir(seg.parent, parallel=True) == res  # too small to split: same walk
    assert read_chain(seg.parent)[:2] == (lines, None)
    with WorkLedger(tmp_path, "six") as wl:
        assert (wl.recovered_tail, wl.head) == (None, (6, head))
        row = wl.record("task.completed", "t2", {"note": "note-7"})
    assert (row["seq"], row["prev_hash"]) == (7, head)
    assert seg.read_bytes() == b"".join(x + b"\n" for x in [*lines, ref_canonical(row)])
    assert verify_dir(seg.parent).entry_count == 7
    # Whole but edited: judged like any row, not excused as a torn tail.
    edited = lines[5].replace(b"note-6", b"note-X")
    seg.write_bytes(b"".join(x + b"\n" for x in lines[:5]) + edited)
    res = verify_dir(seg.parent)
    assert (res.ok, res.error_seq, res.error_line, res.torn_tail) == (False, 6, 6, None)
    assert "entry_hash mismatch" in (res.reason or "")


def test_interior_damage_refuses_to_open(tmp_path: Path) -> None:
    seg, lines = _six(tmp_path)
    damaged = [*lines[:2], lines[2][:50], *lines[3:]]
    seg.write_bytes(b"".join(x + b"\n" for x in damaged))
    res = verify_dir(seg.parent)
    assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 3, 3, 2)
    assert "not a parseable ledger row" in (res.reason or "")
    before = seg.read_bytes()
    with pytest.raises(VerificationFailed, match=r"entry 3 \(000000\.jsonl:3\)"):
        WorkLedger(tmp_path, "six")
    assert seg.read_bytes() == before  # refused without touching the file


def test_blank_trailing_line_is_corruption_not_a_tail(tmp_path: Path) -> None:
    seg, _lines = _six(tmp_path)
    seg.write_bytes(seg.read_bytes() + b"\n")
    res = verify_dir(seg.parent)
    assert (res.ok, res.error_seq, res.error_line) == (False, 7, 7)


def test_segments_are_read_in_name_order(tmp_path: Path) -> None:
    seg, lines = _six(tmp_path)
    d = seg.parent
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines[:3]))
    (d / "000001.jsonl").write_bytes(b"".join(x + b"\n" for x in lines[3:5]) + lines[5][:9])
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.torn_tail) == (True, 5, lines[5][:9])
    # An unterminated end of a segment that a later one continues is interior damage.
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines[:2]) + lines[2][:30])
    res = verify_dir(d)
    assert (res.ok, res.error_seq, res.error_line) == (False, 3, 3)
    with WorkLedger(tmp_path, "fresh") as wl:
        assert wl.head == (0, GENESIS)
    with pytest.raises(NoLedger):
        verify_dir(tmp_path / "nothing")


def test_verify_streams_large_batches_and_names_late_break(tmp_path: Path) -> None:
    # More lines than one fast-path batch, with a break deep inside the second.
    d = tmp_path / "big"
    d.mkdir()
    prev = GENESIS
    out = []
    for seq in range(1, 9001):
        payload = {"i": seq}
        h = entry_hash("goal.tick", None, payload, prev)
        out.append(ref_canonical({"seq": seq, "ts": "2026-11-30T08:00:00.000000000Z",
                                  "kind": "goal.tick", "task_id": None, "payload": payload,
                                  "prev_hash": prev, "entry_hash": h, "schema_version": 1}))
        prev = h
    (d / "000000.jsonl").write_bytes(b"\n".join(out) + b"\n")
    res = verify_dir(d)
    assert (res.ok, res.entry_count, res.head_hash) == (True, 9000, prev)
    good = list(out)
    out[6000] = out[6000].replace(b'"i":6001', b'"i":6002')
    (d / "000000.jsonl").write_bytes(b"\n".join(out) + b"\n")
    res = verify_dir(d)
    assert (res.ok, res.error_seq, res.error_line, res.entry_count) == (False, 6001, 6001, 6000)
    # The parallel walk (forced here; automatic on large ledgers) agrees exactly with
    # the sequential one: ok, a break, a torn tail, two segments, an expected head.
    (d / "000000.jsonl").write_bytes(b"\n".join(out) + b"\n")
    assert verify_dir(d, parallel=True) == verify_dir(d, parallel=False)
    (d / "000000.jsonl").write_bytes(b"\n".join(good[:5000]) + b"\n")
    (d / "000001.jsonl").write_bytes(b"\n".join(good[5000:]) + b"\n" + good[0][:77])
    par = verify_dir(d, parallel=True)
    assert par == verify_dir(d, parallel=False)
    assert (par.ok, par.entry_count, par.head_hash, par.torn_tail) == (True, 9000, prev,
                                                                        good[0][:77])
    for head in (prev, GENESIS):
        assert verify_dir(d, head, parallel=True) == verify_dir(d, head, parallel=False)
    (d / "000000.jsonl").write_bytes(b"\n".join(good[:4999]) + b"\n" + good[4999][:20])
    par = verify_dir(d, parallel=True)
    assert par == verify_dir(d, parallel=False)
    assert (par.ok, par.error_seq, par.error_line) == (False, 5000, 5000)


# --- redaction ----------------------------------------------------------------------

SECRET = "sk-ant-api03-" + "Zx9" * 12


def test_secret_never_reaches_the_file(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "sec") as wl:
        row = wl.record(
            "task.started",
            "t1",
            {"env": f"ANTHROPIC_API_KEY={SECRET}", "argv": ["--key", SECRET], "n": 1},
        )
        seg = wl.segment
    data = seg.read_bytes()
    assert SECRET.encode() not in data and b"Zx9Zx9" not in data
    assert row["redactions"] == 2
    assert row["payload"]["argv"] == ["--key", "[REDACTED]"]
    assert json.loads(data)["redactions"] == 2
    assert verify_dir(seg.parent).ok


_HOME_SCRIPT = """
import json, sys
from harness.worklog.store import WorkLedger
with WorkLedger(sys.argv[1], "home") as wl:
    row = wl.record("task.started", "t1",
                    {"cwd": "/root/project/src", "key": sys.argv[2], "home": "~/x"})
print(json.dumps(row))
"""


def test_entry_hash_does_not_depend_on_home(tmp_path: Path) -> None:
    rows = []
    for i, home in enumerate(["/", "/root", str(tmp_path / "h")]):
        env = dict(os.environ, HOME=home)
        (tmp_path / f"w{i}").mkdir()
        out = subprocess.run(
            [sys.executable, "-c", _HOME_SCRIPT, str(tmp_path / f"w{i}"), SECRET],
            env=env, capture_output=True, text=True, check=True, timeout=60,
        )
        rows.append(json.loads(out.stdout))
    assert len({r["entry_hash"] for r in rows}) == 1
    assert rows[0]["payload"] == {"cwd": "/root/project/src", "key": "[REDACTED]", "home": "~/x"}
    assert rows[0]["entry_hash"] == entry_hash("task.started", "t1", rows[0]["payload"], GENESIS)


# --- validation ---------------------------------------------------------------------

GOOD_RUN_IDS = ["goal-42", "a", "A_b.c-d", "x" * 128, "user@host", "café", "a.b", "v1.0-lock"]
BAD_RUN_IDS: list[object] = [
    "", "x" * 129, "a/b", "/abs", "..", "a..b", ".hidden", "end.", "x.lock", "sp ace",
    "tab\there", "nl\n", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a\\b", "@", "a@{b",
    "nul\x00", "del\x7f", None, 12, "\ud800",
]


@pytest.mark.parametrize("run_id", GOOD_RUN_IDS)
def test_run_id_accepted(tmp_path: Path, run_id: str) -> None:
    assert validate_run_id(run_id) == run_id
    d = ledger_dir(tmp_path, run_id)
    assert d == tmp_path.resolve() / ".harness" / "runtime" / "ledger" / run_id


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_run_id_refused(tmp_path: Path, run_id: object) -> None:
    with pytest.raises(RowRejected, match="run id") as ei:
        validate_run_id(run_id)
    assert ei.value.exit_code == 2
    with pytest.raises(RowRejected):
        WorkLedger(tmp_path, run_id)  # type: ignore[arg-type]
    assert not (tmp_path / ".harness").exists()


def test_ledger_dir_refuses_a_symlinked_escape(tmp_path: Path) -> None:
    root = tmp_path / ".harness" / "runtime" / "ledger"
    root.mkdir(parents=True)
    (root / "evil").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RowRejected, match="outside"):
        ledger_dir(tmp_path, "evil")
    (root / "inner").symlink_to(root / "other")  # even one pointing inside the root
    with pytest.raises(RowRejected, match="symlink"):
        ledger_dir(tmp_path, "inner")
    with pytest.raises(WorkLedgerError, match="not a directory"):
        WorkLedger(tmp_path / "missing", "r")


def test_kinds_task_ids_and_payloads_refused_without_consuming_seq(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "val") as wl:
        wl.record("run.open", None, {})
        with pytest.raises(RowRejected, match=r"'task\.competed'") as ei:
            wl.record("task.competed", "t1", {})
        for k in KINDS:
            assert k in str(ei.value)
        bad: list[tuple[Any, Any, Any, str]] = [
            ("run.finished", None, {}, "not a known run"),
            ("Task.started", "t1", {}, "not a valid kind"),
            ("x" * 65, None, {}, "not a valid kind"),
            ("", None, {}, "not a valid kind"),
            ("task.started", None, {}, "needs a task_id"),
            ("task.started", "", {}, "non-empty"),
            ("task.started", "a" * 129, {}, "at most 128"),
            ("task.started", 'a"b', {}, "control character"),
            ("task.started", "a\nb", {}, "control character"),
            ("run.closed", "t1", {}, "must be None"),
            ("task.started", "t1", [], "must be a JSON object"),
            ("task.started", "t1", None, "must be a JSON object"),
            ("task.started", "t1", {"x": float("nan")}, "non-finite"),
            ("task.started", "t1", {"x": float("inf")}, "non-finite"),
            ("task.started", "t1", {1: "int key"}, "string keys"),
            ("task.started", "t1", {"x": {1, 2}}, "cannot encode a set"),
            ("task.started", "t1", {"x": b"bytes"}, "cannot encode a bytes"),
            ("task.started", "t1", {"x": "\ud800"}, "not canonical JSON"),
            ("task.started", "t1", {"x": "y" * (1 << 20)}, "line limit"),
            ("task.started", "t1", {"x": "y" * ((1 << 20) - 100)}, "exceeds the 1048576"),
            ("task.started", SECRET, {}, "holds a secret"),
        ]
        for kind, task, payload, msg in bad:
            with pytest.raises(RowRejected, match=msg):
                wl.record(kind, task, payload)
        nested: dict[str, Any] = {}
        cur = nested
        for _ in range(5000):
            cur["n"] = cur = {}
        with pytest.raises(RowRejected):
            wl.record("goal.deep", None, nested)
        row = wl.record("goal.note", None, {"text": "extension family"})
        assert row["seq"] == 2 and row["task_id"] is None
        row = wl.record("goal.step", "t1", {})
        assert row["seq"] == 3 and row["task_id"] == "t1"
    res = verify_dir(ledger_dir(tmp_path, "val"))
    assert (res.ok, res.entry_count) == (True, 3)


def test_second_holder_in_same_process_is_refused(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "lock") as wl:
        wl.record("run.open", None, {})
        with pytest.raises(LedgerLocked, match=rf"held by pid {os.getpid()} on ") as ei:
            WorkLedger(tmp_path, "lock")
        assert ei.value.holder["pid"] == os.getpid()
        assert isinstance(ei.value, WorkLedgerError)
    with WorkLedger(tmp_path, "lock") as wl:  # released on close
        assert wl.head[0] == 1
    assert (ledger_dir(tmp_path, "lock") / ".lock").read_bytes() == b""


def test_closed_ledger_refuses_records(tmp_path: Path) -> None:
    wl = WorkLedger(tmp_path, "c")
    wl.close()
    wl.close()
    with pytest.raises(WorkLedgerError, match="closed"):
        wl.record("run.open", None, {})


# --- replay -------------------------------------------------------------------------


def _graph(wl: WorkLedger) -> None:
    wl.record("run.open", None, {"goal": "g"})
    for task, deps in [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"]), ("e", ["zz"]),
                       ("f", [])]:
        wl.record("task.scheduled", task, {"deps": deps})
    wl.record("task.started", "a", {"attempt": 1})
    wl.record("task.failed", "a", {"error": "flaky"})
    wl.record("task.started", "a", {"attempt": 2})
    wl.record("task.completed", "a", {"commit": "c" * 40})
    wl.record("task.started", "b", {"attempt": 1})
    wl.record("goal.note", None, {"text": "carried"})
    wl.record("task.started", "f", {"attempt": 1})
    wl.record("task.abandoned", "f", {})
    wl.record("run.resumed", None, {"nonce": "n1"})
    wl.record("task.started", "a", {"attempt": 3})  # completed work stays completed


def test_replay_projection_and_frontier_exact(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "g") as wl:
        _graph(wl)
        rows = wl.rows()
    st = replay(rows)
    j = st.to_json()
    assert {k: j[k] for k in ("finished", "in_flight", "scheduled", "failed", "abandoned",
                              "prior_resumes", "frontier", "closed", "opened")} == {
        "finished": ["a"],
        "in_flight": ["b"],
        "scheduled": ["c", "d", "e"],
        "failed": [],
        "abandoned": ["f"],
        "prior_resumes": 1,
        "frontier": ["b", "c"],
        "closed": False,
        "opened": True,
    }
    assert j["unknown_kinds"] == {"goal.note": 1}
    assert st.unknown[0]["payload"] == {"text": "carried"}
    assert st.tasks["a"].attempts == 3 and st.tasks["a"].last_seq == 17
    assert st.tasks["d"].deps == ["b", "c"]
    assert (j["entry_count"], j["head_seq"]) == (17, 17)
    # Completing b and c makes d ready; closing the run is recorded.
    more = [
        *rows,
        {"seq": 18, "kind": "task.completed", "task_id": "b", "payload": {}},
        {"seq": 19, "kind": "task.completed", "task_id": "c", "payload": {}},
        {"seq": 20, "kind": "run.closed", "task_id": None, "payload": {}},
    ]
    j2 = replay(more).to_json()
    assert (j2["frontier"], j2["finished"], j2["closed"]) == (["d"], ["a", "b", "c"], True)


def test_replay_is_deterministic(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "g") as wl:
        _graph(wl)
        rows = wl.rows()
    first = json.dumps(replay(rows).to_json(), sort_keys=True)
    again = json.dumps(replay([json.loads(json.dumps(r)) for r in rows]).to_json(),
                       sort_keys=True)
    assert first == again
    lines = read_chain(ledger_dir(tmp_path, "g")).lines
    assert json.dumps(replay([json.loads(x) for x in lines]).to_json(), sort_keys=True) == first


def test_hand_chain_replays(tmp_path: Path) -> None:
    j = replay(_hand_rows()).to_json()
    assert (j["finished"], j["scheduled"], j["frontier"], j["unknown_kinds"]) == (
        ["t1"], ["t2"], ["t2"], {"goal.note": 1})


# --- resume under the lock -------------------------------------------------------------


def _resume_fixture(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "r") as wl:
        wl.record("run.open", None, {"goal": "g"})
        wl.record("task.scheduled", "t1", {"deps": []})


def test_resume_reuses_the_unlocked_pass_when_the_head_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.worklog import resume as resume_mod

    _resume_fixture(tmp_path)
    calls: list[str] = []
    real = resume_mod._local

    def counting(wd: Path, run_id: str) -> Any:
        calls.append(run_id)
        return real(wd, run_id)

    monkeypatch.setattr(resume_mod, "_local", counting)
    res = resume_mod.resume(tmp_path, "r")
    assert calls == ["r"]  # the chain under the lock had the same head: not read again
    assert (res.status, res.entry_count, res.resume_seq, res.frontier) == (
        "resumed", 2, 3, ["t1"])
    assert verify_dir(ledger_dir(tmp_path, "r")).entry_count == 3


def test_resume_redoes_the_checks_when_the_chain_moved_before_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.worklog import resume as resume_mod

    _resume_fixture(tmp_path)
    real = resume_mod._signal_dir
    moved: list[bool] = []

    def append_then(wd: Path) -> Path:
        # First called after the unlocked pass, before the lock: another writer extends
        # the chain there (later calls come under the lock, when signals are written).
        if not moved:
            moved.append(True)
            with WorkLedger(tmp_path, "r") as wl:
                wl.record("task.scheduled", "t2", {"deps": []})
        return real(wd)

    monkeypatch.setattr(resume_mod, "_signal_dir", append_then)
    res = resume_mod.resume(tmp_path, "r")
    assert (res.entry_count, res.resume_seq, res.frontier) == (3, 4, ["t1", "t2"])
    assert res.state.head_seq == 3
    assert verify_dir(ledger_dir(tmp_path, "r")).entry_count == 4


@pytest.mark.parametrize(("stamp", "ok"), [
    ("2024-13-45T99:99:99.000000000Z", False),  # the writer's form, no field in range
    ("2025-02-29T10:00:00.000000000Z", False),  # not a leap year
    ("2024-04-31T10:00:00.000000000Z", False),
    ("2024-02-29T23:59:59.999999999Z", True),
    ("2024-12-31T00:00:00.000000000Z", True),
])
def test_a_stamp_in_the_writers_form_must_be_a_real_time(tmp_path: Path, stamp: str,
                                                          ok: bool) -> None:
    # ts is outside the hash, so only the ts check can refuse it: in the batch pass and
    # in the per-line pass that then names the row.
    _, lines = _six(tmp_path)
    rows = [json.loads(x) for x in lines]
    rows[3]["ts"] = stamp
    res = verify_lines([ref_canonical(r) for r in rows])
    if ok:
        assert res.ok and res.entry_count == 6
        return
    assert (res.ok, res.error_seq, res.error_line) == (False, 4, 4)
    assert res.reason == f"ts {stamp!r} is not an RFC 3339 time"


def test_a_new_work_ledger_syncs_every_directory_it_made(tmp_path: Path) -> None:
    """`.harness/runtime/ledger/<run>` made from nothing in the work tree: each new
    directory's entry is synced in its parent before the first row is acknowledged."""
    files = DirSyncs()
    with WorkLedger(tmp_path, "goal", files=files) as wl:
        wl.record("goal.tick", None, {"i": 1})
    root = tmp_path.resolve()
    made = [root, root / ".harness", root / ".harness" / "runtime",
            root / ".harness" / "runtime" / "ledger"]
    assert files.dirs[: len(made)] == [str(p) for p in made]


def test_a_found_work_ledger_syncs_its_directories_once_before_the_first_row(
        tmp_path: Path) -> None:
    """`.harness/runtime/ledger/<run>` found already there, as a killed process may leave
    it, made and never synced: before the first row is acknowledged each directory's
    entry is synced, up to the work tree that holds `.harness`, once."""
    root = tmp_path.resolve()
    run = root / ".harness" / "runtime" / "ledger" / "goal"
    run.mkdir(parents=True, mode=0o700)
    files = DirSyncs()
    with WorkLedger(tmp_path, "goal", files=files) as wl:
        wl.record("goal.tick", None, {"i": 1})
        first = list(files.dirs)
        wl.record("goal.tick", None, {"i": 2})
    assert first == [str(run), str(run.parent), str(run.parent.parent),
                     str(root / ".harness"), str(root)]
    assert files.dirs == first


def test_a_break_is_named_by_segment_file_and_line_on_both_walks(tmp_path: Path) -> None:
    """The sequential and the parallel walk name a break in a later segment alike: its
    file and the line within it, not a count running across the segments."""
    seg, lines = _six(tmp_path)
    d = seg.parent
    (d / "000000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines[:4]))
    (d / "000001.jsonl").write_bytes(b"".join(x + b"\n" for x in [lines[5], lines[4]]))
    for parallel in (False, True):
        res = verify_dir(d, parallel=parallel)
        assert (res.ok, res.error_seq, res.error_file, res.error_line) == (
            False, 5, "000001.jsonl", 1)
        assert res.to_json("six")["file"] == "000001.jsonl"
        assert res.describe().startswith("entry 5 (000001.jsonl:1): seq mismatch")
    # verify_lines over lines already read names the same place when told the segments.
    read = read_chain(d)
    assert read.starts == [(0, "000000.jsonl"), (4, "000001.jsonl")]
    res = verify_lines(read.lines, starts=read.starts)
    assert (res.error_seq, res.error_file, res.error_line) == (5, "000001.jsonl", 1)
    assert verify_lines(read.lines).describe().startswith("entry 5 (line 5): seq mismatch")
