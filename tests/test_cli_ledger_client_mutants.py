"""Mutation-test survivors of the `harness ledger` work-ledger commands (`harness.cli.ledger`)
and of the control client (`harness.control.client`). The ledger group: a work tree named
after a token, scrubbed from every "no work ledger" line, --json reason, "not inside a git
work tree" and resume's signals line; a --workdir, or a run's ledger path, that is a file,
said to be one; an OSError as one scrubbed line, exit 2; verify's --json documents whole
(sorted, UTF-8, the ledger resolved) and its plain lines; every success line of anchor (an
unchanged dry run included), fetch (its remote scrubbed, its warning on stderr), gc and
resume (closed, nothing to resume, an escaped task id); the runs table exactly (in sync,
local ahead, anchored ahead, anchored only, the most a fetched anchor is ahead, an escaped
run id, a broken ledger's dashes, "no work ledgers"). The client: a process out of
descriptors, a socket path too long, a file at or above the socket path, each "not
reachable" with no advice to start a daemon that could not help; a daemon's error code
scrubbed like its message, a bad_config error with no message scrubbed by the client; a
hello answered with no JSON; replies that are no object (previewed up to 60 characters),
neither ok nor a whole error, a listing of non-objects, a boolean run_id; requests
numbered 1, 2, … with two replies read in one chunk; no socket left open. Real git work
trees in tmp dirs, the real `harness` CLI, real Unix sockets (a scripted daemon where the
reply must be one no real daemon sends), exact stdout, stderr and exit codes (DESIGN.md
§2: 0 ok, 1 no ledger, 2 verification failed, 3 divergence)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import test_control_server
from conftest import World
from harness.control.client import Client, DaemonUnreachable
from harness.control.server import OpError
from harness.worklog.store import WorkLedger
from ledgertools import open_fds
from test_control_server import Serve
from test_worklog_cli import GOAL, REF, RUN, cli, err_line, git, make_repo, record, rows_of

# The fixtures of the control server's own tests, under the names tests ask for.
loop = test_control_server.loop
serve = test_control_server.serve
sockdir = test_control_server.sockdir

TOKEN = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # the form of a GitHub token


def test_no_work_ledger_never_shows_a_token_in_the_work_trees_path(world: World,
                                                                   tmp_path: Path) -> None:
    repo = make_repo(tmp_path / TOKEN)
    shown = f"{tmp_path}/[REDACTED]/.harness/runtime/ledger"
    res = cli(world, repo, "ledger", "verify", "g1")
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == f"harness: no work ledger at {shown}/g1"
    js = cli(world, repo, "ledger", "verify", "g1", "--json")
    assert js.returncode == 1
    assert json.loads(js.stdout)["reason"] == f"no work ledger at {shown}/g1"
    (repo / ".harness" / "runtime" / "ledger" / "g2").mkdir(parents=True)
    res = cli(world, repo, "ledger", "anchor", "g2")
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == f"harness: no work ledger at {shown}/g2 (no segment files)"
    assert TOKEN not in js.stderr + res.stderr


# -- the control client -------------------------------------------------------------------

_OUT_OF_DESCRIPTORS = """
import os, resource, sys
from harness.control.client import Client, DaemonUnreachable
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    Client(sys.argv[1])
except DaemonUnreachable as exc:
    print(exc.absent, exc.advice())
