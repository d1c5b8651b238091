"""The `harness ledger` group on work ledgers, through the real CLI (DESIGN.md §2).

Each test makes a throwaway git work tree, writes a goal's work ledger (by hand to the
row contract, or through `WorkLedger`), and runs the real `harness` in it. Checked: verify
(ok, broken, torn tail, no ledger, --expected-head, the --json fields), resume (the frontier
signals, a closed run, --dry-run changing nothing, the four relations to an anchored
chain), runs, gc, and bad inputs (an unknown or invalid run id, a malformed row, no git
work tree, a missing remote, a ref that is not an anchor). Exit codes are exact: 0 ok,
1 no ledger, 2 verification failed, 3 divergence; no failure prints a traceback.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.ledger.canonical import canonical
from harness.worklog import WorkLedgerError
from harness.worklog.git import Git
from harness.worklog.rows import make_row
from harness.worklog.store import WorkLedger
from ledgertools import ref_canonical

ZERO = "0" * 64
RUN = "goal-42"
REF = f"refs/harness/work-ledger/{RUN}"
GIT_ID = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


# -- helpers (also used by test_worklog_e2e) ---------------------------------------------------


def hand_row(seq: int, kind: str, task_id: str | None, payload: dict[str, Any],
             prev: str) -> tuple[bytes, str]:
    """A row sealed by hand to the §2 contract: (its line, its entry_hash)."""
    digest = hashlib.sha256(ref_canonical(
        {"kind": kind, "payload": payload, "prev_hash": prev, "task_id": task_id}
    )).hexdigest()
    row = {"seq": seq, "ts": f"2026-11-30T08:00:{seq:02d}Z", "kind": kind, "task_id": task_id,
           "payload": payload, "prev_hash": prev, "entry_hash": digest, "schema_version": 1}
    return ref_canonical(row), digest


GOAL: list[tuple[str, str | None, dict[str, Any]]] = [
    ("run.open", None, {"goal": "ship it"}),
    ("task.scheduled", "t1", {"deps": []}),
    ("task.scheduled", "t2", {"deps": ["t1"]}),
    ("task.scheduled", "t3", {"deps": ["t1"]}),
    ("task.scheduled", "t4", {"deps": ["t2", "t3"]}),
    ("task.started", "t1", {"harness": "worker", "run_id": 1}),
    ("task.completed", "t1", {"commit": "abc123"}),
    ("task.started", "t2", {"harness": "worker", "run_id": 2}),
]
"""t1 done, t2 in flight, t3 ready (its only dep done), t4 waiting on t2 and t3."""


def ledger_path(workdir: Path, run_id: str = RUN) -> Path:
    return workdir / ".harness" / "runtime" / "ledger" / run_id / "000000.jsonl"


def hand_ledger(workdir: Path, events: list[tuple[str, str | None, dict[str, Any]]] = GOAL,
                run_id: str = RUN) -> list[str]:
    """Write `events` by hand as the run's ledger; return the entry hashes in order."""
    path = ledger_path(workdir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    prev, lines, hashes = ZERO, [], []
    for seq, (kind, task, payload) in enumerate(events, 1):
        line, prev = hand_row(seq, kind, task, payload, prev)
        lines.append(line)
        hashes.append(prev)
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    return hashes


def record(workdir: Path, events: list[tuple[str, str | None, dict[str, Any]]],
           run_id: str = RUN) -> list[dict[str, Any]]:
    """Append `events` through the real writer; return the rows it wrote."""
    with WorkLedger(workdir, run_id) as led:
        return [led.record(kind, task, payload) for kind, task, payload in events]


def rows_of(workdir: Path, run_id: str = RUN) -> list[dict[str, Any]]:
    return [json.loads(x) for x in ledger_path(workdir, run_id).read_bytes().splitlines()]


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LC_ALL="C", GIT_TERMINAL_PROMPT="0", **GIT_ID)
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=120)
    if check and res.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {res.stderr}")
    return res


