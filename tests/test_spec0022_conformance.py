"""SPEC-0022's scenarios that no other test pins end to end, met as a user meets them: the
real `harness` CLI and a real `harness daemon` in a throwaway XDG world, ledgers written
by hand to DESIGN.md §2/§4 where a scenario starts from a given ledger.

Covers REQ-1 (seq 812 then 813 across restarts; another user refused by the modes alone),
REQ-5 (model_mismatch is a failure, quota_parked and stalled are no verdict, as `harness
jobs` shows them), REQ-12 (a real harness.toml's retention prunes day files at boot),
REQ-13 (after the upgrade, `jobs` shows the last run's id, time and outcome from the
ledger, and run ids continue from last_run_id), REQ-17 (no env_file value, prompt token
or spawn error text in a ledger line) and REQ-19 (a reload of [ledger] restarts no
harness). The rest of SPEC-0022's scenarios are pinned by the tests their REQs name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, request, runs_of, until
from ledgertools import ZERO_HASH, all_lines, seal, verify_ok, write_day_file


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def _utc_cell(stamp: str) -> str:
    """A STARTED cell as the CLI shows it in the world's TZ=UTC (`Jan  2 15:04`)."""
    t = datetime.fromisoformat(stamp[:19] + "+00:00")
    return f"{t:%b} {t.day:>2} {t:%H:%M}"


def _records(world: World, name: str, outcomes: list[str], start: datetime) -> None:
    """One closed record per outcome for one-shot `name`, oldest first, an hour apart,
    sealed by hand into today's and earlier day files (seq continuing from what is there)."""
    lines = all_lines(world.ledger) if world.ledger.exists() else []
    seq = lines[-1]["seq"] if lines else 0
    prev = lines[-1]["hash"] if lines else ZERO_HASH
    by_day: dict[str, list[bytes]] = {}
    for run_id, outcome in enumerate(outcomes, 1):
        at = _stamp(start + timedelta(hours=run_id))
        rec = {"v": 1, "type": "decided", "harness": name, "run_id": run_id, "at": at,
               "kind": "oneshot", "trigger": "schedule", "outcome": outcome,
               "started_at": at, "ended_at": at}
        seq += 1
        raw, prev = seal(rec, seq, prev)
        by_day.setdefault(at[:10], []).append(raw)
    world.ledger.mkdir(parents=True, mode=0o700, exist_ok=True)
    for day, raws in by_day.items():
        path = world.ledger / f"{day}.jsonl"
        old = path.read_bytes().splitlines() if path.exists() else []
        write_day_file(path, old + raws)


