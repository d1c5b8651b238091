"""Mutation-found gaps in the ledger index (ledger/index.py) and in chain verification
(ledger/verify.py): each test pins a behaviour no other test held exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.ledger.index import Index
from harness.ledger.query import Query
from harness.ledger.verify import verify_run_ledger
from harness.timefmt import format_ns
from ledgertools import (
    DAY,
    EDITED,
    MINUTE,
    T0,
    edited,
    foreign,
    sealed_lines,
    verify_json,
    write_day_file,
)


def _line(seq: int, harness: str, run_id: int, at: int, typ: str = "decided",
          **extra: Any) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "type": typ, "at": format_ns(at), "harness": harness,
            "run_id": run_id, "trigger": "schedule", "outcome": "missed", **extra}


# -- the index -------------------------------------------------------------------------


def test_a_trim_keeps_a_harness_floor_below_the_global_floor() -> None:
    """A harness floor lower than the global floor (a/2 kept open while b/1, newer, went)
    stays the harness's own when a later trim drops a/2: a's floor is then a/3's seq, not
    the global floor, and a query of a alone is answered from memory."""
    idx = Index(window_ns=DAY, tail=1)
    old = T0 - 10 * DAY
    idx.apply(_line(1, "a", 1, old))
    idx.apply(_line(2, "a", 2, old + 1, typ="opened"))
    idx.apply(_line(3, "a", 3, old + 2))
    idx.apply(_line(4, "b", 1, old + 3))
    idx.apply(_line(5, "b", 2, old + 4))
    assert idx.trim(T0) == 2
    assert (idx.floor, idx.harness_floor) == (5, {"a": 2, "b": 5})
    closing = {"v": 1, "seq": 6, "type": "closed", "at": format_ns(T0 - MINUTE),
               "harness": "a", "run_id": 2, "outcome": "success"}
    idx.apply(closing, live=True)
    assert idx.trim(T0) == 1
    assert sorted(idx.records) == [("a", 3), ("b", 2)]
    assert (idx.floor, idx.harness_floor) == (5, {"a": 3, "b": 5})
    recs, oldest, complete = idx.query(Query(names=("a",), limit=1))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == ([("a", 3)], 3, True)
    assert idx.query(Query(names=("a",), limit=2)) == ([], None, False)


# -- chain verification ----------------------------------------------------------------

def test_an_edit_in_an_earlier_file_is_the_break_before_a_later_file_of_foreign_lines(
        tmp_path: Path) -> None:
    """Seq 1-5 on the 3rd, seq 4 edited; the 4th holds one whole line that is no ledger
    line. Read in file order (and in seq order) the first break is the edit,
    2025-11-03.jsonl:4, after seq 1-3 — what verify says without the 4th's file. The
    merge puts a file with no linked line where the files before it end (5), not at the
    last seq their own checks verified (3: check_file stops at the edit), which sorted
    the foreign line ahead of seq 4 and named it instead."""
    raws, hashes = sealed_lines({"2025-11-03": [1, 2, 3, 4, 5], "2025-11-04": [6]})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[3], edited(raws[4]), raws[5]])
    alone = verify_json(d)
    assert (alone["seq"], alone["file"], alone["line"], alone["reason"]) == (
        4, "2025-11-03.jsonl", 4, EDITED)
    write_day_file(d / "2025-11-04.jsonl", [foreign(raws[6])])
    out = verify_json(d)
    assert (out["ok"], out["entry_count"], out["head_seq"], out["head_hash"]) == (
        False, 3, 3, hashes[3])
    assert (out["seq"], out["file"], out["line"], out["reason"]) == (
        4, "2025-11-03.jsonl", 4, EDITED)


def test_a_file_holding_chains_seq_and_the_lines_after_it_counts_them_from_chain(
        tmp_path: Path) -> None:
    """CHAIN names seq 6; one file holds seq 5-9 (a clock jump kept the pruned day's last
    lines in it). Seq 5-6 are checked on their own, and the chain from CHAIN is seq 7-9:
    three lines, from seq 7 to 9 — the line of CHAIN's seq does not start the file's
    chain, nor does the next line hide in the fast path."""
    raws, hashes = sealed_lines({"2025-11-03": [1, 2, 3, 4, 5, 6, 7, 8, 9]})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[s] for s in range(5, 10)])
    (d / "CHAIN").write_text(json.dumps({"seq": 6, "hash": hashes[6]}) + "\n")
    res = verify_run_ledger(str(d), parallel=False)
    assert (res.ok, res.lines, res.behind, res.start_seq, res.head_seq, res.head_hash) == (
        True, 3, 2, 7, 9, hashes[9])


def test_a_later_file_of_foreign_lines_breaks_after_every_line_of_the_files_before_it(
        tmp_path: Path) -> None:
    """A clock jump put seq 3 on the 4th while seq 1-2 and 4-5 are on the 3rd (the files
    are merged, all five lines verify); the 5th holds one whole line that is no ledger
    line. It breaks after the files before it, so after seq 5 — not after seq 3, where
    the 3rd's own check stopped (at the gap the 4th fills), which reported three lines
    verified instead of five."""
    raws, hashes = sealed_lines({"2025-11-03": [1, 2, 4, 5], "2025-11-04": [3], "2025-11-05": [6]})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[4], raws[5]])
    write_day_file(d / "2025-11-04.jsonl", [raws[3]])
    assert verify_json(d)["ok"] is True
    write_day_file(d / "2025-11-05.jsonl", [foreign(raws[6])])
    out = verify_json(d)
    assert (out["ok"], out["seq"], out["file"], out["line"]) == (
        False, None, "2025-11-05.jsonl", 1)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (5, 5, hashes[5])


def test_a_file_of_a_fragment_only_keeps_its_place_before_a_break_in_the_merge(
        tmp_path: Path) -> None:
    """The 2nd holds only a torn fragment (no line); seq 1-2 and 4-5 are on the 3rd and a
    clock jump put seq 3, edited, on the 4th, so the files are merged. The break is seq 3
    and the 2nd's fragment, before every line, is listed with it."""
    raws, hashes = sealed_lines({"2025-11-03": [1, 2, 4, 5], "2025-11-04": [3]})
    d = tmp_path / "ledger"
    write_day_file(d / "2025-11-02.jsonl", [], tail=b'{"v":1,"se')
    write_day_file(d / "2025-11-03.jsonl", [raws[1], raws[2], raws[4], raws[5]])
    write_day_file(d / "2025-11-04.jsonl", [edited(raws[3])])
    out = verify_json(d)
    assert (out["seq"], out["file"], out["line"], out["reason"]) == (
        3, "2025-11-04.jsonl", 1, EDITED)
    assert (out["entry_count"], out["head_seq"], out["head_hash"], out["torn"],
            out["torn_at"], out["torn_tail"]) == (2, 2, hashes[2], 1, ["2025-11-02.jsonl:1"],
                                                  False)
