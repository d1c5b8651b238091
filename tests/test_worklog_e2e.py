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
from harness.worklog.store import WorkLedger
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


def _anchored_and_fetched(world: World, tmp_path: Path) -> tuple[Path, Path]:
    """A records GOAL, anchors it and pushes; B clones the remote and fetches the run."""
    a, bare = _remote(tmp_path)
    record(a, GOAL)
    _anchor_and_push(world, a)
    b = _clone(bare, tmp_path / "b")
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    return a, b


def _anchor_and_push(world: World, repo: Path) -> None:
    assert cli(world, repo, "ledger", "anchor", RUN).returncode == 0
    git(repo, "push", "-q", "origin", REFSPEC)


def test_a_resume_after_a_divergent_fetch_is_refused(world: World, tmp_path: Path) -> None:
    """A and B resume the same head; A pushes first. B's fetch meets A's lineage and is
    refused; the fetched anchor stays under refs/harness/fetched/, so B's resume meets it
    too and is refused the same way, until B drops one lineage."""
    a, b = _anchored_and_fetched(world, tmp_path)
    for args in (["resume", RUN], ["anchor", RUN]):
        assert cli(world, a, "ledger", *args).returncode == 0
    git(a, "push", "-q", "origin", REFSPEC)
    assert cli(world, b, "ledger", "resume", RUN).returncode == 0  # B's own, not anchored
    head_a, head_b = rows_of(a)[-1]["entry_hash"], rows_of(b)[-1]["entry_hash"]
    fetched = cli(world, b, "ledger", "fetch", RUN)
    assert fetched.returncode == 3
    assert (f"diverge at entry 9: two chains extend the same parent entry (local head "
            f"{head_b}, anchored head {head_a})") in err_line(fetched)
    private = f"refs/harness/fetched/origin/{RUN}"
    assert git(b, "rev-parse", private).stdout == git(a, "rev-parse", REF).stdout

    before = snapshot(b)
    for args in (["resume", RUN], ["resume", RUN, "--dry-run", "--json"]):
        res = cli(world, b, "ledger", *args)
        assert res.returncode == 3, (args, res.stderr)
        assert err_line(res) == (
            f"harness: work ledgers diverge at entry 9: two chains extend the same parent "
            f"entry (local head {head_b}, fetched head {head_a}). Two lineages of run {RUN} "
            f"exist; refusing to resume. Inspect both chains with 'harness ledger verify "
            f"{RUN} --json', keep exactly one lineage (move the other ledger directory "
            f"aside, or delete the fetched anchor with 'git update-ref -d {private}'), and "
            "re-anchor it.")
    assert snapshot(b) == before
    assert len(rows_of(b)) == 9 and sorted(signals(b)) == [f"{RUN}__t2.signal", f"{RUN}__t3.signal"]

    # B keeps its own lineage, as the message says: the resume goes ahead.
    git(b, "update-ref", "-d", private)
    resumed = cli(world, b, "ledger", "resume", RUN, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["resume_seq"] == 10


def test_a_resume_behind_a_fetched_anchor_is_refused(world: World, tmp_path: Path) -> None:
    """A fetch that fetched the anchor but could not write it (a writer held the run)
    leaves the fetched anchor ahead of the local chain: a resume would fork from it."""
    a, b = _anchored_and_fetched(world, tmp_path)
    record(a, [("task.completed", "t2", {"commit": "def456"})])
    _anchor_and_push(world, a)
    with WorkLedger(b, RUN):
        held = cli(world, b, "ledger", "fetch", RUN)
        assert held.returncode == 2 and "only one writer may hold a run" in err_line(held)
    before = snapshot(b)
    res = cli(world, b, "ledger", "resume", RUN)
    assert res.returncode == 2
    assert err_line(res) == (
        f"harness: the work ledger fetched into refs/harness/fetched/origin/{RUN} is ahead "
        f"of the local one (9 > 8 entries); refusing to resume a stale chain: run 'harness "
        f"ledger fetch {RUN}' from that remote first")
    assert snapshot(b) == before
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    assert cli(world, b, "ledger", "resume", RUN).returncode == 0
    assert [r["kind"] for r in rows_of(b)[-2:]] == ["task.completed", "run.resumed"]


def test_fetch_over_a_diverged_local_anchor_writes_nothing(world: World, tmp_path: Path) -> None:
    """B anchored a lineage of its own and its ledger directory is gone: the side ref is
    the only trace of that lineage, and a fetch of A's diverging one is refused (exit 3)
    before a ledger file is written or a ref moves."""
    a, b = _anchored_and_fetched(world, tmp_path)
    record(a, [("task.completed", "t2", {"by": "a"})])
    _anchor_and_push(world, a)
    record(b, [("task.failed", "t2", {"by": "b"})])
    assert cli(world, b, "ledger", "anchor", RUN).returncode == 0  # B's lineage, not pushed
    head_a, head_b = rows_of(a)[-1]["entry_hash"], rows_of(b)[-1]["entry_hash"]
    mine = git(b, "rev-parse", REF).stdout
    git(b, "clean", "-qfdx")  # the untracked .harness goes; the refs stay
    assert not (b / ".harness").exists()
    for args in (["fetch", RUN, "--dry-run"], ["fetch", RUN]):
        res = cli(world, b, "ledger", *args)
        assert res.returncode == 3, (args, res.stderr)
        assert err_line(res) == (
            f"harness: work ledgers diverge at entry 9: two chains extend the same parent "
            f"entry (local anchor head {head_b}, fetched head {head_a}). Two lineages of run "
            f"{RUN} exist; refusing to fetch. Inspect both chains with 'harness ledger "
            f"verify {RUN} --json', keep exactly one lineage (move the other ledger "
            f"directory aside, or delete the anchor with 'git update-ref -d {REF}'), and "
            "re-anchor it.")
        assert not ledger_path(b).exists()
        assert git(b, "rev-parse", REF).stdout == mine


def test_fetch_onto_a_crash_tail_larger_than_a_chunk_cuts_all_of_it(world: World,
                                                                    tmp_path: Path) -> None:
    """B's ledger ends in 5 MiB of zeroed blocks (a power cut mid-write): more than the
    4 MiB a reader keeps of a fragment. Fetching A's longer chain cuts the whole fragment,
    as writer recovery does, so the ledger B ends with is A's, byte for byte, and verifies."""
    a, b = _anchored_and_fetched(world, tmp_path)
    record(a, [("task.completed", "t2", {"commit": "def456"}),
               ("task.started", "t3", {"harness": "worker", "run_id": 3})])
    _anchor_and_push(world, a)
    with ledger_path(b).open("ab") as f:
        f.write(b"\0" * (5 << 20))
    torn = json.loads(cli(world, b, "ledger", "verify", RUN, "--json").stdout)
    assert (torn["ok"], torn["entry_count"], torn["torn_tail_bytes"]) == (True, 8, 5 << 20)

    fetched = cli(world, b, "ledger", "fetch", RUN, "--json")
    assert fetched.returncode == 0, fetched.stderr
    got = json.loads(fetched.stdout)
    assert (got["status"], got["entry_count"], got["new_entries"]) == ("extended", 10, 2)
    assert ledger_path(b).read_bytes() == ledger_path(a).read_bytes()
    checked = cli(world, b, "ledger", "verify", RUN, "--json")
    assert checked.returncode == 0, checked.stdout
    res = json.loads(checked.stdout)
    assert (res["ok"], res["entry_count"], res["head_hash"], res["torn_tail"]) == (
        True, 10, rows_of(a)[-1]["entry_hash"], False)
    resumed = cli(world, b, "ledger", "resume", RUN, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["resume_seq"] == 11


def test_runs_reports_a_lineage_a_refused_fetch_left_as_diverged(world: World,
                                                                 tmp_path: Path) -> None:
    """A and B resume the same head; each anchors its own lineage and A pushes. B's fetch
    meets A's lineage and is refused (exit 3), leaving it under refs/harness/fetched/: B's
    resume refuses on it, so `runs` must not call B's run in sync with its side ref."""
    a, b = _anchored_and_fetched(world, tmp_path)
    for repo in (a, b):
        for args in (["resume", RUN], ["anchor", RUN]):
            assert cli(world, repo, "ledger", *args).returncode == 0
    git(a, "push", "-q", "origin", REFSPEC)
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 3
    assert cli(world, b, "ledger", "resume", RUN, "--dry-run").returncode == 3

    listing = cli(world, b, "ledger", "runs", "--json")
    assert listing.returncode == 0, listing.stderr
    [r] = json.loads(listing.stdout)["runs"]
    assert (r["agreement"], r["local"], r["anchored"], r["entry_count"],
            r["anchored_entry_count"]) == ("diverged at entry 9", True, True, 9, 9)
    table = cli(world, b, "ledger", "runs")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].endswith("  diverged at entry 9")

    # Once B drops the fetched lineage, as the refusal says, the two agree again.
    git(b, "update-ref", "-d", f"refs/harness/fetched/origin/{RUN}")
    [r] = json.loads(cli(world, b, "ledger", "runs", "--json").stdout)["runs"]
    assert r["agreement"] == "identical"
    assert cli(world, b, "ledger", "runs").stdout.splitlines()[1].endswith("  in sync")


def test_runs_reports_a_diverged_fetched_lineage_of_a_run_never_anchored_here(
        world: World, tmp_path: Path) -> None:
    """B wrote its own chain of the run and never anchored it; A's diverging chain was
    fetched and refused. There is no side ref, but there are two lineages."""
    a, bare = _remote(tmp_path)
    record(a, GOAL)
    _anchor_and_push(world, a)
    b = _clone(bare, tmp_path / "b")
    record(b, [*GOAL[:5], ("task.failed", "t1", {"by": "b"})])
    assert cli(world, b, "ledger", "fetch", RUN).returncode == 3
    assert cli(world, b, "ledger", "resume", RUN, "--dry-run").returncode == 3
    [r] = json.loads(cli(world, b, "ledger", "runs", "--json").stdout)["runs"]
    assert (r["agreement"], r["local"], r["anchored"]) == ("diverged at entry 6", True, False)
    assert cli(world, b, "ledger", "runs").stdout.splitlines()[1].endswith(
        "  diverged at entry 6")


def test_runs_reports_a_fetched_anchor_ahead_of_the_local_chain(world: World,
                                                                 tmp_path: Path) -> None:
    """A's anchor moves on; B's fetch fetches it but cannot write it (a writer holds the
    run), so it stays under refs/harness/fetched/ one entry ahead of B's chain, and B's
    resume refuses. `runs` says so in the table and in --json (fetched_ahead), beside an
    agreement with the side ref that is still "identical"; once a fetch writes it, the
    listing is in sync again."""
    a, b = _anchored_and_fetched(world, tmp_path)
    record(a, [("task.completed", "t2", {"commit": "def456"})])
    _anchor_and_push(world, a)
    with WorkLedger(b, RUN):
        assert cli(world, b, "ledger", "fetch", RUN).returncode == 2
    assert cli(world, b, "ledger", "resume", RUN, "--dry-run").returncode == 2
    head_a = rows_of(a)[-1]["entry_hash"]

    listing = cli(world, b, "ledger", "runs", "--json")
    assert listing.returncode == 0, listing.stderr
    [r] = json.loads(listing.stdout)["runs"]
    assert (r["agreement"], r["entry_count"], r["anchored_entry_count"]) == ("identical", 8, 8)
    assert r["fetched_ahead"] == [{"ref": f"refs/harness/fetched/origin/{RUN}",
                                   "entry_count": 9, "head_hash": head_a, "ahead_by": 1}]
    table = cli(world, b, "ledger", "runs")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].endswith("  in sync, fetched ahead by 1")

    assert cli(world, b, "ledger", "fetch", RUN).returncode == 0
    [r] = json.loads(cli(world, b, "ledger", "runs", "--json").stdout)["runs"]
    assert (r["agreement"], r["entry_count"], r["fetched_ahead"]) == ("identical", 9, [])
    assert cli(world, b, "ledger", "runs").stdout.splitlines()[1].endswith("  in sync")
