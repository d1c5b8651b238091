"""Mutation-found gaps in the work ledger's git side: anchoring (`harness.worklog.anchor`),
resume (`harness.worklog.resume`) and the git wrapper (`harness.worklog.git`). Each test
pins a behaviour no other test held exactly, against real repositories and real git
processes.

The races are made deterministic by letting a real ``git update-ref`` (a rival anchor,
fetch or gc of the same run landing) move the side ref at the one moment that matters:
after the command read the ref and before it moves it. Every ref move is a
compare-and-swap against what was read, so the loser fails with exit 2 and the winner's
lineage is kept; a move against a value read again at the last moment would silently
drop it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.worklog import Divergence, NoLedger, VerificationFailed
from harness.worklog import anchor as anc
from harness.worklog.git import Git, GitFailed, RefMoved
from harness.worklog.resume import resume, survey
from test_worklog_cli import GOAL, cli, hand_ledger
from test_worklog_git import (  # noqa: F401  (bare_env: its autouse fixture)
    REF,
    RUN,
    _blob,
    _forge,
    _meta,
    bare_env,
    chain,
    git,
    ledger_file,
    new_repo,
    published,
    push,
    two_hosts,
    write_ledger,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return new_repo(tmp_path / "repo")


@pytest.fixture
def hosts(tmp_path: Path) -> tuple[Path, Path]:
    return two_hosts(tmp_path)


def side_refs(repo: Path) -> str:
    return git("for-each-ref", "--format=%(refname) %(objectname)", "refs/harness/",
               cwd=repo)


def rival_lands(monkeypatch: pytest.MonkeyPatch, repo: Path, method: str,
                rival: str) -> list[str]:
    """Make `Git.<method>` end by a real git process moving REF to `rival`, once: another
    anchor of the run landing just before this one moves the ref. Returns a list that
    holds the commit the ref held when the rival moved it."""
    real: Callable[..., Any] = getattr(Git, method)
    moved: list[str] = []

    def racing(self: Git, *args: Any, **kw: Any) -> Any:
        out = real(self, *args, **kw)
        if not moved:
            moved.append(git("rev-parse", REF, cwd=repo))
            git("update-ref", REF, rival, cwd=repo)
        return out

    monkeypatch.setattr(Git, method, racing)
    return moved


# -- compare-and-swap ------------------------------------------------------------------------


def test_an_anchor_that_loses_the_race_for_the_ref_keeps_the_winners_lineage(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = chain(3)
    write_ledger(repo, base)
    first = anc.anchor(repo, RUN).commit
    # The rival lineage: another host's resume of the same head, anchored.
    write_ledger(repo, chain(5, salt=" elsewhere", prefix=base))
    rival = anc.anchor(repo, RUN).commit
    git("update-ref", REF, first, cwd=repo)
    mine = chain(5, prefix=base)
    write_ledger(repo, mine)
    moved = rival_lands(monkeypatch, repo, "commit_tree", rival)
    with pytest.raises(RefMoved) as err:
        anc.anchor(repo, RUN)
    assert moved == [first]
    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"{REF} changed while harness was updating it")
    # The rival's anchor stands; nothing was merged over it.
    assert git("rev-parse", REF, cwd=repo) == rival
    monkeypatch.undo()
    with pytest.raises(anc.Divergence):
        anc.anchor(repo, RUN)



def test_a_gc_that_loses_the_race_for_the_ref_keeps_the_new_anchor(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An anchor that extends the chain while gc squashes the history it read: gc fails
    (exit 2) and the ref keeps the new anchor, rather than being squashed back to the
    tree gc read, which would drop the entries the anchor added."""
    lines = chain(3)
    write_ledger(repo, lines)
    anc.anchor(repo, RUN)
    lines = chain(5, prefix=lines)
    write_ledger(repo, lines)
    read = anc.anchor(repo, RUN).commit
    write_ledger(repo, chain(7, prefix=lines))
    newer = anc.anchor(repo, RUN).commit
    git("update-ref", REF, read, cwd=repo)
    moved = rival_lands(monkeypatch, repo, "commit_tree", newer)
    with pytest.raises(RefMoved) as err:
        anc.gc(repo, RUN)
    assert moved == [read]
    assert err.value.exit_code == 2
    assert git("rev-parse", REF, cwd=repo) == newer
    assert git("rev-list", "--count", REF, cwd=repo) == "3"





