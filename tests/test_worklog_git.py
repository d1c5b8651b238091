"""Anchoring, fetching, squashing and listing work ledgers against real git repositories."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import audit
from harness.ledger.canonical import canonical
from harness.ledger.files import FaultyFiles
from harness.worklog import Divergence, NoLedger, VerificationFailed, WorkLedgerError, rows
from harness.worklog import anchor as anc
from harness.worklog.git import Git, RefMoved
from harness.worklog.resume import survey
from harness.worklog.verify import verify_dir
from ledgertools import ref_canonical

GENESIS = "0" * 64
RUN = "goal-42"
REF = f"refs/harness/work-ledger/{RUN}"


# -- ledgers written by hand to DESIGN.md §2's row contract -----------------------------


def chain(n: int, salt: str = "", prefix: list[bytes] | None = None) -> list[bytes]:
    """`prefix` continued to `n` lines; `salt` makes the new entries differ from another
    chain's (the way a resume nonce does)."""
    lines = list(prefix or [])
    prev = GENESIS
    if lines:
        prev = anc.entry_hash_of(lines[-1]) or ""
    for seq in range(len(lines) + 1, n + 1):
        kind = "task.completed" if seq > 1 else "run.open"
        task_id = f"t{seq}" if seq > 1 else None
        payload: dict[str, Any] = {"n": seq, "note": f"entry {seq}{salt}"}
        digest = hashlib.sha256(canonical(
            {"kind": kind, "payload": payload, "prev_hash": prev, "task_id": task_id}
        )).hexdigest()
        row = {"seq": seq, "ts": "2026-11-30T07:00:00.000000000Z", "kind": kind,
               "task_id": task_id, "payload": payload, "prev_hash": prev,
               "entry_hash": digest, "schema_version": 1}
        lines.append(canonical(row))
        prev = digest
    return lines


def head_of(lines: list[bytes]) -> str:
    return anc.entry_hash_of(lines[-1]) or ""


def ledger_file(workdir: Path, run_id: str = RUN) -> Path:
    return workdir / ".harness" / "runtime" / "ledger" / run_id / "000000.jsonl"


def write_ledger(workdir: Path, lines: list[bytes], run_id: str = RUN, tail: bytes = b"") -> Path:
    path = ledger_file(workdir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
    return path


# -- git fixtures -----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def bare_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No git user, no system or global config, a private audit chain."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
                "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    yield


def git(*args: str, cwd: Path) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git("init", "-q", cwd=path)
    return path


def push(repo: Path, remote: str = "origin", run_id: str = RUN, force: bool = False) -> None:
    ref = f"refs/harness/work-ledger/{run_id}"
    git("push", "-q", remote, f"{'+' if force else ''}{ref}:{ref}", cwd=repo)


def published(a: Path, n: int) -> list[bytes]:
    """A chain of `n` entries on host `a`, anchored and pushed to its remote."""
    lines = chain(n)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    push(a)
    return lines


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return new_repo(tmp_path / "repo")


def two_hosts(tmp_path: Path) -> tuple[Path, Path]:
    """A bare origin, the anchoring host A (with origin) and a fresh clone B."""
    origin = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    a = new_repo(tmp_path / "a")
    git("remote", "add", "origin", str(origin), cwd=a)
    git("clone", "-q", str(origin), str(tmp_path / "b"), cwd=tmp_path)
    return a, tmp_path / "b"


@pytest.fixture
def hosts(tmp_path: Path) -> tuple[Path, Path]:
    return two_hosts(tmp_path)


def blobs_of(repo: Path, oids: list[str]) -> list[bytes]:
    """The contents of blobs `oids`, as git itself reads them."""
    return [subprocess.run(["git", "cat-file", "blob", oid], cwd=repo, capture_output=True,
                           check=True).stdout for oid in oids]


def tree_entries(repo: Path, rev: str) -> dict[str, str]:
    return {e.name: e.oid for e in Git.open(repo).ls_tree(rev)}


def audit_events() -> list[dict[str, Any]]:
    import json

    path = Path(audit.audit_path())
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines()]


# -- anchor -----------------------------------------------------------------------------


def test_anchor_created_then_unchanged(repo: Path) -> None:
    lines = chain(2500)
    write_ledger(repo, lines)
    res = anc.anchor(repo, RUN)
    assert (res.status, res.entry_count, res.head_hash) == ("created", 2500, head_of(lines))
    assert git("rev-parse", REF, cwd=repo) == res.commit
    entries = tree_entries(repo, REF)
    assert sorted(entries) == ["LEDGER.json", "chunk-000000.jsonl", "chunk-000001.jsonl",
                               "chunk-000002.jsonl"]
    blobs = blobs_of(repo, [entries[f"chunk-00000{i}.jsonl"] for i in range(3)])
    assert b"".join(blobs) == b"".join(line + b"\n" for line in lines)
    assert blobs[0].count(b"\n") == 1000 and blobs[2].count(b"\n") == 500
    meta = blobs_of(repo, [entries["LEDGER.json"]])[0]
    assert meta.rstrip(b"\n") == canonical({"run_id": RUN, "head_hash": head_of(lines),
                                            "entry_count": 2500, "chunk_count": 3,
                                            "format_version": 1})
    # The fixed identity: no git user is configured in this environment.
    assert git("log", "-1", "--format=%an <%ae>|%cn <%ce>", REF, cwd=repo) == (
        "harness <harness@localhost>|harness <harness@localhost>")

    again = anc.anchor(repo, RUN)
    assert (again.status, again.commit) == ("unchanged", res.commit)
    events = [e for e in audit_events() if e["event"] == "work_ledger.anchor"]
    assert [e["data"] for e in events] == [
        {"run_id": RUN, "head_hash": head_of(lines), "commit": res.commit}]
    assert audit.verify_audit() == (True, 1, None)


