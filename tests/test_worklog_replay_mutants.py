"""Mutation-found gaps in the work ledger's projection (`harness.worklog.replay`), its
row contract (`harness.worklog.rows`) and its writer (`harness.worklog.store`), left by
tests/test_worklog_mutants.py. Each test pins a behaviour no other test held exactly;
those under "defects" failed before the fix they name (replay ordered a task first named
by a row of another kind before one scheduled earlier, though a task's place is the row
that first scheduled it).

Replay is driven with rows as the writer returns them (or as a reader decodes them) and,
where a resumed goal sees the result, through the real `harness ledger resume` CLI."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.ledger.files import FaultyFiles
from harness.worklog import WorkLedgerError
from harness.worklog.replay import replay
from harness.worklog.rows import RowRejected, ledger_dir
from harness.worklog.store import WorkLedger
from test_worklog_cli import RUN, cli, err_line, ledger_path, make_repo, record

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
        "task_id": "t", "status": want, "deps": [], "deps_error": None, "first_seq": 2,
        "last_seq": 4,
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


def test_a_symlink_at_the_lock_is_refused_and_its_target_left_alone(
        world: World, repo: Path, tmp_path: Path) -> None:
    """The writer opens its lock file as it opens a segment, following no link: a symlink
    at ``.lock`` is refused by name, where it had the target truncated and overwritten
    with the holder's identity (and truncated again on release)."""
    record(repo, [("run.open", None, {})])
    lock = ledger_path(repo).parent / ".lock"
    victim = tmp_path / "notes.txt"
    victim.write_bytes(b"keep me\n")
    lock.unlink()
    lock.symlink_to(victim)
    res = cli(world, repo, "ledger", "resume", RUN)
    assert res.returncode == 2
    assert err_line(res) == (f"harness: cannot open work ledger {lock.parent}: "
                             f"Too many levels of symbolic links ({lock})")
    assert victim.read_bytes() == b"keep me\n"
    with pytest.raises(WorkLedgerError, match="Too many levels of symbolic links"):
        WorkLedger(repo, RUN)
    assert victim.read_bytes() == b"keep me\n" and lock.is_symlink()


# -- store: the lock file ----------------------------------------------------------------

def test_a_stale_longer_identity_is_replaced_whole(tmp_path: Path) -> None:
    """A holder killed before releasing leaves its identity in the lock file; the next
    holder's identity replaces it whole, not over its first bytes."""
    d = ledger_dir(tmp_path, "stale")
    d.mkdir(parents=True, mode=0o700)
    (d / ".lock").write_bytes(b'{"host": "' + b"h" * 300 + b'", "pid": 1, "since": "x"}\n')
    with WorkLedger(tmp_path, "stale"):
        text = (d / ".lock").read_bytes()
        assert text.count(b"\n") == 1 and text.endswith(b"}\n")
        assert json.loads(text)["pid"] == os.getpid()
        assert sorted(json.loads(text)) == ["host", "pid", "since"]
    assert (d / ".lock").read_bytes() == b""


# -- store: durability -------------------------------------------------------------------

def test_a_row_whose_sync_failed_is_pending_until_it_lands(tmp_path: Path) -> None:
    """A refused fdatasync is no acknowledgement: `record` raises, and `pending` counts
    the row for as long as the disk refuses it; once it accepts, the row lands in order."""
    faulty = FaultyFiles()
    with WorkLedger(tmp_path, "late", files=faulty, sync_timeout=5.0) as wl:
        faulty.inject("sync", errno=errno.EIO)
        with pytest.raises(WorkLedgerError, match=r"run\.open row was not confirmed durable"):
            wl.record("run.open", None, {"n": 1})
        assert wl.pending() == 1
        faulty.clear("sync")
        deadline = time.monotonic() + 60
        while wl.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert wl.pending() == 0
        assert [(r["seq"], r["payload"]) for r in wl.rows()] == [(1, {"n": 1})]


def test_a_payload_of_exactly_the_line_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "big") as wl:
        payload = {"x": "y" * ((1 << 20) - 8)}  # canonical: {"x":"yy…"} of 1 MiB
        with pytest.raises(RowRejected) as ei:
            wl.record("goal.blob", None, payload)
        assert str(ei.value) == (
            "payload of 1048576 bytes cannot fit the 1048576-byte line limit")
        assert wl.record("run.open", None, {})["seq"] == 1


def test_the_opened_chain_is_described_as_it_is_after_its_torn_tail_is_cut(
        tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "torn") as wl:
        wl.record("run.open", None, {})
    seg = ledger_dir(tmp_path, "torn") / "000000.jsonl"
    whole = seg.read_bytes()
    seg.write_bytes(whole + b'{"seq":2,"kin')
    with WorkLedger(tmp_path, "torn") as wl:
        assert wl.recovered_tail == b'{"seq":2,"kin'
        assert (wl.opened.ok, wl.opened.entry_count) == (True, 1)
        assert (wl.opened.torn_tail, wl.opened.torn_size) == (None, 0)
        assert seg.read_bytes() == whole


# -- rows: the contract's limits ---------------------------------------------------------

def test_a_kind_of_64_characters_is_written_and_one_of_65_refused_by_name(
        tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "kinds") as wl:
        assert wl.record("g" + "x" * 63, None, {})["kind"] == "g" + "x" * 63
        with pytest.raises(RowRejected) as ei:
            wl.record("g" + "x" * 64, None, {})
        assert str(ei.value) == (
            f"kind 'g{'x' * 64}' is not a valid kind (a lowercase letter, then up to 63 of "
            "[a-z0-9_.-])")
        assert wl.record("run.open", None, {})["seq"] == 2

