"""Mutation-found gaps in retention (`harness.ledger.retention`) and the day-file readers
(`harness.ledger.dayfiles`): each test pins a behaviour a small change to the source
left unnoticed by the other tests. Real files in tmp dirs; exact values asserted."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness.ledger.dayfiles as dayfiles_mod
import harness.ledger.retention as retention_mod
from harness.ledger.dayfiles import LedgerDirError, list_day_files
from ledgertools import DAY, T0, sealed_lines, write_day_file

# --- retention -------------------------------------------------------------------------


@contextlib.contextmanager
def _still(_day: str) -> Iterator[bool]:
    yield True


def _no_carry(_day: str) -> int:
    return 0


def _ledger_of(d: Path, days: dict[str, list[int]]) -> dict[int, str]:
    """Day files of sealed lines, by day; the hashes by seq."""
    raws, hashes = sealed_lines(days)
    for day, seqs in days.items():
        write_day_file(d / f"{day}.jsonl", [raws[s] for s in seqs])
    return hashes


def test_a_prune_that_deletes_syncs_the_directory_once_and_one_that_deletes_none_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "ledger"
    _ledger_of(d, {"2026-06-01": [1], "2026-06-02": [2], "2026-06-15": [3]})
    synced: list[str] = []
    monkeypatch.setattr(retention_mod, "fsync_dir", synced.append)
    res = retention_mod.prune(str(d), T0, 3 * DAY, 1 << 30, _no_carry, _still)
    assert (res.deleted, res.error) == (["2026-06-01", "2026-06-02"], None)
    assert synced == [str(d)]
    synced.clear()
    res = retention_mod.prune(str(d), T0, 3 * DAY, 1 << 30, _no_carry, _still)
    assert (res.deleted, res.error) == ([], None)
    assert synced == []


def test_a_directory_sync_that_fails_after_the_deletes_is_a_warning_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "ledger"
    hashes = _ledger_of(d, {"2026-06-01": [1, 2], "2026-06-15": [3]})

    def no_sync(path: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(retention_mod, "fsync_dir", no_sync)
    with caplog.at_level(logging.INFO, logger="harness.ledger"):
        res = retention_mod.prune(str(d), T0, 3 * DAY, 1 << 30, _no_carry, _still)
    assert (res.deleted, res.carried_forward, res.error) == (["2026-06-01"], 0, None)
    assert sorted(p.name for p in d.iterdir()) == ["2026-06-15.jsonl", "CHAIN"]
    assert json.loads((d / "CHAIN").read_bytes()) == {"seq": 2, "hash": hashes[2]}
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING,
         f"ledger: syncing {d} after pruning failed: [Errno 5] Input/output error")]


def test_a_doomed_file_whose_highest_seq_is_chains_leaves_chain_as_it_is(
    tmp_path: Path
) -> None:
    """A killed prune wrote CHAIN (seq 2) but kept the file; the file's seq 2 was damaged
    since. The next prune deletes the file and keeps CHAIN's hash: it anchors nothing new."""
    d = tmp_path / "ledger"
    raws, hashes = sealed_lines({"2026-06-01": [1, 2], "2026-06-15": [3]})
    damaged = raws[2].replace(hashes[2].encode(), b"z" * 64)
    assert damaged != raws[2]
    write_day_file(d / "2026-06-01.jsonl", [raws[1], damaged])
    write_day_file(d / "2026-06-15.jsonl", [raws[3]])
    chain = json.dumps({"hash": hashes[2], "seq": 2}).encode() + b"\n"
    (d / "CHAIN").write_bytes(chain)
    res = retention_mod.prune(str(d), T0, 3 * DAY, 1 << 30, _no_carry, _still)
    assert (res.deleted, res.error) == (["2026-06-01"], None)
    assert (d / "CHAIN").read_bytes() == chain
    assert sorted(p.name for p in d.iterdir()) == ["2026-06-15.jsonl", "CHAIN"]


# --- dayfiles ---------------------------------------------------------------------------


def test_a_directory_that_cannot_be_read_is_a_ledger_dir_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root reads a 0o000 directory all the same: the denial is injected at scandir."""
    d = tmp_path / "ledger"
    d.mkdir()

    def denied(path: str) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(dayfiles_mod.os, "scandir", denied)
    with pytest.raises(LedgerDirError) as exc:
        list_day_files(str(d))
    assert str(exc.value) == f"ledger directory {d} cannot be read: permission denied"
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