def test_a_broken_anchor_this_host_never_checked_is_not_trusted_as_a_prefix(
        repo: Path) -> None:
    """An anchor (arrived by plain git) holding a chain edited under its hashes, and a
    local ledger holding the same bytes and more: the anchor's tree is not among the
    trees this host checked (the cache holds another run's), so the whole local chain
    is verified and refused, by anchor and by gc alike. Trusting any tree once the
    cache exists would publish the broken chain as an extension."""
    write_ledger(repo, chain(3), run_id="other-run")
    anc.anchor(repo, "other-run")
    assert (repo / ".git" / "harness-checked-anchors").exists()
    lines = chain(6)
    edited = [lines[0], lines[1].replace(b'"note":"entry 2"', b'"note":"entry X"'),
              *lines[2:]]
    forged = _forge(repo, {"LEDGER.json": _meta(edited), "chunk-000000.jsonl": _blob(edited)})
    write_ledger(repo, chain(8, prefix=edited))
    with pytest.raises(VerificationFailed) as err:
        anc.anchor(repo, RUN)
    assert err.value.exit_code == 2
    assert str(err.value).startswith(
        f"refusing to anchor run {RUN}: the local work ledger does not verify at entry 2 "
        "(000000.jsonl:2): entry_hash mismatch")
    with pytest.raises(VerificationFailed) as err:
        anc.gc(repo, RUN)
    assert str(err.value).startswith(f"{REF} is not a work-ledger anchor: its chain does "
                                     "not verify: entry 2 (line 2): entry_hash mismatch")
    assert git("rev-parse", REF, cwd=repo) == forged



@pytest.mark.parametrize(("case", "why"), [
    ("chunk_count", "LEDGER.json says 3 chunks, the tree holds 2"),
    ("short chunk", "chunk-000000.jsonl holds 999 lines; chunks hold 1000, only the last "
                    "may hold fewer"),
])
def test_an_anchor_chunked_otherwise_than_the_format_is_not_fetched(
        hosts: tuple[Path, Path], case: str, why: str) -> None:
    """The chain verifies, but the tree is not the one the format gives it (chunk
    boundaries fixed every 1,000 lines from genesis, LEDGER.json counting the chunks):
    another host anchoring the same chain gets another tree id, so it is no anchor."""
    a, b = hosts
    lines = chain(1001)
    if case == "chunk_count":
        files = {"LEDGER.json": _meta(lines, chunk_count=3),
                 "chunk-000000.jsonl": _blob(lines[:1000]),
                 "chunk-000001.jsonl": _blob(lines[1000:])}
    else:
        files = {"LEDGER.json": _meta(lines, chunk_count=2),
                 "chunk-000000.jsonl": _blob(lines[:999]),
                 "chunk-000001.jsonl": _blob(lines[999:])}
    _forge(a, files)
    push(a)
    with pytest.raises(VerificationFailed) as err:
        anc.fetch(b, RUN)
    assert err.value.exit_code == 2
    assert str(err.value) == f"origin {REF} is not a work-ledger anchor: {why}"
    assert not (b / ".harness").exists()


def test_an_executable_chunk_is_no_anchor(hosts: tuple[Path, Path]) -> None:
    """The anchor tree holds regular files (mode 100644) only: the same chain with an
    executable chunk is another tree id, so it is refused like any stray entry."""
    a, b = hosts
    lines = chain(4)
    g = Git.open(a)
    meta, chunk = g.write_blobs([_meta(lines), _blob(lines)])
    tree = subprocess.run(
        ["git", "mktree"], cwd=a, check=True, capture_output=True, text=True,
        input=f"100644 blob {meta}\tLEDGER.json\n100755 blob {chunk}\tchunk-000000.jsonl\n",
    ).stdout.strip()
    git("update-ref", REF, g.commit_tree(tree, [], "forged\n"), cwd=a)
    push(a)
    with pytest.raises(VerificationFailed) as err:
        anc.fetch(b, RUN)
    assert err.value.exit_code == 2
    assert str(err.value) == (f"origin {REF} is not a work-ledger anchor: its tree holds a "
                              "stray entry 'chunk-000000.jsonl' (100755 blob)")
    assert not (b / ".harness").exists()



