"""Mutation-found gaps in the HMAC audit chain (`harness.audit`) and in the parts of
resume (`harness.worklog.resume`) and anchoring (`harness.worklog.anchor`) that
tests/test_worklog_git_mutants.py does not reach. Each test pins a behaviour no other
test held exactly: the audit file's bytes, its key's modes and length, what verifying
reports for a line that was edited, forged with the key, stripped of its mac or cut
short, and what `harness ledger anchor|resume|runs` print and exit with, through the
real CLI in real git repositories.

The audit chain has no command of its own: a chain is read back with `verify_audit` (in
the test process, or in a child process of the test's XDG world after the real CLI
wrote it), and a failure to mirror an anchor into it is the CLI's one-line warning."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness import audit
from harness.ledger.canonical import canonical
from harness.worklog.git import Git
from harness.worklog.rows import entry_hash
from test_worklog_cli import GOAL, REF, RUN, cli, git, hand_ledger, make_repo, record


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's audit directory (XDG_STATE_HOME is private to the test)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "harness" / "audit"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def sealed(key: bytes, body: dict[str, Any]) -> bytes:
    """An audit line made with the chain's own key: what only a key holder can write."""
    mac = hmac.new(key, canonical(body), hashlib.sha256).hexdigest()
    return canonical({**body, "mac": mac}) + b"\n"


def write_key(state: Path, key: bytes, mode: int) -> Path:
    state.mkdir(parents=True, mode=0o700, exist_ok=True)
    path = state / "key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, key)
    finally:
        os.close(fd)
    os.chmod(path, mode)  # the umask may have cut the mode asked for
    return path


# -- the key ---------------------------------------------------------------------------------


def test_the_audit_directory_holds_only_the_chain_and_its_key(state: Path) -> None:
    """The key is written under a private name and linked into place: that name is gone
    once the key is there, so the directory holds exactly the two files, each 0600."""
    audit.append_event("e", {"i": 1})
    assert sorted(p.name for p in state.iterdir()) == ["audit.jsonl", "key"]
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("audit.jsonl", "key"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name


def test_verifying_a_chain_whose_key_is_gone_fails_and_makes_no_key(state: Path) -> None:
    """Verifying only reads: with the key removed, a chain of lines cannot be checked
    (False at seq 1, never a traceback), and no new key is made, which would leave a key
    that no line of the chain was sealed with for the next append to use."""
    audit.append_event("e", {"i": 1})
    audit.append_event("e", {"i": 2})
    (state / "key").unlink()
    assert audit.verify_audit() == (False, 0, 1)
    assert not (state / "key").exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610])
def test_a_key_any_other_user_can_touch_is_refused_everywhere(state: Path,
                                                              mode: int) -> None:
    """Group or other access of any kind (read, write) lets someone other than the owner
    forge or replace the chain's key. Appending and verifying both refuse it, naming the
    file and its mode."""
    path = write_key(state, os.urandom(32), mode)
    for op in (lambda: audit.append_event("e", {}), audit.verify_audit):
        (state / "audit.jsonl").write_bytes(b"")
        with pytest.raises(audit.AuditError) as err:
            op()
        assert str(err.value) == f"audit key {path} must be mode 0600 (it is {mode:o})"
    assert (state / "audit.jsonl").read_bytes() == b""


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_a_key_that_is_not_32_bytes_is_refused(state: Path, size: int) -> None:
    path = write_key(state, os.urandom(size), 0o600)
    (state / "audit.jsonl").write_bytes(b"")
    for op in (lambda: audit.append_event("e", {}), audit.verify_audit):
        with pytest.raises(audit.AuditError) as err:
            op()
        assert str(err.value) == f"audit key {path} is not 32 bytes long"
    assert (state / "audit.jsonl").read_bytes() == b""


# -- the file --------------------------------------------------------------------------------


def test_the_file_is_exactly_one_canonical_line_per_event(state: Path) -> None:
    """No blank line, no separator but one newline after each line: a line whose
    predecessor ended in its newline is written as it is, not after another one."""
    written = [audit.append_event("e", {"i": i}) for i in range(3)]
    written.append(audit.append_event_once("once", {"i": 9}))
    assert (state / "audit.jsonl").read_bytes() == b"".join(
        canonical(line) + b"\n" for line in written if line is not None)