def _stop(daemons: Daemons, proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()


# -- REQ-1: the sequence survives a restart; another user cannot read -----------------------


def test_a_ledger_ending_at_seq_812_goes_on_at_813_after_a_restart(
        world: World, daemons: Daemons) -> None:
    """REQ-1 "Sequence survives a restart": a ledger whose last line has seq 812 (written
    by hand to §4), a daemon boots and writes a line: 813, linked to 812's hash. Restarted
    again, it goes on from its own last line, never repeating a seq."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=30)
    world.ledger.mkdir(parents=True, mode=0o700)
    prev = ZERO_HASH
    raws: dict[str, list[bytes]] = {}
    for seq in range(1, 813):
        at = _stamp(start + timedelta(seconds=seq))
        raw, prev = seal({"v": 1, "type": "decided", "harness": "old", "run_id": seq,
                          "at": at, "kind": "oneshot", "trigger": "schedule",
                          "outcome": "missed", "started_at": at}, seq, prev)
        raws.setdefault(at[:10], []).append(raw)
    for day, lines in raws.items():
        write_day_file(world.ledger / f"{day}.jsonl", lines)
    head_812 = prev
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')

    proc = daemons.start()
    ran = world.harness("trigger", "ok", "--wait")
    assert ran.returncode == 0, ran.stderr
    new = [x for x in all_lines(world.ledger) if x["seq"] > 812]
    assert [(x["seq"], x["type"], x["harness"], x["run_id"]) for x in new] == [
        (813, "opened", "ok", 1), (814, "closed", "ok", 1)]
    assert new[0]["prev"] == head_812
    _stop(daemons, proc)

    proc = daemons.start()
    ran = world.harness("trigger", "ok", "--wait")
    assert ran.returncode == 0, ran.stderr
    _stop(daemons, proc)
    seqs = [x["seq"] for x in all_lines(world.ledger)]
    assert seqs == list(range(1, 817))
    assert "verify from genesis to seq 816" in verify_ok(world)


@pytest.fixture
def open_home() -> Iterator[Path]:
    """A state home another user could reach were the harness dirs not closed: a fresh
    directory (not under pytest's 0700 tmp) whose own mode lets anyone traverse it."""
    home = Path(tempfile.mkdtemp(prefix="harness-spec0022-"))
    try:
        home.chmod(0o711)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` run as user and group 65534 (nobody), from `/`, in the C locale."""
    def drop() -> None:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    return subprocess.run(list(argv), preexec_fn=drop, capture_output=True, text=True,
                          timeout=120, cwd="/", env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_is_refused_by_the_ledgers_own_modes(
        world: World, daemons: Daemons, open_home: Path) -> None:
    """REQ-1 "Another user cannot read it": with every directory above ledger/ opened to
    others by hand (an operator's chmod), a different local user still cannot list
    ledger/ (0700); with ledger/ opened too, it still cannot read the day file (0600)."""
    world.env["XDG_STATE_HOME"] = str(open_home / "state")
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    proc = daemons.start()
    assert world.harness("trigger", "ok", "--wait").returncode == 0
    _stop(daemons, proc)
    ledger = open_home / "state" / "harness" / "ledger"
    [day] = sorted(ledger.glob("*.jsonl"))
    for up in (open_home / "state", open_home / "state" / "harness"):
        up.chmod(0o711)
    listed = _as_nobody("ls", str(ledger))
    assert listed.returncode != 0 and "Permission denied" in listed.stderr, listed
    ledger.chmod(0o711)
    read = _as_nobody("cat", str(day))
    assert read.returncode != 0 and "Permission denied" in read.stderr, read
    assert read.stdout == ""
    # The refusal is the modes': root, which they do not bind, reads the same file.
    assert day.read_bytes().startswith(b'{"at":')
    assert stat.S_IMODE(day.stat().st_mode) == 0o600


# -- REQ-5: which outcomes are verdicts, as `harness jobs` shows them ----------------------


def test_jobs_counts_model_mismatch_as_a_failure_and_quota_parked_as_no_verdict(
        world: World, daemons: Daemons) -> None:
    """REQ-5 "A model mismatch counts as a failure" and "A quota park is not a verdict",
    through a real daemon over a ledger written by hand: a quota_parked (or stalled) run
    after failures neither adds to nor resets their streak, and after a success it starts
    none; a model_mismatch run is part of the streak and is the last run."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=12)
    cases = {
        "mism": (["success", "failed", "model_mismatch"], 2),
        "parked": (["failed", "failed", "quota_parked"], 2),
        "fresh": (["failed", "success", "quota_parked"], 0),
        "mixed": (["failed", "stalled", "quota_parked", "model_unattested"], 2),
    }
    for name, (outcomes, _) in cases.items():
        _records(world, name, outcomes, start)
    daemons.write_config("".join(f'[harness.{n}]\nkind = "oneshot"\nargv = ["true"]\n\n'
                                 for n in cases))
    daemons.start()
    res = world.harness("jobs", "--json")
    assert res.returncode == 0, res.stderr
    jobs = {j["name"]: j for j in json.loads(res.stdout)}
    for name, (outcomes, fails) in cases.items():
        assert jobs[name]["fails"] == fails, name
        assert jobs[name]["last_run"]["run_id"] == len(outcomes)
        assert jobs[name]["last_run"]["outcome"] == outcomes[-1]


# -- REQ-12: retention from a real harness.toml, at boot ----------------------------------


def test_retention_from_the_config_prunes_old_day_files_at_boot(
        world: World, daemons: Daemons) -> None:
    """REQ-12 "Old files go": retention = "30d" and one day file a day for 45 days back;
    the daemon boots: a day that ended more than 30 days ago is gone (the 15 oldest), the
    31 files left are byte for byte as they were, and the chain still verifies."""
    today = datetime.now(UTC).date()
    world.ledger.mkdir(parents=True, mode=0o700)
    prev = ZERO_HASH
    for seq, back in enumerate(range(45, -1, -1), 1):
        at = f"{today - timedelta(days=back)}T00:00:0{seq % 10}.000000000Z"
        raw, prev = seal({"v": 1, "type": "decided", "harness": "n", "run_id": seq,
                          "at": at, "kind": "oneshot", "trigger": "schedule",
                          "outcome": "missed", "started_at": at}, seq, prev)
        write_day_file(world.ledger / f"{at[:10]}.jsonl", [raw])
    before = {p.name: p.read_bytes() for p in world.ledger.glob("*.jsonl")}
    daemons.write_config('[ledger]\nretention = "30d"\n\n'
                         '[harness.n]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    request(daemons, "list")  # answered once the boot (and its prune) is done
    if datetime.now(UTC).date() != today:
        pytest.skip("the UTC day rolled over mid-test")
    kept = {p.name: p.read_bytes() for p in world.ledger.glob("*.jsonl")}
    want = {f"{today - timedelta(days=back)}.jsonl" for back in range(31)}
    assert set(kept) == want
    assert all(kept[name] == before[name] for name in kept)
    assert "INFO harness.daemon: ledger: pruned 15 day file(s)" in daemons.stderr()
    assert "to seq 46" in verify_ok(world)


# -- REQ-13: history leaves state.json; jobs and run ids read the ledger -------------------


def test_after_the_upgrade_jobs_shows_the_last_failed_run_and_ids_continue(
        world: World, daemons: Daemons) -> None:
    """REQ-13 "jobs reads the ledger" and "Run ids continue": the legacy state.json holds
    20 runs of nightly, the last one failed; after the upgrade state.json holds no record,
    and `harness jobs` shows run 20's id, time and outcome, read from the ledger; nightly's
    next run is 21."""
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=21)
    legacy = []
    for i in range(1, 21):
        t = first + timedelta(hours=i)
        ok = i < 20
        legacy.append({"run_id": i, "trigger": "schedule",
                       "outcome": "success" if ok else "failed",
                       "started_at": _stamp(t), "ended_at": _stamp(t + timedelta(seconds=90)),
                       "exit_code": 0 if ok else 1, "reason": None, "window": None,
                       "first_window": None, "windows": None})
    world.state.mkdir(parents=True, mode=0o700)
    state = world.state / "state.json"
    state.write_text(json.dumps({"runs": {"nightly": {"last_run_id": 20, "runs": legacy}}}))
    daemons.write_config('[harness.nightly]\nkind = "oneshot"\nargv = ["sh", "-c", "exit 4"]\n')
    daemons.start()
    request(daemons, "list")
    assert json.loads(state.read_text()) == {"runs": {"nightly": {"last_run_id": 20}}}

    res = world.harness("jobs", "--json")
    assert res.returncode == 0, res.stderr
    [job] = json.loads(res.stdout)
    assert job["last_run"] == {"run_id": 20, "outcome": "failed",
                               "started_at": legacy[19]["started_at"],
                               "ended_at": legacy[19]["ended_at"]}
    assert job["fails"] == 1
    table = world.harness("jobs")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "STATE", "SCHEDULE", "NEXT", "LAST", "RUN", "FAILS"]
    when = _utc_cell(legacy[19]["started_at"])
    assert f"#20 failed {when}" in row
    assert row.split()[0] == "nightly" and row.split()[-1] == "1"

    ran = world.harness("trigger", "nightly", "--wait")
    assert (ran.returncode, ran.stderr) == (4, "nightly run 21: failed\n")
    [rec] = [r for r in runs_of(world, "nightly") if not r.get("imported")]
    assert rec["run_id"] == 21
    assert json.loads(state.read_text())["runs"]["nightly"] == {"last_run_id": 21}


# -- REQ-17: nothing secret reaches a ledger line ------------------------------------------


KEY = "sk-ant-api03-Zq9vKp2Lm4Xr7Tn1Wb8Yc3Hd6Jf0Gs5A"
TOKEN = "ghp_R4nd0mT0k3nF0rTh3Pr0mpt0nlyXyZ12345678"


def test_no_env_file_value_prompt_token_or_spawn_error_reaches_the_ledger(
        world: World, daemons: Daemons) -> None:
    """REQ-17 "A harness with secrets in its env file": a run whose env_file holds an API
    key and whose prompt (an argv element) carries a token, a run that cannot spawn with
    the same prompt, and a run whose env_file is malformed around the key: every record is
    written, and no ledger byte holds the key, the token, or any part of the prompt."""
    env_file = world.root / "agent.env"
    env_file.write_text(f"API_KEY={KEY}\n")
    bad_env = world.root / "bad.env"
    bad_env.write_text(f"API_KEY={KEY}\n{KEY} not a pair\n")
    prompt = f"Review the PR; push with token {TOKEN}"
    daemons.write_config(f"""
[harness.agent]
kind = "oneshot"
argv = ["sh", "-c", "echo \\"$API_KEY\\" \\"$1\\"; exit 0", "sh", {json.dumps(prompt)}]
env_file = {json.dumps(str(env_file))}

[harness.gone]
kind = "oneshot"
argv = ["/nonexistent/agent", "--prompt", {json.dumps(prompt)}]
env_file = {json.dumps(str(env_file))}

[harness.badenv]
kind = "oneshot"
argv = ["true", {json.dumps(prompt)}]
env_file = {json.dumps(str(bad_env))}
""")
    proc = daemons.start()
    ran = world.harness("trigger", "agent", "--wait")
    assert ran.returncode == 0 and ran.stdout == f"{KEY} {prompt}\n", ran.stderr
    for name in ("gone", "badenv"):
        res = world.harness("trigger", name, "--wait")
        assert res.returncode == 1, res.stderr
    _stop(daemons, proc)
    outcomes = {(x["harness"], x["type"]): x.get("outcome") for x in all_lines(world.ledger)}
    assert outcomes == {("agent", "opened"): "running", ("agent", "closed"): "success",
                        ("gone", "opened"): "running", ("gone", "closed"): "failed",
                        ("badenv", "opened"): "running", ("badenv", "closed"): "failed"}
    raw = b"".join(p.read_bytes() for p in world.ledger.iterdir() if p.is_file())
    for secret in (KEY, TOKEN, "Review the PR", "Zq9vKp2", "R4nd0m"):
        assert secret.encode() not in raw, secret
    assert KEY not in daemons.stderr() and TOKEN not in daemons.stderr()


# -- REQ-19: a reload of [ledger] restarts nothing -----------------------------------------


def test_a_reload_of_the_ledger_table_restarts_no_harness(
        world: World, daemons: Daemons) -> None:
    """REQ-19: a reload changing only [ledger] retention, max_mb and trace_url is applied
    without restarting any harness: the resident's live run is the same run before and
    after, and no record is closed or opened by it."""
    body = '[harness.r]\nkind = "resident"\nargv = ["sleep", "1000"]\n'
    daemons.write_config(body)
    daemons.start()
    [live] = until("the resident's run", lambda: [
        r for r in runs_of(world, "r") if r["outcome"] == "running"])
    before = all_lines(world.ledger)
    daemons.write_config('[ledger]\nretention = "10d"\nmax_mb = 16\n'
                         'trace_url = "https://t.example/x?id={trace_id}"\n\n' + body)
    res = world.harness("reload")
    assert (res.returncode, res.stdout, res.stderr) == (
        0, "reloaded: no changes (1 unchanged)\n", "")
    assert runs_of(world, "r") == [live]
    assert all_lines(world.ledger) == before