def test_a_ledger_with_no_complete_entry_is_no_ledger_to_anchor(repo: Path) -> None:
    """Only a torn fragment (a crash during the first write): exit 1, as for no ledger,
    and no ref."""
    write_ledger(repo, [], tail=b'{"seq":1,"ts":"2026-11-30T07:0')
    with pytest.raises(NoLedger) as err:
        anc.anchor(repo, RUN)
    assert err.value.exit_code == 1
    assert str(err.value) == f"work ledger {RUN} has no complete entries to anchor"
    assert git("for-each-ref", "refs/harness/", cwd=repo) == ""



def test_fetch_never_extends_a_local_chain_edited_under_its_hashes(
        hosts: tuple[Path, Path]) -> None:
    """A local row whose payload was edited and whose entry_hash was kept still "matches"
    the anchored row by hash; fetch must verify the local chain first, refuse (exit 2)
    naming the entry and its file line, and not append to it."""
    a, b = hosts
    lines = published(a, 6)
    edited = [*lines[:2], lines[2].replace(b'"note":"entry 3"', b'"note":"entry X"')]
    assert edited[2] != lines[2]
    path = write_ledger(b, edited)
    before = path.read_bytes()
    with pytest.raises(VerificationFailed) as err:
        anc.fetch(b, RUN)
    assert err.value.exit_code == 2
    assert str(err.value).startswith(
        f"refusing to fetch onto run {RUN}: the local work ledger does not verify at "
        "entry 3 (000000.jsonl:3): entry_hash mismatch")
    assert path.read_bytes() == before


# -- dry runs ----------------------------------------------------------------------------------


def test_a_dry_run_anchor_over_an_unchecked_anchor_of_a_prefix_writes_nothing(
        repo: Path) -> None:
    """An anchor this host has not checked (it arrived by plain git) whose chain the
    local one extends: a real anchor records its tree as checked; a dry run must not
    (DESIGN §2: --dry-run writes nothing, not even under .git)."""
    lines = chain(3)
    write_ledger(repo, lines)
    first = anc.anchor(repo, RUN)
    memo = repo / ".git" / "harness-checked-anchors"
    memo.unlink()
    for n, status in ((3, "unchanged"), (5, "extended")):
        write_ledger(repo, chain(n, prefix=lines))
        res = anc.anchor(repo, RUN, dry_run=True)
        assert (res.status, res.dry_run, res.entry_count) == (status, True, n)
        assert not memo.exists(), status
    assert git("rev-parse", REF, cwd=repo) == first.commit
    anc.anchor(repo, RUN)
    assert memo.read_text().splitlines()[0].split(" ")[0] == first.tree



def test_a_dry_run_fetch_that_reads_the_local_side_ref_writes_nothing(
        hosts: tuple[Path, Path]) -> None:
    """After a gc and a forced push, the local side ref is no ancestor of the fetched
    anchor, so a fetch reads it whole to weigh its lineage; a dry run must not record
    its tree as checked (nor move anything)."""
    a, b = hosts
    lines = published(a, 3)
    anc.fetch(b, RUN)
    write_ledger(a, chain(5, prefix=lines))
    anc.anchor(a, RUN)
    anc.gc(a, RUN)
    push(a, force=True)
    memo = b / ".git" / "harness-checked-anchors"
    memo.unlink()
    before = side_refs(b)
    res = anc.fetch(b, RUN, dry_run=True)
    assert (res.status, res.new_entries, res.dry_run) == ("extended", 2, True)
    assert not memo.exists()
    assert side_refs(b) == before
    assert ledger_file(b).read_bytes() == _blob(lines)


# -- a configured fetch refspec ----------------------------------------------------------------

WILDCARD = "+refs/harness/work-ledger/*:refs/harness/work-ledger/*"