"""


def test_a_client_out_of_descriptors_is_told_the_daemon_is_not_reachable(
        tmp_path: Path) -> None:
    """socket() itself failing (EMFILE) is an unreachable daemon like any connect error,
    not an AttributeError on the socket that was never made."""
    sock = str(tmp_path / "control.sock")
    res = subprocess.run([sys.executable, "-c", _OUT_OF_DESCRIPTORS, sock],
                         capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == f"False daemon not reachable (Too many open files) ({sock})\n"


def test_resume_names_the_signal_directory_without_the_token(world: World,
                                                             tmp_path: Path) -> None:
    """Every line of a successful resume, exactly; the signals' directory is shown as a
    refusal shows a path, so a work tree named after a token does not print it."""
    repo = make_repo(tmp_path / TOKEN)
    record(repo, GOAL)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert (res.returncode, res.stderr) == (0, "")
    resumed = rows_of(repo)[-1]
    assert res.stdout == (
        f"resumed {RUN} at entry 9 (head {resumed['entry_hash']}); 1 finished, 1 in flight, "
        "2 scheduled, 0 failed, 0 abandoned; frontier: t2, t3\n"
        f"wrote 2 signal(s) to {tmp_path}/[REDACTED]/.harness/runtime/resume\n"
        f"anchor the resume so others see it: harness ledger anchor {RUN}\n")


def _cli_env(sockdir: Path, tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, HARNESS_SOCKET=str(sockdir / "harness.sock"),
                XDG_STATE_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"))


def test_an_error_code_the_daemon_answers_is_scrubbed_as_its_message_is(
        serve: Serve, sockdir: Path, tmp_path: Path) -> None:
    """Whatever the other end of the socket sends, the CLI's error line carries no
    credential: the code is scrubbed like the message."""

    async def refuse(req: dict[str, Any]) -> Any:
        raise OpError(f"denied_{TOKEN}", f"no {TOKEN} here")

    serve({"list": refuse})
    res = subprocess.run([sys.executable, "-m", "harness.cli", "list"],
                         env=_cli_env(sockdir, tmp_path), capture_output=True, text=True,
                         timeout=120, check=False)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: no [REDACTED] here (denied_[REDACTED])\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_a_workdir_that_is_a_file_is_named_as_one(world: World, tmp_path: Path) -> None:
    """Exit 1 (no ledger) for every command of the group, and the line says what is
    wrong with the path rather than that it does not exist."""
    (tmp_path / "notes").write_text("x\n")
    for args in (["verify", "g1"], ["anchor", "g1"], ["fetch", "g1"], ["resume", "g1"],
                 ["gc", "g1"], ["runs"]):
        res = cli(world, tmp_path, "ledger", *args, "--workdir", "notes")
        assert (res.returncode, res.stdout) == (1, ""), args
        assert err_line(res) == "harness: --workdir notes: not a directory", args


HELLO_OK = b'{"ok": true, "proto": "1.0"}\n'


@contextlib.contextmanager
def scripted_daemon(path: Path, replies: list[bytes]) -> Iterator[list[dict[str, Any]]]:
    """A daemon on `path` for one connection that answers the n-th line it reads with
    ``replies[n]`` as raw bytes (the hello's first), then closes. Yields the lines read."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    got: list[dict[str, Any]] = []

    def answer() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rwb") as f:
            for reply in replies:
                got.append(json.loads(f.readline()))
                f.write(reply)
                f.flush()

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        yield got
        server.join(timeout=60)
    finally:
        listener.close()


def test_an_error_with_no_message_is_shown_scrubbed_even_for_a_config_code(
        sockdir: Path, tmp_path: Path) -> None:
    """A ``bad_config`` message is trusted as scrubbed where the daemon made it; an error
    object with no message string is shown as its JSON instead, which the daemon never
    scrubbed: the client does, so a reload refusal cannot print a token."""
    path = sockdir / "harness.sock"
    refusal = json.dumps({"id": 1, "ok": False,
                          "error": {"code": "bad_config", "t": TOKEN}}).encode() + b"\n"
    with scripted_daemon(path, [HELLO_OK, refusal]) as got:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "reload"],
                             env=_cli_env(sockdir, tmp_path), capture_output=True,
                             text=True, timeout=120, check=False)
    assert [g["op"] for g in got] == ["hello", "reload"]
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", "harness: the daemon refused the new config and keeps its last good one:\n"
               '{"code": "bad_config", "t": "[REDACTED]"}\n')


def _cli_list(sockdir: Path, tmp_path: Path, replies: list[bytes]
              ) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[str]]:
    """`harness list` against a scripted daemon: (the lines it read, the CLI's result)."""
    with scripted_daemon(sockdir / "harness.sock", replies) as got:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "list"],
                             env=_cli_env(sockdir, tmp_path), capture_output=True,
                             text=True, timeout=120, check=False)
    return got, res


