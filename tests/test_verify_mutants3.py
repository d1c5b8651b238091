"""Mutation-found gaps in chain verification (ledger/verify.py), third pass: reading
CHAIN, one file's own check (`check_file`, `_lines`, `_Behind`), the readers of a line
the chain decoder refused and the stitching of the files' checks (`_verify_once`). Each
test pins a behaviour no other test held exactly; the two under "a defect" fail until
the defect they show is fixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.ledger import verify as verify_module
from ledgertools import (
    EDITED,
    FRAGMENT,
    edited,
    foreign,
    seal,
    sealed_lines,
    verify_json,
    write_day_file,
)
from test_verify import REMOVED, REORDERED


def test_a_whole_line_whose_seq_no_decoder_holds_is_a_break(ledger_dir: Path) -> None:
    """Seq 1-2, then a whole line whose seq is an integer of 5,000 digits: no ledger line
    (the chain decoder refuses it) and, past Python's 4,300-digit limit, no value the
    plain decoder gives either. A break at 2025-11-03.jsonl:3 with no seq, not a
    traceback."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 3)})
    huge = b'{"seq":' + b"9" * 5000 + b',"prev":"' + hashes[2].encode() + b'"}'
    write_day_file(ledger_dir / "2025-11-03.jsonl", [raws[1], raws[2], huge])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, None, "2025-11-03.jsonl", 3,
        "complete line is not a ledger line (Integer value out of range - at `$.seq`)")
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hashes[2])


# -- a defect: a break where two files are stitched listed the later file's fragments
# past the break ------------------------------------------------------------------------
#
# `_verify_once` adds each file's fragments (`c.torn_at`) before it stitches the file's
# first line to the file before. When that stitch fails, the file had been read to its end
# by its own check, so fragments after the break were listed too; a break a file's own
# check finds (which stops there) and the merge (which keeps only `place < stop`) list
# only the fragments before the break.


def test_a_break_at_a_files_first_line_lists_no_fragment_after_it(ledger_dir: Path) -> None:
    """Seq 1-3 on the 3rd; the 4th holds a fragment, then seq 4 sealed after a prev that is
    not seq 3's hash, a fragment, and seq 5 linked to it. The break is seq 4 at
    2025-11-04.jsonl:2; the fragment at line 1 is before it and is listed, the one at
    line 3 is after it and is not (verify listed both)."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 4)})
    other, _ = sealed_lines({"2025-11-04": range(4, 6)}, prev="f" * 64)
    write_day_file(ledger_dir / "2025-11-03.jsonl", [raws[1], raws[2], raws[3]])
    write_day_file(ledger_dir / "2025-11-04.jsonl", [FRAGMENT, other[4], FRAGMENT, other[5]])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, 4, "2025-11-04.jsonl", 2,
        "prev does not match the hash of the line before (seq 3): a line was removed, "
        "inserted or edited")
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (3, 3, hashes[3])
    assert (out["torn"], out["torn_at"], out["torn_tail"]) == (
        1, ["2025-11-04.jsonl:1"], False)


# -- a defect: a CHAIN nested past the JSON decoder's depth was a traceback ------------
#
# `read_chain_file` turns OSError and ValueError into "unreadable chain anchor", but
# `json.loads` raises RecursionError for a value nested deeper than the interpreter's
# recursion limit, which no caller catches (`harness ledger verify` printed a traceback).


def test_a_chain_file_nested_past_the_decoders_depth_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "CHAIN").write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"/CHAIN: unreadable chain anchor: "):
        verify_module.read_chain_file(str(tmp_path))


def _spaced(raw: bytes) -> bytes:
    """The same line in a form that is not canonical (spaces after ':' and ','): its
    hash holds only once the line is re-encoded."""
    out = json.dumps(json.loads(raw)).encode()
    assert out != raw
    return out


def test_a_line_not_in_canonical_form_ends_the_file_and_is_the_head(ledger_dir: Path) -> None:
    """Seq 1-3 in canonical form, then seq 4 in another form (its hash holds once
    re-encoded) as the file's last line. It verifies and is the head: the run of lines
    1-3 that `_lines` took before it is not handed back again after it (which would set
    the chain back to seq 3 and name seq 3 the head)."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 5)})
    write_day_file(ledger_dir / "2025-11-03.jsonl",
                   [raws[1], raws[2], raws[3], _spaced(raws[4])])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["entry_count"], out["head_seq"], out["head_hash"]) == (
        True, 4, 4, hashes[4])
    assert "seq" not in out


