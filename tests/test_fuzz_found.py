"""Defects a fuzzing pass found on malformed input, each through the real entry point
(the `harness` CLI as a subprocess, a real daemon's control socket, real files): bad
input gets a one-line error naming the file, line, key or value and the documented exit
code, never a traceback (DESIGN.md §2). Each test failed before its fix."""

from __future__ import annotations

import json

import pytest

from conftest import World
from daemons import Daemons, request
from harness.timefmt import format_ns, now_ns
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


# -- run ledger: a line whose `type` is a list or an object ----------------------------
#
# `valid_line` asked whether `type` was in a frozenset before asking whether it was a
# string: a list or an object there raised TypeError ("unhashable type") out of every
# reader of the files, `harness runs` (a traceback, exit 1) and the daemon's boot alike.
# Such a line is no line a reader folds: it is skipped and counted, like any other.


def _unhashable_type_ledger(world: World, bad: object) -> str:
    """Seq 1-3, decided lines of nightly/1-3 today (inside any retention), seq 2's `type`
    `bad`, sealed as it lies; returns the day."""
    today = format_ns(now_ns())[:10]
    raws, hashes = sealed_lines({today: range(1, 4)})
    odd = json.loads(raws[2])
    odd["type"] = bad
    line, _ = seal(odd, 2, hashes[1])
    write_day_file(world.ledger / f"{today}.jsonl", [raws[1], line, raws[3]])
    return today


@pytest.mark.parametrize("bad", [["closed"], {"closed": 1}])
def test_runs_skips_a_line_whose_type_is_unhashable(world: World, bad: object) -> None:
    _unhashable_type_ledger(world, bad)
    res = world.harness("runs", "--json", "--since", "2d")
    assert res.returncode == 0, res.stderr
    assert [(r["harness"], r["run_id"]) for r in json.loads(res.stdout)] == [
        ("nightly", 3), ("nightly", 1)]
    assert res.stderr.splitlines() == [
        f"harness: daemon not running; read the ledger from disk ({world.ledger})",
        "harness: skipped 1 unparseable line(s) and 0 torn fragment(s)"]


def test_the_daemon_boots_past_a_line_whose_type_is_unhashable(
        world: World, daemons: Daemons) -> None:
    """The daemon refused to boot ("cannot open the ledger …: unhashable type: 'list'",
    exit 1): one hand-edited line kept every harness down."""
    today = _unhashable_type_ledger(world, ["closed"])
    daemons.write_config('[harness.nightly]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    got = request(daemons, "runs", names=["nightly"],
                  since=f"{today}T00:00:00Z")["runs"]
    assert [(r["harness"], r["run_id"]) for r in got] == [("nightly", 3), ("nightly", 1)]
    assert "Traceback" not in daemons.stderr()
