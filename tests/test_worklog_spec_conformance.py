"""The work ledger against shared/specs/durable-work-ledger.txt, end to end.

Black-box checks of `harness ledger verify|anchor|fetch|resume|runs|gc` with real git
(work trees standing for two machines, a bare remote, anchors shared with the spec's own
wildcard refspec) and the real CLI, for the spec's requirements and the original tool's
known bugs (shared/reference/bernstein-work-ledger.md) that no other test file pins:

* the row contract's ``deps`` (DESIGN.md §2: a ``task.scheduled`` payload names its
  dependencies as a list of task ids): the writer refuses a row whose ``deps`` are
  anything else, and a chain holding one (by hand, or from another tool) never puts the
  task in the resume frontier, gives it no signal, and says which task is held and why
  (``held`` in ``--json``, one stderr warning per task);
* "Repo growth": after gc a normal git gc reclaims the superseded chunks, also on a host
  that fetched the run; a fetched anchor of another lineage is kept;
* what travels: a newer scheduler's kinds, never a secret (tuples and keys included),
  and the audit event's head as the reference that catches a truncated tail;
* divergence resolved explicitly, either way, with a refused fetch writing nothing.

Exit codes are exact: 0 ok, 1 no ledger, 2 verification failed, 3 divergence.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import World
from harness.worklog import VerificationFailed
from harness.worklog.replay import replay
from harness.worklog.rows import RowRejected
from harness.worklog.store import WorkLedger
from test_worklog_cli import (
    API_KEY,
    GOAL,
    REF,
    RUN,
    cli,
    err_line,
    git,
    ledger_path,
    make_repo,
    record,
    rows_of,
    sealed_ledger,
    snapshot,
)

WILDCARD = "refs/harness/work-ledger/*:refs/harness/work-ledger/*"
"""The spec's refspec for sharing anchors, exactly as it gives it (no "+")."""
FETCHED = f"refs/harness/fetched/origin/{RUN}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def _signals(workdir: Path) -> list[str]:
    d = workdir / ".harness" / "runtime" / "resume"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


# -- deps: the writer refuses what the contract does not allow -------------------------------


@pytest.mark.parametrize(("deps", "why"), [
    (5, "deps must be a list of task ids, got 5"),
    ("a", "deps must be a list of task ids, got 'a'"),
    ({}, "deps must be a list of task ids, got an object"),
    (None, "deps must be a list of task ids, got null"),
    ([5, None], "deps[0] must be a task id (a string), got 5"),
    (["a", None], "deps[1] must be a task id (a string), got null"),
    (["a", ""], "deps[1] must be a non-empty string, got ''"),
    (["a", ["b"]], "deps[1] must be a task id (a string), got a list"),
    (["a\nb"], "deps[0] 'a\\nb' contains a control character or '\"'"),
    (["x" * 129], "deps[0] 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'… is 129 characters (at most 128)"),
    ([API_KEY], "deps[0] looks like it holds a secret; refusing to record it"),
    (["t0", "t1"], "deps[1] names the task itself, which could never be ready"),
], ids=["int", "str", "object", "null", "int-null", "null-2nd", "empty", "nested", "control",
        "long", "secret", "itself"])
def test_the_writer_refuses_deps_that_are_not_task_ids(tmp_path: Path, deps: object,
                                                       why: str) -> None:
    with WorkLedger(tmp_path, RUN) as wl:
        wl.record("run.open", None, {})
        before = ledger_path(tmp_path).read_bytes()
        with pytest.raises(RowRejected) as caught:
            wl.record("task.scheduled", "t1", {"deps": deps})
        assert str(caught.value) == f"task.scheduled payload: {why}"
        # Nothing written, no seq consumed: the next row is entry 2.
        assert ledger_path(tmp_path).read_bytes() == before
        assert wl.record("task.scheduled", "t1", {"deps": ("t0",)})["seq"] == 2
    assert API_KEY not in ledger_path(tmp_path).read_text()


