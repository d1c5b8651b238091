"""Mutation-test survivors of the boot's window pass (`harness.ledger.load`): the line
limit and the skipped count, which the comparison with the line-by-line reference shares
with it and so cannot pin."""

from __future__ import annotations

import json
from pathlib import Path

from harness.ledger.index import Index
from harness.ledger.load import Loaded, load_files
from harness.ledger.writer import MAX_LINE
from ledgertools import DAY


def _line(seq: int, run_id: int, size: int) -> bytes:
    """A readable run-ledger line of exactly `size` bytes (its newline not counted),
    padded with a key no reader knows."""
    obj = {"v": 1, "seq": seq, "type": "closed", "at": "2026-11-01T00:00:00Z",
           "harness": "h", "run_id": run_id, "outcome": "success", "zz": ""}
    bare = len(json.dumps(obj, separators=(",", ":")).encode())
    obj["zz"] = "p" * (size - bare)
    raw = json.dumps(obj, separators=(",", ":")).encode()
    assert len(raw) == size
    return raw


def test_the_window_pass_reads_a_line_of_the_limit_and_skips_one_over_it(
        tmp_path: Path) -> None:
    """A line of MAX_LINE bytes with its newline is read; one byte more and it is skipped
    and counted, each such line once, as every reader skips it."""
    p = tmp_path / "2026-11-01.jsonl"
    p.write_bytes(_line(1, 1, MAX_LINE - 1) + b"\n" + _line(2, 2, MAX_LINE) + b"\n"
                  + _line(3, 3, MAX_LINE + 5) + b"\n" + _line(4, 4, 200) + b"\n")
    index = Index(window_ns=DAY)
    got = load_files(index, [str(p)])
    assert got == Loaded(skipped=2, top_seq=4, top_path=str(p))
    assert sorted(index.records) == [("h", 1), ("h", 4)]


def test_the_window_pass_of_files_with_no_readable_line_names_no_file(
        tmp_path: Path) -> None:
    p = tmp_path / "2026-11-01.jsonl"
    p.write_bytes(b"not json\n")
    q = tmp_path / "2026-11-02.jsonl"
    q.write_bytes(b"")
    assert load_files(Index(window_ns=DAY), [str(p), str(q)]) == Loaded(skipped=1)


def test_the_window_pass_passes_over_a_file_gone_since_the_listing(tmp_path: Path) -> None:
    """A prune may delete a day file between the listing and the read: the pass reads
    the files still there."""
    p = tmp_path / "2026-11-02.jsonl"
    p.write_bytes(_line(5, 1, 300) + b"\n")
    got = load_files(Index(window_ns=DAY), [str(tmp_path / "2026-11-01.jsonl"), str(p)])
    assert got == Loaded(skipped=0, top_seq=5, top_path=str(p))