def make_repo(path: Path) -> Path:
    """A git work tree with one commit on main."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("work\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "init")
    return path


def cli(world: World, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `harness` CLI, run in `cwd` inside the test's XDG world."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd,
                          env=world.env, capture_output=True, text=True, timeout=120)


def err_line(res: subprocess.CompletedProcess[str]) -> str:
    """A failure's stderr: exactly one line, no traceback."""
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (the work tree and its .git, refs included)."""
    out: dict[str, str] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(root))] = "link:" + os.readlink(p)
            else:
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)").stdout


def signals(workdir: Path) -> dict[str, dict[str, Any]]:
    d = workdir / ".harness" / "runtime" / "resume"
    if not d.is_dir():
        return {}
    return {p.name: json.loads(p.read_text()) for p in sorted(d.iterdir())}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


# -- verify -----------------------------------------------------------------------------------


def test_verify_hand_written_ledger(world: World, repo: Path) -> None:
    hashes = hand_ledger(repo)
    res = cli(world, repo, "ledger", "verify", RUN)
    assert res.returncode == 0, res.stderr
    assert f"{len(GOAL)} entries" in res.stdout and hashes[-1] in res.stdout


def test_verify_json_fields(world: World, repo: Path) -> None:
    hashes = hand_ledger(repo)
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert {k: data[k] for k in ("run_id", "ok", "entry_count", "head_hash", "torn_tail")} == {
        "run_id": RUN, "ok": True, "entry_count": 8, "head_hash": hashes[-1],
        "torn_tail": False,
    }


def test_json_names_a_work_tree_whose_path_is_not_utf8(world: World, tmp_path: Path) -> None:
    """A work tree under a directory named in Latin-1: --json is UTF-8 still, the byte
    spelled \\xff (it was written raw, and no JSON reader took the document)."""
    tree = make_repo(tmp_path / os.fsdecode(b"r\xff"))
    hashes = hand_ledger(tree)
    spelled = f"{tmp_path}/r\\xff/.harness/runtime/ledger/{RUN}"
    for args in (("verify", RUN), ("resume", RUN, "--dry-run")):
        res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", *args, "--json"],
                             cwd=tree, env=world.env, capture_output=True, timeout=120)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout.decode("utf-8"))
        assert data["head_hash"] == hashes[-1]
    res = cli(world, tree, "ledger", "verify", RUN, "--json")
    assert json.loads(res.stdout)["ledger"] == spelled


def test_verify_finds_the_work_tree_from_a_subdirectory(world: World, repo: Path) -> None:
    hand_ledger(repo)
    sub = repo / "deep" / "er"
    sub.mkdir(parents=True)
    res = cli(world, sub, "ledger", "verify", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["entry_count"] == 8


def test_verify_with_workdir_from_anywhere(world: World, repo: Path, tmp_path: Path) -> None:
    hand_ledger(repo)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = cli(world, elsewhere, "ledger", "verify", RUN, "--workdir", str(repo))
    assert res.returncode == 0, res.stderr


def test_verify_edited_payload(world: World, repo: Path) -> None:
    hand_ledger(repo)
    path = ledger_path(repo)
    lines = path.read_bytes().splitlines()
    lines[2] = lines[2].replace(b'"deps":["t1"]', b'"deps":[]')
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 2
    data = json.loads(res.stdout)
    assert (data["ok"], data["seq"], data["file"], data["line"]) == (
        False, 3, "000000.jsonl", 3)
    assert "entry_hash" in data["reason"]
    plain = cli(world, repo, "ledger", "verify", RUN)
    assert plain.returncode == 2
    assert "entry 3 (000000.jsonl:3)" in err_line(plain)


def _split_ledger(repo: Path) -> tuple[Path, list[bytes]]:
    """GOAL by hand in two segments: entries 1-4 in 000000.jsonl, 5-8 in 000001.jsonl."""
    hand_ledger(repo)
    first = ledger_path(repo)
    lines = first.read_bytes().splitlines()
    first.write_bytes(b"".join(x + b"\n" for x in lines[:4]))
    second = first.parent / "000001.jsonl"
    second.write_bytes(b"".join(x + b"\n" for x in lines[4:]))
    return second, lines


def test_a_break_in_a_later_segment_is_named_by_its_file_and_line(world: World,
                                                                  repo: Path) -> None:
    """DESIGN §4: verify names the seq and the file:line, so an operator can find the line:
    entry 6 is line 2 of 000001.jsonl, not "line 6" of no file."""
    second, lines = _split_ledger(repo)
    ok = cli(world, repo, "ledger", "verify", RUN)
    assert ok.returncode == 0, ok.stderr
    edited = lines[5].replace(b'"run_id":1', b'"run_id":9')
    assert edited != lines[5]
    second.write_bytes(b"".join(x + b"\n" for x in [lines[4], edited, *lines[6:]]))

    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 2
    data = json.loads(res.stdout)
    assert (data["ok"], data["seq"], data["file"], data["line"], data["entry_count"]) == (
        False, 6, "000001.jsonl", 2, 5)
    reason = data["reason"]
    assert reason.startswith("entry_hash mismatch")
    plain = cli(world, repo, "ledger", "verify", RUN)
    assert plain.returncode == 2
    assert err_line(plain) == (f"harness: work ledger {RUN} broken at entry 6 "
                               f"(000001.jsonl:2): {reason}")
    resumed = cli(world, repo, "ledger", "resume", RUN)
    assert resumed.returncode == 2
    assert err_line(resumed) == (f"harness: the local work ledger of run '{RUN}' does not "
                                 f"verify at entry 6 (000001.jsonl:2): {reason}")
    anchored = cli(world, repo, "ledger", "anchor", RUN)
    assert anchored.returncode == 2
    assert err_line(anchored) == (f"harness: refusing to anchor run {RUN}: the local work "
                                  f"ledger does not verify at entry 6 (000001.jsonl:2): {reason}")


def test_a_head_mismatch_is_named_at_the_last_line_of_the_last_segment(world: World,
                                                                      repo: Path) -> None:
    _split_ledger(repo)
    res = cli(world, repo, "ledger", "verify", RUN, "--json", "--expected-head", "a" * 64)
    assert res.returncode == 2
    data = json.loads(res.stdout)
    assert (data["seq"], data["file"], data["line"]) == (8, "000001.jsonl", 4)
    assert data["reason"].startswith("head mismatch: expected aaaaaaaaaaaaaaaa…")


def test_verify_malformed_row(world: World, repo: Path) -> None:
    hand_ledger(repo)
    path = ledger_path(repo)
    lines = path.read_bytes().splitlines()
    lines[1] = b'{"seq": 2, "kind": "task.sched'
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 2
    data = json.loads(res.stdout)
    assert (data["ok"], data["seq"], data["line"]) == (False, 2, 2)
    assert "not a parseable ledger row" in data["reason"]


def test_verify_removed_row(world: World, repo: Path) -> None:
    hand_ledger(repo)
    path = ledger_path(repo)
    lines = path.read_bytes().splitlines()
    del lines[4]
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 2
    data = json.loads(res.stdout)
    assert (data["seq"], data["line"]) == (5, 5)
    assert "seq mismatch" in data["reason"]


def test_verify_torn_tail_is_not_a_break(world: World, repo: Path) -> None:
    hashes = hand_ledger(repo)
    with ledger_path(repo).open("ab") as f:
        f.write(b'{"entry_hash":"ab')
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["ok"], data["entry_count"], data["head_hash"], data["torn_tail"]) == (
        True, 8, hashes[-1], True)


def test_verify_unknown_run_is_no_ledger(world: World, repo: Path) -> None:
    res = cli(world, repo, "ledger", "verify", "goal-nope")
    assert res.returncode == 1
    assert "no work ledger" in err_line(res)
    js = cli(world, repo, "ledger", "verify", "goal-nope", "--json")
    assert js.returncode == 1
    data = json.loads(js.stdout)
    # DESIGN §2's fields are there even when no chain was walked.
    assert {k: data[k] for k in ("run_id", "ok", "entry_count", "head_hash", "torn_tail",
                                 "seq", "line")} == {
        "run_id": "goal-nope", "ok": False, "entry_count": 0, "head_hash": None,
        "torn_tail": False, "seq": None, "line": None}
    assert "no work ledger" in data["reason"]


@pytest.mark.parametrize("content", [b"", b'{"seq":1,"ts":"2026'])
def test_a_ledger_with_no_entry_is_no_ledger_for_every_command(
        world: World, repo: Path, content: bytes) -> None:
    """An empty segment, or only a crash's fragment of the first row: verify agrees with
    anchor and resume that there is no ledger (exit 1)."""
    path = ledger_path(repo)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    for cmd in ("verify", "anchor", "resume"):
        res = cli(world, repo, "ledger", cmd, RUN)
        assert res.returncode == 1, (cmd, res.stdout, res.stderr)
    assert "no work ledger" in err_line(cli(world, repo, "ledger", "verify", RUN))
    data = json.loads(cli(world, repo, "ledger", "verify", RUN, "--json").stdout)
    assert (data["ok"], data["entry_count"], data["head_hash"]) == (False, 0, None)


def test_verify_expected_head(world: World, repo: Path) -> None:
    hashes = hand_ledger(repo)
    ok = cli(world, repo, "ledger", "verify", RUN, "--expected-head", hashes[-1])
    assert ok.returncode == 0, ok.stderr
    # A chain cut back to entry 7 still links, but no longer reaches the expected head.
    path = ledger_path(repo)
    path.write_bytes(b"".join(x + b"\n" for x in path.read_bytes().splitlines()[:7]))
    cut = cli(world, repo, "ledger", "verify", RUN, "--expected-head", hashes[-1], "--json")
    assert cut.returncode == 2
    data = json.loads(cut.stdout)
    assert (data["ok"], data["entry_count"], data["head_hash"]) == (False, 7, hashes[6])
    assert "head mismatch" in data["reason"]
    bad = cli(world, repo, "ledger", "verify", RUN, "--expected-head", "xyz")
    assert bad.returncode == 2
    assert "--expected-head" in err_line(bad)
    js = cli(world, repo, "ledger", "verify", RUN, "--expected-head", "xyz", "--json")
    data = json.loads(js.stdout)
    assert (js.returncode, data["ok"], data["entry_count"], data["torn_tail"]) == (
        2, False, 0, False)


def test_verify_without_run_id_is_the_run_ledger(world: World, repo: Path) -> None:
    # The daemon's run ledger (none in this world): exit 1, as before work ledgers existed,
    # even inside a work tree that holds a work ledger.
    hand_ledger(repo)
    res = cli(world, repo, "ledger", "verify")
    assert res.returncode == 1
    assert "no run ledger" in res.stderr


def test_verify_is_read_only(world: World, repo: Path) -> None:
    hand_ledger(repo)
    with ledger_path(repo).open("ab") as f:
        f.write(b'{"torn')
    before = snapshot(repo)
    assert cli(world, repo, "ledger", "verify", RUN).returncode == 0
    assert snapshot(repo) == before


# -- bad inputs -------------------------------------------------------------------------------

SUBCOMMANDS = [
    ["verify", RUN], ["anchor", RUN], ["fetch", RUN], ["resume", RUN],
    ["resume", RUN, "--dry-run"], ["gc", RUN], ["runs"],
]


@pytest.mark.parametrize("args", SUBCOMMANDS, ids=lambda a: "-".join(a))
def test_outside_a_git_work_tree(world: World, tmp_path: Path, args: list[str]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    env_ceiling = dict(world.env, GIT_CEILING_DIRECTORIES=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", *args], cwd=plain,
                         env=env_ceiling, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    line = err_line(res)
    assert "not inside a git work tree" in line and "--workdir" in line


@pytest.mark.parametrize("args", [a for a in SUBCOMMANDS if a != ["runs"]],
                         ids=lambda a: "-".join(a))
@pytest.mark.parametrize("bad", ["../x", "a b", ".hidden", "x.lock", "a..b", "a/b"])
def test_invalid_run_id(world: World, repo: Path, args: list[str], bad: str) -> None:
    res = cli(world, repo, "ledger", args[0], bad, *args[2:])
    assert res.returncode == 2, res.stderr
    assert f"run id {bad!r}" in err_line(res)


def test_workdir_that_does_not_exist(world: World, repo: Path, tmp_path: Path) -> None:
    res = cli(world, repo, "ledger", "resume", RUN, "--workdir", str(tmp_path / "nope"))
    assert res.returncode == 1
    assert "no such directory" in err_line(res)


def test_unknown_run(world: World, repo: Path) -> None:
    for args in (["resume", RUN], ["resume", RUN, "--dry-run"], ["anchor", RUN], ["gc", RUN]):
        res = cli(world, repo, "ledger", *args)
        assert res.returncode == 1, (args, res.stderr)
        err_line(res)


def test_missing_remote(world: World, repo: Path) -> None:
    res = cli(world, repo, "ledger", "fetch", RUN)
    assert res.returncode == 1
    assert "origin" in err_line(res)
    res = cli(world, repo, "ledger", "fetch", RUN, "--remote", "nosuch")
    assert res.returncode == 1
    assert "nosuch" in err_line(res)


def test_remote_without_the_ref(world: World, repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    res = cli(world, repo, "ledger", "fetch", RUN)
    assert res.returncode == 1
    err_line(res)


def test_malformed_row_refuses_resume_and_anchor(world: World, repo: Path) -> None:
    hand_ledger(repo)
    path = ledger_path(repo)
    lines = path.read_bytes().splitlines()
    lines[3] = b"not json at all"
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    before = snapshot(repo)
    for args in (["resume", RUN], ["resume", RUN, "--dry-run"], ["anchor", RUN]):
        res = cli(world, repo, "ledger", *args)
        assert res.returncode == 2, (args, res.stderr)
        assert "entry 4" in err_line(res)
    assert snapshot(repo) == before


def _bogus_anchor(repo: Path) -> None:
    """Point the run's anchor ref at an ordinary commit (no LEDGER.json, no chunks)."""
    git(repo, "update-ref", REF, "HEAD")


