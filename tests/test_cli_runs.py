"""End-to-end tests of `harness runs` (SPEC-0022 REQ-14, REQ-16, REQ-2) through the real CLI.

Every test writes a run ledger (through `RunLedger`, or by hand where the input must be
malformed) into a throwaway XDG world with no daemon running, then runs
`python -m harness.cli runs …` as a subprocess and checks its exact stdout, stderr and exit
code. With no daemon the CLI reads the day files itself (REQ-16), so these tests also pin
that the offline read is read-only and survives damaged input without a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from conftest import World
from daemons import DEADLINE, Daemons, record_of, request, until
from harness.cli import render
from harness.cli.runs import build_query, parse_since
from harness.ledger import RunLedger
from harness.timefmt import format_ns, now_ns, parse_ns

HOUR = 3_600_000_000_000
DAY = 24 * HOUR
SEC = 1_000_000_000

OUTCOMES_LISTED = (
    "running, success, failed, timed_out, skipped, replaced, missed, cancelled, interrupted, "
    "budget_exceeded, quota_parked, model_mismatch, model_unattested, stalled"
)
TRIGGERS_LISTED = "schedule, manual, catch_up, channel, webhook, autostart, restart, release, lease"
OFFLINE = "harness: daemon not running; read the ledger from disk ({})\n"


# -- helpers -------------------------------------------------------------------------------


def run_lines(harness: str, run_id: int, start: int, *, outcome: str = "success",
              took_ms: int = 5000, trigger: str = "schedule", exit_code: int | None = 0,
              kind: str = "oneshot", **extra: Any) -> list[dict[str, Any]]:
    """The opened and closed lines of one finished run that started at `start` (epoch ns)."""
    end = start + took_ms * 1_000_000
    opened = {"type": "opened", "harness": harness, "run_id": run_id, "at": format_ns(start),
              "kind": kind, "trigger": trigger, "started_at": format_ns(start),
              "outcome": "running"}
    closed: dict[str, Any] = {"type": "closed", "harness": harness, "run_id": run_id,
                              "at": format_ns(end), "outcome": outcome,
                              "ended_at": format_ns(end), "duration_ms": took_ms, **extra}
    if exit_code is not None:
        closed["exit_code"] = exit_code
    return [opened, closed]


def open_line(harness: str, run_id: int, start: int, trigger: str = "autostart",
              **extra: Any) -> dict[str, Any]:
    """The opened line of a run that never closed (in flight, or left by a crash)."""
    return {"type": "opened", "harness": harness, "run_id": run_id, "at": format_ns(start),
            "kind": "resident", "trigger": trigger, "started_at": format_ns(start),
            "outcome": "running", **extra}


def seed(world: World, lines: list[dict[str, Any]]) -> None:
    """Append `lines` through the real writer, synced, then close it."""
    led = RunLedger(str(world.ledger))
    try:
        for line in lines:
            led.append(line, sync=True)
    finally:
        led.close()


def day_files(world: World) -> list[Path]:
    return sorted(world.ledger.glob("*.jsonl"))


def one_day_start(span: int) -> int:
    """A start time for lines spanning `span` ns that all fall in one UTC day, in the last 24 h.

    Tests that look at "the" day file must not straddle midnight when the suite runs at 00:30.
    """
    now = now_ns()
    midnight = now - now % DAY
    return now - span if now - span >= midnight else midnight - span - 60 * SEC


def only_file(world: World) -> Path:
    files = day_files(world)
    assert len(files) == 1, files
    return files[0]


def runs(world: World, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    """`harness runs ARGS…`; asserts the CLI never shows a traceback."""
    if env is None:
        res = world.harness("runs", *args)
    else:
        saved = world.env
        world.env = {**saved, **env}
        try:
            res = world.harness("runs", *args)
        finally:
            world.env = saved
    assert "Traceback" not in res.stderr, res.stderr
    assert "Traceback" not in res.stdout, res.stdout
    return res


def runs_json(world: World, *args: str) -> list[dict[str, Any]]:
    res = runs(world, *args, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert isinstance(out, list)
    return out


def ids(records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["harness"], r["run_id"]) for r in records]


def offline_warning(world: World) -> str:
    return OFFLINE.format(world.ledger)


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every path under `root`: its kind, mode and (files) sha256 + mtime, to prove no write."""
    out: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            out[p] = ("dir", st.st_mode, st.st_mtime_ns)
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[p] = (digest, st.st_mode, st.st_mtime_ns)
    return out


# -- REQ-14: which records, in which order -------------------------------------------------


def test_single_name_lists_newest_first_with_default_limit_20(world: World) -> None:
    base = now_ns() - 10 * DAY  # older than 24 h: the single-NAME form has no time window
    lines: list[dict[str, Any]] = []
    for i in range(1, 26):
        lines += run_lines("nightly", i, base + i * HOUR)
        if i % 5 == 0:
            lines += run_lines("other", i, base + i * HOUR)
    seed(world, lines)
    recs = runs_json(world, "nightly")
    assert ids(recs) == [("nightly", i) for i in range(25, 5, -1)]
    seqs = [r["seq"] for r in recs]
    assert seqs == sorted(seqs, reverse=True)
    table = runs(world, "nightly")
    assert table.returncode == 0
    body = table.stdout.splitlines()
    assert body[0].split() == ["HARNESS", "RUN", "STARTED", "TOOK", "TRIGGER", "OUTCOME", "EXIT"]
    assert [int(line.split()[1]) for line in body[1:]] == list(range(25, 5, -1))


def test_no_name_lists_every_harness_of_the_last_24h(world: World) -> None:
    now = now_ns()
    seed(world, [
        *run_lines("alpha", 1, now - 30 * HOUR),
        *run_lines("beta", 1, now - 30 * HOUR, outcome="failed", exit_code=1),
        *run_lines("alpha", 2, now - 2 * HOUR),
        *run_lines("beta", 2, now - 2 * HOUR + SEC, outcome="failed", exit_code=1),
        *run_lines("gamma", 7, now - HOUR),
    ])
    recs = runs_json(world)
    assert ids(recs) == [("gamma", 7), ("beta", 2), ("alpha", 2)]
    table = runs(world)
    assert table.returncode == 0
    assert [line.split()[:2] for line in table.stdout.splitlines()[1:]] == [
        ["gamma", "7"], ["beta", "2"], ["alpha", "2"]]


def test_no_name_with_a_later_until_is_still_the_last_24h(world: World) -> None:
    """--until tomorrow ends the sweep's window now, not tomorrow: a run 2 h ago is in
    REQ-14's last 24 hours. An earlier --until ends it there."""
    now = now_ns()
    seed(world, [*run_lines("a", 1, now - 2 * HOUR), *run_lines("b", 1, now - 30 * HOUR)])

    def q(*args: str) -> list[tuple[str, int]]:
        return [(r["harness"], r["run_id"]) for r in runs_json(world, *args)]

    assert q() == [("a", 1)]
    assert q("--until", format_ns(now + 23 * HOUR)) == [("a", 1)]
    assert q("--until", format_ns(now - 20 * HOUR)) == [("b", 1)]


def test_named_harnesses_with_filters_have_no_24h_window(world: World) -> None:
    """The 24 hours are REQ-14's sweep of every harness ("no NAME and no --harness"):
    `--harness alpha`, or a name with a filter, reaches back as far as `harness runs
    alpha` does. Both used to stop at 24 hours."""
    now = now_ns()
    seed(world, [
        *run_lines("alpha", 1, now - 30 * HOUR),
        *run_lines("beta", 1, now - 30 * HOUR, outcome="failed", exit_code=1),
        *run_lines("alpha", 2, now - 2 * HOUR, outcome="failed", exit_code=1),
    ])
    assert ids(runs_json(world, "--harness", "alpha")) == [("alpha", 2), ("alpha", 1)]
    assert ids(runs_json(world, "alpha", "--outcome", "success")) == [("alpha", 1)]
    assert ids(runs_json(world, "alpha", "beta", "--outcome", "failed")) == [
        ("alpha", 2), ("beta", 1)]
    assert ids(runs_json(world, "--harness", "beta", "--since", "24h")) == []


MORE = ("harness: more runs match than the 50 shown (the default --limit); ask for up to "
        "1000 with --limit, or page back with --until")


def test_no_name_default_limit_is_50(world: World) -> None:
    now = now_ns()
    lines: list[dict[str, Any]] = []
    for i in range(1, 56):
        lines += run_lines(f"h{i % 3}", i, now - 3 * HOUR + i * SEC)
    seed(world, lines)
    recs = runs_json(world)
    assert [r["run_id"] for r in recs] == list(range(55, 5, -1))
    table = runs(world)
    assert len(table.stdout.splitlines()) == 51  # header + 50 rows
    # The 50 cut what matched: said on stderr (a sweep's script would miss the rest),
    # and not when --limit asked for 50, or when 50 is all there is.
    assert table.stderr.splitlines()[-1] == MORE
    asked = runs(world, "--limit", "50", "--json")
    assert len(json.loads(asked.stdout)) == 50
    assert MORE not in asked.stderr
    exact = runs(world, "--until", format_ns(now - 3 * HOUR + 50 * SEC), "--json")
    assert [r["run_id"] for r in json.loads(exact.stdout)] == list(range(50, 0, -1))
    assert MORE not in exact.stderr
    assert runs(world, "--outcome", "success", "--json").stderr.splitlines()[-1] == MORE


