"""Mutation-found gaps and two defects in chain verification (ledger/verify.py), second
pass: each test pins a behaviour no other test held exactly."""

from __future__ import annotations

import json
from pathlib import Path

from ledgertools import EDITED, FRAGMENT, foreign, sealed_lines, verify_json, write_day_file


def test_merged_files_list_every_fragment_before_a_files_first_line(tmp_path: Path) -> None:
    """Seq 1-2 and 4-5 on the 3rd; a clock jump put seq 3 on the 4th after two fragments
    a crash left there. The files are merged and verify, and both fragments are listed,
    not only the last one before the 4th's first line."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 6)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[4], raws[5]])
    write_day_file(d / "2025-11-04.jsonl", [FRAGMENT, FRAGMENT, raws[3]])
    out = verify_json(d)
    assert (out["ok"], out["entry_count"], out["head_seq"], out["head_hash"]) == (
        True, 5, 5, hashes[5])
    assert (out["torn"], out["torn_at"], out["torn_tail"]) == (
        2, ["2025-11-04.jsonl:1", "2025-11-04.jsonl:2"], False)


# -- a file whose first line is seq -1 with an empty prev (a defect, fixed) ------------
#
# `_lines` starts its fast path with expect, head = -1, "" ("until the caller has taken
# a chain line"), so a line of seq -1 whose prev is "" and whose own hash holds is taken
# as linked before the caller has judged any line: it and every line linked after it are
# counted and never yielded. `check_file` then has no first line (first_seq None), and
# the stitching skips the file as if it held no line of the chain.

BAD_REASON = "seq -1 does not follow seq 0 (duplicated or reordered line)"


def test_a_later_file_of_lines_from_seq_minus_1_is_a_break(tmp_path: Path) -> None:
    """Seq 1-3 on the 3rd; the 4th holds seq -1 (prev "") to 2, linked among themselves,
    seq 1 and 2 a second time. Seq -1 does not follow anything: a break at
    2025-11-04.jsonl:1 (the merge, the files' seq ranges overlapping, finds it first).
    Verify said ok, three lines: the fast path took seq -1, prev "", for the chain's
    start, so the 4th's lines were never judged."""
    raws, _ = sealed_lines({"2025-11-03": range(1, 4)})
    bad, _ = sealed_lines({"2025-11-04": range(-1, 3)}, prev="")
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", list(raws.values()))
    write_day_file(d / "2025-11-04.jsonl", list(bad.values()))
    out = verify_json(d)
    assert (out["ok"], out.get("seq"), out.get("file"), out.get("line"),
            out.get("reason")) == (False, -1, "2025-11-04.jsonl", 1, BAD_REASON)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (0, None, None)


def test_a_ledger_of_lines_from_seq_minus_1_is_no_chain(tmp_path: Path) -> None:
    """One file of four lines, seq -1 (prev "") to 2: its first line does not follow
    genesis. Verify said ok with no line verified."""
    bad, _ = sealed_lines({"2025-11-03": range(-1, 3)}, prev="")
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", list(bad.values()))
    out = verify_json(d)
    assert (out["ok"], out.get("seq"), out.get("file"), out.get("line"),
            out.get("reason")) == (False, -1, "2025-11-03.jsonl", 1, BAD_REASON)


def test_in_the_merge_the_break_is_named_by_a_real_line(tmp_path: Path) -> None:
    """Seq 1-2 and 4-5 on the 3rd, seq 3 on the 4th (a clock jump: merged); the 5th holds
    seq -1 (prev "") to 1. The break is seq -1 at 2025-11-05.jsonl:1, before any line; the
    merge reads files without `check_file`, yet `_lines`' fast path had swallowed the run
    and named seq 1 at 2025-11-05.jsonl:0, a line that does not exist."""
    raws, _ = sealed_lines({"2025-11-03": range(1, 6)})
    bad, _ = sealed_lines({"2025-11-05": range(-1, 2)}, prev="")
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[4], raws[5]])
    write_day_file(d / "2025-11-04.jsonl", [raws[3]])
    write_day_file(d / "2025-11-05.jsonl", list(bad.values()))
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, -1, "2025-11-05.jsonl", 1, BAD_REASON)
    assert (out["entry_count"], out["head_seq"]) == (0, None)




def test_a_files_opening_foreign_line_breaks_just_before_its_first_line(
        tmp_path: Path) -> None:
    """Seq 1, 2 and 4 on the 3rd; the 4th holds a fragment, a whole line that is no ledger
    line, then seq 3 (a clock jump: merged). The foreign line goes just ahead of the 4th's
    first line (seq 3), so after seq 2: the break is 2025-11-04.jsonl:2 with two lines
    verified, and the fragment before it is listed."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 5)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[4]])
    write_day_file(d / "2025-11-04.jsonl", [FRAGMENT, foreign(raws[3]), raws[3]])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-04.jsonl", 2)
    assert out["reason"].startswith("complete line is not a ledger line")
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hashes[2])
    assert (out["torn"], out["torn_at"]) == (1, ["2025-11-04.jsonl:1"])


def test_fragments_before_a_later_files_opening_foreign_line_come_after_an_earlier_break(
        tmp_path: Path) -> None:
    """Seq 1, 2, 3 (edited) and 5 on the 3rd; the 4th holds a fragment, a foreign line,
    then seq 4. The break is the edit of seq 3 in the 3rd; the 4th's foreign line, and
    the fragment before it, come after seq 3 of the earlier file, so no fragment is
    listed."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 6)})
    edited = raws[3].replace(b'"outcome":"skipped"', b'"outcome":"success"')
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], edited, raws[5]])
    write_day_file(d / "2025-11-04.jsonl", [FRAGMENT, foreign(raws[4]), raws[4]])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, 3, "2025-11-03.jsonl", 3, EDITED)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hashes[2])
    assert (out["torn"], out["torn_at"]) == (0, [])