def test_two_lines_not_in_canonical_form_after_a_run_verify(ledger_dir: Path) -> None:
    """Seq 1-3 canonical, seq 4 and 5 not, seq 6 canonical: all verify, head seq 6."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 7)})
    write_day_file(ledger_dir / "2025-11-03.jsonl",
                   [raws[1], raws[2], raws[3], _spaced(raws[4]), _spaced(raws[5]), raws[6]])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["entry_count"], out["head_seq"], out["head_hash"]) == (
        True, 6, 6, hashes[6])


def test_a_foreign_line_after_a_run_in_the_only_file_keeps_the_run_as_the_head(
        ledger_dir: Path) -> None:
    """Seq 1-3, then a whole line that is no ledger line (its seq a string), in the only
    day file: the break is 2025-11-03.jsonl:4 with no seq, and seq 1-3 verified (seq 2-3
    taken by `_lines`' fast path, handed back before the foreign line): head seq 3."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 5)})
    write_day_file(ledger_dir / "2025-11-03.jsonl",
                   [raws[1], raws[2], raws[3], foreign(raws[4])])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-03.jsonl", 4)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (3, 3, hashes[3])


def test_an_edited_line_before_chain_in_the_only_file_stops_its_check(
        ledger_dir: Path) -> None:
    """CHAIN holds seq 3; the only day file holds seq 2 and 3 (a crash left them) with
    seq 3 edited, then seq 4-5. The break is seq 3 at 2025-11-03.jsonl:2; nothing after
    it is verified: no line counted, the head is CHAIN's seq 3, and the two lines checked
    on their own (seq 2 and the edited seq 3) are counted as behind CHAIN."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 6)})
    (ledger_dir).mkdir(parents=True)
    (ledger_dir / "CHAIN").write_text(json.dumps({"seq": 3, "hash": hashes[3]}))
    write_day_file(ledger_dir / "2025-11-03.jsonl",
                   [raws[2], edited(raws[3]), raws[4], raws[5]])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, 3, "2025-11-03.jsonl", 2, EDITED)
    assert (out["entry_count"], out["head_seq"], out["head_hash"], out["anchor"]) == (
        0, 3, hashes[3], "CHAIN seq 3")
    assert out["behind_anchor"] == 2


def test_a_line_sealed_after_the_line_before_with_a_lower_seq_is_a_break(
        ledger_dir: Path) -> None:
    """Seq 1-2, then a line sealed by hand after seq 2 (its prev seq 2's hash, its own
    hash holding) whose seq is 1 again. `_lines`' fast path takes only the seq one more
    than the line before; this one the caller judges: a break at 2025-11-03.jsonl:3."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 3)})
    again, _ = seal({"v": 1, "type": "decided", "harness": "nightly", "run_id": 9}, 1,
                    hashes[2])
    write_day_file(ledger_dir / "2025-11-03.jsonl", [raws[1], raws[2], again])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, 1, "2025-11-03.jsonl", 3,
        "seq 1 does not follow seq 2 (duplicated or reordered line)")
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hashes[2])


def test_a_later_file_that_starts_with_the_earlier_files_last_seq_lists_no_fragment_after_it(
        ledger_dir: Path) -> None:
    """Seq 1-3 on the 3rd; the 4th starts with seq 3 again, then a fragment, then seq 4.
    The files' seq ranges touch (3 and 3), so they are merged, not stitched: the break is
    seq 3 at 2025-11-04.jsonl:1, and the fragment after it is not listed."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 5)})
    write_day_file(ledger_dir / "2025-11-03.jsonl", [raws[1], raws[2], raws[3]])
    write_day_file(ledger_dir / "2025-11-04.jsonl", [raws[3], FRAGMENT, raws[4]])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, 3, "2025-11-04.jsonl", 1,
        "seq 3 does not follow seq 3 (duplicated or reordered line)")
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (3, 3, hashes[3])
    assert (out["torn"], out["torn_at"]) == (0, [])




@pytest.mark.parametrize(("kept", "seq", "prev_of", "reason"), [
    # after seq 1, which the caller judged: the same seq again, linked to it
    (1, 1, 1, REORDERED.format(1, 1)),
    # after seq 2, which `_lines`' fast path took: the same seq again, linked to it
    (2, 2, 2, REORDERED.format(2, 2)),
    # after seq 1: the next seq, its prev "" (no hash), its own hash holding
    (1, 2, None, REMOVED.format(1)),
], ids=["same seq after a judged line", "same seq after a taken line", "prev empty"])
def test_a_hand_sealed_line_after_the_last_good_one_is_judged(
        ledger_dir: Path, kept: int, seq: int, prev_of: int | None, reason: str) -> None:
    """Seq 1..`kept`, then a line sealed by hand whose own hash holds, of seq `seq`, its
    prev seq `prev_of`'s hash (or ""). `_lines`' fast path takes a line only when its seq
    is one more than the line before and its prev that line's hash: this one goes to the
    caller, which names it the break, at 2025-11-03.jsonl:`kept + 1`."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, kept + 1)})
    forged, _ = seal({"v": 1, "type": "decided", "harness": "nightly", "run_id": 9}, seq,
                     hashes[prev_of] if prev_of else "")
    write_day_file(ledger_dir / "2025-11-03.jsonl",
                   [raws[s] for s in range(1, kept + 1)] + [forged])
    out = verify_json(ledger_dir)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, seq, "2025-11-03.jsonl", kept + 1, reason)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (
        kept, kept, hashes[kept])