@pytest.mark.parametrize(("size", "shown"), [
    (60, '"' + "a" * 58 + '"'),
    (61, '"' + "a" * 58 + "…"),
], ids=["60-whole", "61-cut"])
def test_a_reply_that_is_no_object_is_previewed_up_to_60_characters(
        sockdir: Path, tmp_path: Path, size: int, shown: str) -> None:
    reply = json.dumps("a" * (size - 2)).encode() + b"\n"
    got, res = _cli_list(sockdir, tmp_path, [HELLO_OK, reply])
    assert [g["op"] for g in got] == ["hello", "list"]
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: the daemon's reply to list is not a JSON object: {shown} "
               "(bad_reply)\n")


@pytest.mark.parametrize("hello", [b"not json\n", b"[" * 100_000 + b"]" * 100_000 + b"\n"],
                         ids=["not-json", "nested-too-deeply"])
def test_a_hello_answered_with_no_json_is_a_daemon_not_responding(
        sockdir: Path, tmp_path: Path, hello: bytes) -> None:
    got, res = _cli_list(sockdir, tmp_path, [hello])
    assert [g["op"] for g in got] == ["hello"]
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: daemon not responding ({sockdir / 'harness.sock'})\n")


def test_replies_that_arrive_together_are_each_their_own_requests(sockdir: Path) -> None:
    """Requests are numbered 1, 2, … on a connection (DESIGN §2), and two replies read in
    one chunk answer two requests, in order."""
    both = (HELLO_OK + b'{"id": 1, "ok": true, "data": "one"}\n'
            b'{"id": 2, "ok": true, "data": "two"}\n')
    with (scripted_daemon(sockdir / "harness.sock", [both, b"", b""]) as got,
          Client(str(sockdir / "harness.sock"), timeout=30.0) as client):
        answers = [client.request("jobs"), client.request("list", x=1)]
    assert answers == ["one", "two"]
    assert got == [{"op": "hello", "proto": "1.0"}, {"id": 1, "op": "jobs"},
                   {"id": 2, "op": "list", "x": 1}]


def test_a_listing_of_things_that_are_not_objects_is_a_bad_reply(
        sockdir: Path, tmp_path: Path) -> None:
    reply = b'{"id": 1, "ok": true, "data": {"harnesses": [1, "x"]}}\n'
    got, res = _cli_list(sockdir, tmp_path, [HELLO_OK, reply])
    assert [g["op"] for g in got] == ["hello", "list"]
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: the daemon's harnesses reply is not a list of objects: "
               '{"harnesses": [1, "x"]} (bad_reply)\n')


def test_a_run_id_that_is_a_boolean_is_a_bad_reply(sockdir: Path, tmp_path: Path) -> None:
    """`true` is an int to Python; a trigger answered with it names no run."""
    reply = b'{"id": 1, "ok": true, "data": {"run_id": true}}\n'
    with scripted_daemon(sockdir / "harness.sock", [HELLO_OK, reply]) as got:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "trigger", "job"],
                             env=_cli_env(sockdir, tmp_path), capture_output=True,
                             text=True, timeout=120, check=False)
    assert [g["op"] for g in got] == ["hello", "trigger"]
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: the daemon's trigger reply is not an object with run_id: "
               '{"run_id": true} (bad_reply)\n')


def test_an_os_error_is_one_scrubbed_line_and_exit_2(world: World, tmp_path: Path) -> None:
    """A file where resume must make its signals' directory: the OS's words and the path
    it names, scrubbed (exit 2: the resume could not be completed), and no entry added."""
    repo = make_repo(tmp_path / TOKEN)
    record(repo, GOAL)
    (repo / ".harness" / "runtime" / "resume").write_text("x\n")
    before = rows_of(repo)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert (res.returncode, res.stdout) == (2, "")
    assert err_line(res) == (
        f"harness: File exists ({tmp_path}/[REDACTED]/.harness/runtime/resume)")
    assert rows_of(repo) == before


def test_a_socket_path_too_long_names_its_size_and_the_limit(tmp_path: Path) -> None:
    """The daemon refuses such a path with these words; the client says the same, not
    the socket module's "AF_UNIX path too long"."""
    sock = "/tmp/" + "d" * 150 + "/harness.sock"
    env = dict(os.environ, HARNESS_SOCKET=sock, XDG_STATE_HOME=str(tmp_path / "state"),
               HOME=str(tmp_path / "home"))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "list"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: daemon not reachable (the path is 168 bytes; a Unix socket's path "
               f"holds at most 107) ({sock})\n")


