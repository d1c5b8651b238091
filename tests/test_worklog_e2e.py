"""Machine migration and divergent resumes, end to end with real git and the real CLI.

The spec's "Machine migration": a goal's ledger written on machine A is anchored, pushed to
a bare remote with the explicit refspec, cloned on machine B, fetched, resumed there
(exactly the frontier, never completed work), anchored and pushed back; on A, `fetch`
fast-forwards the local ledger to B's chain. Then "two resumes are an error, never a
merge": two clones resume the same head, each anchors and pushes; the second to meet the
first's lineage is refused with exit 3 naming the fork entry and both heads, and nothing
is merged or written.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import World
from test_worklog_cli import (
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
    signals,
    snapshot,
)

REFSPEC = f"{REF}:{REF}"


def _remote(tmp_path: Path) -> tuple[Path, Path]:
    """Machine A's work tree with a bare `origin`."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    a = make_repo(tmp_path / "a")
    git(a, "remote", "add", "origin", str(bare))
    git(a, "push", "-q", "origin", "main")
    return a, bare


def _clone(bare: Path, where: Path) -> Path:
    git(where.parent, "clone", "-q", str(bare), str(where))
    return where


def test_machine_migration(world: World, tmp_path: Path) -> None:
    a, bare = _remote(tmp_path)
    rows = record(a, GOAL)
    head_a = rows[-1]["entry_hash"]

    anchored = cli(world, a, "ledger", "anchor", RUN, "--json")
    assert anchored.returncode == 0, anchored.stderr
    assert json.loads(anchored.stdout)["head_hash"] == head_a
    git(a, "push", "-q", "origin", REFSPEC)

    b = _clone(bare, tmp_path / "b")
    # A default clone does not carry the side ref: B has nothing until it fetches.
    assert git(b, "rev-parse", "--verify", "--quiet", REF, check=False).returncode != 0
    assert cli(world, b, "ledger", "resume", RUN).returncode == 1

    fetched = cli(world, b, "ledger", "fetch", RUN, "--json")
    assert fetched.returncode == 0, fetched.stderr
    data = json.loads(fetched.stdout)
    assert (data["status"], data["entry_count"], data["head_hash"]) == ("written", 8, head_a)
    assert ledger_path(b).read_bytes() == ledger_path(a).read_bytes()
    ok = cli(world, b, "ledger", "verify", RUN, "--expected-head", head_a)
    assert ok.returncode == 0, ok.stderr

    resumed = cli(world, b, "ledger", "resume", RUN, "--json")
    assert resumed.returncode == 0, resumed.stderr
    res = json.loads(resumed.stdout)
    assert res["frontier"] == ["t2", "t3"]
    b_rows = rows_of(b)
    assert len(b_rows) == 9 and b_rows[-1]["kind"] == "run.resumed"
    head_b = b_rows[-1]["entry_hash"]
    assert b_rows[-1]["prev_hash"] == head_a
    sig = signals(b)
    assert sorted(sig) == [f"{RUN}__t2.signal", f"{RUN}__t3.signal"]
    assert {s["task_id"]: (s["status"], s["attempts"]) for s in sig.values()} == {
        "t2": ("started", 1), "t3": ("scheduled", 0)}
    assert all(s["resume_seq"] == 9 and s["head_hash"] == head_b for s in sig.values())
    # Completed work is never redone, and t4 still waits on t2 and t3.
    assert not any(s["task_id"] in ("t1", "t4") for s in sig.values())
    assert signals(a) == {}

    # B works on and hands the chain back.
    record(b, [("task.completed", "t2", {"commit": "def456"})])
    assert cli(world, b, "ledger", "anchor", RUN).returncode == 0
    git(b, "push", "-q", "origin", REFSPEC)

    back = cli(world, a, "ledger", "fetch", RUN, "--json")
    assert back.returncode == 0, back.stderr
    got = json.loads(back.stdout)
    assert (got["status"], got["entry_count"], got["new_entries"]) == ("extended", 10, 2)
    assert got["head_hash"] == rows_of(b)[-1]["entry_hash"]
    assert ledger_path(a).read_bytes() == ledger_path(b).read_bytes()
    assert cli(world, a, "ledger", "verify", RUN).returncode == 0
    again = cli(world, a, "ledger", "fetch", RUN, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "unchanged"
    assert git(a, "rev-parse", REF).stdout == git(b, "rev-parse", REF).stdout
    assert ledger_path(a).read_bytes() == ledger_path(b).read_bytes()

    # A resumes where B left off: the resume B did is counted, t2 is done now.
    dry = cli(world, a, "ledger", "resume", RUN, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    projected = json.loads(dry.stdout)
    assert projected["prior_resumes"] == 1
    assert projected["frontier"] == ["t3"]


def test_two_resumes_of_one_head_diverge(world: World, tmp_path: Path) -> None:
    a, bare = _remote(tmp_path)
    rows = record(a, GOAL)
    assert cli(world, a, "ledger", "anchor", RUN).returncode == 0
    git(a, "push", "-q", "origin", REFSPEC)

    heads: dict[str, str] = {}
    clones: dict[str, Path] = {}
    for name in ("b", "c"):
        clone = _clone(bare, tmp_path / name)
        assert cli(world, clone, "ledger", "fetch", RUN).returncode == 0
        res = cli(world, clone, "ledger", "resume", RUN)
        assert res.returncode == 0, res.stderr
        assert cli(world, clone, "ledger", "anchor", RUN).returncode == 0
        heads[name] = rows_of(clone)[-1]["entry_hash"]
        clones[name] = clone
    b, c = clones["b"], clones["c"]
    # Same parent, different nonces: two chains extending entry 8.
    assert rows_of(b)[-1]["prev_hash"] == rows_of(c)[-1]["prev_hash"] == rows[-1]["entry_hash"]
    assert heads["b"] != heads["c"]

    git(b, "push", "-q", "origin", REFSPEC)
    # C's push of its own lineage is not a fast-forward: git itself refuses it.
    assert git(c, "push", "-q", "origin", REFSPEC, check=False).returncode != 0

    # C fetches B's lineage: refused, exit 3, naming the fork entry and both heads.
    before, ref_before = snapshot(c / ".harness"), git(c, "rev-parse", REF).stdout
    fetched = cli(world, c, "ledger", "fetch", RUN)
    assert fetched.returncode == 3, fetched.stderr
    line = err_line(fetched)
    assert "work ledgers diverge at entry 9: two chains extend the same parent entry" in line
    assert f"local head {heads['c']}" in line and f"anchored head {heads['b']}" in line
    assert snapshot(c / ".harness") == before
    assert git(c, "rev-parse", REF).stdout == ref_before
    assert len(rows_of(c)) == 9

    # If C's side ref does take B's lineage (a forced plain git fetch), resume still meets
    # it and refuses: exit 3, nothing written, nothing merged.
    git(c, "fetch", "-q", "origin", f"+{REFSPEC}")
    assert git(c, "rev-parse", REF).stdout == git(b, "rev-parse", REF).stdout
    before = snapshot(c / ".harness")
    for args in (["resume", RUN], ["resume", RUN, "--dry-run", "--json"]):
        res = cli(world, c, "ledger", *args)
        assert res.returncode == 3, (args, res.stderr)
        line = err_line(res)
        assert "diverge at entry 9" in line
        assert f"local head {heads['c']}" in line and f"anchored head {heads['b']}" in line
    assert snapshot(c / ".harness") == before
    # Anchoring C's lineage over B's is refused the same way.
    anchored = cli(world, c, "ledger", "anchor", RUN)
    assert anchored.returncode == 3, anchored.stderr
    assert "diverge at entry 9" in err_line(anchored)
    assert git(c, "rev-parse", REF).stdout == git(b, "rev-parse", REF).stdout

    # Runs shows the disagreement.
    listing = cli(world, c, "ledger", "runs", "--json")
    assert listing.returncode == 0, listing.stderr
    [r] = json.loads(listing.stdout)["runs"]
    assert r["agreement"] == "diverged at entry 9"