def test_a_merged_ledger_whose_newest_file_ends_torn_says_so(tmp_path: Path) -> None:
    """Seq 3 on the 3rd; seq 1-2 and 4-5 on the 4th (a clock jump: merged), which ends in
    an unterminated fragment. The merge verifies all five lines and lists the fragment
    (2025-11-04.jsonl:5), so the newest file ends torn: torn_tail is true. It was false,
    taken from the 4th's own check, which stopped at the gap after seq 2 (the 3rd fills
    it) before it read the file's end."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 6)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[3]])
    write_day_file(d / "2025-11-04.jsonl", [raws[1], raws[2], raws[4], raws[5]])
    with (d / "2025-11-04.jsonl").open("ab") as f:
        f.write(FRAGMENT)
    out = verify_json(d)
    assert (out["ok"], out["entry_count"], out["head_seq"], out["head_hash"]) == (
        True, 5, 5, hashes[5])
    assert (out["torn"], out["torn_at"]) == (1, ["2025-11-04.jsonl:5"])
    assert out["torn_tail"] is True


def test_a_foreign_line_in_a_file_before_the_last_is_the_break_of_a_merge(
        tmp_path: Path) -> None:
    """Seq 1, 2 and a whole line that is no ledger line (its seq a string) on the 3rd, seq
    3 on the 4th: the 3rd's own check fails, so the files are merged, and the 3rd is read
    to its end for its highest ledger seq (2: the foreign line has none). The break is the
    foreign line, 2025-11-03.jsonl:3, after seq 1-2."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 4)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], foreign(raws[3])])
    write_day_file(d / "2025-11-04.jsonl", [raws[3]])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-03.jsonl", 3)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hashes[2])


def test_a_file_of_fragments_only_puts_a_later_foreign_file_at_genesis(
        tmp_path: Path) -> None:
    """The 2nd holds only a fragment, the 3rd only a whole line that is no ledger line,
    the 4th a line of seq 0 (the 3rd's fault sends the files to the merge). Nothing before
    the 3rd ends past genesis (seq 0), so its foreign line goes at seq 0, ahead of the
    4th's line of seq 0 (a later file): the break is 2025-11-03.jsonl:1."""
    raws, _ = sealed_lines({"2025-11-03": range(0, 1)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-02.jsonl", [FRAGMENT])
    write_day_file(d / "2025-11-03.jsonl", [foreign(raws[0])])
    write_day_file(d / "2025-11-04.jsonl", [raws[0]])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-03.jsonl", 1)
    assert (out["entry_count"], out["torn_at"]) == (0, ["2025-11-02.jsonl:1"])


def test_fragments_before_a_foreign_only_files_line_are_listed_with_its_break(
        tmp_path: Path) -> None:
    """Seq 1, 2 and 4 on the 3rd, seq 3 on the 4th (a clock jump: merged); the 5th holds a
    fragment and then a whole line that is no ledger line. That line goes where the files
    before it end (seq 4) and is the break, 2025-11-05.jsonl:2, after four lines; the
    fragment before it is listed."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 6)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[4]])
    write_day_file(d / "2025-11-04.jsonl", [raws[3]])
    write_day_file(d / "2025-11-05.jsonl", [FRAGMENT, foreign(raws[5])])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-05.jsonl", 2)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (4, 4, hashes[4])
    assert (out["torn"], out["torn_at"]) == (1, ["2025-11-05.jsonl:1"])


def test_an_edited_line_behind_chain_in_a_merge_is_the_break_and_ends_it(
        tmp_path: Path) -> None:
    """CHAIN holds seq 3. The 2nd holds seq 2, edited (a line behind CHAIN: checked on its
    own); the 3rd a fragment, then seq 4 and 6; the 4th seq 5 (merged). The edit is the
    break, 2025-11-02.jsonl:1, with nothing verified, and the 3rd's fragment, after it
    in seq order, is not listed."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 7)})
    edited = raws[2].replace(b'"outcome":"skipped"', b'"outcome":"success"')
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-02.jsonl", [edited])
    write_day_file(d / "2025-11-03.jsonl", [FRAGMENT, raws[4], raws[6]])
    write_day_file(d / "2025-11-04.jsonl", [raws[5]])
    (d / "CHAIN").write_text(json.dumps({"seq": 3, "hash": hashes[3]}) + "\n")
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, 2, "2025-11-02.jsonl", 1, EDITED)
    assert (out["entry_count"], out["behind_anchor"], out["torn"], out["torn_at"]) == (
        0, 1, 0, [])


def test_an_opening_foreign_line_sorts_ahead_of_an_earlier_files_line_of_its_files_first_seq(
        tmp_path: Path) -> None:
    """Seq 1-4 on the 3rd; the 4th holds a whole line that is no ledger line, then a second
    seq 3. The foreign line is keyed at the seq before the 4th's first line (2): it is the
    break after seq 1-2, ahead of the 3rd's own seq 3, not after it."""
    raws, hashes = sealed_lines({"2025-11-03": range(1, 5)})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[3], raws[4]])
    write_day_file(d / "2025-11-04.jsonl", [foreign(raws[3]), raws[3]])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-04.jsonl", 1)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hashes[2])