def test_a_last_line_longer_than_a_read_block_is_followed_whole(state: Path) -> None:
    """The last line is found by reading back from the end a block at a time: a line
    longer than a block is read whole, so the next line links to it (its mac), rather
    than to a piece of it (which is no audit line: the append would fail)."""
    first = audit.append_event("e", {"note": "word " * 4000})
    assert len(canonical(first)) > 4 * 4096
    second = audit.append_event("e", {"i": 2})
    assert (second["seq"], second["prev"]) == (2, first["mac"])
    assert audit.verify_audit() == (True, 2, None)


@pytest.mark.parametrize("last", [b"{}", b"[]", b'{"seq":"x","mac":"m"}',
                                  b'{"seq":null,"mac":"m"}', b'{"seq":1}', b"7"])
def test_a_last_line_that_is_json_but_no_audit_line_is_refused(state: Path,
                                                               last: bytes) -> None:
    """JSON that lacks a seq or mac, or holds the wrong kind of either, is no line to
    chain to: the append is refused with one message (never a KeyError or TypeError),
    and the file is left as it was."""
    audit.append_event("e", {"i": 1})
    path = state / "audit.jsonl"
    with open(path, "ab") as f:
        f.write(last + b"\n")
    before = path.read_bytes()
    for append in (audit.append_event, audit.append_event_once):
        with pytest.raises(audit.AuditError) as err:
            append("e", {"i": 2})
        assert str(err.value) == f"the last line of {path} is not an audit line"
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"{", b'{"at":"2026-', b"\n", b"\n\n"])
def test_a_file_with_no_whole_line_starts_the_chain(state: Path, content: bytes) -> None:
    """A crash during the very first append leaves a fragment of it (even one byte), or
    an editor leaves only newlines: the chain starts at seq 1 from 64 zeros, the fragment
    closed off by a newline first."""
    audit.append_event("e", {"i": 0})
    path = state / "audit.jsonl"
    path.write_bytes(content)
    line = audit.append_event("e", {"i": 1})
    assert (line["seq"], line["prev"]) == (1, "0" * 64)
    closer = b"" if content.endswith(b"\n") else b"\n"
    assert path.read_bytes() == content + closer + canonical(line) + b"\n"
    assert audit.verify_audit() == (True, 1, None)


def test_blank_lines_after_the_last_line_are_passed_over(state: Path) -> None:
    first = audit.append_event("e", {"i": 1})
    path = state / "audit.jsonl"
    with open(path, "ab") as f:
        f.write(b"\n\n")
    second = audit.append_event("e", {"i": 2})
    assert (second["seq"], second["prev"]) == (2, first["mac"])
    assert audit.verify_audit() == (True, 2, None)


def test_recording_once_compares_the_scrubbed_data_under_the_event_itself(
        state: Path) -> None:
    """`append_event_once` scrubs as `append_event` does (no secret reaches the file,
    and asking again with the same secret finds the line); a line of another event whose
    data merely holds an "event" key is not the line sought; a torn fragment naming the
    event, newer than the line, does not hide it."""
    secret = "sk-ant-api03-" + "B" * 40
    first = audit.append_event_once("anchor", {"note": f"token={secret}"})
    assert first is not None and first["data"] == {"note": "token=[REDACTED]"}
    path = state / "audit.jsonl"
    assert secret.encode() not in path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"at":"x","data":{"note":"token=[REDACTED]"},"event":"anchor","pr')
    assert audit.append_event_once("anchor", {"note": f"token={secret}"}) is None
    audit.append_event("other", {"event": "anchor", "run_id": "r1"})
    line = audit.append_event_once("anchor", {"event": "anchor", "run_id": "r1"})
    assert line is not None and (line["seq"], line["event"]) == (3, "anchor")
    assert audit.append_event_once("anchor", {"event": "anchor", "run_id": "r1"}) is None
    assert audit.verify_audit() == (True, 3, None)


# -- verifying -------------------------------------------------------------------------------