def test_since_durations_and_instants_and_until(world: World) -> None:
    now = now_ns()
    seed(world, [
        *run_lines("job", 1, now - 8 * DAY),
        *run_lines("job", 2, now - 50 * HOUR),
        *run_lines("job", 3, now - 30 * HOUR),
        *run_lines("job", 4, now - 2 * HOUR),
    ])
    assert [r["run_id"] for r in runs_json(world, "--since", "36h")] == [4, 3]
    assert [r["run_id"] for r in runs_json(world, "--since", "7d")] == [4, 3, 2]
    assert [r["run_id"] for r in runs_json(world, "--since", "30d")] == [4, 3, 2, 1]
    # --since with a single NAME is a query, not the SPEC-0008 form.
    assert [r["run_id"] for r in runs_json(world, "job", "--since", "36h")] == [4, 3]


def test_since_and_until_instants_are_inclusive_on_started_at(world: World) -> None:
    t1, t2, t3 = (parse_ns(s) for s in ("2025-11-01T10:00:00Z", "2025-11-02T10:00:00Z",
                                         "2025-11-03T10:00:00Z"))
    seed(world, [*run_lines("job", 1, t1), *run_lines("job", 2, t2), *run_lines("job", 3, t3)])

    def q(*args: str) -> list[int]:
        return [r["run_id"] for r in runs_json(world, *args)]

    assert q("--since", "2025-11-02T10:00:00Z") == [3, 2]
    assert q("--since", "2025-11-02T10:00:00.000000001Z") == [3]
    assert q("--since", "2025-11-02T12:00:00+02:00") == [3, 2]  # an offset, same instant
    assert q("--since", "2025-10-01T00:00:00Z", "--until", "2025-11-02T10:00:00Z") == [2, 1]
    assert q("--since", "2025-10-01T00:00:00Z", "--until", "2025-11-02T09:59:59Z") == [1]
    assert q("--since", "2025-11-01T10:00:00Z", "--until", "2025-11-01T10:00:00Z") == [1]
    assert q("--since", "2025-11-04T00:00:00Z") == []


def test_bounds_beyond_any_date_are_answered_not_crashed(world: World) -> None:
    """Year 1, year 9999 with an offset past it, a duration longer than the calendar:
    valid flags, so an answer (exit 0), never an overflow."""
    t1 = parse_ns("2025-11-01T10:00:00Z")
    seed(world, [*run_lines("job", 1, t1), *run_lines("job", 2, t1 + HOUR)])

    def q(*args: str) -> list[int]:
        return [r["run_id"] for r in runs_json(world, *args)]

    assert q("--since", "0001-01-01T00:00:00Z") == [2, 1]
    assert q("--since", "999999d") == [2, 1]
    assert q("--since", "999999d", "--until", "2025-11-01T10:00:00Z") == [1]
    assert q("--until", "0001-01-02T00:00:00Z") == []
    assert q("--since", "9999-12-31T23:59:59-01:00") == []
    assert q("--since", "2025-11-01T00:00:00Z", "--until", "9999-12-31T23:59:59-01:00") == [2, 1]
    assert runs(world, "--since", "0001-01-01T00:00:00Z").returncode == 0


def test_morning_sweep_finds_every_failure_across_harnesses(world: World) -> None:
    now = now_ns()
    seed(world, [
        *run_lines("sb-drain", 1, now - 30 * HOUR, outcome="failed", exit_code=1,
                   todo_id="t-old"),
        *run_lines("sb-drain", 2, now - 20 * HOUR, outcome="failed", exit_code=1,
                   todo_id="t1", trigger="channel"),
        *run_lines("pr-review", 5, now - 15 * HOUR, outcome="success"),
        *run_lines("pr-review", 6, now - 10 * HOUR, outcome="timed_out", exit_code=-1,
                   todo_id="t2"),
        *run_lines("nightly", 3, now - 8 * HOUR, outcome="interrupted", exit_code=None,
                   reason="daemon_crash"),
        *run_lines("nightly", 4, now - 6 * HOUR, outcome="cancelled", exit_code=None,
                   reason="operator"),
        open_line("worker", 9, now - HOUR),
    ])
    recs = runs_json(world, "--since", "24h", "--outcome", "failed,timed_out,interrupted")
    assert [(r["harness"], r["run_id"], r["outcome"], r.get("todo_id")) for r in recs] == [
        ("nightly", 3, "interrupted", None),
        ("pr-review", 6, "timed_out", "t2"),
        ("sb-drain", 2, "failed", "t1"),
    ]
    assert recs[0]["reason"] == "daemon_crash"
    # Repeating the flag means the same as a comma list.
    again = runs_json(world, "--since", "24h", "--outcome", "failed", "--outcome",
                      "timed_out,interrupted")
    assert again == recs


def test_trigger_and_harness_filters(world: World) -> None:
    now = now_ns()
    seed(world, [
        *run_lines("a", 1, now - 3 * HOUR, trigger="manual"),
        *run_lines("b", 1, now - 2 * HOUR, trigger="webhook"),
        *run_lines("a", 2, now - HOUR, trigger="webhook"),
    ])
    assert ids(runs_json(world, "--trigger", "webhook")) == [("a", 2), ("b", 1)]
    assert ids(runs_json(world, "--harness", "a")) == [("a", 2), ("a", 1)]
    assert ids(runs_json(world, "a", "b", "--trigger", "manual,webhook")) == [
        ("a", 2), ("b", 1), ("a", 1)]


@pytest.mark.parametrize(("args", "flag", "message"), [
    (("--outcome", "timeout"), "--outcome",
     f"unknown outcome 'timeout' (valid: {OUTCOMES_LISTED})"),
    (("--outcome", "failed,timeout"), "--outcome",
     f"unknown outcome 'timeout' (valid: {OUTCOMES_LISTED})"),
    (("--trigger", "bogus"), "--trigger", f"unknown trigger 'bogus' (valid: {TRIGGERS_LISTED})"),
    (("--limit", "0"), "--limit", "must be between 1 and 1000, got 0"),
    (("--limit", "1001"), "--limit", "must be between 1 and 1000, got 1001"),
    (("nightly", "--limit", "0"), "--limit", "must be between 1 and 1000, got 0"),
    (("--since", "yesterday"), "--since",
     "'yesterday' is neither a duration (e.g. 24h, 7d) nor an RFC 3339 time"),
    (("--since", "1d", "--until", "7d"), "--until", "'7d' is not an RFC 3339 time"),
    # DESIGN.md §2: a bare number means seconds in config only; on a flag it is a slip.
    (("--since", "24"), "--since",
     "'24' needs a unit: a duration (e.g. 24h, 7d) or an RFC 3339 time"),
    (("--since", "1.5"), "--since",
     "'1.5' needs a unit: a duration (e.g. 24h, 7d) or an RFC 3339 time"),
    # An empty value (an unset shell variable) filters nothing: refused, not ignored.
    (("--since", ""), "--since", "'' is neither a duration (e.g. 24h, 7d) nor an RFC 3339 time"),
    (("--until", ""), "--until", "'' is not an RFC 3339 time"),
    (("--outcome", ""), "--outcome", f"no outcome in '' (valid: {OUTCOMES_LISTED})"),
    (("--outcome", "failed", "--outcome", ","), "--outcome",
     f"no outcome in ',' (valid: {OUTCOMES_LISTED})"),
    (("--trigger", " "), "--trigger", f"no trigger in ' ' (valid: {TRIGGERS_LISTED})"),
])
def test_bad_flag_values_are_refused_with_the_valid_ones(
        world: World, args: tuple[str, ...], flag: str, message: str) -> None:
    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    for extra in ((), ("--json",)):
        res = runs(world, *args, *extra)
        assert res.returncode == 2, res
        assert res.stdout == ""
        assert f"Error: Invalid value for '{flag}': {message}\n" in res.stderr
    assert "timed_out" in OUTCOMES_LISTED


KEY = "sk-ant-api03-" + "A" * 70  # the form of an Anthropic API key


@pytest.mark.parametrize(("args", "flag", "message"), [
    (("--since", KEY), "--since",
     "'[REDACTED]' is neither a duration (e.g. 24h, 7d) nor an RFC 3339 time"),
    (("--until", KEY), "--until", "'[REDACTED]' is not an RFC 3339 time"),
    (("--outcome", f"failed,{KEY}"), "--outcome",
     f"unknown outcome '[REDACTED]' (valid: {OUTCOMES_LISTED})"),
    (("--trigger", KEY), "--trigger", f"unknown trigger '[REDACTED]' (valid: {TRIGGERS_LISTED})"),
    # click's own words, not ours: scrubbed all the same.
    (("--limit", KEY), "--limit", "'[REDACTED]' is not a valid integer."),
])
def test_a_credential_in_a_flag_is_not_echoed(world: World, args: tuple[str, ...], flag: str,
                                              message: str) -> None:
    """A token pasted into the wrong flag was quoted back in full in the `Error:` line,
    where `trigger`, `ledger` and `up` scrub the same value."""
    res = runs(world, *args)
    assert (res.returncode, res.stdout, res.stderr.splitlines()[-1]) == (
        2, "", f"Error: Invalid value for '{flag}': {message}")
    assert KEY[:20] not in res.stderr