def test_ref_that_is_not_an_anchor(world: World, repo: Path, tmp_path: Path) -> None:
    record(repo, GOAL)
    _bogus_anchor(repo)
    before = snapshot(repo)
    for args in (["resume", RUN], ["resume", RUN, "--dry-run"], ["anchor", RUN]):
        res = cli(world, repo, "ledger", *args)
        assert res.returncode == 2, (args, res.stderr)
        err_line(res)
    assert snapshot(repo) == before
    # Fetched from a remote, it is refused before a byte is written locally.
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "push", "-q", str(bare), f"{REF}:{REF}")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    res = cli(world, other, "ledger", "fetch", RUN)
    assert res.returncode == 2, res.stderr
    err_line(res)
    assert not ledger_path(other).exists()


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("entry_count", True, "True"), ("entry_count", "8", "'8'"), ("entry_count", 8.0, "8.0"),
    ("chunk_count", True, "True"), ("chunk_count", None, "None"),
    ("format_version", True, "True"),
])
def test_a_ledger_json_with_a_bad_value_names_the_key_and_the_value(
        world: World, repo: Path, key: str, value: object, shown: str) -> None:
    """LEDGER.json's counts and version are integers; any other value (`true` included,
    which Python would take for 1) is refused naming the very key and value."""
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    meta = json.loads(git(repo, "cat-file", "blob", f"{REF}:LEDGER.json").stdout)
    meta[key] = value
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, check=True,
                          capture_output=True, text=True,
                          input=json.dumps(meta, sort_keys=True) + "\n").stdout.strip()
    chunk = git(repo, "rev-parse", f"{REF}:chunk-000000.jsonl").stdout.strip()
    tree = subprocess.run(["git", "mktree"], cwd=repo, check=True, capture_output=True,
                          text=True, input=f"100644 blob {blob}\tLEDGER.json\n"
                          f"100644 blob {chunk}\tchunk-000000.jsonl\n").stdout.strip()
    commit = git(repo, "commit-tree", tree, "-m", "forged").stdout.strip()
    git(repo, "update-ref", REF, commit)
    if key == "format_version":
        why = f"LEDGER.json has format_version {shown}, this harness reads 1"
    else:
        why = f"LEDGER.json {key} {shown} is not an integer"
    for args in (["anchor", RUN], ["gc", RUN], ["resume", RUN, "--dry-run"]):
        res = cli(world, repo, "ledger", *args)
        assert res.returncode == 2, (args, res.stderr)
        assert err_line(res) == f"harness: {REF} is not a work-ledger anchor: {why}"


def _deep_anchor(repo: Path) -> None:
    """Point the run's anchor ref at a tree whose LEDGER.json is 100,000 "[": JSON nested
    past any decoder's depth, which a hostile or corrupt remote can hold."""
    g = Git.open(repo)
    meta, chunk = g.write_blobs([b"[" * 100_000, b"{}\n"])
    tree = g.mktree([("LEDGER.json", meta), ("chunk-000000.jsonl", chunk)])
    g.update_ref(REF, g.commit_tree(tree, [], "forged\n"), None)


def test_an_anchor_nested_too_deeply_is_not_an_anchor(world: World, repo: Path,
                                                      tmp_path: Path) -> None:
    """msgspec raises RecursionError, not DecodeError, for such a LEDGER.json: once a
    traceback (exit 1) from fetch, runs, anchor and resume; now "not an anchor" (exit 2),
    and `runs` lists it as a broken anchor."""
    record(repo, GOAL)
    _deep_anchor(repo)
    not_anchor = (f"{REF} is not a work-ledger anchor: LEDGER.json is not JSON (JSON nested "
                  "too deeply)")
    before = snapshot(repo)
    for args in (["anchor", RUN], ["resume", RUN]):
        res = cli(world, repo, "ledger", *args)
        assert (res.returncode, res.stdout, err_line(res)) == (2, "", f"harness: {not_anchor}")
    assert snapshot(repo) == before
    res = cli(world, repo, "ledger", "runs", "--json")
    assert (res.returncode, res.stderr) == (0, "")
    [r] = json.loads(res.stdout)["runs"]
    # The same words as every other command: the ref, the file and what is wrong with it.
    assert (r["agreement"], r["anchor_error"]) == ("anchor broken", not_anchor)
    other = make_repo(tmp_path / "other")
    res = cli(world, other, "ledger", "fetch", RUN, "--remote", str(repo))
    assert (res.returncode, res.stdout, err_line(res)) == (
        2, "", f"harness: {repo} {not_anchor}")
    assert not ledger_path(other).exists()


# -- resume -----------------------------------------------------------------------------------


def test_resume_writes_the_frontier(world: World, repo: Path) -> None:
    rows = record(repo, GOAL)
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    after = rows_of(repo)
    assert len(after) == 9
    resumed = after[-1]
    assert (resumed["seq"], resumed["kind"], resumed["task_id"]) == (9, "run.resumed", None)
    assert resumed["prev_hash"] == rows[-1]["entry_hash"]
    assert resumed["payload"]["frontier"] == ["t2", "t3"]
    assert len(resumed["payload"]["nonce"]) == 32
    int(resumed["payload"]["nonce"], 16)
    assert resumed["payload"]["host"]
    assert data["resume_seq"] == 9 and data["resumed_head"] == resumed["entry_hash"]
    assert data["head_hash"] == rows[-1]["entry_hash"] and data["entry_count"] == 8
    assert signals(repo) == {
        f"{RUN}__t2.signal": {"run_id": RUN, "task_id": "t2", "status": "started",
                              "attempts": 1, "resume_seq": 9,
                              "head_hash": resumed["entry_hash"]},
        f"{RUN}__t3.signal": {"run_id": RUN, "task_id": "t3", "status": "scheduled",
                              "attempts": 0, "resume_seq": 9,
                              "head_hash": resumed["entry_hash"]},
    }
    sig_dir = repo / ".harness" / "runtime" / "resume"
    for p in sig_dir.iterdir():
        assert p.stat().st_mode & 0o777 == 0o600
    assert cli(world, repo, "ledger", "verify", RUN).returncode == 0


def test_resume_plain_output(world: World, repo: Path) -> None:
    record(repo, GOAL)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 0, res.stderr
    assert "resumed goal-42 at entry 9" in res.stdout
    assert "frontier: t2, t3" in res.stdout


def test_second_resume_counts_the_first_and_replaces_stale_signals(world: World,
                                                                  repo: Path) -> None:
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "resume", RUN).returncode == 0
    record(repo, [("task.completed", "t2", {}), ("task.started", "t3", {})])
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["prior_resumes"] == 1
    assert data["frontier"] == ["t3"]
    # t2 completed since the first resume: its old signal must not survive.
    assert list(signals(repo)) == [f"{RUN}__t3.signal"]
    assert signals(repo)[f"{RUN}__t3.signal"]["resume_seq"] == 12


def test_signals_of_two_runs_do_not_collide(world: World, repo: Path) -> None:
    record(repo, GOAL, run_id="goal-a")
    record(repo, GOAL, run_id="goal-b")
    assert cli(world, repo, "ledger", "resume", "goal-a").returncode == 0
    assert cli(world, repo, "ledger", "resume", "goal-b").returncode == 0
    assert sorted(signals(repo)) == ["goal-a__t2.signal", "goal-a__t3.signal",
                                     "goal-b__t2.signal", "goal-b__t3.signal"]


