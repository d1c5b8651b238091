"""Mutation-found gaps in `harness runs` (cli/runs.py) and `harness ledger verify` on the run
ledger (cli/ledger.py), pinned through the real CLI in a throwaway world.

`harness runs`: its --help (each option's value name and summary) and the exact text of
--json (indented by two, non-ASCII kept as it is). `harness ledger verify`: its --help;
with no RUN_ID, --expected-head and --workdir alone are refused (they apply to work
ledgers); the whole --json object of a ledger that could not be walked (no ledger: exit 1;
a ledger path that is not a directory: exit 2); the exact text of --json for a chain that
verifies.
"""

from __future__ import annotations

import json

from conftest import World
from harness.timefmt import format_ns, now_ns
from test_cli_runs import HOUR, run_lines, runs, seed
from test_verify import hash_of, one_day, verify

# -- harness runs ---------------------------------------------------------------------------


def _help_says(out: str, *parts: str) -> None:
    """Each of `parts` stands in the help, whatever column click wraps it at (its layout is
    click's, not ours: only what it says is pinned)."""
    flat = " ".join(out.split())
    for part in parts:
        assert part in flat, (part, out)


def test_runs_help_names_each_option_its_value_and_what_it_does(world: World) -> None:
    res = runs(world, "--help")
    assert (res.returncode, res.stderr) == (0, "")
    _help_says(
        res.stdout,
        "Usage: harness runs [OPTIONS] [NAMES]...",
        "List run records, newest first (every harness, last 24h, by default).",
        "--harness NAME Only this harness (repeatable).",
        "--since DUR|TIME Started at or after (7d, 36h, RFC 3339).",
        "--until TIME Started at or before (RFC 3339).",
        "--outcome O[,O...] Only these outcomes.",
        "--trigger T[,T...] Only these triggers.",
        "--limit INTEGER At most N records (1-1000).",
        "--wide Add MODEL, TOKENS, COST and TODO.",
        "--json Print a JSON array, newest first.",
    )


def test_runs_json_is_indented_by_two_and_keeps_non_ascii_as_is(world: World) -> None:
    """The array is printed with two-space indents and UTF-8 text unescaped: "nächtlich",
    not "n\\u00e4chtlich"."""
    start = now_ns() - HOUR
    seed(world, run_lines("nächtlich", 1, start, outcome="failed", exit_code=3,
                          model="modèle"))
    res = runs(world, "--json")
    assert res.returncode == 0, res.stderr
    expected = [{
        "harness": "nächtlich", "run_id": 1, "seq": 1, "kind": "oneshot", "outcome": "failed",
        "started_at": format_ns(start), "trigger": "schedule", "duration_ms": 5000,
        "ended_at": format_ns(start + 5000 * 1_000_000), "exit_code": 3, "model": "modèle",
    }]
    assert res.stdout == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    assert res.stdout.startswith('[\n  {\n    "harness": "nächtlich",\n')


# -- harness ledger verify (the run ledger) -------------------------------------------------


def test_verify_help_names_each_option_its_value_and_what_it_does(world: World) -> None:
    res = verify(world, "--help")
    assert (res.returncode, res.stderr) == (0, "")
    _help_says(
        res.stdout,
        "Usage: harness ledger verify [OPTIONS] [RUN_ID]",
        "Check a work ledger's chain (RUN_ID), or with no RUN_ID the daemon's run ledger.",
        "--expected-head HASH Also require the work ledger's head to be HASH (a 64-hex "
        "entry_hash).",
        "--json Print the result as JSON.",
        "--workdir DIR The work tree holding .harness/runtime/ledger (default: the git top "
        "level here).",
    )


def test_verify_without_run_id_refuses_each_work_ledger_flag_alone(world: World) -> None:
    """--expected-head or --workdir with no RUN_ID: exit 2 and one line on stderr, before
    any ledger is looked at (here there is none, which alone would be exit 1)."""
    message = ("harness: --expected-head and --workdir need a RUN_ID (they apply to work "
               "ledgers)\n")
    for args in (("--expected-head", "0" * 64), ("--workdir", str(world.root)),
                 ("--expected-head", "0" * 64, "--workdir", str(world.root))):
        for extra in ((), ("--json",)):
            res = verify(world, *args, *extra)
            assert (res.returncode, res.stdout, res.stderr) == (2, "", message), args


def _unwalked(world: World, reason: str) -> str:
    """--json's text when no chain could be walked: every field, nothing verified."""
    return json.dumps({"ledger": str(world.ledger), "ok": False, "lines": 0, "entry_count": 0,
                       "head_seq": None, "head_hash": None, "torn": 0, "torn_tail": False,
                       "seq": None, "file": None, "line": None, "reason": reason},
                      indent=2) + "\n"


def test_verify_json_of_no_ledger_is_every_field_with_nothing_verified(world: World) -> None:
    res = verify(world, "--json")
    reason = f"no run ledger at {world.ledger}"
    assert (res.returncode, res.stdout, res.stderr) == (
        1, _unwalked(world, reason), f"harness: {reason}\n")


def test_verify_of_a_ledger_path_that_is_a_file_is_a_failure_not_no_ledger(
        world: World) -> None:
    world.state.mkdir(parents=True)
    world.ledger.write_text("x")
    reason = f"ledger path {world.ledger} is not a directory"
    res = verify(world)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"harness: {reason}\n")
    res = verify(world, "--json")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, _unwalked(world, reason), f"harness: {reason}\n")


def test_verify_json_of_a_good_chain_is_indented_by_two(world: World) -> None:
    lines = one_day(world, 2)
    res = verify(world, "--json")
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == json.dumps(
        {"ledger": str(world.ledger), "ok": True, "lines": 2, "entry_count": 2, "files": 1,
         "torn": 0, "torn_tail": False, "torn_at": [], "head_seq": 2,
         "head_hash": hash_of(lines[1]), "anchor": "genesis", "behind_anchor": 0,
         "strays": []}, indent=2) + "\n"