def test_a_state_dir_named_after_a_token_is_scrubbed_in_every_offline_line(
        world: World, tmp_path: Path) -> None:
    """`harness runs` offline named the ledger's path raw in its REQ-16 warning and in
    "could not be read", and `ledger verify` in "no run ledger at" and in its refusal of
    a ledger path that is a file, where `harness logs` scrubs the same path."""
    home = tmp_path / KEY
    world.env["XDG_STATE_HOME"] = str(home)
    ledger = home / "harness" / "ledger"
    shown = str(ledger).replace(KEY, "[REDACTED]")
    res = world.harness("ledger", "verify")
    assert (res.returncode, res.stderr) == (1, f"harness: no run ledger at {shown}\n")
    ledger.mkdir(parents=True)
    res = runs(world, "--json")
    assert (res.returncode, res.stdout) == (0, "[]\n")
    assert res.stderr.splitlines()[0].endswith(f"read the ledger from disk ({shown})")
    ledger.rmdir()
    ledger.write_text("")
    res = runs(world)
    assert res.returncode == 1
    assert res.stderr.endswith(
        f", and the run ledger could not be read: ledger path {shown} is not a directory\n")
    res = world.harness("ledger", "verify")
    assert (res.returncode, res.stderr) == (
        2, f"harness: ledger path {shown} is not a directory\n")
    for out in (res.stdout, res.stderr, runs(world).stderr):
        assert KEY[:20] not in out


@pytest.mark.parametrize("value", ["\uff15", "\u0665", "1_0", "+1_0"])
def test_limit_takes_ascii_digits_only(world: World, value: str) -> None:
    """Python's int() reads full-width and other Unicode digits and underscores:
    `--limit ５` listed 5 runs and `--limit 1_0` ten. Refused as any other value that is
    no integer; an ASCII value keeps its sign and surrounding spaces, as before."""
    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    res = runs(world, "--limit", value)
    assert (res.returncode, res.stdout, res.stderr.splitlines()[-1]) == (
        2, "", f"Error: Invalid value for '--limit': {value!r} is not a valid integer.")
    assert ids(runs_json(world, "--limit", " +1 ")) == [("nightly", 1)]


def test_a_credential_as_a_name_or_a_command_is_not_echoed(world: World) -> None:
    res = runs(world, KEY)
    assert (res.returncode, res.stdout) == (0, "[REDACTED] has no runs yet\n")
    res = world.harness(KEY)
    assert (res.returncode, res.stdout, res.stderr.splitlines()[-1]) == (
        2, "", "Error: No such command '[REDACTED]'.")
    res = runs(world, "--json", f"--x{KEY}")
    assert (res.returncode, res.stdout, res.stderr.splitlines()[-1]) == (
        2, "", "Error: No such option '--x[REDACTED]'.")


def test_back_compat_name_limit_json(world: World) -> None:
    base = now_ns() - 3 * DAY
    lines: list[dict[str, Any]] = []
    for i in range(1, 9):
        lines += run_lines("nightly", i, base + i * HOUR, outcome="failed" if i % 2 else "success",
                           exit_code=i % 2)
        lines += run_lines("noise", i, base + i * HOUR + SEC)
    seed(world, lines)
    res = runs(world, "nightly", "--limit", "5", "--json")
    assert res.returncode == 0, res.stderr
    recs = json.loads(res.stdout)
    assert isinstance(recs, list)
    # Each run wrote 4 lines (nightly opened+closed, then noise opened+closed): nightly run i
    # opened at seq 4i-3.
    assert [(r["seq"], r["run_id"]) for r in recs] == [(4 * i - 3, i) for i in range(8, 3, -1)]
    for r in recs:
        assert {"harness", "run_id", "seq", "trigger", "outcome", "started_at", "ended_at",
                "exit_code", "duration_ms", "kind"} <= set(r)
        assert r["harness"] == "nightly"
    assert recs[0]["outcome"] == "success" and recs[0]["exit_code"] == 0
    assert recs[1]["outcome"] == "failed" and recs[1]["exit_code"] == 1


def test_json_record_carries_the_seq_of_its_first_line(world: World) -> None:
    t = now_ns() - HOUR
    a_open, a_close = run_lines("a", 1, t, outcome="failed", exit_code=3)
    b_open, b_close = run_lines("b", 1, t + SEC)
    upd = {"type": "updated", "harness": "a", "run_id": 1, "at": format_ns(t + 2 * SEC),
           "tokens": {"input": 10, "output": 5, "cache_read": 0, "cache_write": 0}}
    upd2 = {**upd, "at": format_ns(t + 3 * SEC),
            "tokens": {"input": 20, "output": 9, "cache_read": 1, "cache_write": 0}}
    # seq: a opened 1, b opened 2, a updated 3, b closed 4, a updated 5, a closed 6
    seed(world, [a_open, b_open, upd, b_close, upd2, a_close])
    recs = runs_json(world)
    assert [(r["harness"], r["seq"]) for r in recs] == [("b", 2), ("a", 1)]
    a = recs[1]
    assert a["outcome"] == "failed" and a["exit_code"] == 3
    assert a["tokens"] == {"input": 20, "output": 9, "cache_read": 1, "cache_write": 0}
    assert [r["seq"] for r in runs_json(world, "a")] == [1]


# -- REQ-14: the table -------------------------------------------------------------------------

LONG = "nightly-dependency-upgrade-reviewer"  # 35 characters


def test_table_longest_row_fits_80_columns_cutting_only_the_name(world: World) -> None:
    assert len(LONG) == 35
    seed(world, run_lines(LONG, 99999, parse_ns("2025-11-03T09:05:00Z"), took_ms=90_000,
                          trigger="autostart", outcome="model_unattested", exit_code=1,
                          kind="resident"))
    res = runs(world, LONG)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS                   RUN STARTED      TOOK  TRIGGER   OUTCOME          EXIT\n"
        "nightly-dependency-upg… 99999 Nov  3 09:05 1m30s autostart model_unattested 1\n"
    )
    assert res.stderr == offline_warning(world)
    for line in res.stdout.splitlines():
        assert len(line) <= 80


def test_table_name_not_cut_when_it_fits(world: World) -> None:
    name = "weekly-report-for-the-whole-team"  # 32 characters
    seed(world, run_lines(name, 12, parse_ns("2025-11-03T09:05:00Z"), took_ms=42_000))
    res = runs(world, name)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS                          RUN STARTED      TOOK TRIGGER  OUTCOME EXIT\n"
        "weekly-report-for-the-whole-team  12 Nov  3 09:05 42s  schedule success 0\n"
    )
    assert "…" not in res.stdout


def test_table_columns_and_several_rows(world: World) -> None:
    t = parse_ns("2025-11-03T09:05:00Z")
    seed(world, [
        *run_lines("nightly", 1, t, took_ms=850, outcome="failed", exit_code=3),
        *run_lines("pr-review", 12, t + 3 * HOUR + 30 * 60 * SEC, took_ms=45_000_000,
                   trigger="webhook", outcome="timed_out", exit_code=-1),
        open_line("worker", 4, parse_ns("2025-11-04T23:59:00Z")),
    ])
    res = runs(world, "--since", "2025-11-01T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS    RUN  STARTED       TOOK      TRIGGER    OUTCOME    EXIT\n"
        "worker       4  Nov  4 23:59  running?  autostart  running?   —\n"
        "pr-review   12  Nov  3 12:35  12h30m    webhook    timed_out  -1\n"
        "nightly      1  Nov  3 09:05  850ms     schedule   failed     3\n"
    )


def test_table_started_is_local_time(world: World) -> None:
    # POSIX TZ "XST-2" is UTC+2 (no tz database needed); the 23:30 UTC start is the next day.
    seed(world, [*run_lines("nightly", 1, parse_ns("2025-11-03T09:05:00Z")),
                 *run_lines("nightly", 2, parse_ns("2025-11-03T23:30:00Z"))])
    res = runs(world, "nightly", env={"TZ": "XST-2"})
    assert res.returncode == 0, res.stderr
    assert [line[line.index("Nov"):][:12] for line in res.stdout.splitlines()[1:]] == [
        "Nov  4 01:30", "Nov  3 11:05"]
    utc = runs(world, "nightly")
    assert [line[line.index("Nov"):][:12] for line in utc.stdout.splitlines()[1:]] == [
        "Nov  3 23:30", "Nov  3 09:05"]


def test_wide_adds_model_tokens_cost_todo_and_never_cuts(world: World) -> None:
    model = "claude-opus-4-1-20250805-extended-context-preview-with-a-long-name"
    seed(world, [
        *run_lines(LONG, 99999, parse_ns("2025-11-03T09:05:00Z"), took_ms=90_000,
                   trigger="channel", outcome="model_unattested", exit_code=1, model=model,
                   tokens={"input": 1200, "output": 34, "cache_read": 5000, "cache_write": 0},
                   cost_usd=0.4567, cost_source="recorded", todo_id="todo-1234"),
        *run_lines(LONG, 100000, parse_ns("2025-11-03T10:05:00Z"), took_ms=1000,
                   model="gpt-5", tokens={"input": 1, "output": 2, "cache_read": 0,
                                          "cache_write": 0},
                   cost_usd=1.5, cost_source="priced"),
        *run_lines(LONG, 100001, parse_ns("2025-11-03T11:05:00Z"), took_ms=1000,
                   cost_source="unknown"),
    ])
    res = runs(world, LONG, "--wide")
    assert res.returncode == 0, res.stderr
    name = LONG.ljust(35)
    assert res.stdout == (
        f"{'HARNESS'.ljust(35)}     RUN  STARTED       TOOK   TRIGGER   OUTCOME           EXIT"
        f"  MODEL{' ' * (len(model) - 3)}TOKENS  COST          TODO\n"
        f"{name}  100001  Nov  3 11:05  1s     schedule  success           0     —"
        f"{' ' * (len(model) + 1)}—       ?             —\n"
        f"{name}  100000  Nov  3 10:05  1s     schedule  success           0     gpt-5"
        f"{' ' * (len(model) - 3)}3       $1.50 priced  —\n"
        f"{name}   99999  Nov  3 09:05  1m30s  channel   model_unattested  1     {model}"
        f"  1,234   $0.4567       todo-1234\n"
    )
    assert "…" not in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) > 80