def test_resume_dry_run_changes_nothing(world: World, repo: Path) -> None:
    rows = record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    with ledger_path(repo).open("ab") as f:
        f.write(b'{"torn')  # a dry run must not even recover a torn tail
    before, refs_before = snapshot(repo), refs(repo)
    res = cli(world, repo, "ledger", "resume", RUN, "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    assert snapshot(repo) == before and refs(repo) == refs_before
    data = json.loads(res.stdout)
    assert data["dry_run"] is True
    assert data["frontier"] == ["t2", "t3"]
    assert data["prior_resumes"] == 0
    assert data["closed"] is False
    assert data["entry_count"] == 8 and data["head_hash"] == rows[-1]["entry_hash"]
    assert data["torn_tail"] is True
    assert data["resume_seq"] is None and data["signals"] == []
    assert "t1" in json.dumps(data["finished"])
    assert "t2" in json.dumps(data["in_flight"])
    plain = cli(world, repo, "ledger", "resume", RUN, "--dry-run")
    assert plain.returncode == 0 and "would resume: t2, t3" in plain.stdout
    assert snapshot(repo) == before and refs(repo) == refs_before


def test_closed_run_is_not_resumed(world: World, repo: Path) -> None:
    record(repo, [*GOAL, ("run.closed", None, {"why": "done"})])
    before = snapshot(repo)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 0, res.stderr
    assert "closed" in res.stdout and "nothing was written" in res.stdout
    assert snapshot(repo) == before
    assert len(rows_of(repo)) == 9
    assert signals(repo) == {}
    js = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert js.returncode == 0 and json.loads(js.stdout)["status"] == "closed"


def test_resume_of_a_hand_written_ledger(world: World, repo: Path) -> None:
    hashes = hand_ledger(repo)
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert rows_of(repo)[-1]["prev_hash"] == hashes[-1]
    assert sorted(signals(repo)) == [f"{RUN}__t2.signal", f"{RUN}__t3.signal"]


def test_resume_keeps_a_completed_last_row_that_lacks_its_newline(world: World,
                                                                  repo: Path) -> None:
    """Completed work is never redone: a whole last row is part of the chain even when
    the hand-written file does not end in a newline."""
    hashes = hand_ledger(repo, [*GOAL, ("task.completed", "t2", {"commit": "def456"})])
    path = ledger_path(repo, RUN)
    path.write_bytes(path.read_bytes()[:-1])
    done = rows_of(repo)
    res = cli(world, repo, "ledger", "verify", RUN, "--json", "--expected-head", hashes[-1])
    assert res.returncode == 0, res.stdout
    out = json.loads(res.stdout)
    assert (out["entry_count"], out["head_hash"], out["torn_tail"]) == (
        len(hashes), hashes[-1], False)
    assert cli(world, repo, "ledger", "resume", RUN).returncode == 0
    after = rows_of(repo)
    assert after[: len(done)] == done
    assert after[len(done)]["prev_hash"] == hashes[-1]
    assert sorted(signals(repo)) == [f"{RUN}__t3.signal"]  # t2 is done, not redone


# -- resume against an anchored chain: the four relations --------------------------------------


def test_resume_identical_to_anchor(world: World, repo: Path) -> None:
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["anchored"] == "identical"
    assert len(rows_of(repo)) == 9


def test_resume_local_ahead_of_anchor(world: World, repo: Path) -> None:
    record(repo, GOAL[:6])
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    record(repo, GOAL[6:])
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["anchored"] == "local_ahead"
    assert len(rows_of(repo)) == 9


def test_resume_anchor_ahead_of_local(world: World, repo: Path) -> None:
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    path = ledger_path(repo)
    path.write_bytes(b"".join(x + b"\n" for x in path.read_bytes().splitlines()[:6]))
    before = snapshot(repo)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 2, res.stderr
    line = err_line(res)
    assert "ahead" in line and f"harness ledger fetch {RUN}" in line
    assert snapshot(repo) == before


def test_resume_diverged_from_anchor(world: World, repo: Path) -> None:
    record(repo, GOAL[:6])
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    # The anchored chain gets a 7th entry; the local one is cut back and gets another.
    extra = record(repo, [GOAL[6]])[0]
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    anchored_head = extra["entry_hash"]
    path = ledger_path(repo)
    path.write_bytes(b"".join(x + b"\n" for x in path.read_bytes().splitlines()[:6]))
    local = record(repo, [("task.failed", "t1", {"why": "elsewhere"})])[0]
    before = snapshot(repo)
    for args in (["resume", RUN], ["resume", RUN, "--dry-run"]):
        res = cli(world, repo, "ledger", *args)
        assert res.returncode == 3, res.stderr
        line = err_line(res)
        assert "work ledgers diverge at entry 7: two chains extend the same parent entry" in line
        assert f"local head {local['entry_hash']}" in line
        assert f"anchored head {anchored_head}" in line
        assert "keep exactly one lineage" in line.lower()
    assert snapshot(repo) == before


# -- anchor, runs, gc -------------------------------------------------------------------------


def test_anchor_and_runs(world: World, repo: Path) -> None:
    rows = record(repo, GOAL)
    res = cli(world, repo, "ledger", "anchor", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["entry_count"], data["head_hash"]) == (8, rows[-1]["entry_hash"])
    assert git(repo, "rev-parse", REF).stdout.strip() == data["commit"]
    tree = git(repo, "ls-tree", "--name-only", REF).stdout.split()
    assert tree == ["LEDGER.json", "chunk-000000.jsonl"]
    chunk = git(repo, "cat-file", "blob", f"{REF}:chunk-000000.jsonl").stdout.encode()
    assert chunk == ledger_path(repo).read_bytes()
    meta = json.loads(git(repo, "cat-file", "blob", f"{REF}:LEDGER.json").stdout)
    assert meta == {"run_id": RUN, "head_hash": rows[-1]["entry_hash"], "entry_count": 8,
                    "chunk_count": 1, "format_version": 1}
    # The anchor is mirrored into this world's HMAC audit chain, once per ref move.
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0  # unchanged
    audit = [json.loads(x) for x in (world.state / "audit" / "audit.jsonl").read_text()
             .splitlines()]
    assert [(a["event"], a["data"]["run_id"], a["data"]["head_hash"]) for a in audit] == [
        ("work_ledger.anchor", RUN, rows[-1]["entry_hash"])]

    record(repo, GOAL, run_id="goal-local")
    record(repo, [*GOAL, ("run.closed", None, {})], run_id="goal-closed")
    listing = cli(world, repo, "ledger", "runs", "--json")
    assert listing.returncode == 0, listing.stderr
    runs = {r["run_id"]: r for r in json.loads(listing.stdout)["runs"]}
    assert sorted(runs) == ["goal-42", "goal-closed", "goal-local"]
    r = runs[RUN]
    assert (r["local"], r["anchored"], r["entry_count"], r["head_hash"], r["state"],
            r["agreement"]) == (True, True, 8, rows[-1]["entry_hash"], "open", "identical")
    assert r["last_activity"] == rows[-1]["ts"]
    assert (runs["goal-local"]["anchored"], runs["goal-local"]["agreement"]) == (False, None)
    assert runs["goal-closed"]["state"] == "closed"
    table = cli(world, repo, "ledger", "runs")
    assert table.returncode == 0 and "goal-closed" in table.stdout

    # After a resume the local chain is ahead of the anchor, and runs says so.
    assert cli(world, repo, "ledger", "resume", RUN).returncode == 0
    runs = {r["run_id"]: r for r in json.loads(
        cli(world, repo, "ledger", "runs", "--json").stdout)["runs"]}
    assert runs[RUN]["agreement"] == "local_ahead"
    assert runs[RUN]["entry_count"] == 9 and runs[RUN]["anchored_entry_count"] == 8


def test_runs_lists_anchored_only(world: World, repo: Path, tmp_path: Path) -> None:
    rows = record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "push", "-q", str(bare), f"{REF}:{REF}")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    empty = cli(world, other, "ledger", "runs", "--json")
    assert empty.returncode == 0 and json.loads(empty.stdout) == {"runs": []}
    git(other, "fetch", "-q", "origin", f"{REF}:{REF}")
    res = cli(world, other, "ledger", "runs", "--json")
    assert res.returncode == 0, res.stderr
    [r] = json.loads(res.stdout)["runs"]
    assert (r["run_id"], r["local"], r["anchored"], r["entry_count"], r["head_hash"],
            r["state"]) == (RUN, False, True, 8, rows[-1]["entry_hash"], "open")


def test_runs_in_an_empty_work_tree(world: World, repo: Path) -> None:
    res = cli(world, repo, "ledger", "runs", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"runs": []}


def test_anchor_refuses_a_broken_chain(world: World, repo: Path) -> None:
    hand_ledger(repo)
    path = ledger_path(repo)
    lines = path.read_bytes().splitlines()
    lines[5] = lines[5].replace(b'"run_id":1', b'"run_id":7')
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    res = cli(world, repo, "ledger", "anchor", RUN)
    assert res.returncode == 2
    err_line(res)
    assert git(repo, "rev-parse", "--verify", "--quiet", REF, check=False).returncode != 0