def _ok(world: World, cwd: Path, *args: str) -> str:
    """A command of the group that succeeds: its stdout (nothing on stderr)."""
    res = cli(world, cwd, "ledger", *args)
    assert (res.returncode, res.stderr) == (0, ""), args
    return res.stdout


def _runs_table(cwd: Path, entries: int, sync: str) -> str:
    last = rows_of(cwd)[-1]
    return ("RUN      ENTRIES  STATE  LAST ACTIVITY                   HEAD              "
            "LOCAL / ANCHORED\n"
            f"{RUN}  {entries:>7}  open   {last['ts']}  {last['entry_hash'][:16]}  {sync}\n")


def test_the_plain_lines_of_anchor_fetch_gc_and_runs(world: World, tmp_path: Path) -> None:
    """Each success line exactly, through one story: anchor (created, unchanged, and a
    dry run of an unchanged anchor, which says what is there), fetch from a remote whose
    path holds a token (dry run, then written), runs in sync / local ahead / anchored
    ahead, gc."""
    a = make_repo(tmp_path / "a")
    head = record(a, GOAL)[-1]["entry_hash"]
    created = _ok(world, a, "anchor", RUN)
    commit = git(a, "rev-parse", REF).stdout.strip()
    assert created == f"created: {REF} -> {commit} (8 entries, head {head})\n"
    unchanged = f"unchanged: {REF} -> {commit} (8 entries, head {head})\n"
    assert _ok(world, a, "anchor", RUN) == unchanged
    assert _ok(world, a, "anchor", RUN, "--dry-run") == unchanged
    assert _ok(world, a, "runs") == _runs_table(a, 8, "in sync")

    bare = tmp_path / TOKEN / "bare.git"
    bare.parent.mkdir()
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "push", "-q", str(bare), f"{REF}:{REF}")
    b = make_repo(tmp_path / "b")
    shown = f"{tmp_path}/[REDACTED]/bare.git"
    assert _ok(world, b, "fetch", RUN, "--remote", str(bare), "--dry-run") == (
        f"dry run: the local ledger of {RUN} would be written from {shown} (8 new entries; "
        f"anchored entry_count 8, head_hash {head}); nothing was written\n")
    assert _ok(world, b, "fetch", RUN, "--remote", str(bare)) == (
        f"written: work ledger {RUN} from {shown} (entry_count 8, head_hash {head})\n")
    assert json.loads(_ok(world, b, "fetch", RUN, "--remote", str(bare), "--json")) == {
        "commit": commit, "dry_run": False, "entry_count": 8, "head_hash": head,
        "new_entries": 0, "remote": shown, "run_id": RUN, "status": "unchanged",
        "warning": None}

    _ok(world, a, "resume", RUN)
    assert _ok(world, a, "runs") == _runs_table(a, 9, "local ahead by 1")
    _ok(world, a, "anchor", RUN)
    # The 9-entry anchor reaches b's ref by plain git: b's ledger is behind its anchor.
    git(a, "push", "-q", str(bare), f"{REF}:{REF}")
    git(b, "fetch", "-q", str(bare), f"{REF}:{REF}")
    assert _ok(world, b, "runs") == _runs_table(b, 8, "anchored ahead by 1")
    tree = git(a, "rev-parse", f"{REF}^{{tree}}").stdout.strip()
    gc = _ok(world, a, "gc", RUN)
    squashed = git(a, "rev-parse", REF).stdout.strip()
    assert gc == (
        f"{REF}: squashed 2 commits into one parentless commit {squashed} (tree {tree} "
        "unchanged, 1 chunk(s)). The ref no longer fast-forwards from what was pushed, so "
        f"pushing it now needs a forced refspec: git push REMOTE '+{REF}:{REF}'\n")


@pytest.mark.parametrize(("where", "why"), [
    ("notes", "not reachable (not a socket)"),
    ("notes/harness.sock", "not reachable (Not a directory)"),
], ids=["a-file", "under-a-file"])
def test_a_socket_path_that_no_daemon_could_use_is_not_reachable(
        tmp_path: Path, where: str, why: str) -> None:
    """A regular file at the socket path, or above it: the daemon would refuse to start
    there, so the CLI does not advise starting one; the OS's words, not its errno."""
    (tmp_path / "notes").write_text("x\n")
    sock = str(tmp_path / where)
    env = dict(os.environ, HARNESS_SOCKET=sock, XDG_STATE_HOME=str(tmp_path / "state"),
               HOME=str(tmp_path / "home"))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "list"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"harness: daemon {why} ({sock})\n")