def test_table_fits_80_columns_with_long_ids_and_the_longest_outcome(world: World) -> None:
    """A 6-digit run id beside the longest outcome and a live resident leave less than
    the header's width for the harness column: it gives way, header included."""
    t = parse_ns("2025-11-03T09:05:00Z")
    seed(world, [*run_lines("poll", 123456, t, took_ms=90_000, trigger="autostart",
                            outcome="model_unattested", exit_code=1, log="/nonexistent/x.log"),
                 open_line("worker", 3, t + HOUR)])
    res = runs(world, "--since", "2025-11-01T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNE…    RUN STARTED      TOOK     TRIGGER   OUTCOME                       EXIT\n"
        "worker      3 Nov  3 10:05 running? autostart running?                      —\n"
        "poll   123456 Nov  3 09:05 1m30s    autostart model_unattested (log pruned) 1\n"
    )
    assert max(len(line) for line in res.stdout.splitlines()) == 80


def test_table_keeps_every_value_but_the_name_whole_past_80_columns(world: World) -> None:
    """The widest values a writer can make (a 13-digit run id, 11,000 days, the lowest
    32-bit exit code) beside the longest outcome take 88 columns without the name: none
    of them is cut; the name column gives all it can, header included, and the row runs
    past 80."""
    t = parse_ns("2025-11-03T09:05:00Z")
    seed(world, run_lines("b", 1234567890123, t, took_ms=950_400_000_000,
                          trigger="autostart", outcome="model_unattested",
                          exit_code=-2147483648, log="/nonexistent/x.log"))
    res = runs(world, "--since", "2025-11-01T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "H…           RUN STARTED      TOOK     TRIGGER   OUTCOME"
        "                       EXIT\n"
        "b  1234567890123 Nov  3 09:05 11000d0h autostart model_unattested (log pruned)"
        " -2147483648\n"
    )


def test_values_with_control_characters_stay_on_their_row(world: World) -> None:
    seed(world, run_lines("job", 1, parse_ns("2025-11-03T09:05:00Z"), took_ms=1000,
                          todo_id="line1\nline2\tTAB\x07", model="m\r"))
    res = runs(world, "job", "--wide")
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()
    assert len(rows) == 2
    assert rows[1].endswith("  m\\r    —       —     line1\\nline2\\tTAB\\x07")


def test_values_with_separators_and_format_characters_stay_on_their_row(world: World) -> None:
    # A model or todo id an agent reported can hold what `splitlines` takes for a line
    # break (NEL, U+2028) or what turns the row around (a right-to-left override): each
    # shows as its escape, so the row reads as it is stored.
    seed(world, run_lines("job", 1, parse_ns("2025-11-03T09:05:00Z"), took_ms=1000,
                          todo_id="fix\u202etxt.exe\u200b", model="m\u2028n\x85o"))
    res = runs(world, "job", "--wide")
    assert res.returncode == 0, res.stderr
    rows = res.stdout.split("\n")
    assert len(rows) == 3 and rows[2] == ""
    assert rows[1].endswith("  m\\u2028n\\x85o  —       —     fix\\u202etxt.exe\\u200b")


def test_mistyped_counts_on_disk_show_as_unknown(world: World) -> None:
    path, lines = _three_runs(world)
    obj = json.loads(lines[-1])
    obj.update(seq=7, tokens={"input": "12", "output": "x"}, cost_usd=True)
    path.write_bytes(b"\n".join([*lines, _line(obj)]) + b"\n")
    res = runs(world, "nightly", "--wide")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1].split()[-3:] == ["?", "—", "—"]
    assert [r["run_id"] for r in runs_json(world, "nightly")] == [3, 2, 1]


def test_missed_windows_and_pruned_log(world: World, tmp_path: Path) -> None:
    t = parse_ns("2025-11-03T09:00:00Z")
    kept = tmp_path / "kept.log"
    kept.write_text("x")
    zst = tmp_path / "zipped.log"
    (tmp_path / "zipped.log.zst").write_bytes(b"x")
    seed(world, [
        {"type": "decided", "harness": "nightly", "run_id": 1, "at": format_ns(t),
         "kind": "oneshot", "trigger": "schedule", "outcome": "missed",
         "started_at": format_ns(t), "window": format_ns(t),
         "first_window": format_ns(t - HOUR), "windows": 2},
        {"type": "decided", "harness": "nightly", "run_id": 2, "at": format_ns(t + HOUR),
         "kind": "oneshot", "trigger": "schedule", "outcome": "missed",
         "started_at": format_ns(t + HOUR), "window": format_ns(t + HOUR), "windows": 1},
        *run_lines("nightly", 3, t + 2 * HOUR, outcome="failed", exit_code=1,
                   log=str(tmp_path / "gone.log")),
        *run_lines("nightly", 4, t + 3 * HOUR, log=str(kept)),
        *run_lines("nightly", 5, t + 4 * HOUR, log=str(zst)),
    ])
    res = runs(world, "nightly")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS  RUN  STARTED       TOOK  TRIGGER   OUTCOME              EXIT\n"
        "nightly    5  Nov  3 13:00  5s    schedule  success              0\n"
        "nightly    4  Nov  3 12:00  5s    schedule  success              0\n"
        "nightly    3  Nov  3 11:00  5s    schedule  failed (log pruned)  1\n"
        "nightly    2  Nov  3 10:00  —     schedule  missed               —\n"
        "nightly    1  Nov  3 09:00  —     schedule  missed ×2            —\n"
    )
    recs = {r["run_id"]: r for r in runs_json(world, "nightly")}
    assert recs[3]["log_pruned"] is True
    assert "log_pruned" not in recs[4] and "log_pruned" not in recs[5]
    assert recs[1]["windows"] == 2 and recs[1]["outcome"] == "missed"


RESIDENT_AND_JOB = """
[harness.res]
kind = "resident"
restart = "no"
argv = ["sh", "-c", "echo up"]

[harness.job]
kind = "oneshot"
keep_runs = 1
argv = ["true"]
"""


def test_json_prints_the_same_bytes_from_the_daemon_and_from_the_files(
        world: World, daemons: Daemons) -> None:
    """The daemon's records kept the member order their lines were built in, the files'
    the canonical order: memory now folds lines in the order the file holds them, so a
    consumer comparing bytes sees the same record as the same text, whoever answered."""
    daemons.write_config(RESIDENT_AND_JOB)
    proc = daemons.start()
    for _ in (1, 2):
        res = world.harness("trigger", "job", "--wait")
        assert res.returncode == 0, res.stderr
    until("the resident's run to end",
          lambda: (rec := record_of(world, "res", 1)) is not None
          and rec["outcome"] == "success")
    up = runs(world, "--json")
    assert up.returncode == 0 and up.stderr == "", up.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    down = runs(world, "--json")
    assert down.returncode == 0
    assert down.stderr.startswith("harness: daemon not running; ")
    records = json.loads(up.stdout)
    assert sorted((r["harness"], r["run_id"]) for r in records) == [
        ("job", 1), ("job", 2), ("res", 1)]
    assert down.stdout == up.stdout
    assert all(list(r)[:3] == ["harness", "run_id", "seq"] for r in records)


