"""Mutation-found gaps in the work ledger's projection (`harness.worklog.replay`), its
row contract (`harness.worklog.rows`) and its writer (`harness.worklog.store`), left by
tests/test_worklog_mutants.py. Each test pins a behaviour no other test held exactly;
those under "defects" failed before the fix they name (replay ordered a task first named
by a row of another kind before one scheduled earlier, though a task's place is the row
that first scheduled it).

Replay is driven with rows as the writer returns them (or as a reader decodes them) and,
where a resumed goal sees the result, through the real `harness ledger resume` CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.worklog.replay import replay
from test_worklog_cli import RUN, cli, make_repo, record

STATUS = {"task.scheduled": "scheduled", "task.started": "started",
          "task.completed": "completed", "task.failed": "failed",
          "task.abandoned": "abandoned"}


def _rows(events: list[tuple[str, str | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows in chain order as replay takes them (verified: seq and entry_hash set)."""
    return [{"seq": i, "kind": k, "task_id": t, "payload": p, "entry_hash": f"h{i}"}
            for i, (k, t, p) in enumerate(events, 1)]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


# -- replay: task states -----------------------------------------------------------------

@pytest.mark.parametrize("first", sorted(STATUS))
@pytest.mark.parametrize("then", sorted(STATUS))
def test_the_later_row_decides_a_state_unless_the_task_completed(first: str,
                                                                 then: str) -> None:
    """Completed is terminal; every other state (abandoned and failed included) is
    replaced by the task's next row, so a rescheduled abandoned task is ready again."""
    st = replay(_rows([("run.open", None, {}), ("task.scheduled", "t", {"deps": []}),
                       (first, "t", {}), (then, "t", {})]))
    want = "completed" if first == "task.completed" else STATUS[then]
    assert st.to_json()["tasks"] == [{
        "task_id": "t", "status": want, "deps": [], "first_seq": 2, "last_seq": 4,
        "attempts": [first, then].count("task.started")}]
    assert st.frontier == (["t"] if want in ("scheduled", "started") else [])


def test_every_resume_is_counted() -> None:
    events: list[tuple[str, str | None, dict[str, Any]]] = [("run.open", None, {})]
    events += [("run.resumed", None, {"nonce": str(i)}) for i in range(3)]
    assert replay(_rows(events)).to_json()["prior_resumes"] == 3


def test_unknown_kinds_are_counted_per_kind_and_carried_in_order() -> None:
    rows = _rows([("run.open", None, {}), ("goal.note", None, {"i": 1}),
                  ("goal.x", "t", {}), ("goal.note", None, {"i": 2})])
    st = replay(rows)
    assert st.to_json()["unknown_kinds"] == {"goal.note": 2, "goal.x": 1}
    assert st.unknown == [rows[1], rows[2], rows[3]]
    assert st.tasks == {}


def test_deps_keep_the_order_the_scheduler_wrote() -> None:
    st = replay(_rows([("task.scheduled", "t", {"deps": ["z", "a", "m", "a"]})]))
    assert st.to_json()["tasks"][0]["deps"] == ["z", "a", "m"]


# -- defects -----------------------------------------------------------------------------

def test_a_task_takes_its_place_from_the_row_that_first_scheduled_it(world: World,
                                                                     repo: Path) -> None:
    """A task first named by another kind (here started before it was scheduled, which the
    writer accepts) is ordered by its first task.scheduled row, as the frontier's order
    is documented to be; a task never scheduled keeps the seq that first named it."""
    record(repo, [
        ("run.open", None, {}),
        ("task.started", "late", {}),
        ("task.scheduled", "early", {"deps": []}),
        ("task.scheduled", "late", {"deps": []}),
        ("task.scheduled", "late", {"deps": []}),
        ("task.started", "never", {}),
    ])
    res = cli(world, repo, "ledger", "resume", RUN, "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["frontier"] == ["early", "late", "never"]
    got = [(t["task_id"], t["first_seq"], t["last_seq"], t["attempts"]) for t in data["tasks"]]
    assert got == [("early", 3, 3, 0), ("late", 4, 5, 1), ("never", 6, 6, 1)]