def test_anchor_dry_run_names_the_tree_and_writes_nothing(world: World, repo: Path) -> None:
    record(repo, GOAL[:4])
    for step in ("created", "extended"):
        before = snapshot(repo)
        dry = cli(world, repo, "ledger", "anchor", RUN, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        plan = json.loads(dry.stdout)
        assert (plan["status"], plan["dry_run"], plan["blobs_written"]) == (step, True, 0)
        text = cli(world, repo, "ledger", "anchor", RUN, "--dry-run")
        assert text.stdout == (f"dry run: would be {step}: {REF} -> tree {plan['tree']} "
                               f"({plan['entry_count']} entries, head {plan['head_hash']}); "
                               "nothing was written\n")
        assert snapshot(repo) == before  # no object, ref, cache or audit line
        real = json.loads(cli(world, repo, "ledger", "anchor", RUN, "--json").stdout)
        assert (real["status"], real["tree"], real["dry_run"]) == (step, plan["tree"], False)
        if step == "created":
            record(repo, GOAL[4:])
    same = json.loads(cli(world, repo, "ledger", "anchor", RUN, "--dry-run", "--json").stdout)
    assert (same["status"], same["dry_run"]) == ("unchanged", True)


def test_every_command_of_the_group_that_changes_something_takes_dry_run(
        world: World, repo: Path) -> None:
    """DESIGN §2 lists --dry-run for the group: no usage error (exit 2 means a failed
    verification here); fetch without a remote is no ledger (1), as without the flag."""
    record(repo, GOAL)
    for cmd in ("anchor", "resume", "gc", "fetch"):
        res = cli(world, repo, "ledger", cmd, RUN, "--dry-run")
        assert "No such option" not in res.stderr, cmd
    res = cli(world, repo, "ledger", "fetch", RUN, "--dry-run")
    assert res.returncode == 1 and "no remote named 'origin'" in err_line(res)


def test_gc_squashes_the_anchor_history(world: World, repo: Path) -> None:
    record(repo, GOAL[:4])
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    record(repo, GOAL[4:])
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    assert git(repo, "rev-list", "--count", REF).stdout.strip() == "2"
    tree = git(repo, "rev-parse", f"{REF}^{{tree}}").stdout.strip()
    before = snapshot(repo)
    dry = cli(world, repo, "ledger", "gc", RUN, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == (f"dry run: {REF} would be squashed from 2 commits into one "
                          f"parentless commit (tree {tree} unchanged, 1 chunk(s)); "
                          "nothing was changed\n")
    assert snapshot(repo) == before
    res = cli(world, repo, "ledger", "gc", RUN)
    assert res.returncode == 0, res.stderr
    assert "squashed 2 commits" in res.stdout
    assert git(repo, "rev-list", "--count", REF).stdout.strip() == "1"
    assert git(repo, "rev-parse", f"{REF}^{{tree}}").stdout.strip() == tree
    again = cli(world, repo, "ledger", "gc", RUN)
    assert again.returncode == 0, again.stderr
    assert git(repo, "rev-parse", f"{REF}^{{tree}}").stdout.strip() == tree


def test_gc_json_is_structured(world: World, repo: Path) -> None:
    """`gc --json` gives the squash as data (the commits before and after, how many were
    dropped, the tree, whether the ref moved), with the sentence kept under "result"."""
    record(repo, GOAL[:4])
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    record(repo, GOAL[4:])
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    old = git(repo, "rev-parse", REF).stdout.strip()
    tree = git(repo, "rev-parse", f"{REF}^{{tree}}").stdout.strip()
    base = {"run_id": RUN, "ref": REF, "tree": tree, "chunks": 1, "previous_commit": old,
            "dropped_fetched": [], "kept_fetched": []}

    dry = cli(world, repo, "ledger", "gc", RUN, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {
        **base, "dry_run": True, "changed": False, "commit": old, "commits": 2,
        "dropped_commits": 1,
        "result": (f"dry run: {REF} would be squashed from 2 commits into one parentless "
                   f"commit (tree {tree} unchanged, 1 chunk(s)); nothing was changed")}
    assert git(repo, "rev-parse", REF).stdout.strip() == old

    res = cli(world, repo, "ledger", "gc", RUN, "--json")
    assert res.returncode == 0, res.stderr
    new = git(repo, "rev-parse", REF).stdout.strip()
    assert new != old
    assert json.loads(res.stdout) == {
        **base, "dry_run": False, "changed": True, "commit": new, "commits": 2,
        "dropped_commits": 1,
        "result": (f"{REF}: squashed 2 commits into one parentless commit {new} (tree {tree} "
                   "unchanged, 1 chunk(s)). The ref no longer fast-forwards from what was "
                   "pushed, so pushing it now needs a forced refspec: git push REMOTE "
                   f"'+{REF}:{REF}'")}

    again = cli(world, repo, "ledger", "gc", RUN, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        **base, "previous_commit": new, "dry_run": False, "changed": False, "commit": new,
        "commits": 1, "dropped_commits": 0,
        "result": f"{REF} is already a single parentless commit ({new}); nothing to do"}


def test_runs_table(world: World, repo: Path) -> None:
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    assert cli(world, repo, "ledger", "resume", RUN).returncode == 0
    record(repo, GOAL, run_id="goal-solo")
    res = cli(world, repo, "ledger", "runs")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["RUN", "ENTRIES", "STATE"]
    assert lines[1].startswith("goal-42 ") and lines[1].endswith("local ahead by 1")
    assert " 9  open " in lines[1]
    assert lines[2].startswith("goal-solo ") and lines[2].endswith("local only")


# -- resume: failures that must not leave half a resume ---------------------------------------


def test_resume_while_a_writer_holds_the_run(world: World, repo: Path) -> None:
    record(repo, GOAL)
    with WorkLedger(repo, RUN):
        res = cli(world, repo, "ledger", "resume", RUN)
        assert res.returncode == 2
        assert f"pid {os.getpid()}" in err_line(res)
        # A dry run only reads: it works beside a live writer.
        dry = cli(world, repo, "ledger", "resume", RUN, "--dry-run")
        assert dry.returncode == 0, dry.stderr
    assert len(rows_of(repo)) == 8
    assert signals(repo) == {}


def test_resume_when_signals_cannot_be_written(world: World, repo: Path) -> None:
    record(repo, GOAL)
    blocker = repo / ".harness" / "runtime" / "resume"
    blocker.write_text("a file where the signal directory belongs\n")
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 2
    assert str(blocker) in err_line(res)
    assert len(rows_of(repo)) == 8  # nothing recorded: no resume nobody was told about


def test_resume_with_only_an_anchor_points_at_fetch(world: World, repo: Path,
                                                    tmp_path: Path) -> None:
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    ledger_path(repo).parent.rename(tmp_path / "aside")
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 1
    assert f"harness ledger fetch {RUN} --remote ." in err_line(res)
    restored = cli(world, repo, "ledger", "fetch", RUN, "--remote", ".")
    assert restored.returncode == 0, restored.stderr
    assert ledger_path(repo).read_bytes() == (tmp_path / "aside" / "000000.jsonl").read_bytes()
    assert cli(world, repo, "ledger", "resume", RUN).returncode == 0


def test_frontier_skips_failed_abandoned_and_blocked_work(world: World, repo: Path) -> None:
    record(repo, [
        *GOAL,
        ("task.scheduled", "t5", {"deps": []}),
        ("task.started", "t5", {}),
        ("task.failed", "t5", {"exit_code": 1}),
        ("task.scheduled", "t6", {"deps": []}),
        ("task.abandoned", "t6", {}),
        ("task.scheduled", "t7", {"deps": ["t5"]}),  # its dep failed: it waits
        ("task.scheduled", "lint/py", {"deps": ["t1"]}),
        ("mission.note", None, {"text": "a kind this version does not know"}),
        ("task.started", "t1", {"late": True}),  # completed stays completed
    ])
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["frontier"] == ["t2", "t3", "lint/py"]
    assert (data["finished"], data["failed"], data["abandoned"]) == (["t1"], ["t5"], ["t6"])
    assert sorted(signals(repo)) == [f"{RUN}__lint%2Fpy.signal", f"{RUN}__t2.signal",
                                     f"{RUN}__t3.signal"]
    assert signals(repo)[f"{RUN}__lint%2Fpy.signal"]["task_id"] == "lint/py"
    assert rows_of(repo)[-1]["payload"]["frontier"] == ["t2", "t3", "lint/py"]


def test_signal_names_never_collide() -> None:
    from harness.worklog.resume import signal_name

    pairs = [("a", "b__c"), ("a__b", "c"), ("a_", "_b"), ("a", "__b"), ("a_", "b"),
             ("a", "_b"), ("goal-1", "t/1"), ("goal-1", "t%2F1"), ("goal-1", "..")]
    names = [signal_name(r, t) for r, t in pairs]
    assert len(set(names)) == len(names)
    assert all("/" not in n and n.endswith(".signal") for n in names)
    assert signal_name("goal-42", "t1") == "goal-42__t1.signal"


def test_signal_names_of_the_longest_ids_fit_a_file_name() -> None:
    from harness.worklog.resume import signal_name

    def sha256(s: str) -> str:
        return hashlib.sha256(s.encode()).hexdigest()

    # 128 characters is the longest id either may be; escaped, "日" takes nine.
    run, task = "日" * 128, "é" * 127
    names = [signal_name(run, task + c) for c in "ab"] + [signal_name(run[:-1] + "月", task)]
    assert len(set(names)) == 3
    assert all(len(n.encode()) <= 255 and "/" not in n for n in names)
    run_part, task_part = names[0].removesuffix(".signal").split("__")
    assert run_part == ("%E6%97%A5" * 8)[:66] + "%~" + sha256("日" * 128)[:32]
    assert task_part == ("%C3%A9" * 127)[:66] + "%~" + sha256(task + "a")[:32]
    # Short ids keep their names (watchers and earlier resumes' signals rely on them).
    assert signal_name("a" * 100, "t") == "a" * 100 + "__t.signal"


def test_a_resume_signals_tasks_with_the_longest_ids(world: World, repo: Path) -> None:
    """A task id of 128 "é" (1,536 bytes escaped) could not be signalled: the resume
    failed with "File name too long"."""
    task = "é" * 128
    record(repo, [("run.open", None, {}), ("task.scheduled", task, {"deps": []})])
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["frontier"] == [task]
    (name, body), = signals(repo).items()
    assert body["task_id"] == task and len(name.encode()) <= 255


def test_a_held_lock_whose_identity_is_nested_too_deeply(world: World, repo: Path) -> None:
    """The refusal reads the holder's identity from the lock file: JSON nested past the
    decoder's depth there is as unreadable as any bad JSON, and the refusal names the
    file (it reached the CLI's last-resort catch as "cannot read a ledger file")."""
    record(repo, GOAL)
    before = ledger_path(repo).read_bytes()
    lock = ledger_path(repo).parent / ".lock"
    with open(lock, "r+b") as held:  # its own open file description: the CLI's flock fails
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(b'{"pid":' + b"[" * 4000)
        held.flush()
        res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 2
    assert err_line(res) == (f"harness: work ledger '{RUN}' is held by another process (its "
                             f"identity in {lock} cannot be read); only one writer may hold "
                             "a run")
    assert ledger_path(repo).read_bytes() == before
    assert signals(repo) == {}


def test_concurrent_resumes_never_fork_the_local_chain(world: World, repo: Path) -> None:
    record(repo, GOAL)
    procs = [subprocess.Popen([sys.executable, "-m", "harness.cli", "ledger", "resume", RUN],
                              cwd=repo, env=world.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outcomes = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        outcomes.append(p.returncode)
        if p.returncode != 0:
            assert p.returncode == 2 and "held by" in err, err
    ok = outcomes.count(0)
    assert ok >= 1
    rows = rows_of(repo)
    assert len(rows) == 8 + ok
    assert [r["kind"] for r in rows[8:]] == ["run.resumed"] * ok
    verified = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["entry_count"] == 8 + ok
    # The signals belong to the newest resume, whatever order the processes finished in.
    assert {s["resume_seq"] for s in signals(repo).values()} == {8 + ok}


def test_resume_after_a_crash_mid_write(world: World, repo: Path) -> None:
    rows = record(repo, GOAL)
    with ledger_path(repo).open("ab") as f:
        f.write(b'{"entry_hash":"dead')  # the torn tail a hard kill leaves
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["torn_tail"], data["entry_count"], data["resume_seq"]) == (True, 8, 9)
    after = rows_of(repo)  # every line parses: the fragment was cut, not glued onto
    assert len(after) == 9 and after[-1]["prev_hash"] == rows[-1]["entry_hash"]
    verified = json.loads(cli(world, repo, "ledger", "verify", RUN, "--json").stdout)
    assert (verified["ok"], verified["entry_count"], verified["torn_tail"]) == (True, 9, False)


def test_dry_run_and_runs_write_nothing_even_for_an_unseen_anchor(world: World, repo: Path,
                                                                   tmp_path: Path) -> None:
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "push", "-q", str(bare), f"{REF}:{REF}")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    # The ref arrives by plain git and the ledger by copy: nothing on this host has
    # looked at the anchor yet.
    git(other, "fetch", "-q", "origin", f"{REF}:{REF}")
    ledger_path(other).parent.mkdir(parents=True)
    ledger_path(other).write_bytes(ledger_path(repo).read_bytes())
    before = snapshot(other)
    dry = cli(world, other, "ledger", "resume", RUN, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["anchored"] == "identical"
    listing = cli(world, other, "ledger", "runs", "--json")
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)["runs"][0]["agreement"] == "identical"
    assert snapshot(other) == before


def test_runs_lists_a_bad_anchor_without_failing(world: World, repo: Path) -> None:
    record(repo, GOAL)
    _bogus_anchor(repo)
    res = cli(world, repo, "ledger", "runs", "--json")
    assert res.returncode == 0, res.stderr
    [r] = json.loads(res.stdout)["runs"]
    assert (r["run_id"], r["agreement"], r["entry_count"]) == (RUN, "anchor broken", 8)
    assert "not a work-ledger anchor" in r["anchor_error"]


# -- an inherited git environment ---------------------------------------------------------------


def test_an_inherited_git_environment_never_chooses_the_repository(world: World, repo: Path,
                                                                   tmp_path: Path) -> None:
    """GIT_DIR and friends, exported by a hook or a shell, name another repository (and
    send objects and refs elsewhere); --workdir, or else the current directory, decides."""
    record(repo, GOAL)
    other = make_repo(tmp_path / "other")
    stray = tmp_path / "stray-objects"
    stray.mkdir()
    env = dict(world.env, GIT_DIR=str(other / ".git"), GIT_WORK_TREE=str(other),
               GIT_INDEX_FILE=str(other / ".git" / "index"), GIT_OBJECT_DIRECTORY=str(stray),
               GIT_NAMESPACE="elsewhere", GIT_CEILING_DIRECTORIES=str(tmp_path))
    other_refs = refs(other)

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)

    sub = repo / "sub"
    sub.mkdir()
    res = run(tmp_path, "ledger", "anchor", RUN, "--workdir", str(repo))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"created: {REF} -> ")
    commit = res.stdout.split(" -> ", 1)[1].split()[0]
    assert f"{REF} {commit}\n" in refs(repo)
    # Every object of the anchor is in the work tree's own repository.
    assert git(repo, "cat-file", "-p", f"{REF}:LEDGER.json").stdout.startswith('{"chunk_count":1')
    assert refs(other) == other_refs
    assert list(stray.iterdir()) == []
    # Without --workdir, the current directory (here a subdirectory) finds the work tree.
    again = run(sub, "ledger", "anchor", RUN)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"unchanged: {REF} -> {commit} ")
    resumed = run(tmp_path, "ledger", "resume", RUN, "--workdir", str(repo), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["anchored"] == "identical"
    assert refs(other) == other_refs


# -- dry runs change nothing --------------------------------------------------------------------


def stat_snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """(sha256, mtime in ns, mode) of every file under `root`, .git included: a dry run
    that rewrote a file with the same bytes, or touched one, shows here too."""
    out: dict[str, tuple[str, int, int]] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = ("link:" + os.readlink(p) if p.is_symlink()
                      else hashlib.sha256(p.read_bytes()).hexdigest())
            out[str(p.relative_to(root))] = (digest, st.st_mtime_ns, st.st_mode)
    return out


def test_dry_runs_write_nothing_not_even_the_verified_tree_cache(world: World,
                                                                 tmp_path: Path) -> None:
    """gc, anchor, fetch and resume with --dry-run, each reading an anchor this host has
    never verified (so the whole chain is read): not a byte, a file or an mtime changes."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    a = make_repo(tmp_path / "a")
    git(a, "remote", "add", "origin", str(origin))
    git(a, "push", "-q", "origin", "main")
    record(a, GOAL[:6])
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    record(a, GOAL[6:7])
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", f"{REF}:{REF}")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(b))
    memo = b / ".git" / "harness-checked-anchors"

    def unchanged(*args: str, code: int) -> subprocess.CompletedProcess[str]:
        before = stat_snapshot(b)
        res = cli(world, b, "ledger", *args, "--dry-run")
        assert res.returncode == code, res.stderr
        assert stat_snapshot(b) == before, args
        assert not memo.exists(), args
        return res

    # The ref arrives by plain git: nothing on this host has verified its tree.
    git(b, "fetch", "-q", "origin", f"{REF}:{REF}")
    gc = unchanged("gc", RUN, code=0)
    assert gc.stdout.startswith(f"dry run: {REF} would be squashed from 2 commits")
    fetched = cli(world, b, "ledger", "fetch", RUN)
    assert fetched.returncode == 0, fetched.stderr
    memo.unlink()
    # The anchor moves ahead of B's local chain, by plain git again.
    record(a, GOAL[7:])
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", f"{REF}:{REF}")
    git(b, "fetch", "-q", "-f", "origin", f"{REF}:{REF}")
    ahead = unchanged("anchor", RUN, code=2)
    assert "is ahead of the local chain (8 > 7 entries)" in err_line(ahead)
    dry_fetch = unchanged("fetch", RUN, code=0)
    assert dry_fetch.stdout.startswith(f"dry run: the local ledger of {RUN} would be extended")
    stale = unchanged("resume", RUN, code=2)
    assert "is ahead of the local one (8 > 7 entries)" in err_line(stale)
    assert len(rows_of(b)) == 7


# -- the audit mirror ---------------------------------------------------------------------------


def anchor_events(world: World) -> list[tuple[str, str, str]]:
    path = world.state / "audit" / "audit.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return [(a["data"]["run_id"], a["data"]["head_hash"], a["data"]["commit"])
            for a in lines if a["event"] == "work_ledger.anchor"]


def test_an_audit_chain_whose_last_line_is_nested_too_deeply_is_passed_over(
        world: World, repo: Path) -> None:
    """The ref has moved by the time the audit mirror reads the chain's last line; one
    nested past msgspec's depth (RecursionError) once ended the anchor in a traceback.
    Undecodable, it is a fragment like a torn one: the chain starts after it."""
    rows = record(repo, GOAL)
    path = world.state / "audit" / "audit.jsonl"
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(b"[" * 100_000 + b"\n")
    res = cli(world, repo, "ledger", "anchor", RUN)
    commit = git(repo, "rev-parse", REF).stdout.strip()
    assert (res.returncode, res.stdout, res.stderr) == (
        0, f"created: {REF} -> {commit} (8 entries, head {rows[-1]['entry_hash']})\n", "")
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert (last["seq"], last["prev"], last["data"]["commit"]) == (1, "0" * 64, commit)


def test_an_anchor_whose_audit_mirror_failed_is_mirrored_by_the_next_anchor(
        world: World, repo: Path) -> None:
    rows = record(repo, GOAL)
    head = rows[-1]["entry_hash"]
    # A real failure of the audit chain: its key may not be read by others, so a key
    # file of mode 0644 is refused (after the ref has moved).
    key = world.state / "audit" / "key"
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    first = cli(world, repo, "ledger", "anchor", RUN)
    assert first.returncode == 0, first.stderr
    commit = git(repo, "rev-parse", REF).stdout.strip()
    assert first.stdout == f"created: {REF} -> {commit} (8 entries, head {head})\n"
    assert first.stderr == (f"harness: warning: anchored, but the audit chain was not updated: "
                            f"audit key {key} must be mode 0600 (it is 644)\n")
    assert anchor_events(world) == []
    key.chmod(0o600)
    again = cli(world, repo, "ledger", "anchor", RUN)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"unchanged: {REF} -> {commit} (8 entries, head {head})\n"
    assert anchor_events(world) == [(RUN, head, commit)]
    # Once: a further anchor of the same head finds the event and adds none.
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    assert anchor_events(world) == [(RUN, head, commit)]
    assert cli(world, repo, "ledger", "anchor", RUN, "--dry-run").returncode == 0
    assert anchor_events(world) == [(RUN, head, commit)]
    verified = subprocess.run(
        [sys.executable, "-c", "from harness import audit; print(audit.verify_audit())"],
        env=world.env, capture_output=True, text=True, timeout=60)
    assert verified.stdout == "(True, 1, None)\n", verified.stderr


# -- task ids on the read path ------------------------------------------------------------------

HOSTILE = "t1\x1b[2J\x1b]0;owned\x07\nFAKE: all tasks completed"


def test_a_hand_written_ledger_with_any_string_ids_verifies_and_prints_them_escaped(
        world: World, repo: Path, tmp_path: Path) -> None:
    """DESIGN §2: a task_id is a string, and a ledger written by hand to the contract must
    verify, whatever a writer of ours would refuse (an escape sequence, a line break, a
    quote, 129 characters). What reaches the terminal is escaped: a fetched chain's id
    cannot retitle it or forge a line, and its signal's name is escaped as well."""
    ids = [HOSTILE, 'a"b', "x" * 129]
    hashes = hand_ledger(repo, [("run.open", None, {})]
                         + [("task.scheduled", t, {"deps": []}) for t in ids])
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert (json.loads(res.stdout)["ok"], json.loads(res.stdout)["head_hash"]) == (
        True, hashes[-1])
    resumed = cli(world, repo, "ledger", "resume", RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert "\x1b" not in resumed.stdout and "\x07" not in resumed.stdout
    assert not any(line.startswith("FAKE") for line in resumed.stdout.splitlines())
    shown = "t1\\x1b[2J\\x1b]0;owned\\x07\\nFAKE: all tasks completed"
    assert f"; frontier: {shown}, a\"b, {'x' * 129}\n" in resumed.stdout
    assert {body["task_id"] for body in signals(repo).values()} == set(ids)


def test_ids_the_writer_accepts_verify_and_print_as_they_read(world: World, repo: Path) -> None:
    """Unicode ids, and ids at the length limit, still verify on every path; an id the
    writer accepts that holds a format character (a right-to-left override) is printed
    as its escape."""
    long_id = "x" * 128
    record(repo, [("run.open", None, {}), ("task.scheduled", long_id, {"deps": []}),
                  ("task.scheduled", "é" * 8, {"deps": []}),
                  ("task.scheduled", "t\u202eevil", {"deps": []}),
                  ("task.scheduled", "задача-✓", {"deps": []})])
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert res.returncode == 0, res.stderr
    assert (json.loads(res.stdout)["ok"], json.loads(res.stdout)["entry_count"]) == (True, 5)
    resumed = cli(world, repo, "ledger", "resume", RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert f"; frontier: {long_id}, éééééééé, t\\u202eevil, задача-✓\n" in resumed.stdout
    assert "\u202e" not in resumed.stdout
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0


def test_resume_records_nothing_when_a_signal_cannot_be_written(world: World,
                                                                repo: Path) -> None:
    """A real failure under one signal file (a directory stands where it belongs): the
    signals go first, so no run.resumed row is recorded, and the one signal that was
    written is removed again."""
    record(repo, GOAL)
    before = ledger_path(repo).read_bytes()
    sig = repo / ".harness" / "runtime" / "resume"
    blocker = sig / f"{RUN}__t3.signal"
    blocker.mkdir(parents=True)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 2
    assert ledger_path(repo).read_bytes() == before  # no run.resumed row
    assert err_line(res) == (
        f"harness: cannot write resume signal {blocker}: Is a directory; the resume was not "
        "recorded and the signals it wrote were removed")
    assert sorted(p.name for p in sig.iterdir()) == [blocker.name]
    blocker.rmdir()
    ok = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert ok.returncode == 0, ok.stderr
    assert sorted(signals(repo)) == [f"{RUN}__t2.signal", f"{RUN}__t3.signal"]
    assert json.loads(ok.stdout)["resume_seq"] == 9


SECRET_RUN = "api_key=sk-live-4f9a8b7c6d5e4f3a2b1c"


@pytest.mark.parametrize("args", [a for a in SUBCOMMANDS if a != ["runs"]],
                         ids=lambda a: "-".join(a))
def test_a_run_id_holding_a_secret_is_refused_and_not_echoed(world: World, repo: Path,
                                                              args: list[str]) -> None:
    """A run id becomes a ref name, LEDGER.json and commit messages that are pushed: one the
    secret scrubber would rewrite is refused (exit 2) as a task id is, and never printed.
    Even a ledger directory by that name, written by hand, is not anchored."""
    hand_ledger(repo, run_id=SECRET_RUN)
    before = refs(repo)
    res = cli(world, repo, "ledger", args[0], SECRET_RUN, *args[2:])
    assert res.returncode == 2, res.stderr
    assert err_line(res) == ("harness: run id looks like it holds a secret (the secret "
                             "scrubber would rewrite it); refusing to use it")
    assert "sk-live" not in res.stdout + res.stderr
    assert refs(repo) == before


def test_the_writer_refuses_a_run_id_holding_a_secret(repo: Path) -> None:
    with pytest.raises(WorkLedgerError) as ei:
        WorkLedger(repo, SECRET_RUN)
    assert ei.value.exit_code == 2
    assert str(ei.value) == ("run id looks like it holds a secret (the secret scrubber "
                             "would rewrite it); refusing to use it")
    assert not (repo / ".harness" / "runtime" / "ledger" / SECRET_RUN).exists()


# -- what an error quotes is scrubbed, its own words and the OS's are not ---------------------

API_KEY = "sk-ant-api03-" + "Zx9" * 12


def test_an_error_scrubs_what_it_quotes_and_keeps_its_words(world: World, repo: Path,
                                                            tmp_path: Path) -> None:
    """The scrubber reads "passwd: No" as a password and its value: a message scrubbed
    whole lost its own wording, git's, or the OS's strerror after any path ending in
    "passwd". Only the values a message quotes are scrubbed, so each reads as written,
    and a token in the same value (a URL's userinfo) is still hidden."""
    missing = tmp_path / "passwd"
    url = "https://user:tok3n@127.0.0.1:1/x.git"
    shown = "https://user:[REDACTED]@127.0.0.1:1/x.git"
    for where, said in ((str(missing), str(missing)), (url, shown)):
        res = cli(world, repo, "ledger", "verify", RUN, "--workdir", where)
        assert res.returncode == 1
        assert err_line(res) == f"harness: --workdir {said}: no such directory"

    res = cli(world, repo, "ledger", "fetch", RUN, "--remote", str(missing))
    assert res.returncode == 1
    assert err_line(res) == (f"harness: cannot read remote '{missing}': fatal: '{missing}' "
                             "does not appear to be a git repository")
    # Nothing listens on port 1 of this host; no proxy may stand in for it.
    env = {k: v for k, v in world.env.items() if not k.lower().endswith("_proxy")}
    res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "fetch", RUN,
                          "--remote", url], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1
    assert err_line(res).startswith(f"harness: cannot read remote '{shown}': fatal: ")
    assert "tok3n" not in res.stdout + res.stderr

    record(repo, GOAL, run_id="passwd")
    lock = ledger_path(repo, "passwd").parent / ".lock"
    lock.unlink()
    lock.mkdir()  # the writer's lock cannot be opened: the OS says why
    res = cli(world, repo, "ledger", "resume", "passwd")
    assert res.returncode == 2
    assert err_line(res) == (f"harness: cannot open work ledger {lock.parent}: "
                             f"Is a directory ({lock})")


def test_a_fetch_names_a_remote_holding_a_secret_redacted_on_success(
        world: World, repo: Path, tmp_path: Path) -> None:
    """A success line shows the remote as a refusal would: scrubbed."""
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    bare = tmp_path / "token=s3cr3tvalue" / "origin.git"
    bare.parent.mkdir()
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "push", "-q", str(bare), f"{REF}:{REF}")
    other = make_repo(tmp_path / "other")
    res = cli(world, other, "ledger", "fetch", RUN, "--remote", str(bare))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"written: work ledger {RUN} from {tmp_path}/token=[REDACTED] ")
    dry = cli(world, other, "ledger", "fetch", RUN, "--remote", str(bare), "--json",
              "--dry-run")
    assert json.loads(dry.stdout)["remote"] == f"{tmp_path}/token=[REDACTED]"
    assert "s3cr3t" not in res.stdout + res.stderr + dry.stdout + dry.stderr