@pytest.mark.parametrize(("reply", "said"), [
    (b'{"id": 1}\n',
     """the daemon's reply to list is neither ok nor an error object: {"id": 1} (bad_reply)"""),
    (b'{"id": 1, "ok": false, "error": "boom"}\n',
     "the daemon's reply to list is neither ok nor an error object: "
     """{"id": 1, "ok": false, "error": "boom"} (bad_reply)"""),
    (b'{"id": 1, "ok": false, "error": {"message": "no"}}\n', "no (error)"),
], ids=["no-ok", "error-not-object", "error-without-code"])
def test_a_reply_neither_ok_nor_a_whole_error_is_one_line(
        sockdir: Path, tmp_path: Path, reply: bytes, said: str) -> None:
    got, res = _cli_list(sockdir, tmp_path, [HELLO_OK, reply])
    assert [g["op"] for g in got] == ["hello", "list"]
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"harness: {said}\n")


def test_a_client_leaves_no_descriptor_open(sockdir: Path) -> None:
    """A command polling for a daemon that is not there, and one done with a daemon it
    used through `with`: neither keeps a socket open."""
    before = open_fds()
    for _ in range(5):
        with pytest.raises(DaemonUnreachable) as err:
            Client(str(sockdir / "nobody.sock"), timeout=5.0)
        assert (err.value.why, err.value.absent) == ("not running", True)
    assert open_fds() <= before
    reply = b'{"id": 1, "ok": true, "data": []}\n'
    with (scripted_daemon(sockdir / "harness.sock", [HELLO_OK, reply]),
          Client(str(sockdir / "harness.sock"), timeout=30.0) as client):
        assert client.request("list") == []
    assert open_fds() <= before  # the daemon's side is closed and joined by now


def test_verify_json_and_plain_lines_exactly(world: World, repo: Path) -> None:
    """`verify RUN_ID`: the whole --json document of a chain with a torn tail, of no
    ledger, and of a segment holding only a torn fragment; and the plain lines of each."""
    head = record(repo, GOAL)[-1]["entry_hash"]
    seg = repo / ".harness" / "runtime" / "ledger" / RUN / "000000.jsonl"
    with seg.open("ab") as f:
        f.write(b'{"seq":9,"ts":"20')
    ledger = str(seg.parent)
    assert json.loads(_ok(world, repo, "verify", RUN, "--json")) == {
        "entry_count": 8, "head_hash": head, "head_seq": 8, "ledger": ledger, "ok": True,
        "run_id": RUN, "torn_tail": True, "torn_tail_bytes": 17}
    assert _ok(world, repo, "verify", RUN) == (
        f"ok: work ledger {RUN}: 8 entries verify from genesis to head {head}; a torn "
        "trailing fragment of 17 bytes is not part of the chain\n")

    nothing = {"run_id": "g9", "ok": False, "entry_count": 0, "head_hash": None,
               "head_seq": 0, "torn_tail": False, "torn_tail_bytes": 0, "seq": None,
               "file": None, "line": None, "exit_code": 1}
    res = cli(world, repo, "ledger", "verify", "g9", "--json")
    assert res.returncode == 1
    no_dir = f"no work ledger at {seg.parent.parent}/g9"
    assert json.loads(res.stdout) == {**nothing, "reason": no_dir}
    assert err_line(res) == f"harness: {no_dir}"

    torn = seg.parent.parent / "g9" / "000000.jsonl"
    torn.parent.mkdir()
    torn.write_bytes(b'{"seq":1,"ts":"20')
    res = cli(world, repo, "ledger", "verify", "g9", "--json")
    said = f"no work ledger at {torn.parent} (no entries; only a torn fragment of 17 bytes)"
    assert (res.returncode, json.loads(res.stdout)) == (1, {**nothing, "reason": said})
    assert err_line(res) == f"harness: {said}"