def test_the_writer_accepts_deps_the_contract_allows(tmp_path: Path) -> None:
    """A list of task ids (a tuple is one in JSON), none, or no ``deps`` key at all; the
    check is on task.scheduled only (another kind's payload may hold any ``deps``)."""
    with WorkLedger(tmp_path, RUN) as wl:
        wl.record("run.open", None, {})
        rows = [wl.record("task.scheduled", "a", {"deps": []}),
                wl.record("task.scheduled", "b", {"deps": ("a",)}),
                wl.record("task.scheduled", "c", {"note": "no deps"}),
                wl.record("task.started", "a", {"deps": 5}),
                wl.record("goal.note", None, {"deps": "anything"})]
    assert [r["payload"] for r in rows] == [{"deps": []}, {"deps": ["a"]}, {"note": "no deps"},
                                            {"deps": 5}, {"deps": "anything"}]


# -- deps: a chain that holds them anyway is read, the task held ------------------------------


HELD_GOAL: list[tuple[str, str | None, dict[str, Any]]] = [
    ("run.open", None, {}),
    ("task.scheduled", "a", {"deps": []}),
    ("task.completed", "a", {}),
    ("task.scheduled", "n", {"deps": 5}),
    ("task.scheduled", "s", {"deps": "a"}),
    ("task.scheduled", "o", {"deps": {}}),
    ("task.scheduled", "m", {"deps": ["a", 5, None]}),
    ("task.scheduled", "u", {"deps": ["a", "ghost"]}),
    ("task.scheduled", "ok", {"deps": ["a"]}),
]
"""Written by another tool: only ``ok`` may run (its one dep completed)."""

HELD = [
    {"task_id": "n", "seq": 4, "reason": "deps must be a list of task ids, got 5"},
    {"task_id": "s", "seq": 5, "reason": "deps must be a list of task ids, got 'a'"},
    {"task_id": "o", "seq": 6, "reason": "deps must be a list of task ids, got an object"},
    {"task_id": "m", "seq": 7, "reason": "deps[1] must be a task id (a string), got 5"},
    {"task_id": "u", "seq": 8,
     "reason": "deps name 'ghost', which no row of this ledger schedules"},
]


def test_resume_holds_a_task_whose_deps_cannot_be_read(world: World, repo: Path) -> None:
    sealed_ledger(repo, HELD_GOAL)
    # The chain itself is sound: verify passes it; the rows break the row contract.
    assert cli(world, repo, "ledger", "verify", RUN).returncode == 0
    before = snapshot(repo)
    dry = cli(world, repo, "ledger", "resume", RUN, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    j = json.loads(dry.stdout)
    assert j["frontier"] == ["ok"]
    assert j["held"] == HELD
    assert {t["task_id"]: t["deps_error"] for t in j["tasks"]} == {
        "a": None, "ok": None, "u": None,
        **{h["task_id"]: h["reason"] for h in HELD if h["task_id"] != "u"}}
    assert snapshot(repo) == before

    plain = cli(world, repo, "ledger", "resume", RUN)
    assert plain.returncode == 0, plain.stderr
    assert "Traceback" not in plain.stderr
    assert plain.stderr.splitlines() == [
        f"harness: warning: run {RUN}: task {h['task_id']} (entry {h['seq']}) is held, not "
        f"resumed: {h['reason']}" for h in HELD]
    assert "1 finished, 0 in flight, 6 scheduled, 0 failed, 0 abandoned, 5 held; " \
        "frontier: ok" in plain.stdout
    # Only the ready task is signalled, and the resume row names only it.
    assert _signals(repo) == [f"{RUN}__ok.signal"]
    last = json.loads(ledger_path(repo).read_bytes().splitlines()[-1])
    assert (last["kind"], last["payload"]["frontier"]) == ("run.resumed", ["ok"])


def test_a_later_schedule_with_readable_deps_releases_a_held_task(world: World,
                                                                  repo: Path) -> None:
    """The deps in force are the last task.scheduled row's that names them: a row with
    readable deps replaces unreadable ones, a row without ``deps`` keeps them."""
    sealed_ledger(repo, [
        ("run.open", None, {}),
        ("task.scheduled", "a", {"deps": []}),
        ("task.completed", "a", {}),
        ("task.scheduled", "b", {"deps": [None]}),
        ("task.scheduled", "c", {"deps": [7]}),
        ("task.scheduled", "b", {"deps": ["a"]}),
        ("task.scheduled", "c", {"note": "deps not named: kept"}),
    ])
    res = cli(world, repo, "ledger", "resume", RUN, "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert (j["frontier"], j["held"]) == (
        ["b"], [{"task_id": "c", "seq": 5, "reason": "deps[0] must be a task id (a string), "
                 "got 7"}])


def test_a_dep_naming_an_id_only_a_hand_written_chain_holds_is_read(world: World,
                                                                    repo: Path) -> None:
    """A reader takes any string as a task id (DESIGN §2; such a chain must verify and
    resume): a dep naming a task whose id our writer would refuse still names that task,
    and waits for it like any other. A dep naming no task of the chain holds its task."""
    odd = 'a"b\x1b[2J'
    sealed_ledger(repo, [
        ("run.open", None, {}),
        ("task.scheduled", odd, {"deps": []}),
        ("task.scheduled", "next", {"deps": [odd]}),
        ("task.scheduled", "orphan", {"deps": [""]}),
        ("task.completed", odd, {}),
    ])
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"harness: warning: run {RUN}: task orphan (entry 4) is held, not resumed: deps "
        "name '', which no row of this ledger schedules"]
    assert "; frontier: next\n" in res.stdout
    assert _signals(repo) == [f"{RUN}__next.signal"]