def test_a_configured_wildcard_fetch_refspec_never_moves_the_side_ref_of_a_dry_run(
        hosts: tuple[Path, Path]) -> None:
    """Sharing the side refs with a wildcard push is what the spec shows; a wildcard
    remote.origin.fetch is its natural companion. git then also updates every ref such a
    refspec maps a fetched ref to: a dry run would move refs/harness/work-ledger/<run-id>."""
    a, b = hosts
    base = published(a, 3)
    write_ledger(b, base)
    anc.anchor(b, RUN)
    write_ledger(a, chain(5, prefix=base))
    anc.anchor(a, RUN)
    push(a)
    git("config", "--add", "remote.origin.fetch", WILDCARD, cwd=b)
    before = side_refs(b)
    res = anc.fetch(b, RUN, dry_run=True)
    assert (res.status, res.new_entries, res.dry_run) == ("extended", 2, True)
    assert side_refs(b) == before


def test_a_configured_wildcard_fetch_refspec_never_overwrites_a_diverged_side_ref(
        hosts: tuple[Path, Path]) -> None:
    """B's own lineage, anchored on B, and A's, pushed: fetch refuses (exit 3) and writes
    nothing, dry run or not; the side ref keeps B's lineage, which a configured wildcard
    refspec would have overwritten with A's before fetch compared the two."""
    a, b = hosts
    base = chain(3)
    write_ledger(a, chain(5, salt=" on a", prefix=base))
    anc.anchor(a, RUN)
    push(a)
    write_ledger(b, chain(5, salt=" on b", prefix=base))
    anc.anchor(b, RUN)
    git("config", "--add", "remote.origin.fetch", WILDCARD, cwd=b)
    mine = git("rev-parse", REF, cwd=b)
    with pytest.raises(Divergence) as err:
        anc.fetch(b, RUN, dry_run=True)
    assert err.value.exit_code == 3
    assert str(err.value).startswith("work ledgers diverge at entry 4: ")
    assert side_refs(b) == f"{REF} {mine}"
    with pytest.raises(Divergence) as err:
        anc.fetch(b, RUN)
    assert err.value.exit_code == 3
    # What fetch keeps of the refused lineage is its own private ref, not the side ref.
    theirs = git("rev-parse", f"refs/harness/fetched/origin/{RUN}", cwd=b)
    assert side_refs(b) == f"refs/harness/fetched/origin/{RUN} {theirs}\n{REF} {mine}"



