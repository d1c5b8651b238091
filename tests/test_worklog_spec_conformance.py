"""The work ledger against shared/specs/durable-work-ledger.txt, end to end.

Black-box checks of `harness ledger verify|anchor|fetch|resume|runs|gc` with real git
(work trees standing for two machines, a bare remote) and the real CLI, for the spec's
requirements and the original tool's known bugs (shared/reference/bernstein-work-ledger.md)
that no other test file pins. Among them, the row contract's ``deps`` (DESIGN.md §2: a
``task.scheduled`` payload names its dependencies as a list of task ids): the writer
refuses a row whose ``deps`` are anything else, and a chain holding one (by hand, or from
another tool) never puts the task in the resume frontier, gives it no signal, and says
which task is held and why (``held`` in ``--json``, one stderr warning per task).
Exit codes are exact: 0 ok, 1 no ledger, 2 verification failed, 3 divergence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.worklog.rows import RowRejected
from harness.worklog.store import WorkLedger
from test_worklog_cli import (
    API_KEY,
    RUN,
    cli,
    ledger_path,
    make_repo,
    sealed_ledger,
    snapshot,
)


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
], ids=["int", "str", "object", "null", "int-null", "null-2nd", "empty", "nested", "control",
        "long", "secret"])
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