def test_resume_names_the_tasks_whose_deps_form_a_cycle(world: World, repo: Path) -> None:
    """A task depending on itself, or tasks depending on each other through scheduled
    tasks, can never be ready; resume said nothing, and the goal just stopped moving.
    Each is now held with the cycle named. A cycle through a task in flight is none:
    that task can still complete and release the others."""
    sealed_ledger(repo, [
        ("run.open", None, {}),
        ("task.scheduled", "self", {"deps": ["self"]}),
        ("task.scheduled", "a", {"deps": ["c"]}),
        ("task.scheduled", "b", {"deps": ["a"]}),
        ("task.scheduled", "c", {"deps": ["b", "free"]}),
        ("task.scheduled", "free", {"deps": []}),
        ("task.scheduled", "tail", {"deps": ["a"]}),  # waits on the cycle, in none
        ("task.scheduled", "x", {"deps": ["y"]}),
        ("task.scheduled", "y", {"deps": ["x"]}),
        ("task.started", "y", {}),  # started anyway: x waits for it, as for any task
    ])
    res = cli(world, repo, "ledger", "resume", RUN, "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert (j["frontier"], j["held"]) == (["free", "y"], [
        {"task_id": "self", "seq": 2, "reason": "it depends on itself"},
        {"task_id": "a", "seq": 3, "reason": "its deps form a cycle: 'a' -> 'c' -> 'b' -> 'a'"},
        {"task_id": "b", "seq": 4, "reason": "its deps form a cycle: 'b' -> 'a' -> 'c' -> 'b'"},
        {"task_id": "c", "seq": 5, "reason": "its deps form a cycle: 'c' -> 'b' -> 'a' -> 'c'"},
    ])
    plain = cli(world, repo, "ledger", "resume", RUN)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines()[:2] == [
        f"harness: warning: run {RUN}: task self (entry 2) is held, not resumed: it depends "
        "on itself",
        f"harness: warning: run {RUN}: task a (entry 3) is held, not resumed: its deps form "
        "a cycle: 'a' -> 'c' -> 'b' -> 'a'"]
    assert _signals(repo) == [f"{RUN}__free.signal", f"{RUN}__y.signal"]


def test_a_cycle_is_released_by_a_later_schedule(tmp_path: Path) -> None:
    """Deps in force are the last schedule's: a row that breaks the cycle frees it."""
    rows = [{"seq": i, "kind": k, "task_id": t, "payload": p} for i, (k, t, p) in enumerate([
        ("run.open", None, {}),
        ("task.scheduled", "a", {"deps": ["b"]}),
        ("task.scheduled", "b", {"deps": ["a"]}),
    ], 1)]
    assert [h["task_id"] for h in replay(rows).held] == ["a", "b"]
    rows.append({"seq": 4, "kind": "task.scheduled", "task_id": "b", "payload": {"deps": []}})
    state = replay(rows)
    assert (state.held, state.frontier) == ([], ["b"])


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 6), max_size=3),
                          st.sampled_from(["task.scheduled", "task.started",
                                           "task.completed"])), min_size=1, max_size=7))