def test_verify_json_is_sorted_utf8_text_naming_the_resolved_ledger(
        world: World, tmp_path: Path) -> None:
    """--workdir given relative: the document names the ledger by its absolute path, with
    the keys sorted and a non-ASCII name as itself, not as escapes."""
    repo = make_repo(tmp_path / "wörk")
    head = record(repo, GOAL)[-1]["entry_hash"]
    expected = {"entry_count": 8, "head_hash": head, "head_seq": 8,
                "ledger": f"{repo}/.harness/runtime/ledger/{RUN}", "ok": True, "run_id": RUN,
                "torn_tail": False, "torn_tail_bytes": 0}
    out = _ok(world, tmp_path, "verify", RUN, "--json", "--workdir", "wörk")
    assert out == json.dumps(expected, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_outside_a_work_tree_named_after_a_token(world: World, tmp_path: Path) -> None:
    plain = tmp_path / TOKEN
    plain.mkdir()
    env = dict(world.env, GIT_CEILING_DIRECTORIES=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "runs"], cwd=plain,
                         env=env, capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == (f"harness: {tmp_path}/[REDACTED] is not inside a git work tree; "
                             "run this in the project's work tree or pass --workdir DIR")


def test_runs_in_a_work_tree_with_no_ledger_says_so(world: World, repo: Path) -> None:
    assert _ok(world, repo, "runs") == "no work ledgers\n"


def test_resume_with_a_relative_workdir_names_the_signals_absolutely(
        world: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "w")
    record(repo, GOAL)
    out = _ok(world, tmp_path, "resume", RUN, "--workdir", "w").splitlines()
    assert out[1] == f"wrote 2 signal(s) to {repo}/.harness/runtime/resume"


def test_resume_lines_for_a_closed_run_no_frontier_and_an_escaped_task_id(
        world: World, tmp_path: Path) -> None:
    done = make_repo(tmp_path / "done")
    rows = record(done, [("run.open", None, {"goal": "g"}),
                         ("task.scheduled", "t1", {"deps": []}),
                         ("task.started", "t1", {"harness": "worker", "run_id": 1}),
                         ("task.completed", "t1", {"commit": "abc123"})])
    assert _ok(world, done, "resume", RUN, "--dry-run") == (
        f"dry run: {RUN} (4 entries, head {rows[-1]['entry_hash']}): 1 finished, 0 in "
        "flight, 0 scheduled, 0 failed, 0 abandoned; prior resumes 0; would resume: "
        "nothing\n")
    closed = record(done, [("run.closed", None, {})])[-1]["entry_hash"]
    assert _ok(world, done, "resume", RUN) == (
        f"run {RUN} is closed (5 entries, head {closed}); nothing to resume, nothing was "
        "written\n")
    # A right-to-left override in a task id is shown as an escape, not obeyed.
    odd = make_repo(tmp_path / "odd")
    head = record(odd, [("run.open", None, {"goal": "g"}),
                        ("task.scheduled", "t\u202e1", {"deps": []})])[-1]["entry_hash"]
    assert _ok(world, odd, "resume", RUN, "--dry-run") == (
        f"dry run: {RUN} (2 entries, head {head}): 0 finished, 0 in flight, 1 scheduled, "
        "0 failed, 0 abandoned; prior resumes 0; would resume: t\\u202e1\n")


def test_runs_table_escapes_a_run_id_and_dashes_what_a_broken_ledger_lacks(
        world: World, repo: Path) -> None:
    odd = "r\u202ex"
    last = record(repo, [("run.open", None, {"goal": "g"})], run_id=odd)[-1]
    broken = repo / ".harness" / "runtime" / "ledger" / "b1" / "000000.jsonl"
    broken.parent.mkdir()
    broken.write_bytes(b"not a row\n")
    assert _ok(world, repo, "runs") == (
        "RUN       ENTRIES  STATE   LAST ACTIVITY                   HEAD              "
        "LOCAL / ANCHORED\n"
        f"b1              0  broken  -                               {'0' * 16}  local only\n"
        f"r\\u202ex        1  open    {last['ts']}  {last['entry_hash'][:16]}  local only\n")


def test_fetch_warns_on_stderr_when_it_keeps_a_side_ref_ahead(world: World,
                                                              tmp_path: Path) -> None:
    """b anchored 5 entries, then lost its ledger directory; the remote holds 3. Fetch
    writes those 3 and succeeds, and says on stderr why the side ref stays on b's anchor."""
    a = make_repo(tmp_path / "a")
    head3 = record(a, GOAL[:3])[-1]["entry_hash"]
    _ok(world, a, "anchor", RUN)
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "push", "-q", str(bare), f"{REF}:{REF}")
    b = make_repo(tmp_path / "b")
    _ok(world, b, "fetch", RUN, "--remote", str(bare))
    record(b, GOAL[3:5])
    _ok(world, b, "anchor", RUN)
    mine = git(b, "rev-parse", REF).stdout.strip()
    shutil.rmtree(b / ".harness" / "runtime" / "ledger" / RUN)
    res = cli(world, b, "ledger", "fetch", RUN, "--remote", str(bare))
    assert (res.returncode, res.stdout, res.stderr) == (
        0, f"written: work ledger {RUN} from {bare} (entry_count 3, head_hash {head3})\n",
        f"harness: warning: kept {REF} at {mine}: it anchors entries the fetched anchor "
        "lacks; the local ledger now follows the fetched chain\n")