def test_a_residents_missing_durable_log_is_not_a_pruned_log(
        world: World, daemons: Daemons) -> None:
    """REQ-4's log_pruned is "the per-run log was deleted by keep_runs": a resident has no
    per-run log, and keep_runs never deletes its durable log, so that log gone (removed
    by its operator) is no pruned log. A one-shot's log keep_runs deleted still is, in the
    same answer, daemon up or down."""
    daemons.write_config(RESIDENT_AND_JOB)
    proc = daemons.start()
    for _ in (1, 2):
        res = world.harness("trigger", "job", "--wait")
        assert res.returncode == 0, res.stderr
    jobs = world.state / "jobs" / "job"
    until("run 2's log compressed and run 1's pruned",
          lambda: sorted(os.listdir(jobs)) == ["2.log.zst"])
    until("the resident's run to end",
          lambda: (rec := record_of(world, "res", 1)) is not None
          and rec["outcome"] == "success")
    durable = world.state / "logs" / "res.log"
    assert durable.read_text() == "up\n"
    durable.unlink()

    def listed() -> list[tuple[Any, ...]]:
        return sorted((r["harness"], r["run_id"], r["kind"], r["outcome"], r["log"],
                       r.get("log_pruned")) for r in runs_json(world))

    want = [("job", 1, "oneshot", "success", str(jobs / "1.log"), True),
            ("job", 2, "oneshot", "success", str(jobs / "2.log"), None),
            ("res", 1, "resident", "success", str(durable), None)]
    assert listed() == want
    assert runs(world, "res").stdout.splitlines()[1].split()[-2:] == ["success", "0"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    # From the files, the daemon down: the same answer.
    assert listed() == want
    assert runs(world, "res").stdout.splitlines()[1].split()[-2:] == ["success", "0"]


def test_empty_results(world: World) -> None:
    res = runs(world)
    assert (res.returncode, res.stdout) == (0, "no runs match\n")
    res = runs(world, "nightly")
    assert (res.returncode, res.stdout) == (0, "nightly has no runs yet\n")
    seed(world, run_lines("nightly", 1, now_ns() - 3 * DAY))
    res = runs(world)  # only older than 24 h
    assert (res.returncode, res.stdout) == (0, "no runs match\n")
    res = runs(world, "ghost")
    assert (res.returncode, res.stdout) == (0, "ghost has no runs yet\n")
    res = runs(world, "nightly", "--outcome", "failed")
    assert (res.returncode, res.stdout) == (0, "no runs match\n")
    assert runs_json(world, "ghost") == []


# -- REQ-16: the offline read ---------------------------------------------------------------


def test_offline_read_warns_shows_running_and_changes_nothing(world: World) -> None:
    now = one_day_start(3 * HOUR) + 3 * HOUR
    seed(world, [
        *run_lines("nightly", 3, now - 3 * HOUR, outcome="success"),
        open_line("nightly", 4, now - HOUR, trigger="schedule"),
    ])
    # A torn tail, as a daemon killed mid-write leaves it: the read must not repair it.
    with open(only_file(world), "ab") as f:
        f.write(b'{"v":1,"seq":3,"type":"clo')
    before = snapshot(world.root)
    listing = sorted(os.listdir(world.ledger))

    table = runs(world, "nightly")
    assert table.returncode == 0
    assert table.stderr == offline_warning(world) + (
        "harness: skipped 0 unparseable line(s) and 1 torn fragment(s)\n")
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows[1][:2] == ["nightly", "4"]
    assert rows[1][-4:] == ["running?", "schedule", "running?", "—"]
    assert rows[2][-4:] == ["5s", "schedule", "success", "0"]

    recs = runs_json(world, "nightly")
    assert [(r["run_id"], r["outcome"]) for r in recs] == [(4, "running?"), (3, "success")]
    assert "ended_at" not in recs[0]
    assert [r["run_id"] for r in runs_json(world, "--outcome", "running")] == [4]
    for args in ((), ("--wide",), ("--since", "7d"), ("--json",)):
        assert runs(world, *args).returncode == 0

    assert snapshot(world.root) == before
    assert sorted(os.listdir(world.ledger)) == listing


def test_stale_socket_is_not_running(world: World) -> None:
    """A socket file nobody listens on (a crashed daemon's) is "not running"."""
    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    path = world.root / "run" / "harness.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    res = runs(world, "nightly", "--json")
    assert res.returncode == 0
    assert res.stderr == offline_warning(world)
    assert [r["run_id"] for r in json.loads(res.stdout)] == [1]


def test_unresponsive_daemon_falls_back_to_disk(world: World) -> None:
    """Something holds the socket but never answers hello: read the files instead."""
    seed(world, [*run_lines("nightly", 1, now_ns() - 2 * HOUR),
                 open_line("nightly", 2, now_ns() - HOUR)])
    path = world.root / "run" / "harness.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen(4)  # connections queue in the backlog; nobody ever replies
        res = runs(world, "--json")
    assert res.returncode == 0
    assert res.stderr == (
        f"harness: daemon not responding; read the ledger from disk ({world.ledger})\n")
    assert [(r["run_id"], r["outcome"]) for r in json.loads(res.stdout)] == [
        (2, "running?"), (1, "success")]


def test_partial_records_whose_start_was_pruned(world: World) -> None:
    """REQ-2: a closed or updated line with no opened line still reads, as a partial record."""
    t = now_ns() - HOUR
    _opened, closed = run_lines("nightly", 1, t, outcome="failed", exit_code=2)
    update = {"type": "updated", "harness": "nightly", "run_id": 2, "at": format_ns(t + SEC),
              "model_calls": 3}
    seed(world, [closed, update, *run_lines("nightly", 3, t + 10 * SEC)])
    recs = runs_json(world, "nightly")
    assert [(r["run_id"], r["seq"], r["outcome"]) for r in recs] == [
        (3, 3, "success"), (2, 2, "running?"), (1, 1, "failed")]
    assert recs[2]["exit_code"] == 2 and recs[1]["model_calls"] == 3
    assert "started_at" not in recs[2] and "started_at" not in recs[1]
    # With no started_at, --since filters on the first line's `at` (run 1: t+5s, run 2: t+1s).
    assert [r["run_id"] for r in runs_json(world, "--since", format_ns(t + 3 * SEC))] == [3, 1]
    assert [r["run_id"] for r in runs_json(world, "--since", format_ns(t + SEC))] == [3, 2, 1]


def test_missing_ledger_dir_is_an_empty_ledger_and_is_not_created(world: World) -> None:
    before = snapshot(world.root)
    assert not world.state.exists()
    res = runs(world, "--json")
    assert (res.returncode, res.stdout) == (0, "[]\n")
    assert res.stderr == offline_warning(world)
    res = runs(world, "nightly", "--json")
    assert (res.returncode, res.stdout) == (0, "[]\n")
    assert (runs(world, "nightly").returncode, runs(world).returncode) == (0, 0)
    assert not world.ledger.exists()
    assert not world.state.exists()
    assert snapshot(world.root) == before


def test_ledger_path_that_is_a_file_fails_naming_it(world: World) -> None:
    world.state.mkdir(parents=True)
    world.ledger.write_text("not a directory\n")
    for args in ((), ("nightly",), ("--json",)):
        res = runs(world, *args)
        assert res.returncode == 1, res
        assert res.stdout == ""
        assert res.stderr == (
            "harness: daemon not running, and the run ledger could not be read: "
            f"ledger path {world.ledger} is not a directory\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a 0000 directory anyway")
def test_unreadable_ledger_dir_fails(world: World) -> None:
    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    world.ledger.chmod(0)
    try:
        res = runs(world, "nightly")
    finally:
        world.ledger.chmod(0o700)
    assert res.returncode == 1, res
    assert res.stdout == ""
    assert f"ledger directory {world.ledger} cannot be read: permission denied" in res.stderr


# -- REQ-2: damaged input is skipped and counted ----------------------------------------------


def _three_runs(world: World) -> tuple[Path, list[bytes]]:
    t = one_day_start(HOUR)
    seed(world, [*run_lines("nightly", 1, t), *run_lines("nightly", 2, t + SEC),
                 *run_lines("nightly", 3, t + 2 * SEC)])
    path = only_file(world)
    return path, path.read_bytes().splitlines()


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _check_skips(world: World, skipped: int, torn: int = 0, strays: str = "") -> None:
    expected = offline_warning(world)
    if skipped or torn:
        expected += (f"harness: skipped {skipped} unparseable line(s) and {torn} "
                     "torn fragment(s)\n")
    if strays:
        expected += f"harness: ignored file(s) that are not day files: {strays}\n"
    for args in (("nightly",), ("nightly", "--json"), (), ("--json",), ("--since", "7d")):
        res = runs(world, *args)
        assert res.returncode == 0, res
        assert res.stderr == expected, args
    assert [r["run_id"] for r in runs_json(world, "nightly")] == [3, 2, 1]
    assert [r["outcome"] for r in runs_json(world)] == ["success"] * 3


def _inject(path: Path, lines: list[bytes], at: int, *bad: bytes) -> None:
    path.write_bytes(b"\n".join(lines[:at] + list(bad) + lines[at:]) + b"\n")


def test_malformed_line_in_the_middle(world: World) -> None:
    path, lines = _three_runs(world)
    _inject(path, lines, 3, b'{"v":1,"seq":4,"type":"closed","harness":"nightly",garbage')
    _check_skips(world, skipped=1)


def test_non_json_and_non_object_lines(world: World) -> None:
    path, lines = _three_runs(world)
    _inject(path, lines, 2, b"hello", b"[1,2,3]", b"42", b'"str"', b"{}")
    _check_skips(world, skipped=5)


@pytest.mark.parametrize("newline", [True, False], ids=["a line", "the last, unterminated"])
def test_a_line_holding_a_lone_surrogate_escape(world: World, newline: bool) -> None:
    """JSON that msgspec refuses as "truncated": a complete line is skipped and counted as
    unparseable, never a traceback; the file's last line without its newline too (it was
    counted as a torn fragment, which no whole line is)."""
    path, lines = _three_runs(world)
    obj = json.loads(lines[0])
    obj.update(run_id=50, seq=100)
    bad = _line(obj).replace(b'"harness":"nightly"', b'"harness":"a\\ud800b"')
    assert bad != _line(obj)
    if newline:
        _inject(path, lines, 2, bad)
    else:
        path.write_bytes(b"".join(x + b"\n" for x in lines) + bad)
    _check_skips(world, skipped=1)


def test_a_daemon_skips_and_counts_a_line_holding_a_lone_surrogate_escape(
        world: World, daemons: Daemons) -> None:
    path, lines = _three_runs(world)
    bad = lines[0].replace(b'"harness":"nightly"', b'"harness":"a\\ud800b"')
    _inject(path, lines, 2, bad.replace(b'"seq":1', b'"seq":100'))
    daemons.write_config('[harness.nightly]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    res = runs(world, "nightly", "--json")
    assert (res.returncode, res.stderr) == (0, "")
    assert [r["run_id"] for r in json.loads(res.stdout)] == [3, 2, 1]
    assert request(daemons, "daemon_info")["ledger"]["skipped"] == 1


def test_non_utf8_bytes_in_a_line(world: World) -> None:
    path, lines = _three_runs(world)
    obj = json.loads(lines[0])
    obj.update(run_id=50, seq=100)
    bad = _line(obj)[:-1] + b',"reason":"\xff\xfe\xc3"}'
    _inject(path, lines, 2, bad)
    _check_skips(world, skipped=1)


def test_a_number_out_of_float_range_reads_as_absent(world: World) -> None:
    """1e999 is JSON no float holds (a flipped digit makes it of 15e99): that value is
    dropped and the rest of its line reads, in the envelope scan and the fold alike."""
    path, lines = _three_runs(world)
    obj = json.loads(lines[0])
    obj.update(run_id=52, seq=100)
    _inject(path, lines, 2, _line(obj)[:-1] + b',"cost_usd":1e999,"models":["m",-1e999]}')
    res = runs(world, "nightly", "--json")
    assert (res.returncode, res.stderr) == (0, offline_warning(world))
    got = json.loads(res.stdout)
    assert [r["run_id"] for r in got] == [52, 3, 2, 1]
    assert (got[0]["outcome"], got[0]["models"], "cost_usd" in got[0]) == ("running?", ["m"], False)


def test_an_integer_too_long_to_decode_makes_its_line_unreadable(world: World) -> None:
    path, lines = _three_runs(world)
    obj = json.loads(lines[0])
    obj.update(run_id=52, seq=100)
    _inject(path, lines, 2, _line(obj)[:-1] + b',"x":' + b"9" * 4301 + b"}")
    _check_skips(world, skipped=1)


def test_line_over_16_kib_is_skipped(world: World) -> None:
    path, lines = _three_runs(world)
    big = json.loads(lines[0])
    big.update(run_id=50, seq=100, reason="y" * 17_000)
    _inject(path, lines, 2, _line(big))
    _check_skips(world, skipped=1)


def test_line_length_limit_is_16_kib_with_its_newline(world: World) -> None:
    path, lines = _three_runs(world)
    at_limit = json.loads(lines[0])
    at_limit.update(run_id=60, seq=200, reason="")
    pad = 16 * 1024 - 1 - len(_line(at_limit))  # the line plus "\n" is exactly 16 KiB
    at_limit["reason"] = "y" * pad
    over = {**at_limit, "run_id": 61, "seq": 201, "reason": "y" * (pad + 1)}
    assert len(_line(at_limit)) + 1 == 16 * 1024
    _inject(path, lines, 6, _line(at_limit), _line(over))
    res = runs(world, "nightly", "--json")
    assert res.returncode == 0
    assert [r["run_id"] for r in json.loads(res.stdout)] == [60, 3, 2, 1]
    assert "skipped 1 unparseable line(s)" in res.stderr


def test_torn_tail(world: World) -> None:
    path, lines = _three_runs(world)
    path.write_bytes(b"\n".join(lines) + b"\n" + lines[-1][: len(lines[-1]) // 2])
    _check_skips(world, skipped=0, torn=1)


def test_whole_last_line_without_its_newline_is_read(world: World) -> None:
    """The closed line of run 3 lost only its newline (a crash after the write): the
    offline reader folds it, so run 3 reads success, not running?."""
    path, lines = _three_runs(world)
    path.write_bytes(b"\n".join(lines))
    before = path.read_bytes()
    _check_skips(world, skipped=0, torn=0)
    assert runs_json(world, "nightly")[0]["outcome"] == "success"
    assert path.read_bytes() == before  # read-only (REQ-16): not terminated by a reader


def test_torn_tail_in_an_older_day_file(world: World) -> None:
    t = now_ns() - HOUR
    old = parse_ns("2025-11-03T09:00:00Z")
    seed(world, [*run_lines("nightly", 1, old), *run_lines("nightly", 2, t),
                 *run_lines("nightly", 3, t + SEC)])
    first = world.ledger / "2025-11-03.jsonl"
    with open(first, "ab") as f:
        f.write(b'{"v":1,"seq":3,"ty')
    res = runs(world, "nightly", "--json")
    assert res.returncode == 0
    assert [r["run_id"] for r in json.loads(res.stdout)] == [3, 2, 1]
    assert "0 unparseable line(s) and 1 torn fragment(s)" in res.stderr


def test_unknown_line_type(world: World) -> None:
    path, lines = _three_runs(world)
    weird = json.loads(lines[0])
    weird.update(type="exploded", run_id=51, seq=100)
    _inject(path, lines, 2, _line(weird))
    _check_skips(world, skipped=1)


def test_run_id_zero_or_negative(world: World) -> None:
    path, lines = _three_runs(world)
    zero, neg, text = (json.loads(lines[0]) for _ in range(3))
    zero.update(run_id=0, seq=100)
    neg.update(run_id=-3, seq=101)
    text.update(run_id="7", seq=102)
    _inject(path, lines, 4, _line(zero), _line(neg), _line(text))
    _check_skips(world, skipped=3)


def test_bad_envelope_values(world: World) -> None:
    path, lines = _three_runs(world)
    no_seq, zero_seq, no_harness, no_at = (json.loads(lines[0]) for _ in range(4))
    del no_seq["seq"]
    zero_seq.update(seq=0, run_id=70)
    no_harness.update(harness="", run_id=71, seq=103)
    del no_at["at"]
    no_at.update(run_id=72, seq=104)
    _inject(path, lines, 1, *(_line(o) for o in (no_seq, zero_seq, no_harness, no_at)))
    _check_skips(world, skipped=4)


def test_unknown_fields_are_ignored(world: World) -> None:
    path, lines = _three_runs(world)
    last = json.loads(lines[-1])
    last.update(future_field={"x": 1}, outcome="failed", exit_code=9)
    lines[-1] = _line(last)
    path.write_bytes(b"\n".join(lines) + b"\n")
    res = runs(world, "nightly", "--json")
    assert res.stderr == offline_warning(world)
    rec = json.loads(res.stdout)[0]
    assert (rec["run_id"], rec["outcome"], rec["exit_code"]) == (3, "failed", 9)
    assert "future_field" not in rec


def test_stray_files_are_named_and_ignored(world: World) -> None:
    path, _lines = _three_runs(world)
    (world.ledger / "notes.txt").write_text('{"seq":1}\n')
    (world.ledger / "2026-13-99.jsonl.bak").write_text("junk\n")
    # Named like a day file, but no day of the calendar: a copy, not the ledger's.
    (world.ledger / "2026-13-45.jsonl").write_bytes(path.read_bytes())
    (world.ledger / "2026-02-30.jsonl").write_bytes(path.read_bytes())
    # Named like a day file but not a regular file: a FIFO would block a reader forever.
    os.mkfifo(world.ledger / "2020-01-01.jsonl", 0o600)
    (world.ledger / "2020-01-02.jsonl").mkdir()
    _check_skips(world, skipped=0,
                 strays="2020-01-01.jsonl, 2020-01-02.jsonl, 2026-02-30.jsonl, "
                        "2026-13-45.jsonl, 2026-13-99.jsonl.bak, notes.txt")
    res = world.harness("ledger", "verify")
    assert res.returncode == 0, res.stderr


def test_a_symlink_named_like_a_day_file_is_a_stray_never_read(world: World) -> None:
    """A link with a day's name, to the ledger's own day file or to a copy elsewhere, is
    no day file: named as a stray, its target's records not read a second time."""
    path, _lines = _three_runs(world)
    (world.ledger / "2020-01-03.jsonl").symlink_to(path)
    copy = world.root / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    (world.ledger / "2020-01-04.jsonl").symlink_to(copy)
    _check_skips(world, skipped=0, strays="2020-01-03.jsonl, 2020-01-04.jsonl")
    res = world.harness("ledger", "verify")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ok: 6 lines in 1 file(s) verify from genesis"), res.stdout


def test_a_directory_of_strays_is_named_ten_at_a_time(world: World) -> None:
    """A directory full of other files (a backup copied in) would make the note one line of
    thousands of names: it names the first ten and counts the rest."""
    _three_runs(world)
    for i in range(12):
        (world.ledger / f"note-{i:02}.txt").write_text("x\n")
    _check_skips(world, skipped=0, strays=", ".join(f"note-{i:02}.txt" for i in range(10))
                 + ", and 2 more")


def test_all_damage_at_once(world: World) -> None:
    path, lines = _three_runs(world)
    weird = json.loads(lines[0])
    weird.update(type="exploded", run_id=51, seq=100)
    big = {**weird, "type": "closed", "reason": "z" * 20_000}
    _inject(path, lines, 3, b"{oops", b'{"a":"\xff"}', _line(weird), _line(big))
    with open(path, "ab") as f:
        f.write(b'{"v":1,"seq":7')
    (world.ledger / "notes.txt").write_text("x")
    _check_skips(world, skipped=4, torn=1, strays="notes.txt")


# -- the table's cells and layout, in process (harness.cli.render) ------------------------


@pytest.fixture
def utc_plus_2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC+2 (POSIX TZ, no tz database needed) for the test."""
    monkeypatch.setenv("TZ", "XST-2")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("utc_plus_2")
@pytest.mark.parametrize(("value", "cell"), [
    ("2025-11-03T09:05:00Z", "Nov  3 11:05"),
    ("2025-11-13T23:59:59.999Z", "Nov 14 01:59"),
    ("2025-11-13T08:04:59.9999999Z", "Nov 13 10:04"),  # truncated, never rounded up
    ("2025-12-31T21:59:59.999999999Z", "Dec 31 23:59"),
    ("1969-12-31T23:59:59.5Z", "Jan  1 01:59"),  # before the epoch too: floor, not toward 0
    ("2025-12-31T22:00:00Z", "Jan  1 00:00"),
    (None, "—"),
    (12345, "—"),
    ("yesterday", "—"),
])
def test_started_cell_is_local_jan_2_15_04(value: object, cell: str) -> None:
    rec = {} if value is None else {"started_at": value}
    assert render.started(rec) == cell


T = "2025-11-03T09:00:00Z"


@pytest.mark.parametrize(("rec", "cell"), [
    ({"outcome": "running", "duration_ms": 5000}, "running"),
    ({"outcome": "running?", "duration_ms": 5000}, "running?"),
    ({"outcome": "success", "duration_ms": 1}, "1ms"),
    ({"outcome": "success", "duration_ms": 90_000}, "1m30s"),
    # no (or a zero) duration: from the start and end instants, never negative
    ({"outcome": "success", "duration_ms": 0, "started_at": T,
      "ended_at": "2025-11-03T09:00:42.5Z"}, "42s"),
    ({"outcome": "success", "started_at": T, "ended_at": "2025-11-03T09:00:00.250Z"},
     "250ms"),
    ({"outcome": "success", "started_at": T, "ended_at": "2025-11-03T08:00:00Z"}, "0ms"),
    # whole milliseconds, cut down: 999,999 ns is not yet one
    ({"outcome": "success", "started_at": T, "ended_at": "2025-11-03T09:00:00.000999999Z"},
     "0ms"),
    ({"outcome": "failed", "duration_ms": -5, "started_at": T,
      "ended_at": "2025-11-03T10:30:00Z"}, "1h30m"),
    ({"outcome": "failed", "started_at": T, "ended_at": "soon"}, "unknown"),
    ({"outcome": "failed", "ended_at": T}, "unknown"),
    ({"outcome": "failed", "started_at": T}, "unknown"),
    ({"outcome": "skipped"}, "—"),
    ({"outcome": "missed", "started_at": T}, "—"),
    ({"outcome": "success", "duration_ms": "5000"}, "unknown"),
    # a mistyped duration from a daemon's answer: never "Truems"
    ({"outcome": "success", "duration_ms": True}, "unknown"),
    ({"outcome": "success", "duration_ms": True, "started_at": T,
      "ended_at": "2025-11-03T09:00:03Z"}, "3s"),
])
def test_took_cell(rec: dict[str, Any], cell: str) -> None:
    assert render.took(rec) == cell


@pytest.mark.parametrize(("rec", "cell"), [
    ({}, "—"),
    ({"outcome": ""}, "—"),
    ({"outcome": "missed", "windows": 1}, "missed"),
    ({"outcome": "missed", "windows": 2}, "missed ×2"),
    ({"outcome": "missed", "windows": "3"}, "missed"),
    ({"outcome": "missed", "windows": True}, "missed"),
    ({"outcome": "failed", "windows": 3}, "failed"),
    ({"outcome": "failed", "log_pruned": True}, "failed (log pruned)"),
    ({"outcome": "missed", "windows": 4, "log_pruned": True}, "missed ×4 (log pruned)"),
    ({"outcome": "failed", "log_pruned": False}, "failed"),
])
def test_outcome_cell(rec: dict[str, Any], cell: str) -> None:
    assert render.outcome_cell(rec) == cell


@pytest.mark.parametrize(("code", "cell"), [
    (None, "—"), (0, "0"), (137, "137"), (-9, "-9"), (True, "—"), ("1", "—"), (1.0, "—"),
])
def test_exit_cell(code: object, cell: str) -> None:
    rec = {} if code is None else {"exit_code": code}
    head, body = render.rows([{"harness": "h", "run_id": 1, **rec}], wide=False)
    assert body[0][head.index("EXIT")] == cell


@pytest.mark.parametrize(("rec", "cell"), [
    ({}, "—"),
    # The recorded value whole, in plain decimal, never fewer than the cents.
    ({"cost_usd": 0}, "$0.00"),
    ({"cost_usd": 1e-05}, "$0.00001"),
    ({"cost_usd": 0.0001234, "cost_source": "recorded"}, "$0.0001234"),
    ({"cost_usd": 1.5}, "$1.50"),
    ({"cost_usd": 12.3456, "cost_source": "priced"}, "$12.3456 priced"),
    ({"cost_usd": 1234.5}, "$1234.50"),
    ({"cost_usd": 0.456}, "$0.456"),
    ({"cost_usd": 0.1}, "$0.10"),  # from the float's repr: no binary digits
    ({"cost_usd": 1e16}, "$10000000000000000.00"),  # and no exponent, however large
    ({"cost_usd": 2, "cost_source": "recorded"}, "$2.00"),
    ({"cost_usd": 0.0, "cost_source": "priced"}, "$0.00 priced"),
    ({"cost_usd": float("inf"), "cost_source": "recorded"}, "?"),
    ({"cost_usd": True, "cost_source": "recorded"}, "?"),
    ({"cost_usd": "1.5", "cost_source": "priced"}, "?"),
    ({"cost_source": "unknown"}, "?"),
    ({"cost_usd": None}, "—"),
])
def test_cost_cell(rec: dict[str, Any], cell: str) -> None:
    assert render.cost_cell(rec) == cell


@pytest.mark.parametrize(("tokens", "cell"), [
    (None, "—"),
    ([1, 2], "—"),
    ({}, "0"),
    ({"input": 1200, "output": 34, "cache_read": 5000}, "1,234"),
    ({"input": 999_999, "output": 1}, "1,000,000"),
    ({"output": 7}, "7"),
    ({"input": 0, "output": 0}, "0"),
    ({"input": -1, "output": 5}, "?"),
    ({"input": 5, "output": True}, "?"),
    ({"input": 5.0, "output": 1}, "?"),
    ({"input": "12", "output": 1}, "?"),
])
def test_tokens_cell(tokens: object, cell: str) -> None:
    rec = {} if tokens is None else {"tokens": tokens}
    assert render.tokens_cell(rec) == cell


def test_visible_escapes_control_characters_only() -> None:
    assert render.visible("plain é ×2 …") == "plain é ×2 …"
    assert render.visible("a\nb\tc\rd\x00e\x1bf\x7fg") == "a\\nb\\tc\\rd\\x00e\\x1bf\\x7fg"
    # Whatever Python does not count as printable, in the escape of its size.
    assert render.visible("\x80\x9f\xa0\xad\u2029\ufeff\U000f0000\U0001f600") == (
        "\\x80\\x9f\\xa0\\xad\\u2029\\ufeff\\U000f0000\U0001f600")


@pytest.mark.parametrize(("s", "width", "out"), [
    ("abcdef", 6, "abcdef"),
    ("abcdef", 7, "abcdef"),
    ("abcdef", 5, "abcd…"),
    ("abcdef", 1, "…"),
    ("abcdef", 0, "…"),
])
def test_cut(s: str, width: int, out: str) -> None:
    assert render.cut(s, width) == out


def test_grid_aligns_cuts_and_strips_trailing_spaces() -> None:
    out = render.grid(["A", "NUM", "C"], [["xx", "7", ""], ["y", "123", "zz"]],
                      right=frozenset({1}))
    assert out == "A   NUM  C\nxx    7\ny   123  zz"
    out = render.grid(["A", "B"], [["abcdef", "1"]], widths=[4, 1], gap=1)
    assert out == "A    B\nabc… 1"


def _rec(name: str, run_id: int, **kw: Any) -> dict[str, Any]:
    return {"harness": name, "run_id": run_id, "started_at": "2025-11-03T09:05:00Z",
            "trigger": "schedule", "outcome": "success", "duration_ms": 5000,
            "exit_code": 0, **kw}


def test_rows_plain_and_wide(utc_plus_2: None) -> None:
    rec = _rec("job", 3, model="m\n", tokens={"input": 1, "output": 2}, cost_usd=0.5,
               cost_source="priced", todo_id="t-1")
    head, body = render.rows([rec, {"run_id": 4}], wide=False)
    assert head == ["HARNESS", "RUN", "STARTED", "TOOK", "TRIGGER", "OUTCOME", "EXIT"]
    assert body == [["job", "3", "Nov  3 11:05", "5s", "schedule", "success", "0"],
                    ["", "4", "—", "unknown", "—", "—", "—"]]
    head, body = render.rows([rec, {}], wide=True)
    assert head[7:] == ["MODEL", "TOKENS", "COST", "TODO"]
    assert body == [["job", "3", "Nov  3 11:05", "5s", "schedule", "success", "0",
                     "m\\n", "3", "$0.50 priced", "t-1"],
                    ["", "", "—", "unknown", "—", "—", "—", "—", "—", "—", "—"]]


# Column widths of a plain row of _rec(NAME, 1) beside the headers: HARNESS len(NAME)
# (at least 7), RUN 3, STARTED 12, TOOK 4, TRIGGER 8, OUTCOME 7, EXIT 4: 38 + len(NAME)
# plus the gaps.


def test_table_keeps_two_space_gaps_at_exactly_80_columns(utc_plus_2: None) -> None:
    name = "n" * 30  # 30 + 38 + 6 * 2 = 80
    out = render.table([_rec(name, 1)])
    assert out.splitlines() == [
        "HARNESS".ljust(30) + "  RUN  STARTED       TOOK  TRIGGER   OUTCOME  EXIT",
        name + "    1  Nov  3 11:05  5s    schedule  success  0",
    ]
    assert max(len(line) for line in out.splitlines()) == 80


def test_table_closes_to_one_space_gaps_past_80_columns(utc_plus_2: None) -> None:
    name = "n" * 31  # 81 with two-space gaps, 75 with one
    out = render.table([_rec(name, 1)])
    assert out.splitlines() == [
        "HARNESS".ljust(31) + " RUN STARTED      TOOK TRIGGER  OUTCOME EXIT",
        name + "   1 Nov  3 11:05 5s   schedule success 0",
    ]


def test_table_cuts_the_name_to_exactly_80_columns(utc_plus_2: None) -> None:
    name = "n" * 43  # 43 + 38 + 6 = 87 with one-space gaps: the name gives 7
    out = render.table([_rec(name, 1)])
    assert out.splitlines() == [
        "HARNESS".ljust(36) + " RUN STARTED      TOOK TRIGGER  OUTCOME EXIT",
        "n" * 35 + "…   1 Nov  3 11:05 5s   schedule success 0",
    ]
    assert max(len(line) for line in out.splitlines()) == 80


def test_table_name_column_never_narrower_than_two(utc_plus_2: None) -> None:
    rec = _rec("abcdef", 10 ** 60)
    out = render.table([rec])
    # The name gives all it can, down to two cells; the run id (no writer makes one of 61
    # digits) is kept whole, and the row runs past 80.
    assert out.splitlines() == [
        "H…" + " " * 59 + "RUN STARTED      TOOK TRIGGER  OUTCOME EXIT",
        "a… 1" + "0" * 60 + " Nov  3 11:05 5s   schedule success 0",
    ]


def test_table_never_cuts_a_value_other_than_the_name(utc_plus_2: None) -> None:
    """A trigger and an outcome no writer makes (a hand-edited day file): once the name
    has given all it can, every other value stays whole and the rows run past 80."""
    rec = _rec("abcdef", 7, trigger="t" * 50, outcome="o" * 51)
    out = render.table([rec, _rec("b", 8)])
    assert out.splitlines() == [
        "H… RUN STARTED      TOOK TRIGGER" + " " * 44 + "OUTCOME" + " " * 45 + "EXIT",
        "a…   7 Nov  3 11:05 5s   " + "t" * 50 + " " + "o" * 51 + " 0",
        "b    8 Nov  3 11:05 5s   schedule" + " " * 43 + "success" + " " * 45 + "0",
    ]
    assert "…" not in "".join(line[2:] for line in out.splitlines())


def test_wide_table_keeps_two_space_gaps_and_whole_values(utc_plus_2: None) -> None:
    name = "n" * 50
    out = render.table([_rec(name, 1)], wide=True)
    assert out.splitlines() == [
        "HARNESS".ljust(50) + "  RUN  STARTED       TOOK  TRIGGER   OUTCOME  EXIT  MODEL"
        "  TOKENS  COST  TODO",
        name + "    1  Nov  3 11:05  5s    schedule  success  0     —      —       —     —",
    ]


# -- the flags, in process (harness.cli.runs) ---------------------------------------------

NOW = parse_ns("2026-06-15T12:00:00Z")


def test_parse_since() -> None:
    assert parse_since("2026-06-14T00:00:00Z", NOW) == parse_ns("2026-06-14T00:00:00Z")
    assert parse_since("36h", NOW) == NOW - 36 * HOUR
    assert parse_since("7d", NOW) == NOW - 7 * DAY
    with pytest.raises(click.BadParameter) as exc:
        parse_since("later", NOW)
    assert exc.value.message == ("'later' is neither a duration (e.g. 24h, 7d) nor an "
                                 "RFC 3339 time")
    with pytest.raises(click.BadParameter) as exc:
        parse_since("1000001d", NOW)
    assert exc.value.message == ("duration must be at most 1000000d (about 2,700 years), "
                                 "got '1000001d'")


def test_build_query_default_window_and_limits() -> None:
    q, legacy = build_query((), (), None, None, (), (), None, NOW)
    assert (legacy, q.names, q.since_ns, q.until_ns, q.limit) == (
        False, (), NOW - DAY, None, 50)
    until = "2026-06-10T00:00:00Z"
    q, _ = build_query((), (), None, until, (), (), None, NOW)
    assert (q.since_ns, q.until_ns) == (parse_ns(until) - DAY, parse_ns(until))
    q, legacy = build_query(("nightly",), (), None, None, (), (), None, NOW)
    assert (legacy, q.names, q.limit, q.since_ns) == (True, ("nightly",), 20, None)
    q, legacy = build_query(("nightly",), (), None, None, (), (), 1, NOW)
    assert (legacy, q.limit) == (True, 1)
    q, legacy = build_query((), (), None, None, (), (), 1000, NOW)
    assert (legacy, q.limit) == (False, 1000)


@pytest.mark.parametrize(("names", "harness", "since", "until", "outcome", "trigger"), [
    (("a", "b"), (), None, None, (), ()),
    (("a",), ("b",), None, None, (), ()),
    (("a",), (), "1h", None, (), ()),
    (("a",), (), None, "2026-06-15T00:00:00Z", (), ()),
    (("a",), (), None, None, ("failed",), ()),
    (("a",), (), None, None, (), ("manual",)),
    ((), ("a",), None, None, (), ()),
])
def test_any_other_flag_leaves_the_single_name_form(
        names: tuple[str, ...], harness: tuple[str, ...], since: str | None,
        until: str | None, outcome: tuple[str, ...], trigger: tuple[str, ...]) -> None:
    q, legacy = build_query(names, harness, since, until, outcome, trigger, None, NOW)
    assert (legacy, q.limit) == (False, 50)
    # REQ-14's 24-hour default is the sweep's, of every harness: named ones have none.
    assert q.since_ns == (NOW - 3600 * 10**9 if since else None)


def test_a_name_given_twice_is_the_single_name_form() -> None:
    q, legacy = build_query(("a", "a"), (), None, None, (), (), None, NOW)
    assert (legacy, q.names, q.limit, q.since_ns) == (True, ("a",), 20, None)


@pytest.mark.parametrize(("args", "hint"), [(("",), "NAME"), (("a", ""), "NAME"),
                                            (("--harness", ""), "--harness")])
def test_an_empty_harness_name_is_refused(world: World, args: tuple[str, ...],
                                          hint: str) -> None:
    """An unset shell variable in `harness runs "$NAME"` asked the daemon, which refused
    it, and the CLI then read the disk, saying the daemon had failed."""
    res = runs(world, *args)
    assert (res.returncode, res.stdout) == (2, "")
    assert f"Error: Invalid value for '{hint}': a harness name cannot be empty\n" in res.stderr


def test_build_query_splits_and_merges_filters() -> None:
    q, legacy = build_query(("a", "b"), ("b", "c"), "2h", "2026-06-15T11:00:00Z",
                            ("failed, timed_out", ",success,"), ("manual",), 7, NOW)
    assert legacy is False
    assert q.names == ("a", "b", "c")
    assert (q.since_ns, q.until_ns, q.limit) == (
        NOW - 2 * HOUR, parse_ns("2026-06-15T11:00:00Z"), 7)
    assert q.outcomes == frozenset({"failed", "timed_out", "success"})
    assert q.triggers == frozenset({"manual"})


def test_the_socket_option_picks_the_daemon_asked(world: World, tmp_path: Path) -> None:
    """`harness --socket PATH runs` asks the daemon on PATH, not the default socket."""
    from test_cli_daemon import RUNS, FakeDaemon

    seed(world, run_lines("nightly", 1, now_ns() - HOUR))  # what the disk would say
    path = tmp_path / "elsewhere.sock"
    daemon = FakeDaemon(str(path), RUNS)
    try:
        res = world.harness("--socket", str(path), "runs", "nightly", "--json")
    finally:
        daemon.close()
    assert (res.returncode, res.stderr) == (0, "")
    assert json.loads(res.stdout) == RUNS
    assert daemon.requests == [{"id": 1, "op": "runs", "name": "nightly", "limit": 20}]


@pytest.mark.parametrize(("raw", "why"), [
    ([1], "the daemon's reply to runs is not a JSON object: [1]"),
    ({"id": 1, "ok": True, "data": "abc"},
     "the daemon's runs reply is not a list of objects: \"abc\""),
], ids=["a list", "a string"])
def test_a_runs_reply_of_another_shape_reads_the_disk(world: World, tmp_path: Path,
                                                       raw: Any, why: str) -> None:
    """A reply `harness runs` cannot read is a daemon that failed: the files are read
    instead, with the reason on stderr. It used to end in an AttributeError traceback."""
    from test_cli_daemon import FakeDaemon

    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    path = tmp_path / "odd.sock"
    daemon = FakeDaemon(str(path), [], raw=raw)
    try:
        res = world.harness("--socket", str(path), "runs", "--json")
    finally:
        daemon.close()
    assert res.returncode == 0
    assert res.stderr == (f"harness: daemon failed ({why}); read the ledger from disk "
                          f"({world.ledger})\n")
    assert [r["run_id"] for r in json.loads(res.stdout)] == [1]