def test_a_fetch_that_loses_the_race_for_the_side_ref_keeps_the_winners_lineage(
        hosts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetch moves the local side ref to the fetched anchor only from the commit it
    checked: another lineage anchored meanwhile is kept (exit 2), not overwritten."""
    a, b = hosts
    base = published(a, 3)
    write_ledger(b, chain(5, salt=" rival", prefix=base))
    rival = anc.anchor(b, RUN).commit
    write_ledger(b, base)
    git("update-ref", "-d", REF, cwd=b)
    checked = anc.anchor(b, RUN).commit
    write_ledger(a, chain(5, prefix=base))
    anc.anchor(a, RUN)
    push(a)
    moved = rival_lands(monkeypatch, b, "is_ancestor", rival)
    with pytest.raises(RefMoved) as err:
        anc.fetch(b, RUN)
    assert moved == [checked]
    assert err.value.exit_code == 2
    assert git("rev-parse", REF, cwd=b) == rival
    # The ledger was written before the ref lost its race, and the error says so.
    assert ledger_file(b).read_bytes() == _blob(chain(5, prefix=base))
    assert str(err.value) == (
        f"fetched run {RUN} into the local work ledger (extended, 5 entries), but {REF} "
        "changed while harness was moving it to the fetched anchor (another anchor or "
        f"fetch ran at the same time) and was left as it is; run 'harness ledger fetch "
        f"{RUN}' again")



# -- the local side ref on fetch -----------------------------------------------------------------


def test_fetch_keeps_a_side_ref_that_anchors_more_than_the_fetched_anchor(
        hosts: tuple[Path, Path]) -> None:
    """B anchored 5 entries and then moved its ledger directory away; the remote holds the
    first 3. Fetch writes those 3 into the ledger, but leaves the side ref on B's anchor
    and says so: moving it back would drop two anchored entries."""
    a, b = hosts
    base = published(a, 3)
    write_ledger(b, chain(5, prefix=base))
    mine = anc.anchor(b, RUN).commit
    ledger_file(b).unlink()
    res = anc.fetch(b, RUN)
    assert (res.status, res.entry_count, res.new_entries) == ("written", 3, 3)
    assert res.warning == (f"kept {REF} at {mine}: it anchors entries the fetched anchor "
                           "lacks; the local ledger now follows the fetched chain")
    assert git("rev-parse", REF, cwd=b) == mine
    assert ledger_file(b).read_bytes() == _blob(base)


def test_fetch_replaces_a_side_ref_that_is_no_anchor(hosts: tuple[Path, Path]) -> None:
    """A local side ref whose anchor does not verify holds no lineage to keep: fetch
    moves it to the fetched anchor (compare-and-swap from the broken one)."""
    a, b = hosts
    lines = published(a, 4)
    broken = chain(4, salt=" b")
    _forge(b, {"LEDGER.json": _meta(broken),
               "chunk-000000.jsonl": _blob(broken).replace(b"entry 2 b", b"entry Z")})
    res = anc.fetch(b, RUN)
    assert (res.status, res.warning) == ("written", None)
    assert git("rev-parse", REF, cwd=b) == res.commit
    assert ledger_file(b).read_bytes() == _blob(lines)



# -- resume ------------------------------------------------------------------------------------


def test_a_resume_checks_the_anchor_again_under_the_writers_lock(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first checks run without the lock; a diverging anchor that lands on the side ref
    before resume takes the lock (another host's resume, anchored and fetched) is found
    by the check made under it: refused (exit 3), no row, no signal."""
    from harness.worklog import resume as resume_mod

    base = chain(3)
    write_ledger(repo, chain(5, salt=" elsewhere", prefix=base))
    rival = anc.anchor(repo, RUN).commit
    git("update-ref", "-d", REF, cwd=repo)
    mine = chain(4, prefix=base)
    path = write_ledger(repo, mine)
    anc.anchor(repo, RUN)
    real = resume_mod._signal_dir
    landed: list[bool] = []

    def rival_lands_first(wd: Path) -> Path:
        # First called after the unlocked pass, before the lock is taken.
        if not landed:
            landed.append(True)
            git("update-ref", REF, rival, cwd=repo)
        return real(wd)

    monkeypatch.setattr(resume_mod, "_signal_dir", rival_lands_first)
    with pytest.raises(Divergence) as err:
        resume(repo, RUN)
    assert landed == [True]
    assert err.value.exit_code == 3
    assert str(err.value).startswith("work ledgers diverge at entry 4: ")
    assert path.read_bytes() == _blob(mine)
    assert list((repo / ".harness" / "runtime" / "resume").iterdir()) == []



def test_a_fetched_anchor_that_does_not_verify_is_no_lineage_to_resume_against(
        hosts: tuple[Path, Path]) -> None:
    """A fetch refused a tampered anchor (exit 2), leaving it under refs/harness/fetched/:
    it is no second lineage, so resume of the local chain goes ahead."""
    a, b = hosts
    lines = chain(4)
    _forge(a, {"LEDGER.json": _meta(lines),
               "chunk-000000.jsonl": _blob(lines).replace(b"entry 2", b"entry Z")})
    push(a)
    write_ledger(b, lines)
    with pytest.raises(VerificationFailed):
        anc.fetch(b, RUN)
    assert git("for-each-ref", "--format=%(refname)", "refs/harness/", cwd=b) == (
        f"refs/harness/fetched/origin/{RUN}")
    res = resume(b, RUN)
    assert (res.status, res.resume_seq, res.anchored) == ("resumed", 5, "none")


def test_ledger_runs_reads_anchors_it_never_checked_and_writes_nothing(
        hosts: tuple[Path, Path]) -> None:
    """`survey` (harness ledger runs) reads the side ref and fetched anchors whole when
    they are not a prefix of the local chain, and records none as checked: a listing
    writes nothing, not even under .git."""
    a, b = hosts
    lines = published(a, 3)
    anc.fetch(b, RUN)
    old = git("rev-parse", REF, cwd=b)
    write_ledger(a, chain(5, prefix=lines))
    anc.anchor(a, RUN)
    push(a)
    memo = b / ".git" / "harness-checked-anchors"
    memo.unlink()
    # The side ref, then only a fetched ref, moved ahead of the local chain by plain git.
    git("fetch", "-q", "origin", f"+{REF}:{REF}", cwd=b)
    [run] = survey(b)
    assert (run["agreement"], run["anchored_entry_count"]) == ("anchored_ahead", 5)
    assert not memo.exists()
    fetched = f"refs/harness/fetched/origin/{RUN}"
    git("update-ref", fetched, git("rev-parse", REF, cwd=b), cwd=b)
    git("update-ref", REF, old, cwd=b)
    [run] = survey(b)
    assert run["agreement"] == "identical"
    assert [(x["ref"], x["ahead_by"]) for x in run["fetched_ahead"]] == [(fetched, 2)]
    assert not memo.exists()



def test_a_dry_run_resume_of_a_closed_run_says_it_is_closed(world: World,
                                                             repo: Path) -> None:
    """A closed run is never resumed, and a dry run must not project a resume of one
    (its frontier as "would resume")."""
    hashes = hand_ledger(repo, [*GOAL, ("run.closed", None, {"why": "done"})])
    res = cli(world, repo, "ledger", "resume", RUN, "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (f"run {RUN} is closed (9 entries, head {hashes[-1]}); nothing to "
                          "resume, nothing was written\n")
    js = cli(world, repo, "ledger", "resume", RUN, "--dry-run", "--json")
    assert js.returncode == 0, js.stderr
    out = json.loads(js.stdout)
    assert (out["status"], out["dry_run"], out["resume_seq"]) == ("closed", True, None)


# -- exit codes ------------------------------------------------------------------------------


def test_a_fetch_that_fails_here_for_a_ref_the_remote_has_is_a_git_failure(
        hosts: tuple[Path, Path]) -> None:
    """The remote holds the anchor, but git cannot write it here (a stale lock on the ref
    fetch writes, left by a killed git): exit 2, a git failure, never 1 ("no ledger"),
    which would tell the operator there is nothing to fetch."""
    a, b = hosts
    published(a, 4)
    lock = b / ".git" / "refs" / "harness" / "fetched" / "origin" / f"{RUN}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_bytes(b"")
    with pytest.raises(GitFailed) as err:
        anc.fetch(b, RUN)
    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"git fetch of {REF} from 'origin' failed: ")
    assert not (b / ".harness").exists()


