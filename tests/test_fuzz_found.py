"""Defects a fuzzing pass found on malformed input, each through the real entry point
(the `harness` CLI as a subprocess, a real daemon's control socket, real files): bad
input gets a one-line error naming the file, line, key or value and the documented exit
code, never a traceback (DESIGN.md §2). Each test failed before its fix."""

from __future__ import annotations

import json

import pytest

from conftest import World
from ledgertools import seal, sealed_lines, write_day_file

# -- run ledger: a seq past 64 bits ----------------------------------------------------
#
# verify's per-file scan keeps each file's seqs in a 64-bit array; a whole line whose
# seq the chain decoder read as a Python int past int64 raised OverflowError out of
# `harness ledger verify`: a traceback and exit 1 ("no ledger"). Such a seq is no seq the
# writer can make: the line is no ledger line, as one of 5,000 digits already was.


@pytest.mark.parametrize("seq", [2**63, 2**64, -(2**63) - 1, 10**35])
def test_verify_names_a_line_whose_seq_is_past_64_bits(world: World, seq: int) -> None:
    raws, hashes = sealed_lines({"2025-11-03": range(1, 3)})
    big, _ = seal(json.loads(raws[2]), seq, hashes[2])
    write_day_file(world.ledger / "2025-11-03.jsonl", [raws[1], raws[2], big])
    bound = ("<= 9223372036854775807" if seq > 0 else ">= -9223372036854775808")
    reason = f"complete line is not a ledger line (Expected `int` {bound} - at `$.seq`)"
    res = world.harness("ledger", "verify")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: ledger chain broken at seq {seq} (2025-11-03.jsonl:3): {reason}\n")
    res = world.harness("ledger", "verify", "--json")
    out = json.loads(res.stdout)
    assert (res.returncode, res.stderr) == (2, "")
    assert (out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        False, seq, "2025-11-03.jsonl", 3, reason)
    assert (out["entry_count"], out["head_hash"]) == (2, hashes[2])