def test_a_line_without_its_mac_breaks_the_chain_there(state: Path) -> None:
    for i in range(3):
        audit.append_event("e", {"i": i})
    path = state / "audit.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    row = json.loads(lines[1])
    del row["mac"]
    lines[1] = canonical(row) + b"\n"
    path.write_bytes(b"".join(lines))
    assert audit.verify_audit() == (False, 1, 2)


@pytest.mark.parametrize("how", ["seq skipped", "seq repeated", "prev of another line",
                                 "not an object"])
def test_a_line_sealed_with_the_key_must_still_follow_its_predecessor(state: Path,
                                                                      how: str) -> None:
    """The mac alone proves only who wrote a line: the seq must be the next one and
    `prev` the mac of the line before, or the chain breaks at that line (a key holder
    cannot renumber or re-link lines unnoticed without rewriting all that follow)."""
    one = audit.append_event("e", {"i": 1})
    two = audit.append_event("e", {"i": 2})
    key = (state / "key").read_bytes()
    body = {"seq": 3, "at": two["at"], "event": "e", "data": {"i": 3}, "prev": two["mac"]}
    if how == "seq skipped":
        body["seq"] = 4
    elif how == "seq repeated":
        body["seq"] = 2
    elif how == "prev of another line":
        body["prev"] = one["mac"]
    path = state / "audit.jsonl"
    with open(path, "ab") as f:
        f.write(b"[3]\n" if how == "not an object" else sealed(key, body))
    assert audit.verify_audit() == (False, 2, 3)


def test_a_line_cut_short_breaks_the_chain_unless_nothing_follows_it(state: Path) -> None:
    """A line cut short (its newline kept) no longer decodes: it reads as a fragment a
    crash left. Inside the chain that is caught, at the cut line's seq, since the next
    line links to the mac it lost. As the last line it is indistinguishable from an
    append cut short, exactly as removing the last line is indistinguishable from it
    never being written (a chain proves what it holds, not that nothing followed): it
    is not counted, and the next append links to the line before it."""
    lines = [audit.append_event("e", {"i": i}) for i in range(3)]
    path = state / "audit.jsonl"
    whole = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(whole[0] + whole[1][:40] + b"\n" + whole[2])
    assert audit.verify_audit() == (False, 1, 2)
    path.write_bytes(whole[0] + whole[1] + whole[2][:40] + b"\n")
    assert audit.verify_audit() == (True, 2, None)
    line = audit.append_event("e", {"i": 9})
    assert (line["seq"], line["prev"]) == (3, lines[1]["mac"])
    assert audit.verify_audit() == (True, 3, None)


# -- the audit mirror of an anchor, through the CLI --------------------------------------------