# -- forged anchors --------------------------------------------------------------------------


def test_a_forged_early_chunk_under_a_genuine_last_chunk_is_no_anchor(repo: Path) -> None:
    """An anchor whose last chunk and LEDGER.json are the local chain's, but whose first
    chunk was edited: the blob ids of every chunk before the last must match the local
    chain's, or the anchor is read whole and refused. Taking it for the local chain
    (deciding from the last chunk only) would report it "unchanged", vouch for its tree
    in the checked-tree cache, and let a resume call it identical."""
    lines = chain(2500)
    write_ledger(repo, lines)
    chunks = [_blob(lines[i:i + 1000]) for i in range(0, 2500, 1000)]
    forged = chunks[0].replace(b'"note":"entry 7"', b'"note":"entry Z"')
    assert forged != chunks[0]
    commit = _forge(repo, {"LEDGER.json": _meta(lines, chunk_count=3),
                           "chunk-000000.jsonl": forged,
                           "chunk-000001.jsonl": chunks[1],
                           "chunk-000002.jsonl": chunks[2]})
    for op in (anc.anchor, resume):
        with pytest.raises(VerificationFailed) as err:
            op(repo, RUN)
        assert err.value.exit_code == 2
        assert str(err.value).startswith(
            f"{REF} is not a work-ledger anchor: its chain does not verify: entry 7 (line 7): "
            "entry_hash mismatch"), op
    assert git("rev-parse", REF, cwd=repo) == commit
    assert not (repo / ".git" / "harness-checked-anchors").exists()
