"""Anchoring a work ledger into git, fetching it back, squashing and listing anchors.

It owns the side ref ``refs/harness/work-ledger/<run-id>`` and the anchor tree format
(DESIGN.md §2 "Anchor tree"): ``chunk-000000.jsonl``, ``chunk-000001.jsonl``, … holding
1,000 canonical ledger lines each, "\\n"-terminated, plus ``LEDGER.json`` = canonical
``{run_id, head_hash, entry_count, chunk_count, format_version}``. It also owns the one
rule for comparing two chains (`compare_chains`), which resume uses too.

Invariants:

* Nothing unverified crosses a boundary: a local chain that does not verify is never
  anchored, and an anchored chain is verified before a byte of it is written into the
  local ledger. A torn local tail is excluded exactly as `verify.read_chain` excludes it,
  and cut whole (`store.cut_torn_tail`, as writer recovery cuts it) before fetch appends.
  What fetch writes goes through the writer's `FileLayer` (where tests inject faults)
  and is read back: it must be the verified chain, or it is undone and fetch fails, so
  fetch never reports success for a ledger that does not verify. An append that fails
  is cut back; should that cut fail too, the entries the ledger held are all kept and
  the error says what follows them.
* The tree is a pure function of the chain (no timestamps), so the same chain gives the
  same tree id on every machine: a chunk holds each row's canonical line, whatever
  spelling the local ledger holds it in (a ledger written by hand may hold spaces, other
  key orders, escapes or CRLF and still verify). Only the lines verification could not
  prove canonical are re-encoded, and the local ledger is never rewritten. Chunk
  boundaries are fixed from the start of the chain, so a re-anchor reuses every full
  chunk's blob and writes only what is new.
* Secrets never become portable: a chain holding what the writer never records (a
  payload string or key the secret scrubber would rewrite, a kind or task id it would
  refuse; `rows.SecretScan`, shown the chain as it is verified) is never anchored, and
  an anchor holding one is no anchor to fetch, compare or resume from (`read_anchor`
  refuses it). Each refusal names the entry and the field's path, never what it holds.
* Refs move only by compare-and-swap; two chains that disagree are never merged:
  divergence is an error (exit 3) naming the fork entry and both heads. Fetch compares
  the fetched chain with the local ledger and with the local side ref, and writes
  nothing when either holds a diverging lineage (the side ref may be the only trace of
  one whose ledger directory was moved away).
* Every anchor is mirrored into the audit chain as one ``work_ledger.anchor`` event
  naming the run, head and commit: when `anchor` moves the ref, and when it finds the ref
  already holding the chain but no event for that commit (the mirror of the anchor that
  moved it failed), so a failed mirror is made good by the next anchor, exactly once.
* After gc, nothing of the run's own keeps the squashed history reachable, so a normal
  git gc reclaims the superseded chunks: gc also deletes (compare-and-swap) every anchor
  of the run fetched from a remote (``refs/harness/fetched/<remote>/<run-id>``) whose
  chain the anchored one holds whole; one holding another lineage is kept and named.
* A dry run (anchor, fetch, gc) writes nothing under the work tree or .git: no object
  it did not have to fetch, ref, ledger byte or verified-tree cache line.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

import msgspec

from harness import audit
from harness.ledger.canonical import canonical, decode_untrusted
from harness.ledger.files import FileLayer, atomic_write, make_private_dir

from . import (
    Divergence,
    NoLedger,
    VerificationFailed,
    WorkLedgerError,
    os_problem,
    quoted,
    rows,
    secretless,
    store,
    verify,
)
from .git import Git, GitFailed, RefMoved

__all__ = [
    "CHUNK_LINES",
    "FORMAT_VERSION",
    "REF_PREFIX",
    "AnchorResult",
    "AnchoredAhead",
    "AnchoredChain",
    "AnchoredInfo",
    "FetchResult",
    "GcResult",
    "LocalAhead",
    "Relation",
    "all_fetched_refs",
    "anchor",
    "chunk_blobs",
    "compare_chains",
    "divergence_message",
    "fetch",
    "gc",
    "is_hex64",
    "list_anchored",
    "read_anchor",
]

REF_PREFIX: Final = "refs/harness/work-ledger/"
FETCHED_PREFIX: Final = "refs/harness/fetched/"
CHUNK_LINES: Final = 1000
FORMAT_VERSION: Final = 1
META_NAME: Final = "LEDGER.json"
_CHUNK_RX: Final = re.compile(r"chunk-(\d{6})\.jsonl")
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_META_KEYS: Final = frozenset(("run_id", "head_hash", "entry_count", "chunk_count",
                               "format_version"))
# Trees checked on this host, by id: a tree id names its content exactly, so a tree whose
# chain verified, in canonical lines, with no secret in any, passes for ever, and a
# re-anchor need not walk the whole chain again. (An earlier memo,
# "harness-verified-anchors", recorded trees checked for the chain alone: its entries
# vouch for less, so they are not read.)
_MEMO_NAME: Final = "harness-checked-anchors"

Relation = (
    Literal["identical", "local_ahead", "anchored_ahead"] | tuple[Literal["diverged"], int]
)


class AnchoredAhead(VerificationFailed):
    """The anchored chain extends the local one: fetch first (exit 2)."""


class LocalAhead(VerificationFailed):
    """The local chain extends the fetched one: anchor instead (exit 2)."""


@dataclass
class AnchorResult:
    status: Literal["created", "unchanged", "extended"]
    commit: str
    head_hash: str
    entry_count: int
    run_id: str = ""
    ref: str = ""
    tree: str = ""
    chunk_count: int = 0
    blobs_written: int = 0
    warning: str | None = None
    dry_run: bool = False  # nothing was written; `tree` is what the anchor would hold

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FetchResult:
    status: Literal["written", "extended", "unchanged"]
    commit: str
    head_hash: str
    entry_count: int
    run_id: str = ""
    remote: str = ""  # as the user gave it, scrubbed (a URL may carry a token)
    new_entries: int = 0
    warning: str | None = None
    dry_run: bool = False  # nothing was written, no ref moved

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GcResult:
    """What `gc` did (or, for a dry run, would do) to ``refs/harness/work-ledger/<run-id>``."""

    run_id: str
    ref: str
    dry_run: bool
    changed: bool  # the ref moved to a new parentless commit
    commit: str  # the ref's commit after gc (for a dry run or no-op: its commit now)
    previous_commit: str  # the ref's commit before gc
    commits: int  # commits in the anchor history before gc
    dropped_commits: int  # commits squashed away (would be, for a dry run)
    tree: str  # the anchored tree, unchanged by gc
    chunks: int
    # Anchors of the run fetched from a remote (``refs/harness/fetched/…``) that hold
    # nothing the anchored chain lacks: deleted (would be, for a dry run), as they keep
    # the history gc squashes away reachable. And those kept: another lineage.
    dropped_fetched: list[str] = field(default_factory=list)
    kept_fetched: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """One line for a human."""
        return self._squash_message() + self._fetched_message()

    def _squash_message(self) -> str:
        if self.commits == 1:
            return (f"{self.ref} is already a single parentless commit ({self.commit}); "
                    + ("nothing to do" if not self.dropped_fetched else "not squashed"))
        if self.dry_run:
            return (f"dry run: {self.ref} would be squashed from {self.commits} commits into "
                    f"one parentless commit (tree {self.tree} unchanged, {self.chunks} "
                    "chunk(s)); nothing was changed")
        return (
            f"{self.ref}: squashed {self.commits} commits into one parentless commit "
            f"{self.commit} (tree {self.tree} unchanged, {self.chunks} chunk(s)). The ref no "
            "longer fast-forwards from what was pushed, so pushing it now needs a forced "
            f"refspec: git push REMOTE '+{self.ref}:{self.ref}'"
        )

    def _fetched_message(self) -> str:
        text = ""
        if self.dropped_fetched:
            verb = "would delete" if self.dry_run else "deleted"
            text += (f"; {verb} {', '.join(self.dropped_fetched)}: fetched anchor(s) of "
                     "this chain, which kept the squashed history reachable")
        if self.kept_fetched:
            text += (f"; kept {', '.join(self.kept_fetched)}: another lineage of the run "
                     "(git gc cannot reclaim what it reaches)")
        return text

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "result": self.message}


@dataclass
class AnchoredInfo:
    run_id: str
    entry_count: int
    head_hash: str
    commit: str
    error: str | None = None


@dataclass
class AnchoredChain:
    """An anchor read from git and checked: its tree, metadata and (when read) its lines."""

    ref: str
    commit: str
    tree: str
    head_hash: str
    entry_count: int
    chunk_ids: list[str]
    lines: list[bytes] | None = field(default=None, repr=False)
    # Whether every line is its row's canonical line (an anchor harness writes always
    # is; an older harness copied a hand-written ledger's spelling).
    canonical: bool = True


# -- chains -----------------------------------------------------------------------------


class _Hash(msgspec.Struct):
    entry_hash: str | None = None


_hash_of = msgspec.json.Decoder(_Hash)
# JSON an anchor holds may come from another machine: it is decoded by `decode_untrusted`, so a
# value nested past the decoder's depth is as undecodable as any other bad JSON.


def entry_hash_of(line: bytes) -> str | None:
    """The `entry_hash` a ledger line holds, or None for a line that holds none (not a
    row, bad JSON, or nested past the decoder's depth)."""
    try:
        return decode_untrusted(line, _hash_of).entry_hash
    except msgspec.DecodeError:
        return None


def compare_chains(local_lines: Sequence[bytes], anchored_lines: Sequence[bytes]) -> Relation:
    """How two chains relate, entry by entry from genesis.

    Entries are the same when their lines are byte-identical or carry the same
    ``entry_hash`` (metadata outside the hash, such as ``ts``, may differ). Both chains
    must already have been verified. ``("diverged", n)`` names the first differing entry
    by its seq (1-based), the child both chains hang on the same parent.
    """
    n = min(len(local_lines), len(anchored_lines))
    if list(local_lines[:n]) != list(anchored_lines[:n]):
        for i in range(n):
            a, b = local_lines[i], anchored_lines[i]
            if a != b:
                ha = entry_hash_of(a)
                if ha is None or ha != entry_hash_of(b):
                    return ("diverged", i + 1)
    if len(local_lines) == len(anchored_lines):
        return "identical"
    return "local_ahead" if len(local_lines) > len(anchored_lines) else "anchored_ahead"


def divergence_message(
    fork_seq: int, local_head: str, anchored_head: str, run_id: str, action: str, *,
    local: str = "local", anchored: str = "anchored", ref: str | None = None,
) -> str:
    """The one message every divergence gives (anchor, fetch, resume). `local` and
    `anchored` name the two chains; `ref` is the one to delete to drop the anchored
    lineage (default: the run's side ref)."""
    drop = secretless(ref) if ref is not None else f"{REF_PREFIX}{run_id}"
    what = "the anchor" if drop.startswith(REF_PREFIX) else f"the {anchored} anchor"
    return (
        f"work ledgers diverge at entry {fork_seq}: two chains extend the same parent entry "
        f"({local} head {local_head}, {anchored} head {anchored_head}). Two lineages of run "
        f"{run_id} exist; refusing to {action}. Inspect both chains with "
        f"'harness ledger verify {run_id} --json', keep exactly one lineage (move the other "
        f"ledger directory aside, or delete {what} with 'git update-ref -d {drop}'), and "
        "re-anchor it."
    )


def chunk_blobs(lines: Sequence[bytes]) -> list[bytes]:
    """The chunk files of a chain: 1,000 lines each, each line "\\n"-terminated."""
    return [
        b"\n".join(lines[i : i + CHUNK_LINES]) + b"\n"
        for i in range(0, len(lines), CHUNK_LINES)
    ]


def chunk_name(index: int) -> str:
    return f"chunk-{index:06d}.jsonl"


def _meta_blob(run_id: str, head_hash: str, entry_count: int, chunk_count: int) -> bytes:
    return canonical({
        "run_id": run_id,
        "head_hash": head_hash,
        "entry_count": entry_count,
        "chunk_count": chunk_count,
        "format_version": FORMAT_VERSION,
    }) + b"\n"


# -- the checked-tree memo ---------------------------------------------------------------


def _memo_path(git: Git) -> Path:
    return git.git_dir / _MEMO_NAME


def _memo_has(git: Git, tree: str) -> bool:
    try:
        with open(_memo_path(git), "rb") as f:
            return any(line.split(b" ", 1)[0] == tree.encode("ascii") for line in f)
    except OSError:
        return False


def _memo_add(git: Git, tree: str, head_hash: str, entry_count: int) -> None:
    if _memo_has(git, tree):
        return
    try:
        fd = os.open(_memo_path(git), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return  # only a cache: the next anchor walks the whole chain instead
    try:
        os.write(fd, f"{tree} {head_hash} {entry_count}\n".encode("ascii"))
    finally:
        os.close(fd)


# -- reading an anchor ------------------------------------------------------------------


def is_hex64(value: str) -> bool:
    """Whether `value` is spelled as an entry hash: exactly 64 lowercase hex digits."""
    return _HEX64.fullmatch(value) is not None


def _not_anchor(ref: str, why: str) -> VerificationFailed:
    # `ref` may open with the remote the user gave (a URL that can carry a token); `why`
    # has quoted what it found scrubbed already.
    return VerificationFailed(f"{secretless(ref)} is not a work-ledger anchor: {why}")


class _Tree(NamedTuple):
    """An anchor commit as `_read_tree` found it, its tree's shape checked."""

    tree: str
    chunk_ids: list[str]  # in chunk order
    meta_id: str  # LEDGER.json's blob
    parents: list[str]  # the commit's parents


def _read_tree(git: Git, ref: str, commit: str) -> _Tree:
    """Read the commit `ref` names (`commit`) and check its tree's shape."""
    try:
        tree, parents = git.read_commit(commit)
    except GitFailed:
        raise _not_anchor(ref, f"it points at {commit}, which is not a commit") from None
    chunks: dict[int, str] = {}
    meta: str | None = None
    for e in git.ls_tree(tree):
        m = _CHUNK_RX.fullmatch(e.name)
        if e.type != "blob" or e.mode != "100644" or (m is None and e.name != META_NAME):
            raise _not_anchor(ref, f"its tree holds a stray entry {quoted(e.name)} "
                                   f"({e.mode} {e.type})")
        if m is None:
            meta = e.oid
        else:
            chunks[int(m.group(1))] = e.oid
    if meta is None:
        raise _not_anchor(ref, f"its tree has no {META_NAME}")
    if not chunks:
        raise _not_anchor(ref, "its tree has no chunk files")
    if sorted(chunks) != list(range(len(chunks))):
        gap = next(i for i in range(len(chunks)) if i not in chunks)
        raise _not_anchor(ref, f"its chunk files are not contiguous ({chunk_name(gap)} missing)")
    return _Tree(tree, [chunks[i] for i in range(len(chunks))], meta, parents)


def _parse_meta(ref: str, raw: bytes, run_id: str, chunk_count: int) -> tuple[str, int]:
    """Check LEDGER.json against the run and the tree; return (head_hash, entry_count)."""
    try:
        meta = decode_untrusted(raw)
    except msgspec.DecodeError as exc:
        raise _not_anchor(ref, f"{META_NAME} is not JSON ({secretless(exc)})") from None
    if not isinstance(meta, dict) or set(meta) != _META_KEYS:
        got = quoted(sorted(meta)) if isinstance(meta, dict) else type(meta).__name__
        raise _not_anchor(ref, f"{META_NAME} must hold exactly {sorted(_META_KEYS)}, got {got}")
    version = meta["format_version"]
    if type(version) is not int or version != FORMAT_VERSION:  # true == 1 in Python
        raise _not_anchor(ref, f"{META_NAME} has format_version {quoted(version)}, "
                               f"this harness reads {FORMAT_VERSION}")
    if meta["run_id"] != run_id:
        raise _not_anchor(ref, f"{META_NAME} names run {quoted(meta['run_id'])}, "
                               f"not {run_id!r}")
    head, count, chunks = meta["head_hash"], meta["entry_count"], meta["chunk_count"]
    if not isinstance(head, str) or not is_hex64(head):
        raise _not_anchor(ref, f"{META_NAME} head_hash {quoted(head)} is not 64 lowercase "
                               "hex digits")
    for key, value in (("entry_count", count), ("chunk_count", chunks)):
        if type(value) is not int:  # bool is a subclass of int: `true` is no count
            raise _not_anchor(ref, f"{META_NAME} {key} {quoted(value)} is not an integer")
    if chunks != chunk_count:
        raise _not_anchor(ref, f"{META_NAME} says {chunks} chunks, the tree holds "
                               f"{chunk_count}")
    if not (chunk_count - 1) * CHUNK_LINES < count <= chunk_count * CHUNK_LINES:
        raise _not_anchor(ref, f"{META_NAME} says {quoted(count)} entries, which {chunk_count} "
                               f"chunks of {CHUNK_LINES} lines cannot hold")
    return head, count


def _chunk_lines(ref: str, index: int, blob: bytes, last: bool) -> list[bytes]:
    name = chunk_name(index)
    if not blob.endswith(b"\n"):
        raise _not_anchor(ref, f"{name} does not end with a newline")
    lines = blob[:-1].split(b"\n")
    ok = 1 <= len(lines) <= CHUNK_LINES if last else len(lines) == CHUNK_LINES
    if not ok:
        raise _not_anchor(ref, f"{name} holds {len(lines)} lines; chunks hold {CHUNK_LINES}, "
                               "only the last may hold fewer")
    return lines


def read_anchor(git: Git, ref: str, commit: str, run_id: str, *,
                remember: bool = True, shape: _Tree | None = None) -> AnchoredChain:
    """Read every line of the anchor at `commit` and verify it; `VerificationFailed` if
    it is not a well-formed anchor of `run_id` whose chain verifies, or if a line holds
    what the writer never records (a secret: the spec's "Secrets never become
    portable" holds for what arrives as much as for what leaves). With remember=False
    nothing is written (not even the verified-tree cache): for dry runs. `shape` is
    `_read_tree` of the same `commit` when the caller has already read it."""
    tree, chunk_ids, meta_id, _ = shape if shape is not None else _read_tree(git, ref, commit)
    objs = git.read_objects([meta_id, *chunk_ids])
    if any(o is None or o[0] != "blob" for o in objs):
        raise _not_anchor(ref, "a blob of its tree is missing from the repository")
    blobs = [o[1] for o in objs if o is not None]
    head, count = _parse_meta(ref, blobs[0], run_id, len(chunk_ids))
    lines: list[bytes] = []
    for i, blob in enumerate(blobs[1:]):
        lines.extend(_chunk_lines(ref, i, blob, i == len(chunk_ids) - 1))
    if len(lines) != count:
        raise _not_anchor(ref, f"{META_NAME} says {count} entries, the chunks hold {len(lines)}")
    scan = rows.SecretScan()
    v = verify.verify_lines(lines, expected_head=head, observe=scan)
    if not v.ok:
        raise _not_anchor(ref, f"its chain does not verify: {v.describe()}")
    assert v.unproven is not None  # verify_lines keeps them
    canon = verify.canonical_lines(lines, v.unproven)
    where = _secret_in(scan, canon, v.unproven, [(k * CHUNK_LINES, chunk_name(k))
                                                 for k in range(len(chunk_ids))])
    if where is not None:
        raise _not_anchor(ref, f"{where}, which a work ledger never carries in cleartext")
    if remember and canon is lines:
        _memo_add(git, tree, head, count)
    return AnchoredChain(ref, commit, tree, head, count, chunk_ids, lines, canon is lines)


def anchored_prefix(
    git: Git, ref: str, commit: str, run_id: str, lines: list[bytes], local_ids: list[str],
    *, shape: _Tree | None = None,
) -> tuple[AnchoredChain, bool] | None:
    """The anchor at `commit` if its chain is byte for byte a prefix of `lines`, found by
    comparing blob ids and reading only LEDGER.json and the last chunk; with whether its
    tree is one this host has checked (its chain verified, in canonical lines, none
    holding a secret). None when it is not such a prefix. Writes nothing.
    `local_ids` are the blob ids of `chunk_blobs(lines)`; `shape` as for `read_anchor`."""
    tree, chunk_ids, meta_id, _ = shape if shape is not None else _read_tree(git, ref, commit)
    k = len(chunk_ids)
    if k > len(local_ids) or chunk_ids[: k - 1] != local_ids[: k - 1]:
        return None
    objs = git.read_objects([meta_id, chunk_ids[-1]])
    if objs[0] is None or objs[1] is None:
        return None
    head, count = _parse_meta(ref, objs[0][1], run_id, k)
    last = _chunk_lines(ref, k - 1, objs[1][1], True)
    start = (k - 1) * CHUNK_LINES
    if count != start + len(last) or lines[start : start + len(last)] != last:
        return None
    if entry_hash_of(last[-1]) != head:
        raise _not_anchor(ref, f"{META_NAME} head_hash {head} is not the hash of its last entry")
    chain = AnchoredChain(ref, commit, tree, head, count, chunk_ids, None)
    return chain, _memo_has(git, tree)


# -- anchor -----------------------------------------------------------------------------


def _local_lines(workdir: str | os.PathLike[str], run_id: str) -> verify.LedgerRead:
    return verify.read_chain(rows.ledger_dir(Path(workdir), run_id))


def _refuse_broken(run_id: str, v: verify.WorkVerify, action: str,
                   starts: Sequence[tuple[int, str]]) -> VerificationFailed:
    """The refusal of a local chain that does not verify, naming the break by segment
    file and line (`starts` is the `LedgerRead.starts` of the lines verified)."""
    return VerificationFailed(
        f"refusing to {action} run {run_id}: the local work ledger does not verify at "
        f"{v.place(starts).describe()}"
    )


def _verify_from(lines: list[bytes], start: int, prev_hash: str,
                 scan: rows.SecretScan) -> verify.WorkVerify:
    """Verify `lines[start:]` as the continuation of a verified prefix ending in
    `prev_hash`, showing them to `scan`."""
    # Only the new lines are walked: this is what keeps a re-anchor's cost proportional
    # to what is new.
    if start == 0:
        return verify.verify_lines(lines, observe=scan)
    return verify.verify_continuation(lines, start, prev_hash, observe=scan)


def _secret_in(scan: rows.SecretScan, lines: list[bytes], unproven: Sequence[int],
               starts: Sequence[tuple[int, str]]) -> str | None:
    """Where the first row that holds what the writer never records is, as a message says
    it ("entry 3 (000000.jsonl:3) holds a secret in payload.token (…)"), of the rows
    `scan` was shown while they were verified and of those it was not (`unproven`,
    judged by their canonical lines in `lines`); None when none does. `starts` places a
    line in its file as `LedgerRead.starts` does."""
    found = scan.first(lines, unproven)
    if found is None:
        return None
    i, where = found
    # The seqs of a verified chain run 1, 2, …: the row at index i is entry i + 1.
    at = verify.WorkVerify(ok=False, entry_count=i, head_hash="", error_seq=i + 1,
                           error_line=i + 1).place(starts)
    what = (f"{where} for a secret (it cannot be shown to hold none)" if where == rows.TOO_DEEP
            else f"a secret in {where} (the secret scrubber would rewrite it)")
    return f"entry {i + 1} ({at.error_file}:{at.error_line}) holds {what}"


def anchor(workdir: str | os.PathLike[str], run_id: str, *, dry_run: bool = False
           ) -> AnchorResult:
    """Publish the verified local chain of `run_id` to ``refs/harness/work-ledger/<run-id>``.

    With `dry_run`, every check is made and the result says what would be published
    (the tree id included), but nothing is written: no object, ref, cache or audit line.
    """
    rows.validate_run_id(run_id)
    git = Git.open(workdir)
    read = _local_lines(workdir, run_id)
    local, starts = read.lines, read.starts
    if not local:
        raise NoLedger(f"work ledger {run_id} has no complete entries to anchor")
    ref = REF_PREFIX + run_id
    chunks = chunk_blobs(local)
    ids = [git.blob_id(c) for c in chunks]
    old = git.resolve(ref)
    # One read of the anchor commit serves the prefix tests and a full read.
    shape = _read_tree(git, ref, old) if old is not None else None
    found = (anchored_prefix(git, ref, old, run_id, local, ids, shape=shape)
             if old is not None else None)
    # An anchor this host has checked whose lines are byte for byte a prefix of the local
    # ones: those are verified, canonical and clean, and only the lines after them are
    # walked. This is what keeps a re-anchor's cost proportional to what is new.
    done = found[0] if found is not None and found[1] else None
    start = done.entry_count if done is not None else 0
    scan = rows.SecretScan()
    v = _verify_from(local, start, done.head_hash if done is not None else rows.GENESIS, scan)
    if not v.ok:
        raise _refuse_broken(run_id, v, "anchor", starts)
    assert v.unproven is not None  # kept by verify_lines and verify_continuation
    # The anchor holds the canonical lines; the local ledger keeps its own spelling.
    lines = verify.canonical_lines(local, v.unproven)
    if lines is not local:
        for k in sorted({i // CHUNK_LINES for i in v.unproven if lines[i] is not local[i]}):
            chunks[k] = chunk_blobs(lines[k * CHUNK_LINES : (k + 1) * CHUNK_LINES])[0]
            ids[k] = git.blob_id(chunks[k])
        found = (anchored_prefix(git, ref, old, run_id, lines, ids, shape=shape)
                 if old is not None else None)
    where = _secret_in(scan, lines, v.unproven, starts)
    if where is not None:
        raise VerificationFailed(
            f"refusing to anchor run {run_id}: {where}. An anchor is published for other "
            "machines to fetch, and a work ledger never carries a secret in cleartext: "
            "rewrite the chain from that entry with the value redacted, then anchor it"
        )
    head = v.head_hash
    known: list[str] = []
    if old is not None:
        if found is not None:
            chain = found[0]
            if not found[1] and not dry_run:
                # Its lines are the local chain's, verified, canonical and clean just now.
                _memo_add(git, chain.tree, chain.head_hash, chain.entry_count)
            relation: Relation = ("identical" if chain.entry_count == len(lines)
                                  else "local_ahead")
        else:
            chain = read_anchor(git, ref, old, run_id, remember=not dry_run, shape=shape)
            assert chain.lines is not None
            relation = compare_chains(lines, chain.lines)
        anchored_head = chain.head_hash
        if isinstance(relation, tuple):
            raise Divergence(
                divergence_message(relation[1], head, anchored_head, run_id, "anchor")
            )
        if relation == "anchored_ahead":
            raise AnchoredAhead(
                f"the anchored ledger {ref} is ahead of the local chain ({chain.entry_count} > "
                f"{len(lines)} entries); run 'harness ledger fetch {run_id}' first"
            )
        if relation == "identical" and chain.canonical:
            unchanged = AnchorResult("unchanged", old, head, len(lines), run_id, ref,
                                     chain.tree, len(chain.chunk_ids), 0, dry_run=dry_run)
            if not dry_run:
                # The anchor that moved the ref may have failed to reach the audit chain
                # (a full disk, a bad key): it is mirrored now, once, whatever wrote it.
                unchanged.warning = _mirror(run_id, head, old, once=True)
            return unchanged
        # Ahead of the anchor, or the same entries in lines an older harness copied as a
        # hand-written ledger spelled them: anchored anew in canonical lines, so that
        # this tree is the one every other host gets for the chain.
        known = chain.chunk_ids
    meta = _meta_blob(run_id, head, len(lines), len(chunks))
    if dry_run:
        names = [(chunk_name(i), oid) for i, oid in enumerate(ids)]
        tree = git.tree_id([*names, (META_NAME, git.blob_id(meta))])
        return AnchorResult("created" if old is None else "extended", old or "", head,
                            len(lines), run_id, ref, tree, len(chunks), 0, dry_run=True)
    before = set(known)
    written = git.write_blobs([*chunks, meta], [*ids, git.blob_id(meta)], known=known)
    names = [(chunk_name(i), oid) for i, oid in enumerate(written[:-1])]
    tree = git.mktree([*names, (META_NAME, written[-1])])
    message = (f"harness work ledger anchor\n\nrun_id={run_id}\nhead={head}\n"
               f"entries={len(lines)}\n")
    commit = git.commit_tree(tree, [old] if old else [], message)
    git.update_ref(ref, commit, old, reason=f"harness ledger anchor {run_id}")
    _memo_add(git, tree, head, len(lines))
    result = AnchorResult("created" if old is None else "extended", commit, head, len(lines),
                          run_id, ref, tree, len(chunks),
                          sum(1 for oid in written if oid not in before))
    result.warning = _mirror(run_id, head, commit)
    return result


def _mirror(run_id: str, head: str, commit: str, *, once: bool = False) -> str | None:
    """Record the anchor in the audit chain (with `once`, only if no event records this
    very anchor yet); a failure there is reported, not raised, because the ref has
    already moved and the anchor itself stands."""
    data = {"run_id": run_id, "head_hash": head, "commit": commit}
    try:
        if once:
            audit.append_event_once("work_ledger.anchor", data)
        else:
            audit.append_event("work_ledger.anchor", data)
    except (OSError, audit.AuditError) as exc:
        why = os_problem(exc) if isinstance(exc, OSError) else secretless(exc)
        return f"anchored, but the audit chain was not updated: {why}"
    return None


# -- fetch ------------------------------------------------------------------------------


def _remote_component(remote: str) -> str:
    if (re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", remote)):
        return remote
    # A URL or a path: name the private ref after a digest of it.
    return "url-" + hashlib.sha256(remote.encode("utf-8")).hexdigest()[:16]



def _write_new(d: Path, lines: list[bytes], files: FileLayer) -> Callable[[], None]:
    """Write `lines` as the ledger's first segment through `files`; return how to undo it."""
    make_private_dir(str(d))
    seg = d / "000000.jsonl"
    atomic_write(seg, b"".join(line + b"\n" for line in lines), files)
    return lambda: seg.unlink(missing_ok=True)


def _cut_back(seg: Path, size: int, files: FileLayer) -> None:
    """Cut `seg` back to the `size` bytes it held before an append, and sync it."""
    fd, _ = files.open_append(str(seg))
    try:
        files.truncate(fd, size)
        files.sync(fd)
    finally:
        files.close(fd)


def _append(d: Path, run_id: str, new: list[bytes], torn: bytes | None, torn_size: int,
            files: FileLayer) -> Callable[[], None]:
    """Append `new` to the last segment through `files`, first cutting its torn tail (the
    whole fragment, as writer recovery does, so the first new line does not fuse with
    it); return how to undo the append (the segment back to its size before it).

    An append that fails (a write or its sync) is cut back before its error is raised, so
    the local chain is as it was. Should the cut fail too, what the failed append left
    stays after the local chain: a prefix of the verified lines being appended, so whole
    lines of it are verified entries and the rest a torn fragment that readers skip and
    the next writer cuts; the error says so."""
    seg = verify.iter_segments(d)[-1]
    if torn is not None:
        store.cut_torn_tail(seg, torn, torn_size, files)
    fd, _ = files.open_append(str(seg))
    try:
        size = files.size(fd)
        joined = b"".join(line + b"\n" for line in new)
        if files.last_byte(fd, size) not in (b"", b"\n"):
            joined = b"\n" + joined  # the last row was whole but lacked its newline
        try:
            done = 0
            while done < len(joined):  # O_APPEND: every write lands at the end
                done += files.write(fd, joined[done:])
            files.sync(fd)
        except OSError as exc:
            why = os_problem(exc)
            try:
                _cut_back(seg, size, files)
            except OSError as again:
                raise WorkLedgerError(
                    f"cannot append the fetched entries of run {run_id} to "
                    f"{secretless(seg)}: {why}; cutting it back to the {size} bytes it held "
                    f"before failed too ({os_problem(again)}). Every entry it held is still "
                    "there; after them it holds only fetched entries, verified, or a torn "
                    "fragment that readers skip and the next writer cuts. Run 'harness "
                    f"ledger fetch {run_id}' again once the disk takes writes"
                ) from None
            raise WorkLedgerError(
                f"cannot append the fetched entries of run {run_id} to {secretless(seg)}: "
                f"{why}; they were cut off again, and the local chain is as it was before "
                "the fetch"
            ) from None
    finally:
        files.close(fd)
    return lambda: _cut_back(seg, size, files)


def _check_written(d: Path, run_id: str, expected: list[bytes],
                   undo: Callable[[], None]) -> None:
    """Read the ledger back after a fetch wrote it: it must hold exactly `expected` (a
    verified chain: the verified local prefix and the verified anchored lines after
    it), or the write is undone and `VerificationFailed` says where it broke. A fetch
    never reports success for a ledger that does not verify; when the undo fails too,
    the error says the ledger must be moved aside."""
    back, _, _, starts = verify.read_chain(d)
    if back == expected:
        return
    v = verify.verify_lines(back, starts=starts)
    if not v.ok:
        why = f"it does not verify at {v.describe()}"
    else:
        at = next((i for i, (x, y) in enumerate(zip(back, expected, strict=False)) if x != y),
                  min(len(back), len(expected)))
        why = (f"it holds {len(back)} entries, not the {len(expected)} of the fetched chain "
               f"(they differ from entry {at + 1})")
    wrong = (f"fetched run {run_id}, but the local work ledger {secretless(d)} did not read "
             f"back as the verified chain: {why}")
    try:
        undo()
    except OSError as exc:
        raise VerificationFailed(
            f"{wrong}; removing the fetched entries failed ({os_problem(exc)}), so it is "
            f"left as read back: move {secretless(d)} aside and run 'harness ledger fetch "
            f"{run_id}' again"
        ) from None
    raise VerificationFailed(
        f"{wrong}; the fetched entries were removed again, and the local chain is as it "
        "was before the fetch"
    )


def _bring_up_to(
    d: Path, chain: AnchoredChain, run_id: str, remote: str, *, dry_run: bool = False,
    also: Callable[[], object] = lambda: None, files: FileLayer | None = None,
) -> tuple[Literal["written", "extended", "unchanged"], int]:
    """Make the local ledger in `d` equal the verified anchored chain, or refuse (with
    `dry_run`, only say which it would be). `also` is a further check, made once the
    local chain has been found to agree with the anchored one and before a byte is
    written: a refusal of the local chain is named first. What is written (through
    `files`, default the real `FileLayer`) is read back and checked before success is
    reported."""
    assert chain.lines is not None
    layer = files or FileLayer()
    try:
        lines, torn, torn_size, starts = verify.read_chain(d)
    except NoLedger:
        lines, torn, torn_size, starts = [], None, 0, []
    if not lines:
        also()
        if not dry_run:
            _check_written(d, run_id, chain.lines, _write_new(d, chain.lines, layer))
        return "written", len(chain.lines)
    v = verify.verify_lines(lines)
    if not v.ok:
        raise _refuse_broken(run_id, v, "fetch onto", starts)
    relation = compare_chains(lines, chain.lines)
    if isinstance(relation, tuple):
        raise Divergence(
            divergence_message(relation[1], v.head_hash, chain.head_hash, run_id, "fetch")
        )
    if relation == "local_ahead":
        raise LocalAhead(
            f"the local ledger of run {run_id} is ahead of the anchored chain on "
            f"'{secretless(remote)}' ({len(lines)} > {chain.entry_count} entries); nothing was "
            f"changed. Run 'harness ledger anchor {run_id}' (and push the ref) instead"
        )
    also()
    if relation == "anchored_ahead":
        if not dry_run:
            new = chain.lines[len(lines):]
            undo = _append(d, run_id, new, torn, torn_size, layer)
            _check_written(d, run_id, lines + new, undo)
        return "extended", chain.entry_count - len(lines)
    return "unchanged", 0


def fetch(workdir: str | os.PathLike[str], run_id: str, remote: str = "origin", *,
          dry_run: bool = False, files: FileLayer | None = None) -> FetchResult:
    """Bring the anchored chain of `run_id` from `remote` into the local ledger, verified.

    With `dry_run`, the anchored chain is fetched and verified and the result says what
    the local ledger would become, but no ref moves and the local ledger is not touched
    (git keeps the fetched objects unreferenced, as after any fetch that names no ref).
    `files` is the file layer the ledger is written through (the writer's; tests inject
    faults there).
    """
    rows.validate_run_id(run_id)
    git = Git.open(workdir)
    ref = REF_PREFIX + run_id
    private = None if dry_run else f"{FETCHED_PREFIX}{_remote_component(remote)}/{run_id}"
    commit = git.fetch_ref(remote, ref, private)
    chain = read_anchor(git, f"{remote} {ref}", commit, run_id, remember=not dry_run)
    assert chain.lines is not None
    d = rows.ledger_dir(Path(workdir), run_id)
    # The local side ref may hold a lineage of its own (anchored here, its ledger since
    # moved away): checked before anything is written, like the local ledger itself.
    side: list[tuple[str | None, bool]] = []

    def check_side_ref() -> None:
        side.append(_local_anchor(git, ref, chain, run_id, remember=not dry_run))

    if dry_run:
        status, new = _bring_up_to(d, chain, run_id, remote, dry_run=True,
                                   also=check_side_ref)
        return FetchResult(status, commit, chain.head_hash, chain.entry_count, run_id,
                           secretless(remote), new, dry_run=True)
    fresh = not d.exists()
    if fresh:
        # No local chain to name first: the side ref is judged before anything is made,
        # so a refusal leaves no ledger directory (nor its lock file) behind.
        check_side_ref()
    make_private_dir(str(d))
    # The writer's lock: no append can slip in between reading the local chain and
    # writing after it, and a live writer makes fetch refuse rather than race it.
    lock = store.take_lock(d, run_id)
    try:
        status, new = _bring_up_to(d, chain, run_id, remote, files=files,
                                   also=(lambda: None) if fresh else check_side_ref)
    finally:
        store.release_lock(lock)
    [(cur, follow)] = side
    warning = None
    if cur != chain.commit:
        if follow:
            try:
                git.update_ref(ref, chain.commit, cur, reason=f"harness ledger fetch {run_id}")
            except RefMoved:
                # The ledger is written by now: the generic "nothing was changed" is untrue.
                raise RefMoved(
                    f"fetched run {run_id} into the local work ledger ({status}, "
                    f"{chain.entry_count} entries), but {ref} changed while harness was "
                    "moving it to the fetched anchor (another anchor or fetch ran at the "
                    f"same time) and was left as it is; run 'harness ledger fetch {run_id}' "
                    "again"
                ) from None
        else:
            warning = (f"kept {ref} at {cur}: it anchors entries the fetched anchor lacks; "
                       "the local ledger now follows the fetched chain")
    return FetchResult(status, commit, chain.head_hash, chain.entry_count, run_id,
                       secretless(remote), new, warning)


def _local_anchor(git: Git, ref: str, chain: AnchoredChain, run_id: str, *,
                  remember: bool) -> tuple[str | None, bool]:
    """(the commit of the local side ref, whether fetch may move it to the fetched
    anchor): not when that would lose anchored entries the fetched one lacks.
    `Divergence` when the two anchors hold diverging lineages."""
    cur = git.resolve(ref)
    if cur is None or cur == chain.commit or git.is_ancestor(cur, chain.commit):
        return cur, True
    try:
        mine = read_anchor(git, ref, cur, run_id, remember=remember)
    except VerificationFailed:
        return cur, True  # not an anchor at all: no lineage to keep
    assert mine.lines is not None and chain.lines is not None
    relation = compare_chains(mine.lines, chain.lines)
    if isinstance(relation, tuple):
        raise Divergence(divergence_message(
            relation[1], mine.head_hash, chain.head_hash, run_id, "fetch",
            local="local anchor", anchored="fetched"))
    return cur, relation in ("identical", "anchored_ahead")


# -- gc and listing ---------------------------------------------------------------------


def gc(workdir: str | os.PathLike[str], run_id: str, *, dry_run: bool = False) -> GcResult:
    """Squash the anchor history of `run_id` into one parentless commit of the same tree
    (with `dry_run`, say what would be squashed and change nothing)."""
    rows.validate_run_id(run_id)
    git = Git.open(workdir)
    ref = REF_PREFIX + run_id
    commit = git.resolve(ref)
    if commit is None:
        raise NoLedger(f"no anchored ledger for run {run_id} ({ref} does not exist)")
    shape = _read_tree(git, ref, commit)
    tree, chunk_ids = shape.tree, shape.chunk_ids
    if not _memo_has(git, tree):
        read_anchor(git, ref, commit, run_id, remember=not dry_run, shape=shape)
    commits = git.count_commits(commit) if shape.parents else 1
    result = GcResult(run_id, ref, dry_run, False, commit, commit, commits, commits - 1,
                      tree, len(chunk_ids))
    superseded = _superseded_fetched(git, ref, commit, shape, run_id, result,
                                     remember=not dry_run)
    if dry_run:
        return result
    if commits > 1:
        message = f"harness work ledger anchor (gc)\n\nrun_id={run_id}\n"
        new = git.commit_tree(tree, [], message)
        git.update_ref(ref, new, commit, reason=f"harness ledger gc {run_id}")
        result.commit, result.changed = new, True
    for name, oid in superseded:
        try:
            git.delete_ref(name, oid, reason=f"harness ledger gc {run_id}")
        except RefMoved:
            # A fetch moved it meanwhile: what it names now was not judged.
            result.dropped_fetched.remove(secretless(name))
            result.kept_fetched.append(secretless(name))
    return result


def all_fetched_refs(git: Git) -> dict[str, list[tuple[str, str]]]:
    """(ref, commit) of every ``refs/harness/fetched/<remote>/<run-id>``, by run id."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, oid in git.for_each_ref(FETCHED_PREFIX):
        remote, sep, run = name[len(FETCHED_PREFIX):].partition("/")
        if remote and sep and run:
            out.setdefault(run, []).append((name, oid))
    return out


def _superseded_fetched(git: Git, ref: str, commit: str, shape: _Tree, run_id: str,
                        result: GcResult, *, remember: bool) -> list[tuple[str, str]]:
    """(ref, commit) of every anchor of the run fetched from a remote whose chain the
    anchor at `commit` holds whole (the same chain, or a prefix of it): no lineage of its
    own, and, left, it would keep the anchor history gc squashes away reachable, so no
    git gc could reclaim the superseded chunks. Named in `result` as dropped; any other
    (a diverged or longer lineage, or no anchor at all) as kept."""
    found: list[tuple[str, str]] = []
    chain: AnchoredChain | None = None
    for name, oid in all_fetched_refs(git).get(run_id, []):
        held = oid == commit
        if not held:
            try:
                if chain is None:
                    chain = read_anchor(git, ref, commit, run_id, remember=remember,
                                        shape=shape)
                assert chain.lines is not None
                held = anchored_prefix(git, name, oid, run_id, chain.lines,
                                       shape.chunk_ids) is not None
            except VerificationFailed:
                held = False  # not an anchor of this run: not gc's to judge or delete
        if held:
            found.append((name, oid))
            result.dropped_fetched.append(secretless(name))
        else:
            result.kept_fetched.append(secretless(name))
    return found


def list_anchored(workdir: str | os.PathLike[str]) -> list[AnchoredInfo]:
    """Every anchored run in the repository, from its LEDGER.json (one ``cat-file``)."""
    git = Git.open(workdir)
    refs = git.for_each_ref(REF_PREFIX)
    if not refs:
        return []
    objs = git.read_objects([f"{oid}:{META_NAME}" for _, oid in refs])
    out: list[AnchoredInfo] = []
    for (name, oid), obj in zip(refs, objs, strict=True):
        run_id = name[len(REF_PREFIX):]
        info = AnchoredInfo(run_id, 0, "", oid)
        try:
            if obj is None or obj[0] != "blob":
                raise _not_anchor(name, f"no {META_NAME}")
            try:
                meta = decode_untrusted(obj[1])
            except msgspec.DecodeError as exc:
                raise _not_anchor(name, f"{META_NAME} is not JSON ({secretless(exc)})") from None
            if not isinstance(meta, dict):
                raise _not_anchor(name, f"{META_NAME} is not an object")
            count, head = meta.get("entry_count", 0), meta.get("head_hash", "")
            # Typed as `_parse_meta` types them, and named as it names them: a count
            # spelled "12" or 3.5 is no count, and the error says which key held what.
            if type(count) is not int:  # bool is a subclass of int: `true` is no count
                raise _not_anchor(name, f"{META_NAME} entry_count {quoted(count)} is not an "
                                        "integer")
            if not isinstance(head, str):
                raise _not_anchor(name, f"{META_NAME} head_hash {quoted(head)} is not a string")
            info.entry_count, info.head_hash = count, head
        except VerificationFailed as exc:
            info.error = str(exc)  # what it quotes is scrubbed already
        out.append(info)
    return out