def test_an_anchor_whose_audit_line_was_only_partly_written_warns_and_is_mirrored_later(
        world: World, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file may take only part of a line (a full disk, a file size limit): the write
    returns short. That is no recorded event: the anchor must say the audit chain was
    not updated (naming the file) rather than report a clean anchor whose event is a torn
    fragment, and the next anchor of the same head mirrors it, once, after the fragment."""
    monkeypatch.setenv("XDG_STATE_HOME", world.env["XDG_STATE_HOME"])
    for i in range(300):  # an audit file far larger than any object the anchor writes
        audit.append_event("other", {"i": i, "pad": "p " * 100})
    path = Path(audit.audit_path())
    room = path.stat().st_size + 40
    head = record(repo, GOAL)[-1]["entry_hash"]

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))

    first = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "anchor", RUN],
                           cwd=repo, env=world.env, capture_output=True, text=True,
                           timeout=120, preexec_fn=small_files)
    commit = git(repo, "rev-parse", REF).stdout.strip()
    assert (first.returncode, first.stdout, first.stderr) == (
        0, f"created: {REF} -> {commit} (8 entries, head {head})\n",
        f"harness: warning: anchored, but the audit chain was not updated: File too large "
        f"({path})\n")
    assert path.stat().st_size == room  # the fragment the short write left
    assert audit.verify_audit() == (True, 300, None)
    again = cli(world, repo, "ledger", "anchor", RUN)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"unchanged: {REF} -> {commit} (8 entries, head {head})\n"
    assert audit.verify_audit() == (True, 301, None)
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert (last["seq"], last["event"], last["data"]) == (
        301, "work_ledger.anchor", {"run_id": RUN, "head_hash": head, "commit": commit})


def test_a_fragment_closed_off_at_the_end_of_the_chain_does_not_stop_it(
        world: World, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append cut short twice (a crash, or a full disk: the first left a fragment, the
    second wrote only the newline closing it off) leaves the fragment as the last line
    ending in a newline. Verifying passes over it as a fragment; appending must too, or
    no anchor is ever mirrored into the chain again (each warns "not an audit line")."""
    monkeypatch.setenv("XDG_STATE_HOME", world.env["XDG_STATE_HOME"])
    first = audit.append_event("other", {"i": 1})
    path = Path(audit.audit_path())
    with open(path, "ab") as f:
        f.write(b'{"at":"2026-12-01T10:00:00.000000000Z","data":{"ru\n')
    assert audit.verify_audit() == (True, 1, None)
    head = record(repo, GOAL)[-1]["entry_hash"]
    res = cli(world, repo, "ledger", "anchor", RUN)
    commit = git(repo, "rev-parse", REF).stdout.strip()
    assert (res.returncode, res.stdout, res.stderr) == (
        0, f"created: {REF} -> {commit} (8 entries, head {head})\n", "")
    assert audit.verify_audit() == (True, 2, None)
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert (last["seq"], last["prev"], last["event"], last["data"]) == (
        2, first["mac"], "work_ledger.anchor",
        {"run_id": RUN, "head_hash": head, "commit": commit})


# -- harness ledger runs ---------------------------------------------------------------------


def test_ledger_runs_reports_a_torn_tail_and_a_broken_chain(world: World, repo: Path) -> None:
    """`harness ledger runs --json` says, per local ledger, whether a torn fragment
    follows its last entry (a crash mid-write: it is not counted) and, for a chain that
    does not verify, that it is broken and where, as verify names the place, whatever
    its anchor holds."""
    rows = record(repo, GOAL)
    path = repo / ".harness" / "runtime" / "ledger" / RUN / "000000.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"seq":9,"ts":"2026-11-30T0')
    sealed_rows = record(repo, GOAL[:3], run_id="goal-bad")
    assert cli(world, repo, "ledger", "anchor", "goal-bad").returncode == 0
    bad = repo / ".harness" / "runtime" / "ledger" / "goal-bad" / "000000.jsonl"
    bad.write_bytes(bad.read_bytes().replace(b'"deps":["t1"]', b'"deps":["t9"]'))
    record(repo, GOAL[:2], run_id="goal-ok")
    res = cli(world, repo, "ledger", "runs", "--json")
    assert res.returncode == 0, res.stderr
    runs = {r["run_id"]: r for r in json.loads(res.stdout)["runs"]}
    assert sorted(runs) == ["goal-42", "goal-bad", "goal-ok"]
    mine = runs[RUN]
    assert (mine["torn_tail"], mine["ok"], mine["entry_count"], mine["head_hash"],
            mine["state"], mine["last_activity"]) == (
        True, True, 8, rows[-1]["entry_hash"], "open", rows[-1]["ts"])
    assert (runs["goal-ok"]["torn_tail"], runs["goal-ok"]["state"]) == (False, "open")
    broken = runs["goal-bad"]
    # Its anchor (made before the edit) verifies, but the listing's state is the local
    # chain's: broken, not the anchored chain's "open".
    assert (broken["ok"], broken["state"], broken["torn_tail"], broken["entry_count"],
            broken["last_activity"], broken["anchored"], broken["anchored_entry_count"],
            broken["agreement"]) == (False, "broken", False, 2, None, True, 3, None)
    recomputed = entry_hash("task.scheduled", "t2", {"deps": ["t9"]},
                            sealed_rows[1]["entry_hash"])
    assert broken["error"] == (
        f"entry 3 (000000.jsonl:3): entry_hash mismatch (recomputed {recomputed[:16]}…, "
        f"stored {sealed_rows[2]['entry_hash'][:16]}…): the row's kind, task_id or payload "
        "was changed")


def _meta(**over: object) -> bytes:
    meta = {"run_id": "goal-x", "head_hash": "0" * 64, "entry_count": 1, "chunk_count": 1,
            "format_version": 1}
    return canonical({**meta, **over}) + b"\n"


@pytest.mark.parametrize(("meta", "why"), [
    (_meta(entry_count="sk-ant-api03-" + "C" * 40),
     "LEDGER.json entry_count '[REDACTED]' is not an integer"),
    (_meta(entry_count="12"), "LEDGER.json entry_count '12' is not an integer"),
    (_meta(entry_count=3.0), "LEDGER.json entry_count 3.0 is not an integer"),
    (_meta(head_hash=7), "LEDGER.json head_hash 7 is not a string"),
    (b"[1]\n", "LEDGER.json is not an object"),
    (None, "no LEDGER.json"),
], ids=["secret-count", "string-count", "float-count", "int-head", "array", "directory"])
def test_ledger_runs_names_what_is_wrong_with_an_anchors_metadata(
        world: World, repo: Path, meta: bytes | None, why: str) -> None:
    """An anchor that arrived by plain git whose LEDGER.json is no object, counts its
    entries with anything but an integer, or is a directory: the listing names it as a
    bad anchor (exit 0: listing is how an operator finds one) in the words every command
    uses, saying which file and key held what (scrubbed: never a secret), and counts no
    entries from it."""
    g = Git.open(repo)
    [chunk] = g.write_blobs([b"{}\n"])
    if meta is None:  # a directory named LEDGER.json
        inner = g.mktree([("x", chunk)])
        tree = subprocess.run(
            ["git", "mktree"], cwd=repo, check=True, capture_output=True, text=True,
            input=f"040000 tree {inner}\tLEDGER.json\n100644 blob {chunk}\tchunk-000000.jsonl\n",
        ).stdout.strip()
    else:
        [blob] = g.write_blobs([meta])
        tree = g.mktree([("LEDGER.json", blob), ("chunk-000000.jsonl", chunk)])
    commit = g.commit_tree(tree, [], "forged\n")
    g.update_ref("refs/harness/work-ledger/goal-x", commit, None)
    res = cli(world, repo, "ledger", "runs", "--json")
    assert res.returncode == 0, res.stderr
    assert "sk-ant" not in res.stdout + res.stderr
    [run] = json.loads(res.stdout)["runs"]
    assert (run["run_id"], run["local"], run["anchored"], run["agreement"],
            run["anchored_commit"], run["entry_count"], run["head_hash"]) == (
        "goal-x", False, True, "anchor broken", commit, 0, "")
    assert run["anchor_error"] == (
        f"refs/harness/work-ledger/goal-x is not a work-ledger anchor: {why}")


# -- a lineage fetched from a URL or path ------------------------------------------------------


def test_a_lineage_fetched_from_a_path_is_kept_under_a_digest_of_it_and_named(
        world: World, repo: Path, tmp_path: Path) -> None:
    """A remote given as a path (or URL) is no ref name component: what fetch keeps of a
    refused lineage is ``refs/harness/fetched/url-<first 16 hex of sha256(remote)>/<run>``,
    and resume, refusing the two lineages (exit 3), names that very ref to delete."""
    theirs = record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "push", "-q", str(bare), f"{REF}:{REF}")
    other = make_repo(tmp_path / "other")
    mine = record(other, [*GOAL[:5], ("task.started", "t1", {"harness": "other", "run_id": 9})])
    fetched = cli(world, other, "ledger", "fetch", RUN, "--remote", str(bare))
    assert fetched.returncode == 3, fetched.stderr
    digest = hashlib.sha256(str(bare).encode()).hexdigest()[:16]
    kept = f"refs/harness/fetched/url-{digest}/{RUN}"
    assert git(other, "for-each-ref", "--format=%(refname)", "refs/harness/").stdout == (
        f"{kept}\n")
    res = cli(world, other, "ledger", "resume", RUN)
    assert res.returncode == 3
    assert res.stderr.startswith(
        f"harness: work ledgers diverge at entry 6: two chains extend the same parent entry "
        f"(local head {mine[-1]['entry_hash']}, fetched head {theirs[-1]['entry_hash']}).")
    assert f"delete the fetched anchor with 'git update-ref -d {kept}')" in res.stderr
    assert list((other / ".harness" / "runtime" / "resume").glob("*")) == []
    assert len((other / ".harness" / "runtime" / "ledger" / RUN / "000000.jsonl")
               .read_bytes().splitlines()) == 6