def test_the_tasks_held_for_a_cycle_are_those_that_reach_themselves(
        graph: list[tuple[set[int], str]]) -> None:
    """Against a walk by brute force: a scheduled task is held for a cycle exactly when
    it reaches itself through the deps of scheduled tasks."""
    rows = [{"seq": 1, "kind": "run.open", "task_id": None, "payload": {}}]
    for i, (deps, _) in enumerate(graph):  # every task scheduled; deps on tasks only
        rows.append({"seq": len(rows) + 1, "kind": "task.scheduled", "task_id": f"t{i}",
                     "payload": {"deps": [f"t{d}" for d in sorted(deps) if d < len(graph)]}})
    for i, (_, kind) in enumerate(graph):
        if kind != "task.scheduled":
            rows.append({"seq": len(rows) + 1, "kind": kind, "task_id": f"t{i}",
                         "payload": {}})
    state = replay(rows)
    waiting = {f"t{i}" for i, (_, kind) in enumerate(graph) if kind == "task.scheduled"}

    def reaches_itself(t: str) -> bool:
        seen: set[str] = set()
        todo = [d for d in state.tasks[t].deps if d in waiting]
        while todo:
            v = todo.pop()
            if v == t:
                return True
            if v not in seen:
                seen.add(v)
                todo += [d for d in state.tasks[v].deps if d in waiting]
        return False

    assert {h["task_id"] for h in state.held} == {t for t in waiting if reaches_itself(t)}


def test_a_long_chain_of_deps_is_no_cycle_and_no_recursion() -> None:
    """200,000 tasks each waiting on the next: no cycle, and the walk is no recursion
    (Python's limit is 1,000 frames)."""
    n = 200_000
    rows = [{"seq": 1, "kind": "run.open", "task_id": None, "payload": {}}]
    rows += [{"seq": i + 2, "kind": "task.scheduled", "task_id": f"t{i}",
              "payload": {"deps": [f"t{i + 1}"] if i + 1 < n else []}} for i in range(n)]
    state = replay(rows)
    assert (state.held, state.frontier) == ([], [f"t{n - 1}"])
    rows.append({"seq": n + 2, "kind": "task.scheduled", "task_id": f"t{n - 1}",
                 "payload": {"deps": ["t0"]}})
    held = replay(rows).held
    assert len(held) == n
    assert (held[0], held[-1]) == (
        {"task_id": "t0", "seq": 2, "reason": f"its deps form a cycle of {n} tasks: it "
         "waits on 't1', whose deps lead back to it"},
        {"task_id": f"t{n - 1}", "seq": n + 2, "reason": f"its deps form a cycle of {n} "
         "tasks: it waits on 't0', whose deps lead back to it"})


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling symlink"])
def test_a_segment_that_is_no_regular_file_fails_closed(world: World, repo: Path,
                                                         kind: str) -> None:
    """A newest segment that is a directory (or a FIFO, or a symlink to nothing) was
    passed over: verify said ok over the rows before it, resume went on without its
    rows, and an anchor published the chain short of them. Now every reader names it
    and refuses (exit 2), and the writer will not append past it."""
    sealed_ledger(repo, GOAL)
    seg = ledger_path(repo).with_name("000001.jsonl")
    if kind == "directory":
        seg.mkdir()
        why = "it is a directory, not a regular file"
    elif kind == "fifo":
        os.mkfifo(seg)
        why = "it is a FIFO, not a regular file"
    else:
        seg.symlink_to(seg.with_name("gone"))
        why = "No such file or directory"
    said = (f"harness: work ledger {ledger_path(repo).parent}: segment '000001.jsonl' "
            f"cannot be read: {why}")
    for args in (("verify", RUN), ("resume", RUN, "--dry-run"), ("anchor", RUN)):
        res = cli(world, repo, "ledger", *args)
        assert (res.returncode, res.stdout, err_line(res)) == (2, "", said), args
    with pytest.raises(VerificationFailed) as refused:
        WorkLedger(repo, RUN)
    assert str(refused.value) == said.removeprefix("harness: ")