def test_a_break_quotes_what_the_ledger_holds_scrubbed(world: World, repo: Path) -> None:
    """A hand-written ledger may hold a secret in any field: the break that quotes it says
    what was there, scrubbed, in every command and in --json."""
    hand_ledger(repo)
    path = ledger_path(repo)
    lines = path.read_bytes().splitlines()
    row = json.loads(lines[2])
    row["seq"] = API_KEY
    lines[2] = json.dumps(row).encode()
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    why = "entry 3 (000000.jsonl:3): seq must be an integer, got '[REDACTED]'"
    out = ""
    res = cli(world, repo, "ledger", "verify", RUN)
    assert (res.returncode, err_line(res)) == (2, f"harness: work ledger {RUN} broken at {why}")
    out += res.stdout + res.stderr
    res = cli(world, repo, "ledger", "verify", RUN, "--json")
    assert (res.returncode, json.loads(res.stdout)["reason"]) == (
        2, "seq must be an integer, got '[REDACTED]'")
    out += res.stdout + res.stderr
    res = cli(world, repo, "ledger", "anchor", RUN)
    assert (res.returncode, err_line(res)) == (
        2, f"harness: refusing to anchor run {RUN}: the local work ledger does not verify "
           f"at {why}")
    out += res.stdout + res.stderr
    res = cli(world, repo, "ledger", "runs", "--json")
    assert json.loads(res.stdout)["runs"][0]["error"] == why
    out += res.stdout + res.stderr
    assert "Zx9" not in out