def test_runs_names_the_most_any_fetched_anchor_is_ahead(world: World,
                                                         tmp_path: Path) -> None:
    """Two remotes' anchors fetched but not written (a writer holds b's run): one is 1
    entry ahead of b's chain, the other 2; the table names the most, 2."""
    a = make_repo(tmp_path / "a")
    record(a, GOAL)
    _ok(world, a, "anchor", RUN)
    bare1, bare2 = tmp_path / "one.git", tmp_path / "two.git"
    for bare in (bare1, bare2):
        git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "push", "-q", str(bare1), f"{REF}:{REF}")
    b = make_repo(tmp_path / "b")
    _ok(world, b, "fetch", RUN, "--remote", str(bare1))
    for bare in (bare1, bare2):
        record(a, [("task.completed", "t2", {"commit": "def456"})])
        _ok(world, a, "anchor", RUN)
        git(a, "push", "-q", str(bare), f"+{REF}:{REF}")
        with WorkLedger(b, RUN):
            assert cli(world, b, "ledger", "fetch", RUN, "--remote", str(bare)).returncode == 2
    assert _ok(world, b, "runs").splitlines()[1].endswith("  in sync, fetched ahead by 2")


def test_a_file_where_a_run_ledger_directory_belongs_is_named_as_one(
        world: World, repo: Path) -> None:
    """Still no ledger (exit 1), but the line says a file holds the path rather than that
    nothing is there."""
    where = repo / ".harness" / "runtime" / "ledger" / "g1"
    where.parent.mkdir(parents=True)
    where.write_text("x\n")
    for cmd, said in (("verify", f"no work ledger at {where} (not a directory)"),
                      ("anchor", f"no work ledger at {where} (not a directory)"),
                      ("resume", f"no work ledger for run 'g1' in {where} (not a directory)")):
        res = cli(world, repo, "ledger", cmd, "g1")
        assert (res.returncode, res.stdout) == (1, ""), cmd
        assert err_line(res) == f"harness: {said}", cmd


def test_runs_table_says_anchored_only_for_a_run_with_no_local_ledger(
        world: World, repo: Path) -> None:
    last = record(repo, GOAL)[-1]
    _ok(world, repo, "anchor", RUN)
    shutil.rmtree(repo / ".harness" / "runtime" / "ledger" / RUN)
    assert _ok(world, repo, "runs").splitlines()[1] == (
        f"{RUN}        8  open   {last['ts']}  {last['entry_hash'][:16]}  anchored only")


def test_without_git_on_the_path_the_work_tree_cannot_be_found(world: World,
                                                               repo: Path) -> None:
    env = dict(world.env, PATH=str(tmp_bin := repo / "no-bin"))
    tmp_bin.mkdir()
    res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "runs"], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == ("harness: cannot find the work tree (git: No such file or "
                             "directory (git)); pass --workdir DIR")


def test_an_expected_head_of_an_empty_ledger_is_still_no_ledger(world: World,
                                                                repo: Path) -> None:
    seg = repo / ".harness" / "runtime" / "ledger" / "g1" / "000000.jsonl"
    seg.parent.mkdir(parents=True)
    seg.write_bytes(b"")
    res = cli(world, repo, "ledger", "verify", "g1", "--expected-head", "a" * 64)
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == f"harness: no work ledger at {seg.parent} (no entries)"