# -- repo growth: gc, then a normal git gc ------------------------------------------------------


def _machines(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Machine A's work tree, a bare `origin`, and machine B, a clone of it."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    a = make_repo(tmp_path / "a")
    git(a, "remote", "add", "origin", str(bare))
    git(a, "push", "-q", "origin", "main")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(bare), str(b))
    return a, bare, b


def _exists(repo: Path, oid: str) -> bool:
    return git(repo, "cat-file", "-e", oid, check=False).returncode == 0


def test_gc_then_git_gc_reclaims_the_superseded_chunks_on_a_host_that_fetched(
        world: World, tmp_path: Path) -> None:
    """"Repo growth": gc leaves one parentless commit of the same tree, and "superseded
    chunk blobs become unreachable and a normal git gc reclaims them". On a host that
    has fetched the run (a migration's way back), the anchor fetch kept under
    refs/harness/fetched/ held the old history reachable, so git gc reclaimed nothing;
    gc now deletes such a fetched anchor, whose chain the anchored one holds."""
    a, _, b = _machines(tmp_path)
    record(a, GOAL[:4])
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", WILDCARD)
    first = git(a, "rev-parse", f"{REF}:chunk-000000.jsonl").stdout.strip()
    # B: a default clone has no side ref; fetch brings it, B works on and shares it.
    assert cli(world, b, "ledger", "runs", "--json").stdout == '{\n  "runs": []\n}\n'
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    record(b, GOAL[4:])
    assert cli(world, b, "ledger", "anchor", RUN).returncode == 0
    git(b, "push", "-q", "origin", WILDCARD)
    second = git(b, "rev-parse", f"{REF}:chunk-000000.jsonl").stdout.strip()
    # A takes B's work back, goes on, and squashes its anchor history.
    assert cli(world, a, "ledger", "fetch", RUN).returncode == 0
    record(a, [("task.completed", "t2", {"commit": "def456"})])
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    tree = git(a, "rev-parse", f"{REF}^{{tree}}").stdout.strip()
    assert git(a, "rev-list", "--count", REF).stdout.strip() == "3"

    before = snapshot(a)
    dry = cli(world, a, "ledger", "gc", RUN, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert (plan["dropped_commits"], plan["dropped_fetched"], plan["kept_fetched"]) == (
        2, [FETCHED], [])
    assert snapshot(a) == before
    res = cli(world, a, "ledger", "gc", RUN)
    assert res.returncode == 0, res.stderr
    assert res.stdout.rstrip("\n").endswith(
        f"; deleted {FETCHED}: fetched anchor(s) of this chain, which kept the squashed "
        "history reachable")
    assert git(a, "for-each-ref", "--format=%(refname)", "refs/harness/").stdout == f"{REF}\n"
    assert git(a, "rev-parse", f"{REF}^{{tree}}").stdout.strip() == tree
    assert git(a, "rev-list", "--count", REF).stdout.strip() == "1"
    git(a, "gc", "-q", "--prune=now")
    assert (_exists(a, first), _exists(a, second)) == (False, False)
    assert cli(world, a, "ledger", "verify", RUN).returncode == 0
    assert cli(world, a, "ledger", "resume", RUN, "--dry-run").returncode == 0

    # Sharing the squashed ref needs the forced refspec gc names; B follows it.
    assert git(a, "push", "origin", WILDCARD, check=False).returncode != 0
    git(a, "push", "-q", "origin", "+" + WILDCARD)
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    assert cli(world, b, "ledger", "gc", RUN).returncode == 0
    git(b, "gc", "-q", "--prune=now")
    assert (_exists(b, first), _exists(b, second)) == (False, False)
    assert rows_of(b) == rows_of(a)


def test_gc_keeps_a_fetched_lineage_that_diverges_and_names_it(world: World,
                                                               tmp_path: Path) -> None:
    """A fetched anchor of another lineage is the trace resume refuses on: gc keeps it
    (and says so), and the resume is refused after gc as before."""
    _, b = _two_lineages(world, tmp_path)
    theirs = git(b, "rev-parse", FETCHED).stdout
    res = cli(world, b, "ledger", "gc", RUN)
    assert res.returncode == 0, res.stderr
    assert res.stdout.rstrip("\n").endswith(
        f"; kept {FETCHED}: another lineage of the run (git gc cannot reclaim what it "
        "reaches)")
    assert git(b, "rev-parse", FETCHED).stdout == theirs
    refused = cli(world, b, "ledger", "resume", RUN)
    assert refused.returncode == 3
    assert "work ledgers diverge at entry 9" in err_line(refused)


# -- what travels --------------------------------------------------------------------------------


NEWER: list[tuple[str, str | None, dict[str, Any]]] = [
    ("run.open", None, {"goal": "g"}),
    ("task.scheduled", "t1", {"deps": []}),
    ("task.scheduled", "t2", {"deps": ["t1"]}),
    ("task.started", "t1", {}),
    ("task.suspended", "t1", {"why": "parked"}),  # kinds of a newer scheduler
    ("mission.defined", None, {"phases": 3}),
    ("task.completed", "t1", {"commit": "abc"}),
]


def test_a_chain_of_a_newer_scheduler_travels_and_resumes(world: World,
                                                          tmp_path: Path) -> None:
    """"Unknown kinds are carried through replay untouched, so a ledger written by a
    newer scheduler still resumes on an older install": such a chain (the writer here
    refuses unknown task.* kinds, another tool's need not) anchors, travels byte for
    byte, resumes on the other machine counting the kinds it does not know, and comes
    back."""
    a, _, b = _machines(tmp_path)
    sealed_ledger(a, NEWER)
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", WILDCARD)
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    assert ledger_path(b).read_bytes() == ledger_path(a).read_bytes()
    res = cli(world, b, "ledger", "resume", RUN, "--json")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert (j["unknown_kinds"], j["finished"], j["frontier"], j["held"]) == (
        {"mission.defined": 1, "task.suspended": 1}, ["t1"], ["t2"], [])
    assert cli(world, b, "ledger", "anchor", RUN).returncode == 0
    git(b, "push", "-q", "origin", WILDCARD)
    back = cli(world, a, "ledger", "fetch", RUN, "--json")
    assert back.returncode == 0, back.stderr
    assert (json.loads(back.stdout)["status"], rows_of(a)) == ("extended", rows_of(b))


def test_a_secret_in_a_tuple_or_a_key_never_reaches_another_machine(
        world: World, tmp_path: Path) -> None:
    """"Secrets never become portable": the scrubber walks tuples and dict keys too (the
    original tool passed both through), so no object on the remote, and no file on the
    machine that fetched, holds the token; the redacted chain verifies there."""
    a, bare, b = _machines(tmp_path)
    record(a, [("run.open", None, {}),
               ("task.started", "t1", {"argv": ("deploy", "--token", API_KEY),
                                       API_KEY: "as a key", "nested": {"k": [(API_KEY,)]}})])
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", WILDCARD)
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    assert cli(world, b, "ledger", "verify", RUN).returncode == 0
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=bare,
                             capture_output=True, check=True, timeout=120).stdout
    assert b"--token" in objects and API_KEY.encode() not in objects
    assert API_KEY not in ledger_path(b).read_text()
    payload = rows_of(b)[1]["payload"]
    assert payload["argv"] == ["deploy", "--token", "[REDACTED]"]
    assert API_KEY not in json.dumps(payload)