# -- resume signals ----------------------------------------------------------------------------


def test_resume_makes_its_signal_directory_private_and_prunes_only_signals(
        world: World, repo: Path) -> None:
    """The signal directory is made 0700 (its files 0600), and a resume removes only an
    earlier resume's *signals* of this run for tasks no longer in the frontier: another
    file there, even one named after the run (an operator's copy), is left alone."""
    record(repo, GOAL)
    resume_dir = repo / ".harness" / "runtime" / "resume"
    first = cli(world, repo, "ledger", "resume", RUN)
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(resume_dir.stat().st_mode) == 0o700
    keep = resume_dir / f"{RUN}__t2.signal.bak"
    keep.write_bytes(b"copy\n")
    stale = resume_dir / f"{RUN}__t9.signal"
    stale.write_bytes(b"{}\n")
    again = cli(world, repo, "ledger", "resume", RUN)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in resume_dir.iterdir()) == [
        f"{RUN}__t2.signal", f"{RUN}__t2.signal.bak", f"{RUN}__t3.signal"]
    assert keep.read_bytes() == b"copy\n"
    for name in (f"{RUN}__t2.signal", f"{RUN}__t3.signal"):
        assert stat.S_IMODE((resume_dir / name).stat().st_mode) == 0o600


# -- an anchor's metadata, read whole ----------------------------------------------------------