def test_anchor_extended_reuses_unchanged_chunk_blobs(repo: Path) -> None:
    lines = chain(2500)
    write_ledger(repo, lines)
    first = anc.anchor(repo, RUN)
    more = chain(3600, prefix=lines)
    write_ledger(repo, more)
    res = anc.anchor(repo, RUN)
    assert (res.status, res.entry_count, res.head_hash) == ("extended", 3600, head_of(more))
    assert git("rev-parse", f"{REF}^", cwd=repo) == first.commit
    before, after = tree_entries(repo, first.commit), tree_entries(repo, res.commit)
    assert after["chunk-000000.jsonl"] == before["chunk-000000.jsonl"]
    assert after["chunk-000001.jsonl"] == before["chunk-000001.jsonl"]
    assert after["chunk-000002.jsonl"] != before["chunk-000002.jsonl"]
    assert "chunk-000003.jsonl" in after
    # Only the last partial chunk, the new chunk and LEDGER.json were new objects.
    assert res.blobs_written == 3
    assert len(audit_events()) == 2


def test_reanchor_without_memo_still_verifies(repo: Path) -> None:
    lines = chain(1500)
    write_ledger(repo, lines)
    anc.anchor(repo, RUN)
    (repo / ".git" / "harness-checked-anchors").unlink()
    write_ledger(repo, chain(1600, prefix=lines))
    assert anc.anchor(repo, RUN).status == "extended"


def test_same_chain_gives_same_tree_in_two_repos(tmp_path: Path) -> None:
    lines = chain(1200)
    trees = []
    for name in ("one", "two"):
        r = new_repo(tmp_path / name)
        write_ledger(r, lines)
        res = anc.anchor(r, RUN)
        trees.append(res.tree)
        assert git("rev-parse", f"{REF}^{{tree}}", cwd=r) == res.tree
    assert trees[0] == trees[1]


# -- the anchor holds canonical lines, however the local ledger spells them ---------------


def rich_rows(n: int) -> list[dict[str, Any]]:
    """The rows of an `n`-entry chain whose payloads hold what JSON can spell several
    ways (non-ASCII text, a float), sealed by hand to DESIGN.md §2's contract."""
    out: list[dict[str, Any]] = []
    prev = GENESIS
    for seq in range(1, n + 1):
        kind = "task.completed" if seq > 1 else "run.open"
        task_id = f"t{seq}" if seq > 1 else None
        payload: dict[str, Any] = {"n": seq, "note": f"entrée {seq} ☕", "ratio": 1e-05}
        digest = hashlib.sha256(ref_canonical(
            {"kind": kind, "payload": payload, "prev_hash": prev, "task_id": task_id}
        )).hexdigest()
        out.append({"seq": seq, "ts": "2026-11-30T07:00:00.000000000Z", "kind": kind,
                    "task_id": task_id, "payload": payload, "prev_hash": prev,
                    "entry_hash": digest, "schema_version": 1})
        prev = digest
    return out


# Spellings of a row that a hand-written ledger may hold, every one of which verifies.
SPELLINGS = {
    # spaces after separators, keys in insertion order, non-ASCII as \\u escapes
    "json.dumps": lambda row: json.dumps(row).encode(),
    "ascii": lambda row: json.dumps(row, sort_keys=True, separators=(",", ":")).encode(),
    "crlf": lambda row: ref_canonical(row) + b"\r",
    "float": lambda row: ref_canonical(row).replace(b'"ratio":1e-05', b'"ratio":1.0E-5'),
}


def spelled(rows: list[dict[str, Any]], how: str) -> list[bytes]:
    """`rows` as lines spelled `how`; "mixed" takes each spelling in turn."""
    ways = list(SPELLINGS.values()) if how == "mixed" else [SPELLINGS[how]]
    return [ways[i % len(ways)](row) for i, row in enumerate(rows)]


def canonical_lines(rows: list[dict[str, Any]]) -> list[bytes]:
    return [ref_canonical(row) for row in rows]