def sealed_ledger(workdir: Path, events: list[tuple[str, str | None, dict[str, Any]]],
                  run_id: str = RUN) -> None:
    """Write `events` as the run's ledger, each row sealed by the writer's own `make_row`
    but without the writer's checks: a chain another tool could have written."""
    path = ledger_path(workdir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    prev, lines = ZERO, []
    for seq, (kind, task, payload) in enumerate(events, 1):
        row, line = make_row(seq=seq, ts_ns=seq * 10**9, kind=kind, task_id=task,
                             payload=payload, payload_bytes=canonical(payload),
                             prev_hash=prev, redactions=0)
        lines.append(line)
        prev = row["entry_hash"]
    path.write_bytes(b"".join(x + b"\n" for x in lines))


@pytest.mark.parametrize(("field", "event"), [
    ("task_id", ("task.scheduled", API_KEY, {"deps": []})),
    ("deps", ("task.scheduled", "t2", {"deps": [API_KEY]})),
    ("kind", (API_KEY, "t2", {})),
], ids=["task_id", "deps", "kind"])
def test_resume_refuses_an_id_the_writer_would_refuse_as_a_secret(
        world: World, repo: Path, field: str, event: tuple[str, str, dict[str, Any]]) -> None:
    """A chain-valid ledger the writer did not write may hold an id that reads as a secret:
    resume would print it and name a signal file after it. It refuses (exit 2), naming the
    row by seq and segment line and never the id, and writes nothing; verify, which only
    checks the chain, still passes it."""
    sealed_ledger(repo, [("run.open", None, {}), ("task.scheduled", "t1", {"deps": []}),
                         event])
    assert cli(world, repo, "ledger", "verify", RUN).returncode == 0
    before = snapshot(repo)
    out = ""
    for args in (["resume", RUN], ["resume", RUN, "--dry-run"],
                 ["resume", RUN, "--dry-run", "--json"]):
        res = cli(world, repo, "ledger", *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert err_line(res) == (
            f"harness: refusing to resume run '{RUN}': entry 3 (000000.jsonl:3) has a "
            f"{field} that looks like it holds a secret (the secret scrubber would rewrite "
            "it). The writer refuses such an id; resume would print it and name a signal "
            "file after it, so it is neither shown nor used")
        assert res.stdout == ""
        out += res.stderr
    assert "Zx9" not in out
    assert snapshot(repo) == before
    assert signals(repo) == {}


# -- secrets never become portable: anchor and fetch refuse a chain holding one ---------------

CLEAN: list[tuple[str, str | None, dict[str, Any]]] = [
    ("run.open", None, {"goal": "ship it"}), ("task.scheduled", "t1", {"deps": []})]
HELD: list[tuple[str, tuple[str, str, dict[str, Any]]]] = [
    ("payload.log", ("task.completed", "t1", {"log": f"deployed with {API_KEY} ok"})),
    ("payload.argv[1]", ("task.completed", "t1", {"argv": ["deploy", "--token=s3cr3tvalue"]})),
    # neither string is a secret alone: the value is one under a credential's name
    ("payload.env.password", ("task.completed", "t1", {"env": {"password": "hunter2"}})),
    ("payload['my env'].token", ("task.completed", "t1", {"my env": {"token": "hunter2"}})),
    ("a key of payload.headers", ("task.completed", "t1", {"headers": {API_KEY: "x"}})),
    ("task_id", ("task.started", API_KEY, {})),
    ("kind", (API_KEY, "t1", {})),
]


def anchor_refusal(seq: int, where: str) -> str:
    return (f"harness: refusing to anchor run {RUN}: entry {seq} (000000.jsonl:{seq}) holds a "
            f"secret in {where} (the secret scrubber would rewrite it). An anchor is published "
            "for other machines to fetch, and a work ledger never carries a secret in "
            "cleartext: rewrite the chain from that entry with the value redacted, then "
            "anchor it")


def no_secret_in(out: str) -> None:
    for secret in ("Zx9", "s3cr3t", "hunter2"):
        assert secret not in out


@pytest.mark.parametrize(("where", "event"), HELD, ids=[w for w, _ in HELD])
def test_anchor_refuses_a_chain_holding_a_secret_and_writes_nothing(
        world: World, repo: Path, where: str, event: tuple[str, str, dict[str, Any]]) -> None:
    """The spec's "Secrets never become portable": the writer scrubs every payload string
    and refuses an id that holds a secret, but a ledger sealed by another hand can hold
    one in clear and still verify. Anchor would publish it to a ref that gets pushed: it
    refuses (exit 2, a dry run too) naming the entry and the field's path, never what it
    holds, and writes nothing, not even an object or the checked-tree cache."""
    sealed_ledger(repo, [*CLEAN, event])
    assert cli(world, repo, "ledger", "verify", RUN).returncode == 0
    before = snapshot(repo)
    out = ""
    for args in (["anchor", RUN], ["anchor", RUN, "--dry-run"], ["anchor", RUN, "--json"]):
        res = cli(world, repo, "ledger", *args)
        assert (res.returncode, res.stdout, err_line(res)) == (
            2, "", anchor_refusal(3, where)), args
        out += res.stdout + res.stderr
    no_secret_in(out)
    assert snapshot(repo) == before
    assert REF not in refs(repo)


def test_anchor_refuses_a_secret_appended_after_a_clean_anchor(world: World,
                                                                repo: Path) -> None:
    """A re-anchor walks only the entries after the anchor it has checked: those are
    searched for secrets too, and the ref stays where it was."""
    sealed_ledger(repo, CLEAN)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    anchored = git(repo, "rev-parse", REF).stdout.strip()
    sealed_ledger(repo, [*CLEAN, ("task.completed", "t1", {"env": {"password": "hunter2"}})])
    before = snapshot(repo)
    res = cli(world, repo, "ledger", "anchor", RUN)
    assert (res.returncode, res.stdout, err_line(res)) == (
        2, "", anchor_refusal(3, "payload.env.password"))
    no_secret_in(res.stderr)
    assert snapshot(repo) == before
    assert git(repo, "rev-parse", REF).stdout.strip() == anchored


def test_fetch_refuses_an_anchor_holding_a_secret(world: World, repo: Path,
                                                  tmp_path: Path) -> None:
    """An anchor that carries a secret in clear (made by another tool or an older harness,
    and pushed) is refused as it arrives, as the spec's fetch "verifies the anchored chain
    before a byte is written locally": exit 2, a dry run too, naming the entry by chunk
    file and line and the field's path; no local ledger is written, no side ref set."""
    sealed_ledger(repo, [*CLEAN, ("task.completed", "t1", {"log": f"deployed with {API_KEY}"})])
    data = ledger_path(repo).read_bytes()
    head = json.loads(data.splitlines()[-1])["entry_hash"]
    meta = ref_canonical({"run_id": RUN, "head_hash": head, "entry_count": 3,
                          "chunk_count": 1, "format_version": 1}) + b"\n"
    g = Git.open(repo)
    chunk, meta_id = g.write_blobs([data, meta])
    tree = g.mktree([("LEDGER.json", meta_id), ("chunk-000000.jsonl", chunk)])
    g.update_ref(REF, g.commit_tree(tree, [], "forged\n"), None)
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(repo, "push", "-q", str(origin), "main", f"{REF}:{REF}")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(b))
    refusal = (f"harness: origin {REF} is not a work-ledger anchor: entry 3 "
               "(chunk-000000.jsonl:3) holds a secret in payload.log (the secret scrubber "
               "would rewrite it), which a work ledger never carries in cleartext")
    out = ""
    for args in (["fetch", RUN, "--dry-run"], ["fetch", RUN]):
        res = cli(world, b, "ledger", *args)
        assert (res.returncode, res.stdout, err_line(res)) == (2, "", refusal), args
        out += res.stdout + res.stderr
    no_secret_in(out)
    assert not ledger_path(b).parent.exists()
    assert REF not in refs(b)