@pytest.mark.parametrize(("entries", "over", "why"), [
    (3, {"head_hash": "UPPER"}, "LEDGER.json head_hash {head!r} is not 64 lowercase hex digits"),
    (3, {"format_version": True}, "LEDGER.json has format_version True, this harness reads 1"),
    (1001, {"entry_count": 1000},
     "LEDGER.json says 1000 entries, which 2 chunks of 1000 lines cannot hold"),
    (1, {"entry_count": True}, "LEDGER.json entry_count True is not an integer"),
    (2, {"chunk": "no newline"}, "chunk-000000.jsonl does not end with a newline"),
], ids=["upper-case-head", "version-true", "count-of-fewer-chunks", "count-true",
        "unterminated-chunk"])
def test_anchor_names_what_is_wrong_with_the_metadata_of_the_anchor_it_finds(
        world: World, repo: Path, entries: int, over: dict[str, Any], why: str) -> None:
    """An anchor (arrived by plain git) over the very chain of the local ledger, whose
    LEDGER.json spells the head in upper case, gives format_version or entry_count as
    `true` (== 1 in Python), or counts as many entries as fewer chunks hold, or whose
    chunk lacks its last newline: each is no anchor, and
    anchor refuses (exit 2) saying exactly what, rather than the chain check's words
    about a head that does not match, or taking it for an anchor of the chain."""
    hashes = hand_ledger(repo, [("task.scheduled", f"t{i}", {"deps": []})
                                for i in range(entries)])
    lines = (repo / ".harness" / "runtime" / "ledger" / RUN / "000000.jsonl").read_bytes()
    rows = lines.splitlines(keepends=True)
    head = hashes[-1].upper() if over.get("head_hash") == "UPPER" else hashes[-1]
    meta = {"run_id": RUN, "head_hash": head, "entry_count": entries,
            "chunk_count": (entries + 999) // 1000, "format_version": 1}
    meta.update({k: v for k, v in over.items() if k not in ("head_hash", "chunk")})
    g = Git.open(repo)
    chunks = [b"".join(rows[i:i + 1000]) for i in range(0, entries, 1000)]
    if "chunk" in over:
        chunks[-1] = chunks[-1].rstrip(b"\n")
    ids = g.write_blobs([canonical(meta) + b"\n", *chunks])
    tree = g.mktree([("LEDGER.json", ids[0]),
                     *[(f"chunk-{k:06d}.jsonl", oid) for k, oid in enumerate(ids[1:])]])
    commit = g.commit_tree(tree, [], "forged\n")
    g.update_ref(REF, commit, None)
    res = cli(world, repo, "ledger", "anchor", RUN)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"harness: {REF} is not a work-ledger anchor: "
                          f"{why.format(head=head)}\n")
    assert git(repo, "rev-parse", REF).stdout.strip() == commit


