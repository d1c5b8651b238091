"""Defects a fuzzing pass found on malformed input, each through the real entry point
(the `harness` CLI as a subprocess, a real daemon's control socket, real files): bad
input gets a one-line error naming the file, line, key or value and the documented exit
code, never a traceback (DESIGN.md §2). Each test failed before its fix."""

from __future__ import annotations

import json
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import World
from daemons import Daemons, request
from harness.ledger.reader import decode_line
from harness.ledger.verify import verify_run_ledger
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


# -- run ledger: a run_id past 64 bits -------------------------------------------------
#
# The readers took any positive run_id, while the writer holds every integer to 64 bits:
# an opened line with run_id 2**64 (hand-edited) read `running?` in `harness runs` for
# ever, and the daemon, which could not write its closed line, logged "cannot close open
# run" at every boot and shutdown. Such a line is no ledger line: skipped and counted.


@pytest.mark.parametrize("field", ["run_id", "seq"])
def test_a_line_with_a_number_past_64_bits_is_skipped_by_every_reader(
        world: World, daemons: Daemons, field: str) -> None:
    today = format_ns(now_ns())[:10]
    raws, hashes = sealed_lines({today: range(1, 4)})
    odd = {**json.loads(raws[2]), "type": "opened", "outcome": "running"}
    del odd["reason"]
    odd[field] = 2**64
    line, _ = seal(odd, odd["seq"], hashes[1])
    write_day_file(world.ledger / f"{today}.jsonl", [raws[1], line, raws[3]])
    res = world.harness("runs", "--json", "--since", "2d")
    assert res.returncode == 0, res.stderr
    assert [(r["run_id"], r["outcome"]) for r in json.loads(res.stdout)] == [
        (3, "skipped"), (1, "skipped")]
    assert res.stderr.splitlines()[-1] == \
        "harness: skipped 1 unparseable line(s) and 0 torn fragment(s)"
    daemons.write_config('[harness.nightly]\nkind = "oneshot"\nargv = ["true"]\n')
    proc = daemons.start()
    got = request(daemons, "runs", names=["nightly"], since=f"{today}T00:00:00Z")["runs"]
    assert [(r["run_id"], r["outcome"]) for r in got] == [(3, "skipped"), (1, "skipped")]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, daemons.stderr()
    assert "cannot close" not in daemons.stderr()


# -- the invariant both defects above broke, pinned over many values ---------------------
#
# One field of a sealed line set to any JSON value (the two defects' values among the
# boundaries): the line reader returns a dict or None and never raises, and verify names
# exactly that line as the break (or passes, when the value is the one the line held).

_EDGE_INTS = [0, -1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from(_EDGE_INTS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.sampled_from(["opened", "closed", "decided", "updated", "2025-11-03T08:00:02Z"]))
_VALUES = st.recursive(_SCALARS, lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=8)
_FIELDS = ["v", "seq", "type", "at", "harness", "run_id", "prev", "hash", "outcome",
           "trigger", "started_at", "exit_code"]
_RAWS, _HASHES = sealed_lines({"2025-11-03": range(1, 4)})
_LINE2 = json.loads(_RAWS[2])


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_FIELDS), _VALUES, min_size=1, max_size=2))
@example({"seq": 2**63})
@example({"type": ["closed"]})
def test_any_value_in_a_field_is_read_or_skipped_and_verify_names_its_line(
        edits: dict[str, object]) -> None:
    raw = json.dumps({**_LINE2, **edits}).encode()
    got = decode_line(raw)
    assert got is None or type(got) is dict
    with tempfile.TemporaryDirectory() as d:
        write_day_file(Path(d) / "2025-11-03.jsonl", [_RAWS[1], raw, _RAWS[3]])
        res = verify_run_ledger(d)
    if raw == json.dumps(_LINE2).encode():
        assert (res.ok, res.error) == (True, None)
    else:
        assert res.error is not None
        assert (res.ok, res.error.file, res.error.line) == (False, "2025-11-03.jsonl", 2)