def test_the_head_in_the_audit_event_catches_a_truncated_tail(world: World,
                                                              repo: Path) -> None:
    """Rows removed from the end leave a shorter chain that verifies on its own (the
    original tool's blind spot, and ours without a reference): the anchor's audit event
    names the head, `verify --expected-head` with it fails (exit 2) naming the last
    line, and anchor and resume refuse the shorter chain against the anchor."""
    record(repo, GOAL)
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    [event] = [json.loads(x) for x in
               (world.root / "state" / "harness" / "audit" / "audit.jsonl").read_text()
               .splitlines()]
    head = event["data"]["head_hash"]
    path = ledger_path(repo)
    path.write_bytes(b"".join(x + b"\n" for x in path.read_bytes().splitlines()[:6]))
    assert cli(world, repo, "ledger", "verify", RUN).returncode == 0
    res = cli(world, repo, "ledger", "verify", RUN, "--expected-head", head, "--json")
    assert res.returncode == 2
    j = json.loads(res.stdout)
    assert (j["ok"], j["seq"], j["line"], j["entry_count"]) == (False, 6, 6, 6)
    assert j["reason"].startswith(f"head mismatch: expected {head[:16]}")
    for args in (["anchor", RUN], ["resume", RUN, "--dry-run"]):
        refused = cli(world, repo, "ledger", *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert "is ahead of the local" in err_line(refused)


# -- divergence: resolution is explicit ------------------------------------------------------


def _two_lineages(world: World, tmp_path: Path) -> tuple[Path, Path]:
    """A and B both resume the head A anchored; each anchors its own resume, A pushes
    first, and B's fetch meets A's lineage: refused (exit 3)."""
    a, _, b = _machines(tmp_path)
    record(a, GOAL)
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", WILDCARD)
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    for host in (a, b):
        assert cli(world, host, "ledger", "resume", RUN).returncode == 0
        assert cli(world, host, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", WILDCARD)
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 3
    return a, b


def test_keeping_the_other_lineage_moves_the_own_aside_and_fetches(world: World,
                                                                   tmp_path: Path) -> None:
    """"Pick the lineage to keep, move the other aside, re-anchor." B keeps A's: with its
    ledger directory moved aside, a fetch is still refused, B's own side ref being the
    other lineage, and (once a refused fetch made the ledger directory and its lock
    file) it wrote nothing, so resume still points at the side ref; deleting that as
    the message says, the fetch writes A's chain and B resumes it."""
    a, b = _two_lineages(world, tmp_path)
    ledger = ledger_path(b).parent
    ledger.rename(tmp_path / "b-lineage")
    before = snapshot(b)
    refused = cli(world, b, "ledger", "fetch", RUN)
    assert refused.returncode == 3
    assert f"delete the anchor with 'git update-ref -d {REF}'" in err_line(refused)
    assert snapshot(b) == before
    assert not ledger.exists()
    hint = cli(world, b, "ledger", "resume", RUN, "--dry-run")
    assert hint.returncode == 1
    assert err_line(hint).endswith(
        f"; {REF} exists here: run 'harness ledger fetch {RUN} --remote .' to restore the "
        "local ledger from it")
    git(b, "update-ref", "-d", REF)
    fetched = cli(world, b, "ledger", "fetch", RUN, "--json")
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads(fetched.stdout)["status"] == "written"
    assert rows_of(b) == rows_of(a)
    resumed = cli(world, b, "ledger", "resume", RUN, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert (json.loads(resumed.stdout)["anchored"], json.loads(resumed.stdout)["prior_resumes"]
            ) == ("identical", 1)


def test_keeping_the_own_lineage_drops_the_fetched_one_and_re_anchors(world: World,
                                                                      tmp_path: Path) -> None:
    """B keeps its own lineage: it deletes the fetched anchor, resumes, re-anchors and
    pushes it in place of A's (forced: it is not a fast-forward); A's next fetch meets
    the lineage B kept and is refused until A, in turn, keeps one."""
    a, b = _two_lineages(world, tmp_path)
    git(b, "update-ref", "-d", FETCHED)
    assert cli(world, b, "ledger", "resume", RUN).returncode == 0
    assert cli(world, b, "ledger", "anchor", RUN).returncode == 0
    assert git(b, "push", "origin", WILDCARD, check=False).returncode != 0
    git(b, "push", "-q", "origin", "+" + WILDCARD)
    refused = cli(world, a, "ledger", "fetch", RUN)
    assert refused.returncode == 3
    assert "work ledgers diverge at entry 9" in err_line(refused)
    ledger_path(a).parent.rename(tmp_path / "a-lineage")
    git(a, "update-ref", "-d", REF)
    assert cli(world, a, "ledger", "fetch", RUN).returncode == 0
    assert rows_of(a) == rows_of(b) and len(rows_of(a)) == 10