def test_an_anchor_in_a_hand_written_spelling_is_never_taken_as_checked(
        world: World, repo: Path) -> None:
    """A hand-written ledger may spell its rows with spaces and still verify; an older
    harness anchored such a ledger as spelled. Anchor re-anchors it in canonical lines
    (extended), and must not record the old tree as checked: when that anchor comes
    back (plain git moving the ref to it), the next anchor must again re-anchor it,
    not find it "checked" and report it unchanged, leaving a tree no other host would
    make from the chain."""
    hashes = hand_ledger(repo, GOAL[:3])
    path = repo / ".harness" / "runtime" / "ledger" / RUN / "000000.jsonl"
    spelled = b"".join(json.dumps(json.loads(x), sort_keys=True).encode() + b"\n"
                       for x in path.read_bytes().splitlines())
    path.write_bytes(spelled)
    g = Git.open(repo)
    meta = canonical({"run_id": RUN, "head_hash": hashes[-1], "entry_count": 3,
                      "chunk_count": 1, "format_version": 1}) + b"\n"
    ids = g.write_blobs([meta, spelled])
    old = g.commit_tree(g.mktree([("LEDGER.json", ids[0]), ("chunk-000000.jsonl", ids[1])]),
                        [], "an older harness's anchor\n")
    g.update_ref(REF, old, None)
    for _ in range(2):
        res = cli(world, repo, "ledger", "anchor", RUN)
        new = git(repo, "rev-parse", REF).stdout.strip()
        assert (res.returncode, res.stdout) == (
            0, f"extended: {REF} -> {new} (3 entries, head {hashes[-1]})\n"), res.stderr
        chunk = git(repo, "cat-file", "blob", f"{REF}:chunk-000000.jsonl").stdout.encode()
        assert chunk == b"".join(canonical(json.loads(x)) + b"\n"
                                 for x in spelled.splitlines())
        git(repo, "update-ref", REF, old)
    assert path.read_bytes() == spelled  # the local ledger keeps its own spelling


def test_a_run_id_spelled_as_an_escape_never_shares_signals_with_the_run_it_spells(
        world: World, repo: Path) -> None:
    """Run ids may hold "%": the run "%C3%A9" is not the run "é" (whose escaped name it
    spells), so their signals have distinct names and a resume of one neither replaces
    nor prunes the other's."""
    for run in ("é", "%C3%A9"):
        record(repo, GOAL, run_id=run)
        res = cli(world, repo, "ledger", "resume", run)
        assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (repo / ".harness" / "runtime" / "resume").iterdir())
    assert names == ["%25C3%25A9__t2.signal", "%25C3%25A9__t3.signal",
                     "%C3%A9__t2.signal", "%C3%A9__t3.signal"]
    for name in names:
        body = json.loads((repo / ".harness" / "runtime" / "resume" / name).read_bytes())
        assert body["run_id"] == ("%C3%A9" if name.startswith("%25") else "é")


def test_only_the_deps_a_scheduled_row_names_are_ids_resume_checks_for_secrets(
        world: World, repo: Path) -> None:
    """A hand-written chain: deps that are no strings (no task id) and a "deps" list
    in the payload of a row of another kind (not a dependency: never printed, never a
    file name) do not stop a resume, however they read."""
    secret = "ghp_" + "D" * 36
    hand_ledger(repo, [
        ("run.open", None, {}),
        ("task.scheduled", "t1", {"deps": []}),
        ("task.scheduled", "t2", {"deps": [5, None]}),
        ("task.started", "t1", {"deps": [secret]}),
    ])
    res = cli(world, repo, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["status"], out["resume_seq"], out["frontier"][0]) == ("resumed", 5, "t1")
    assert secret not in res.stdout + res.stderr