def expected_tree(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[str, list[bytes]]:
    """The anchor tree DESIGN.md §2 gives the chain of `rows`, made here from its canonical
    lines with git's own plumbing (hash-object, mktree): its id and its chunk blobs."""
    lines = canonical_lines(rows)
    chunks = [b"".join(x + b"\n" for x in lines[i : i + 1000])
              for i in range(0, len(lines), 1000)]
    meta = ref_canonical({"run_id": RUN, "head_hash": rows[-1]["entry_hash"],
                          "entry_count": len(rows), "chunk_count": len(chunks),
                          "format_version": 1}) + b"\n"
    scratch = tmp_path / "plumbing"
    if not scratch.exists():
        new_repo(scratch)
    listing = ""
    for name, data in [*((f"chunk-{i:06d}.jsonl", c) for i, c in enumerate(chunks)),
                       ("LEDGER.json", meta)]:
        oid = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=scratch, input=data,
                             capture_output=True, check=True).stdout.decode().strip()
        listing += f"100644 blob {oid}\t{name}\n"
    tree = subprocess.run(["git", "mktree"], cwd=scratch, input=listing.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    return tree, chunks


@pytest.mark.parametrize("how", [*SPELLINGS, "mixed"])
def test_a_chain_spelled_non_canonically_anchors_to_the_canonical_tree(
        tmp_path: Path, how: str) -> None:
    """DESIGN.md §2: the chunks hold the canonical lines, and two machines anchoring the
    same chain get the same tree id. A hand-written ledger that spells its rows another
    way verifies; anchored, it gives the chain's canonical tree all the same, byte for
    byte, and its own file is left as it was."""
    rows = rich_rows(1500)
    tree, chunks = expected_tree(tmp_path, rows)
    canon = new_repo(tmp_path / "canonical")
    write_ledger(canon, canonical_lines(rows))
    odd_repo = new_repo(tmp_path / "odd")
    odd = spelled(rows, how)
    assert all(x != y for x, y in zip(odd, canonical_lines(rows), strict=True))
    path = write_ledger(odd_repo, odd)
    assert verify_dir(path.parent).ok
    for r in (canon, odd_repo):
        res = anc.anchor(r, RUN)
        assert (res.status, res.tree, res.entry_count, res.head_hash) == (
            "created", tree, 1500, rows[-1]["entry_hash"])
        assert git("rev-parse", f"{REF}^{{tree}}", cwd=r) == tree
        entries = tree_entries(r, REF)
        assert blobs_of(
            r, [entries["chunk-000000.jsonl"], entries["chunk-000001.jsonl"]]) == chunks
    assert path.read_bytes() == b"".join(x + b"\n" for x in odd)


@pytest.mark.parametrize("prefix", ["canonical", "mixed"])
def test_reanchoring_lines_spelled_non_canonically_reuses_the_full_chunks(
        tmp_path: Path, prefix: str) -> None:
    """Entries appended by hand in other spellings (after a canonical prefix, the one a
    re-anchor takes on trust from its checked anchor, or after one spelled oddly too)
    are anchored as canonical lines, and the full chunks' blobs are reused."""
    rows = rich_rows(3600)
    repo = new_repo(tmp_path / "repo")
    first_lines = (canonical_lines(rows[:2500]) if prefix == "canonical"
                   else spelled(rows[:2500], "mixed"))
    write_ledger(repo, first_lines)
    first = anc.anchor(repo, RUN)
    assert first.tree == expected_tree(tmp_path, rows[:2500])[0]
    lines = first_lines + spelled(rows[2500:], "mixed")
    path = write_ledger(repo, lines)
    res = anc.anchor(repo, RUN)
    assert (res.status, res.tree, res.entry_count, res.blobs_written) == (
        "extended", expected_tree(tmp_path, rows)[0], 3600, 3)
    before, after = tree_entries(repo, first.commit), tree_entries(repo, res.commit)
    assert [after[f"chunk-00000{i}.jsonl"] for i in (0, 1)] == [
        before[f"chunk-00000{i}.jsonl"] for i in (0, 1)]
    again = anc.anchor(repo, RUN)
    assert (again.status, again.commit) == ("unchanged", res.commit)
    assert path.read_bytes() == b"".join(x + b"\n" for x in lines)


def test_a_non_canonical_ledger_travels_as_canonical_lines(hosts: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    """A's ledger spells its rows its own way. B fetches A's anchor as canonical lines,
    extends the chain and anchors it back; A fetches that onto its own lines, which it
    keeps as they are, and then verify, `ledger runs` and a re-anchor all find the one
    chain both hosts anchor to the same tree."""
    a, b = hosts
    rows = rich_rows(2100)
    odd = spelled(rows[:1500], "mixed")
    path_a = write_ledger(a, odd)
    assert anc.anchor(a, RUN).tree == expected_tree(tmp_path, rows[:1500])[0]
    push(a)
    got = anc.fetch(b, RUN)
    assert (got.status, got.entry_count) == ("written", 1500)
    assert ledger_file(b).read_bytes() == b"".join(
        x + b"\n" for x in canonical_lines(rows[:1500]))
    write_ledger(b, canonical_lines(rows))
    theirs = anc.anchor(b, RUN)
    assert theirs.status == "extended"
    push(b)

    got = anc.fetch(a, RUN)
    assert (got.status, got.new_entries) == ("extended", 600)
    assert path_a.read_bytes() == b"".join(
        x + b"\n" for x in odd + canonical_lines(rows[1500:]))
    v = verify_dir(path_a.parent)
    assert (v.ok, v.entry_count, v.head_hash) == (True, 2100, rows[-1]["entry_hash"])
    assert git("rev-parse", REF, cwd=a) == theirs.commit
    [entry] = survey(a)
    assert (entry["agreement"], entry["entry_count"]) == ("identical", 2100)
    again = anc.anchor(a, RUN)
    assert (again.status, again.commit, again.tree) == (
        "unchanged", theirs.commit, expected_tree(tmp_path, rows)[0])


def test_an_anchor_an_older_harness_spelled_non_canonically_is_anchored_anew(
        repo: Path, tmp_path: Path) -> None:
    """An older harness copied a hand-written ledger's spelling into the anchor (and
    recorded its tree as verified). Anchoring the same chain now replaces that tree with
    the canonical one, on top of it; once, as the next anchor finds it in sync."""
    rows = rich_rows(1200)
    odd = spelled(rows, "json.dumps")
    write_ledger(repo, odd)
    forged = _forge(repo, {"chunk-000000.jsonl": _blob(odd[:1000]),
                           "chunk-000001.jsonl": _blob(odd[1000:]),
                           "LEDGER.json": _meta(odd, chunk_count=2)})
    old_tree = git("rev-parse", f"{forged}^{{tree}}", cwd=repo)
    (repo / ".git" / "harness-verified-anchors").write_text(
        f"{old_tree} {rows[-1]['entry_hash']} 1200\n")
    res = anc.anchor(repo, RUN)
    assert (res.status, res.tree, res.entry_count) == (
        "extended", expected_tree(tmp_path, rows)[0], 1200)
    assert git("rev-parse", f"{REF}^", cwd=repo) == forged
    again = anc.anchor(repo, RUN)
    assert (again.status, again.commit) == ("unchanged", res.commit)


def test_a_secret_deep_in_a_long_chain_is_named_by_its_file_and_line(
        hosts: tuple[Path, Path]) -> None:
    """A chain sealed by the writer's own row code but without its scrubber, one payload
    deep in it holding a password: anchor refuses it naming the entry by its segment
    file and line, and fetch refuses an anchor of it naming the chunk file and line;
    neither names the secret, and neither writes a ref or a ledger."""
    a, b = hosts
    lines, prev = [], GENESIS
    for seq in range(1, 2101):
        payload: dict[str, Any] = {"n": seq}
        if seq == 1500:
            payload["env"] = {"user": "bob", "password": "hunter2"}
        row, line = rows.make_row(seq=seq, ts_ns=seq * 10**9, kind="task.completed",
                                  task_id=f"t{seq}", payload=payload,
                                  payload_bytes=canonical(payload), prev_hash=prev,
                                  redactions=0)
        lines.append(line)
        prev = row["entry_hash"]
    d = ledger_file(a).parent
    d.mkdir(parents=True)
    (d / "000000.jsonl").write_bytes(_blob(lines[:1000]))
    (d / "000001.jsonl").write_bytes(_blob(lines[1000:]))
    assert verify_dir(d).ok
    held = ("entry 1500 ({where}) holds a secret in payload.env.password (the secret "
            "scrubber would rewrite it)")
    with pytest.raises(VerificationFailed) as ei:
        anc.anchor(a, RUN)
    assert str(ei.value) == (
        f"refusing to anchor run {RUN}: {held.format(where='000001.jsonl:500')}. An anchor "
        "is published for other machines to fetch, and a work ledger never carries a "
        "secret in cleartext: rewrite the chain from that entry with the value redacted, "
        "then anchor it")
    assert ei.value.exit_code == 2
    assert Git.open(a).resolve(REF) is None

    _forge(a, {"chunk-000000.jsonl": _blob(lines[:1000]),
               "chunk-000001.jsonl": _blob(lines[1000:2000]),
               "chunk-000002.jsonl": _blob(lines[2000:]),
               "LEDGER.json": _meta(lines, chunk_count=3)})
    push(a)
    with pytest.raises(VerificationFailed) as ei:
        anc.fetch(b, RUN)
    assert str(ei.value) == (
        f"origin {REF} is not a work-ledger anchor: "
        f"{held.format(where='chunk-000001.jsonl:500')}, which a work ledger never carries "
        "in cleartext")
    assert "hunter2" not in str(ei.value)
    assert Git.open(b).resolve(REF) is None
    assert not ledger_file(b).parent.exists()



def test_a_payload_too_deep_to_search_is_refused_not_a_crash(repo: Path) -> None:
    """A payload nested deeper than the scrubber can walk (it recurses; the verifier
    reads it in C) can verify, but cannot be shown to hold no secret: anchor refuses it,
    naming the entry, rather than failing with a RecursionError."""
    clean = {"n": 1}
    first, line1 = rows.make_row(seq=1, ts_ns=10**9, kind="goal.note", task_id=None,
                                 payload=clean, payload_bytes=canonical(clean),
                                 prev_hash=GENESIS, redactions=0)

    def chain(depth: int) -> list[bytes]:
        deep = b'{"a":' + b"[" * depth + b'"password=x"' + b"]" * depth + b"}"
        _, line2 = rows.make_row(seq=2, ts_ns=2 * 10**9, kind="goal.note", task_id=None,
                                 payload={}, payload_bytes=deep,
                                 prev_hash=first["entry_hash"], redactions=0)
        return [line1, line2]

    def anchor_at(depth: int) -> BaseException | None:
        write_ledger(repo, chain(depth))
        try:
            anc.anchor(repo, RUN, dry_run=True)
        except BaseException as exc:
            return exc
        return None

    def unverified(exc: BaseException | None) -> bool:
        return isinstance(exc, VerificationFailed) and "does not verify" in str(exc)

    out: list[BaseException | None] = []

    def run() -> None:
        # On a thread of its own, the stack is as shallow and as deep each time: the
        # deepest payload anchor's verifier takes is one its scrubber cannot walk.
        low, high = 1, 5000  # verifies at low, not at high
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if unverified(anchor_at(mid)) else (mid, high)
        out.append(anchor_at(low))

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=120)
    [exc] = out
    assert isinstance(exc, VerificationFailed), repr(exc)
    assert str(exc) == (
        f"refusing to anchor run {RUN}: entry 2 (000000.jsonl:2) holds a payload nested too "
        "deeply to search for a secret (it cannot be shown to hold none). An anchor is "
        "published for other machines to fetch, and a work ledger never carries a secret "
        "in cleartext: rewrite the chain from that entry with the value redacted, then "
        "anchor it")
    assert Git.open(repo).resolve(REF) is None


def test_torn_tail_is_excluded(repo: Path) -> None:
    lines = chain(5)
    write_ledger(repo, lines, tail=b'{"seq":6,"ts":"2026')
    res = anc.anchor(repo, RUN)
    assert (res.entry_count, res.head_hash) == (5, head_of(lines))


def test_broken_chain_is_never_anchored(repo: Path) -> None:
    lines = chain(8)
    lines[4] = lines[4].replace(b"entry 5", b"entry X")
    write_ledger(repo, lines)
    with pytest.raises(VerificationFailed) as ei:
        anc.anchor(repo, RUN)
    assert ei.value.exit_code == 2 and "entry 5" in str(ei.value)
    assert Git.open(repo).resolve(REF) is None


def test_broken_local_extension_is_refused(repo: Path) -> None:
    lines = chain(1500)
    write_ledger(repo, lines)
    anc.anchor(repo, RUN)
    more = chain(1510, prefix=lines)
    more[1505] = more[1505].replace(b"entry 1506", b"entry 9999")
    write_ledger(repo, more)
    with pytest.raises(VerificationFailed, match="entry 1506"):
        anc.anchor(repo, RUN)


def test_no_local_ledger(repo: Path) -> None:
    with pytest.raises(NoLedger) as ei:
        anc.anchor(repo, RUN)
    assert ei.value.exit_code == 1


def test_anchored_ahead_is_refused(repo: Path) -> None:
    lines = chain(10)
    write_ledger(repo, lines)
    anc.anchor(repo, RUN)
    write_ledger(repo, lines[:7])
    with pytest.raises(anc.AnchoredAhead) as ei:
        anc.anchor(repo, RUN)
    assert ei.value.exit_code == 2
    assert f"harness ledger fetch {RUN}" in str(ei.value)


def test_divergence_names_the_fork_entry_and_both_heads(repo: Path) -> None:
    base = chain(5)
    theirs = chain(8, salt="-theirs", prefix=base)
    mine = chain(9, salt="-mine", prefix=base)
    write_ledger(repo, theirs)
    old = anc.anchor(repo, RUN)
    write_ledger(repo, mine)
    with pytest.raises(Divergence) as ei:
        anc.anchor(repo, RUN)
    msg = str(ei.value)
    assert ei.value.exit_code == 3
    assert msg.startswith("work ledgers diverge at entry 6: two chains extend the same parent "
                          "entry (local head ")
    assert head_of(mine) in msg and head_of(theirs) in msg
    assert "keep exactly one lineage" in msg and "\n" not in msg
    assert Git.open(repo).resolve(REF) == old.commit


def _forge(repo: Path, files: dict[str, bytes], parent: str | None = None) -> str:
    """Point REF at a commit whose tree holds exactly `files` (bypassing anchor)."""
    g = Git.open(repo)
    ids = g.write_blobs(list(files.values()))
    tree = g.mktree(list(zip(files, ids, strict=True)))
    commit = g.commit_tree(tree, [parent] if parent else [], "forged\n")
    g.update_ref(REF, commit, g.resolve(REF))
    return commit


def _meta(lines: list[bytes], **over: Any) -> bytes:
    m = {"run_id": RUN, "head_hash": head_of(lines), "entry_count": len(lines),
         "chunk_count": 1, "format_version": 1}
    m.update(over)
    return canonical(m) + b"\n"


def _blob(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize("case", ["stray", "gap", "count", "run", "tampered", "no-meta",
                                  "head", "version", "blob-ref"])
def test_a_ref_that_is_not_an_anchor(repo: Path, case: str) -> None:
    lines = chain(6)
    write_ledger(repo, lines)
    files = {"LEDGER.json": _meta(lines), "chunk-000000.jsonl": _blob(lines)}
    if case == "stray":
        files["README"] = b"hi\n"
    elif case == "gap":
        files["chunk-000002.jsonl"] = files.pop("chunk-000000.jsonl")
    elif case == "count":
        files["LEDGER.json"] = _meta(lines, entry_count=5)
    elif case == "run":
        files["LEDGER.json"] = _meta(lines, run_id="other")
    elif case == "tampered":
        files["chunk-000000.jsonl"] = _blob(lines).replace(b"entry 3", b"entry Z")
    elif case == "no-meta":
        del files["LEDGER.json"]
    elif case == "head":
        files["LEDGER.json"] = _meta(lines, head_hash="a" * 64)
    elif case == "version":
        files["LEDGER.json"] = _meta(lines, format_version=2)
    if case == "blob-ref":
        g = Git.open(repo)
        g.update_ref(REF, g.write_blobs([b"x"])[0], None)
    else:
        _forge(repo, files)
    for op in (anc.anchor, anc.gc):
        with pytest.raises(VerificationFailed) as ei:
            op(repo, RUN)
        assert str(ei.value).startswith(f"{REF} is not a work-ledger anchor: ")
        assert ei.value.exit_code == 2


def test_non_git_directory(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    write_ledger(plain, chain(3))
    for op in (anc.anchor, anc.gc, anc.fetch):
        with pytest.raises(NoLedger) as ei:
            op(plain, RUN)
        assert str(ei.value) == f"not a git repository: {plain}"
    with pytest.raises(NoLedger):
        anc.list_anchored(plain)


def test_anchor_with_gpg_signing_configured(repo: Path) -> None:
    git("config", "commit.gpgSign", "true", cwd=repo)
    git("config", "gpg.program", "false", cwd=repo)
    git("config", "user.signingKey", "nobody", cwd=repo)
    write_ledger(repo, chain(3))
    res = anc.anchor(repo, RUN)
    assert res.status == "created"
    assert "gpgsig" not in git("cat-file", "commit", res.commit, cwd=repo)


def test_update_ref_is_compare_and_swap(repo: Path) -> None:
    write_ledger(repo, chain(3))
    res = anc.anchor(repo, RUN)
    g = Git.open(repo)
    with pytest.raises(RefMoved):
        g.update_ref(REF, res.tree, None)  # create, but it exists
    with pytest.raises(RefMoved):
        g.update_ref(REF, res.commit, "1" * 40)  # wrong old value
    assert g.resolve(REF) == res.commit


def test_objects_are_written_in_batches(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    real = subprocess.run

    def spy(argv: list[str], *a: Any, **kw: Any) -> Any:
        calls.append(argv)
        return real(argv, *a, **kw)

    monkeypatch.setattr(subprocess, "run", spy)
    write_ledger(repo, chain(12_000))
    anc.anchor(repo, RUN)
    assert len(calls) <= 10, [c[7] for c in calls]
    g = Git.open(repo)
    blobs = [b"a\n", b"b\n", b"a\n"]
    calls.clear()
    ids = g.write_blobs(blobs)
    assert ids[0] == ids[2]
    assert blobs_of(repo, ids) == blobs
    calls.clear()
    g.write_blobs(blobs)  # all present: a presence check, no write
    assert [c[7] for c in calls] == ["cat-file"]


def test_blob_ids_match_git(repo: Path) -> None:
    g = Git.open(repo)
    data = b"hello\nworld\n"
    out = subprocess.run(["git", "hash-object", "--stdin"], cwd=repo, input=data,
                         capture_output=True, check=True).stdout.decode().strip()
    assert g.blob_id(data) == out


# -- fetch ------------------------------------------------------------------------------


def test_fetch_into_a_clone_without_a_ledger(hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = chain(2100)
    write_ledger(a, lines)
    anchored = anc.anchor(a, RUN)
    push(a)
    res = anc.fetch(b, RUN)
    assert (res.status, res.entry_count, res.head_hash) == ("written", 2100, head_of(lines))
    path = ledger_file(b)
    assert path.read_bytes() == ledger_file(a).read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert Git.open(b).resolve(REF) == anchored.commit
    assert anc.fetch(b, RUN).status == "unchanged"


def test_fetch_extends_a_local_prefix(hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = published(a, 1500)
    write_ledger(b, lines[:1200], tail=b'{"seq":1201,"ts')
    before = ledger_file(b).stat().st_ino
    res = anc.fetch(b, RUN)
    assert (res.status, res.new_entries) == ("extended", 300)
    assert ledger_file(b).read_bytes() == _blob(lines)
    assert ledger_file(b).stat().st_ino == before  # appended, not rewritten


def test_fetch_extends_a_local_prefix_whose_last_row_lacks_its_newline(
        hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = published(a, 1500)
    write_ledger(b, lines[:1199], tail=lines[1199])  # whole, only the newline missing
    res = anc.fetch(b, RUN)
    assert (res.status, res.new_entries) == ("extended", 300)
    assert ledger_file(b).read_bytes() == _blob(lines)


def test_fetch_dry_run_says_what_fetch_would_do_and_changes_nothing(
        hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = published(a, 1500)

    def state() -> tuple[str, bytes | None]:
        path = ledger_file(b)
        return (git("for-each-ref", cwd=b), path.read_bytes() if path.exists() else None)

    for local, want in ((None, ("written", 1500)), (lines[:1200], ("extended", 300)),
                        (lines, ("unchanged", 0))):
        if local is not None:
            write_ledger(b, local)
        before = state()
        res = anc.fetch(b, RUN, dry_run=True)
        assert (res.status, res.new_entries, res.dry_run) == (*want, True)
        assert (res.entry_count, res.head_hash) == (1500, head_of(lines))
        assert state() == before  # no ref moved, the local ledger untouched
    real = anc.fetch(b, RUN)
    assert (real.status, real.dry_run) == ("unchanged", False)


def test_fetch_identical_is_unchanged(hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = chain(40)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    push(a)
    write_ledger(b, lines)
    assert anc.fetch(b, RUN).status == "unchanged"
    assert ledger_file(b).read_bytes() == _blob(lines)


def test_fetch_refuses_when_local_is_ahead(hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = chain(40)
    write_ledger(a, lines[:30])
    anc.anchor(a, RUN)
    push(a)
    write_ledger(b, lines)
    with pytest.raises(anc.LocalAhead) as ei:
        anc.fetch(b, RUN)
    assert ei.value.exit_code == 2 and f"harness ledger anchor {RUN}" in str(ei.value)
    assert ledger_file(b).read_bytes() == _blob(lines)


def test_fetch_refuses_a_diverged_local_chain(hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    base = chain(5)
    theirs, mine = chain(7, "-a", base), chain(7, "-b", base)
    write_ledger(a, theirs)
    anc.anchor(a, RUN)
    push(a)
    write_ledger(b, mine)
    with pytest.raises(Divergence) as ei:
        anc.fetch(b, RUN)
    msg = str(ei.value)
    assert ei.value.exit_code == 3 and "diverge at entry 6" in msg
    assert head_of(mine) in msg and head_of(theirs) in msg
    assert ledger_file(b).read_bytes() == _blob(mine)


@pytest.mark.parametrize("local", [None, 3])
def test_fetch_verifies_before_a_byte_is_written(
    hosts: tuple[Path, Path], local: int | None
) -> None:
    a, b = hosts
    lines = chain(10)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    bad = _blob(lines).replace(b"entry 7", b"entry 0")
    _forge(a, {"LEDGER.json": _meta(lines), "chunk-000000.jsonl": bad})
    push(a, force=True)
    if local is not None:
        write_ledger(b, lines[:local])
    before = {p: p.read_bytes() for p in (b / ".harness").rglob("*") if p.is_file()} \
        if (b / ".harness").exists() else None
    with pytest.raises(VerificationFailed, match="not a work-ledger anchor"):
        anc.fetch(b, RUN)
    if local is None:
        assert not (b / ".harness").exists()
    else:
        assert before == {p: p.read_bytes() for p in (b / ".harness").rglob("*") if p.is_file()}
    assert Git.open(b).resolve(REF) is None


def test_fetch_from_a_missing_remote(hosts: tuple[Path, Path]) -> None:
    _, b = hosts
    with pytest.raises(NoLedger, match="no remote named 'nowhere'") as ei:
        anc.fetch(b, RUN, remote="nowhere")
    assert ei.value.exit_code == 1
    with pytest.raises(NoLedger, match="cannot read remote"):
        anc.fetch(b, RUN, remote=str(b.parent / "absent.git"))


def test_fetch_from_a_remote_without_the_ref(hosts: tuple[Path, Path]) -> None:
    _, b = hosts
    with pytest.raises(NoLedger, match=f"remote 'origin' has no {REF}") as ei:
        anc.fetch(b, RUN)
    assert ei.value.exit_code == 1


def test_migration_round_trip_then_reanchor_on_the_new_host(hosts: tuple[Path, Path]) -> None:
    a, b = hosts
    lines = chain(1100)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    push(a)
    anc.fetch(b, RUN)
    more = chain(1150, prefix=lines)
    write_ledger(b, more)
    res = anc.anchor(b, RUN)
    assert res.status == "extended"
    push(b)
    assert anc.fetch(a, RUN).status == "extended"
    assert ledger_file(a).read_bytes() == _blob(more)


# -- gc and listing ---------------------------------------------------------------------


def test_gc_squashes_to_one_parentless_commit(repo: Path) -> None:
    lines = chain(1000)
    write_ledger(repo, lines)
    anc.anchor(repo, RUN)
    for n in (1500, 2100):
        lines = chain(n, prefix=lines)
        write_ledger(repo, lines)
        last = anc.anchor(repo, RUN)
    msg = anc.gc(repo, RUN).message
    assert f"+{REF}:{REF}" in msg
    assert git("rev-list", "--count", REF, cwd=repo) == "1"
    assert git("rev-parse", f"{REF}^{{tree}}", cwd=repo) == last.tree
    assert git("rev-parse", REF, cwd=repo) != last.commit
    assert "already" in anc.gc(repo, RUN).message
    assert anc.anchor(repo, RUN).status == "unchanged"


def test_gc_without_an_anchor(repo: Path) -> None:
    with pytest.raises(NoLedger):
        anc.gc(repo, RUN)


def test_list_anchored(repo: Path) -> None:
    assert anc.list_anchored(repo) == []
    write_ledger(repo, chain(3), run_id="r1")
    write_ledger(repo, chain(1001), run_id="r2")
    c1 = anc.anchor(repo, "r1").commit
    c2 = anc.anchor(repo, "r2").commit
    g = Git.open(repo)
    g.update_ref("refs/harness/work-ledger/junk", g.write_blobs([b"x"])[0], None)
    got = {i.run_id: i for i in anc.list_anchored(repo)}
    assert (got["r1"].entry_count, got["r1"].commit, got["r1"].error) == (3, c1, None)
    assert (got["r2"].entry_count, got["r2"].head_hash) == (1001, head_of(chain(1001)))
    assert got["r2"].commit == c2
    assert got["junk"].error is not None


# -- compare_chains ---------------------------------------------------------------------


def test_compare_chains() -> None:
    base = chain(4)
    longer = chain(6, prefix=base)
    other = chain(6, "-x", base)
    assert anc.compare_chains(base, base) == "identical"
    assert anc.compare_chains(longer, base) == "local_ahead"
    assert anc.compare_chains(base, longer) == "anchored_ahead"
    assert anc.compare_chains(longer, other) == ("diverged", 5)
    assert anc.compare_chains(chain(3, "-p"), chain(3, "-q")) == ("diverged", 1)
    assert anc.compare_chains([], []) == "identical"
    # Metadata outside the hash (ts) does not make two entries differ.
    restamped = [x.replace(b"07:00:00", b"08:00:00") for x in base]
    assert anc.compare_chains(restamped, base) == "identical"


def test_errors_are_work_ledger_errors() -> None:
    for cls in (anc.AnchoredAhead, anc.LocalAhead, RefMoved):
        assert issubclass(cls, WorkLedgerError)
    assert os.environ["GIT_CONFIG_NOSYSTEM"] == "1"


def test_fetch_refuses_while_a_writer_holds_the_ledger(hosts: tuple[Path, Path]) -> None:
    from harness.worklog import store

    a, b = hosts
    lines = chain(20)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    push(a)
    path = write_ledger(b, lines[:10])
    fd = store.take_lock(path.parent, RUN)
    try:
        with pytest.raises(store.LedgerLocked) as ei:
            anc.fetch(b, RUN)
        assert ei.value.exit_code == 2
    finally:
        store.release_lock(fd)
    assert path.read_bytes() == _blob(lines[:10])
    assert anc.fetch(b, RUN).status == "extended"


def test_reanchor_rewalks_a_prefix_that_changed_locally(repo: Path) -> None:
    lines = chain(1500)
    write_ledger(repo, lines)
    anc.anchor(repo, RUN)
    more = chain(1600, prefix=lines)
    more[9] = more[9].replace(b"entry 10", b"entry 1O")
    write_ledger(repo, more)
    with pytest.raises(VerificationFailed, match="entry 10 "):
        anc.anchor(repo, RUN)


def test_fetch_after_gc_and_forced_push_follows_the_squashed_ref(
    hosts: tuple[Path, Path],
) -> None:
    a, b = hosts
    lines = chain(1200)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    lines = chain(1300, prefix=lines)
    write_ledger(a, lines)
    anc.anchor(a, RUN)
    push(a)
    assert anc.fetch(b, RUN).status == "written"
    anc.gc(a, RUN)
    with pytest.raises(AssertionError):
        push(a)  # no longer a fast-forward
    push(a, force=True)
    res = anc.fetch(b, RUN)
    assert (res.status, res.warning) == ("unchanged", None)
    assert Git.open(b).resolve(REF) == Git.open(a).resolve(REF)


def test_fetch_that_cannot_read_back_the_chain_undoes_its_append_and_fails(
        hosts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing unverified crosses a boundary: should the torn tail stay in place (here the
    cut is made to do nothing), the appended lines fuse with it, the ledger read back is
    not the verified chain, and fetch fails (exit 2) with the append undone instead of
    reporting "extended" over a ledger that no longer verifies."""
    a, b = hosts
    lines = published(a, 7)
    fragment = b'{"seq":6,"ts'
    path = write_ledger(b, lines[:5], tail=fragment)
    before = path.read_bytes()
    monkeypatch.setattr(anc.store, "cut_torn_tail", lambda *a, **k: 0)
    with pytest.raises(VerificationFailed) as ei:
        anc.fetch(b, RUN)
    assert ei.value.exit_code == 2
    assert str(ei.value) == (
        f"fetched run {RUN}, but the local work ledger {path.parent} did not read back as "
        "the verified chain: it does not verify at entry 6 (000000.jsonl:6): not a "
        "parseable ledger row (Unterminated string starting at: line 1 column 10 (char 9)); "
        "the fetched entries were removed again, and the local chain is as it was before "
        "the fetch")
    assert path.read_bytes() == before
    assert Git.open(b).resolve(REF) is None  # the side ref did not move either


# -- the fetch's writes go through the file layer, and so do their undos --------------------

EIO = "Input/output error"


def test_a_fetch_whose_append_fails_cuts_it_back(hosts: tuple[Path, Path]) -> None:
    """A write that fails part way (a full or failing disk): fetch cuts the segment back to
    what it held, fails with exit 2, moves no ref, and the next fetch completes."""
    a, b = hosts
    lines = published(a, 7)
    path = write_ledger(b, lines[:5])
    before = path.read_bytes()
    files = FaultyFiles()
    files.inject("write", errno=errno.EIO, partial=True, lands=10, times=1)
    with pytest.raises(WorkLedgerError) as ei:
        anc.fetch(b, RUN, files=files)
    assert ei.value.exit_code == 2
    assert str(ei.value) == (
        f"cannot append the fetched entries of run {RUN} to {path}: {EIO} (injected on "
        "write); they were cut off again, and the local chain is as it was before the fetch")
    assert (files.calls["write"], files.calls["truncate"]) == (1, 1)
    assert path.read_bytes() == before
    assert Git.open(b).resolve(REF) is None
    assert anc.fetch(b, RUN, files=files).status == "extended"
    assert path.read_bytes() == _blob(lines)


@pytest.mark.parametrize(("fault", "kept", "torn"), [("write", 5, 10), ("sync", 7, 0)])
def test_a_fetch_whose_append_and_its_undo_fail_loses_nothing(
        hosts: tuple[Path, Path], fault: str, kept: int, torn: int) -> None:
    """The append fails (10 bytes of it landed, or all of it but not its sync) and cutting
    it back fails too: fetch fails (exit 2) saying so, every entry the ledger held is
    still there, and what follows them is verified fetched entries or a torn fragment,
    so the ledger still verifies; the side ref did not move. Once the disk takes writes,
    fetch completes the same chain."""
    a, b = hosts
    lines = published(a, 7)
    path = write_ledger(b, lines[:5])
    size = path.stat().st_size
    files = FaultyFiles()
    files.inject(fault, errno=errno.EIO, partial=fault == "write", lands=10, times=1)
    files.inject("truncate", errno=errno.EIO)
    with pytest.raises(WorkLedgerError) as ei:
        anc.fetch(b, RUN, files=files)
    assert ei.value.exit_code == 2
    assert str(ei.value) == (
        f"cannot append the fetched entries of run {RUN} to {path}: {EIO} (injected on "
        f"{fault}); cutting it back to the {size} bytes it held before failed too ({EIO} "
        "(injected on truncate)). Every entry it held is still there; after them it holds "
        "only fetched entries, verified, or a torn fragment that readers skip and the next "
        f"writer cuts. Run 'harness ledger fetch {RUN}' again once the disk takes writes")
    assert path.read_bytes() == (_blob(lines) if fault == "sync"
                                 else _blob(lines[:5]) + lines[5][:10])
    v = verify_dir(path.parent)
    assert (v.ok, v.entry_count, v.head_hash, v.torn_size) == (
        True, kept, head_of(lines[:kept]), torn)
    assert Git.open(b).resolve(REF) is None
    files.clear()
    res = anc.fetch(b, RUN, files=files)
    assert (res.status, res.new_entries) == (("extended", 2) if kept == 5 else ("unchanged", 0))
    assert path.read_bytes() == _blob(lines)
    assert Git.open(b).resolve(REF) == Git.open(a).resolve(REF)


def test_a_fetch_whose_read_back_fails_and_whose_undo_fails_says_to_move_it_aside(
        hosts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-back mismatch of the test above (the torn tail left in place, so the
    appended lines fuse with it), and the undo's truncate fails: fetch still fails
    (exit 2), never reporting success for a ledger that does not verify, and says that
    the ledger is left as read back and must be moved aside."""
    a, b = hosts
    lines = published(a, 7)
    fragment = b'{"seq":6,"ts'
    path = write_ledger(b, lines[:5], tail=fragment)
    monkeypatch.setattr(anc.store, "cut_torn_tail", lambda *a, **k: 0)
    files = FaultyFiles()
    files.inject("truncate", errno=errno.EIO)
    with pytest.raises(VerificationFailed) as ei:
        anc.fetch(b, RUN, files=files)
    assert ei.value.exit_code == 2
    assert str(ei.value) == (
        f"fetched run {RUN}, but the local work ledger {path.parent} did not read back as "
        "the verified chain: it does not verify at entry 6 (000000.jsonl:6): not a "
        "parseable ledger row (Unterminated string starting at: line 1 column 10 (char 9)); "
        f"removing the fetched entries failed ({EIO} (injected on truncate)), so it is left "
        f"as read back: move {path.parent} aside and run 'harness ledger fetch {RUN}' again")
    assert files.calls["truncate"] == 1
    # The fragment stays a line of its own: a newline was put after it, as after a
    # last row that lacks one.
    assert path.read_bytes() == _blob(lines[:5]) + fragment + b"\n" + _blob(lines[5:])
    assert Git.open(b).resolve(REF) is None