def test_a_ledger_holding_only_a_torn_first_row_is_no_ledger_to_resume(
        world: World, repo: Path) -> None:
    """A crash during the very first write leaves only a fragment: resume exits 1 (no
    ledger) naming the directory, and writes nothing: no run.resumed row as the chain's
    first, no signal."""
    d = repo / ".harness" / "runtime" / "ledger" / RUN
    d.mkdir(parents=True)
    (d / "000000.jsonl").write_bytes(b'{"seq":1,"ts":"2026-11-30T07:0')
    for args in ((), ("--dry-run",)):
        res = cli(world, repo, "ledger", "resume", RUN, *args)
        assert (res.returncode, res.stdout, res.stderr) == (
            1, "", f"harness: the work ledger of run '{RUN}' in {d} holds no entries\n")
    assert (d / "000000.jsonl").read_bytes() == b'{"seq":1,"ts":"2026-11-30T07:0'
    assert not (repo / ".harness" / "runtime" / "resume").exists()


def test_fetching_the_same_anchor_again_records_its_tree_as_checked_once(
        world: World, repo: Path, tmp_path: Path) -> None:
    """Every fetch reads and verifies the anchor it fetched and records its tree as
    checked: a tree already recorded is not recorded again, so the cache under .git
    holds one line per tree however often an unchanged anchor is fetched."""
    rows = record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "push", "-q", str(bare), f"{REF}:{REF}")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    for status in ("written", "unchanged", "unchanged"):
        res = cli(world, other, "ledger", "fetch", RUN, "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["status"] == status
    tree = git(other, "rev-parse", f"{REF}^{{tree}}").stdout.strip()
    memo = (other / ".git" / "harness-checked-anchors").read_text()
    assert memo == f"{tree} {rows[-1]['entry_hash']} 8\n"


def test_a_run_closed_while_resume_waits_for_the_lock_is_not_resumed(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resume checks and replays the chain, then takes the writer's lock. A writer that
    closes the run in between (a real `run.closed` row, recorded through the writer just
    before the lock is taken) is seen under the lock: the run is reported closed, with
    the entries, head and state of the chain as it now is, and no run.resumed row or
    signal is written."""
    from harness.worklog import resume as resume_mod
    from harness.worklog.store import WorkLedger

    record(repo, GOAL)
    real = resume_mod._signal_dir
    closed: list[dict[str, Any]] = []

    def closes_first(wd: Path) -> Path:
        # Called after the unlocked pass, just before the lock is taken.
        if not closed:
            with WorkLedger(repo, RUN) as led:
                closed.append(led.record("run.closed", None, {"why": "done elsewhere"}))
        return real(wd)

    monkeypatch.setattr(resume_mod, "_signal_dir", closes_first)
    res = resume_mod.resume(repo, RUN)
    assert (res.status, res.state.closed, res.resume_seq, res.nonce) == (
        "closed", True, None, None)
    # What the result says of the chain (printed: "run … is closed (9 entries, head …)")
    # is the chain found closed, not the one read before the lock.
    assert (res.entry_count, res.head_hash) == (9, closed[0]["entry_hash"])
    lines = (repo / ".harness" / "runtime" / "ledger" / RUN / "000000.jsonl").read_bytes()
    last = json.loads(lines.splitlines()[-1])
    assert (len(lines.splitlines()), last["kind"], last["entry_hash"]) == (
        9, "run.closed", closed[0]["entry_hash"])
    assert list((repo / ".harness" / "runtime" / "resume").glob("*")) == []


def test_ledger_runs_passes_over_a_file_where_a_run_directory_would_be(
        world: World, repo: Path) -> None:
    """A regular file (a note, a stray copy) under the ledger root named like a run is no
    run: listed neither as a ledger nor as an error, and the listing exits 0."""
    rows = record(repo, GOAL)
    (repo / ".harness" / "runtime" / "ledger" / "goal-note").write_bytes(b"{}\n")
    res = cli(world, repo, "ledger", "runs", "--json")
    assert (res.returncode, res.stderr) == (0, "")
    [run] = json.loads(res.stdout)["runs"]
    assert (run["run_id"], run["entry_count"], run["head_hash"]) == (
        RUN, 8, rows[-1]["entry_hash"])
