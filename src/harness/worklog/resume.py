"""Resume a goal's work ledger: verify, compare with the anchor, replay, record, signal.

This module owns `harness ledger resume` (shared/specs/durable-work-ledger.txt, "resume"),
the resume signal files in ``<workdir>/.harness/runtime/resume/``, and `survey`, the
read-only overview of every run's ledger that `harness ledger runs` prints (what a resume
of each run would find: entries, head, open or closed, local and anchored agreement, and
any fetched anchor that diverges from the local chain or is ahead of it).

Invariants:

* Nothing is written unless the local chain verifies end to end and, when an anchored ref
  of the run exists, the anchored chain verifies too and does not diverge from the local
  one; nor when an anchor of the run fetched from any remote
  (``refs/harness/fetched/<remote>/<run-id>``) diverges from the local chain or extends
  it: both lineages are then on this machine. A divergence is refused (`Divergence`,
  exit 3) naming the fork entry and both heads, never merged.
* No id that reads as a secret is printed or names a file: a chain holding a kind, task
  id or ``task.scheduled`` dep that the secret scrubber would rewrite (the writer refuses
  such ids; a chain written by hand or by another tool can hold one and verify) is
  refused (`VerificationFailed`, exit 2) by seq and segment line, dry run included.
* A closed run is never resumed. A dry run and `survey` never take the writer's lock and
  write nothing at all (not even under .git): no row, signal, tail recovery, ref or
  verified-tree cache entry. When the anchor is the local chain or a prefix of it, that is
  decided from blob ids without a full read; any other anchor is read whole through
  `anchor.read_anchor` with ``remember=False``.
* A resume that fails is absent: the ``run.resumed`` row is recorded only after every
  signal of its frontier is durable (each written atomically: temporary file, fsync,
  rename, 0600, its directory synced), and when the signals or the row cannot be written
  the signals this attempt wrote are removed (those it replaced restored) and nothing is
  recorded. A process killed between the last signal and the row leaves signals of a
  resume the chain does not hold (the next resume overwrites them): each signal names its
  row by ``resume_seq`` and ``head_hash`` (the seq alone could be a later row's), and a
  watcher that must not act before the chain holds the resume checks for that row.
  Signals are named ``<run-id>__<task-id>.signal`` (each part escaped, and bounded to fit
  a file name) so signals of two runs never collide, and only once the row is recorded
  are an earlier resume's signals for tasks no longer in the frontier removed. Completed
  tasks never get a signal.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.ledger.files import FileLayer, atomic_write, fsync_dir

from . import Divergence, NoLedger, VerificationFailed, WorkLedgerError, secretless
from . import anchor as anchor_mod
from .git import Git
from .replay import State, replay
from .rows import clean_payload, entry_hash, holds_secret, ledger_dir, validate_run_id
from .store import SYNC_TIMEOUT, WorkLedger
from .verify import WorkVerify, not_a_directory, read_chain, verify_lines

__all__ = [
    "ResumeResult",
    "resume",
    "resume_dir",
    "signal_name",
    "survey",
]

SIGNAL_SUFFIX = ".signal"


@dataclass
class ResumeResult:
    """What `resume` did (or, for a dry run, would do).

    ``state``, ``entry_count`` and ``head_hash`` describe the chain as it was before the
    resume; ``resume_seq`` and ``resumed_head`` name the ``run.resumed`` row appended.
    """

    run_id: str
    status: str  # "resumed" | "closed" | "dry_run"
    dry_run: bool
    state: State
    entry_count: int
    head_hash: str
    anchored: str  # "none" | "identical" | "local_ahead"
    resume_seq: int | None = None
    resumed_head: str | None = None
    nonce: str | None = None
    frontier: list[str] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)
    torn_tail: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.state.to_json())
        out.update(
            run_id=self.run_id,
            status=self.status,
            dry_run=self.dry_run,
            entry_count=self.entry_count,
            head_hash=self.head_hash,
            anchored=self.anchored,
            resume_seq=self.resume_seq,
            resumed_head=self.resumed_head,
            frontier=list(self.frontier),
            signals=list(self.signals),
            torn_tail=self.torn_tail,
        )
        return out


def resume_dir(workdir: str | os.PathLike[str]) -> Path:
    return Path(workdir) / ".harness" / "runtime" / "resume"


# The longest escaped run or task part of a signal's name. Escaping can make an id nine
# times longer ("日" is "%E6%97%A5"), and a file name holds at most 255 bytes: two parts
# of this length, "__" and ".signal" stay under it.
_PART_MAX = 100


def _bounded(part: str, original: str) -> str:
    """`part`, or when it is longer than `_PART_MAX` its start and a digest of `original`.
    "%~" occurs in no escaped id (quote writes every "%" as "%25"), so a shortened part
    never equals a whole one, and two ids share one only with their sha256 prefix."""
    if len(part) <= _PART_MAX:
        return part
    digest = hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return part[: _PART_MAX - 2 - len(digest)] + "%~" + digest


def _run_part(run_id: str) -> str:
    part = quote(run_id, safe="-._~")
    # The first "__" in a signal name must be the separator, so a run part that could
    # contribute one (an inner "__" or a trailing "_") has its underscores escaped.
    if "__" in part or part.endswith("_"):
        part = part.replace("_", "%5F")
    return _bounded(part, run_id)


def signal_name(run_id: str, task_id: str) -> str:
    """``<run-id>__<task-id>.signal``, escaped so that distinct pairs never share a name,
    and each part bounded so that the name fits a file system's 255 bytes."""
    task_part = _bounded(quote(task_id, safe="-._~"), task_id)
    return f"{_run_part(run_id)}__{task_part}{SIGNAL_SUFFIX}"


def _has_anchor(workdir: Path, run_id: str) -> bool:
    try:
        return Git.open(workdir).resolve(anchor_mod.REF_PREFIX + run_id) is not None
    except NoLedger:
        return False


def _rows(lines: list[bytes]) -> list[dict[str, Any]]:
    # Only verified lines reach here, so every one is a JSON object.
    return [json.loads(line) for line in lines]


def _broken(what: str, res: WorkVerify, run_id: str) -> VerificationFailed:
    # Only a failed `verify_lines` result (no expected head) reaches here, and its break
    # always carries a seq and a line.
    return VerificationFailed(
        f"{what} work ledger of run '{run_id}' does not verify at {res.describe()}"
    )


def _anchored_prefix(git: Git, ref: str, commit: str, run_id: str,
                     local: list[bytes]) -> anchor_mod.AnchoredChain | None:
    """The anchor at `commit` when it is exactly the anchor of a prefix of the verified
    `local` chain (decided from blob ids; nothing is written), else None."""
    ids = [git.blob_id(c) for c in anchor_mod.chunk_blobs(local)]
    found = anchor_mod.anchored_prefix(git, ref, commit, run_id, local, ids)
    return found[0] if found is not None else None


def _check_anchor(workdir: Path, run_id: str, local: list[bytes],
                  local_head: str, remember: bool = True) -> str:
    """Compare the verified local chain with the anchored one, and with every anchor of
    the run fetched from a remote; return the relation to the anchored one or raise."""
    try:
        git = Git.open(workdir)
    except NoLedger:
        return "none"  # a work tree outside git has no anchor
    ref = anchor_mod.REF_PREFIX + run_id
    commit = git.resolve(ref)
    _check_fetched(git, run_id, local, local_head, commit, remember)
    if commit is None:
        return "none"
    prefix = _anchored_prefix(git, ref, commit, run_id, local)
    if prefix is not None:
        return "identical" if prefix.entry_count == len(local) else "local_ahead"
    # Not a prefix of the local chain: read and verify it whole to say why (anchored
    # ahead, diverged, or not an anchor at all).
    chain = anchor_mod.read_anchor(git, ref, commit, run_id, remember=remember)
    assert chain.lines is not None  # read_anchor reads and verifies every line
    relation = anchor_mod.compare_chains(local, chain.lines)
    if isinstance(relation, tuple):
        raise Divergence(anchor_mod.divergence_message(
            relation[1], local_head, chain.head_hash, run_id, "resume"))
    if relation == "anchored_ahead":
        # Resuming the shorter chain would fork it from the anchored one at the very
        # next entry; the operator brings the local chain up to date first.
        raise anchor_mod.AnchoredAhead(
            f"the anchored work ledger {chain.ref} is ahead of the local one "
            f"({chain.entry_count} > {len(local)} entries); refusing to resume a stale "
            f"chain: run 'harness ledger fetch {run_id}' first"
        )
    return str(relation)


def _fetched_lineages(
    git: Git, run_id: str, local: list[bytes], anchored: str | None, remember: bool,
    fetched: list[tuple[str, str]] | None = None,
) -> Iterator[tuple[str, anchor_mod.AnchoredChain, anchor_mod.Relation]]:
    """(ref, chain, relation to `local`) of every anchor of the run fetched from a remote
    that is neither the run's own side ref (`anchored`, compared by the caller) nor a
    prefix of the verified `local` chain. A fetched anchor that does not verify is no
    lineage (fetch refused it as it arrived) and is passed over. `fetched` is
    `anchor.all_fetched_refs` of the run when the caller has already listed them."""
    if fetched is None:
        fetched = anchor_mod.all_fetched_refs(git).get(run_id, [])
    for ref, commit in fetched:
        if commit == anchored:
            continue
        try:
            if _anchored_prefix(git, ref, commit, run_id, local) is not None:
                continue
            chain = anchor_mod.read_anchor(git, ref, commit, run_id, remember=remember)
        except VerificationFailed:
            continue
        assert chain.lines is not None
        yield ref, chain, anchor_mod.compare_chains(local, chain.lines)


def _check_fetched(git: Git, run_id: str, local: list[bytes], local_head: str,
                   anchored: str | None, remember: bool) -> None:
    """Refuse to resume when an anchor fetched from a remote holds another lineage than
    the local chain (`Divergence`) or more of it (`AnchoredAhead`).

    A fetch that found the two lineages refused to write, but the anchor it fetched
    stays under ``refs/harness/fetched/``: that is how this host knows a second
    lineage exists.
    """
    for ref, chain, relation in _fetched_lineages(git, run_id, local, anchored, remember):
        if isinstance(relation, tuple):
            raise Divergence(anchor_mod.divergence_message(
                relation[1], local_head, chain.head_hash, run_id, "resume",
                anchored="fetched", ref=ref))
        if relation == "anchored_ahead":
            # What the local side ref's check says, for the same reason: a resume of
            # the shorter chain forks it from the fetched one at the next entry.
            raise anchor_mod.AnchoredAhead(
                f"the work ledger fetched into {secretless(ref)} is ahead of the local one "
                f"({chain.entry_count} > {len(local)} entries); refusing to resume a "
                f"stale chain: run 'harness ledger fetch {run_id}' from that remote first"
            )


def _secret_id(row: dict[str, Any]) -> str | None:
    """The field of a verified row that holds an id the writer refuses as a secret: the
    kind, the task id, or a dep a ``task.scheduled`` row names (each is printed, and a
    task id names a signal file). None when there is none."""
    kind, task_id = row["kind"], row["task_id"]
    if holds_secret(kind):
        return "kind"
    if task_id is not None and holds_secret(task_id):
        return "task_id"
    deps = row["payload"].get("deps") if kind == "task.scheduled" else None
    if isinstance(deps, list) and any(isinstance(d, str) and holds_secret(d) for d in deps):
        return "deps"
    return None


def _refuse_secret_ids(rows: list[dict[str, Any]], starts: list[tuple[int, str]],
                       run_id: str) -> None:
    """Refuse a chain that holds an id the writer would have refused as a secret (a
    ledger written by hand or by another tool can, and still verify): resume would print
    it and name a signal file after it. Rewriting it instead would name no task (and
    would make two such tasks one), so the row is named by seq and segment line, never
    by the id."""
    for i, row in enumerate(rows):
        field = _secret_id(row)
        if field is None:
            continue
        at = WorkVerify(ok=False, entry_count=i, head_hash="", error_seq=row["seq"],
                        error_line=i + 1).place(starts)
        raise VerificationFailed(
            f"refusing to resume run '{run_id}': entry {at.error_seq} ({at.error_file}:"
            f"{at.error_line}) has a {field} that looks like it holds a secret (the secret "
            "scrubber would rewrite it). The writer refuses such an id; resume would print "
            "it and name a signal file after it, so it is neither shown nor used"
        )


def _local(workdir: Path, run_id: str
           ) -> tuple[list[bytes], list[dict[str, Any]], WorkVerify]:
    """The verified local chain of `run_id`: its lines, its rows, and the result."""
    directory = ledger_dir(workdir, run_id)
    if not directory.is_dir():
        hint = ""
        if _has_anchor(workdir, run_id):
            hint = (f"; {anchor_mod.REF_PREFIX}{run_id} exists here: run 'harness ledger "
                    f"fetch {run_id} --remote .' to restore the local ledger from it")
        raise NoLedger(f"no work ledger for run '{run_id}' in {secretless(directory)}"
                       f"{not_a_directory(directory)}{hint}")
    lines, torn, _, starts = read_chain(directory)
    if not lines:
        raise NoLedger(f"the work ledger of run '{run_id}' in {secretless(directory)} holds "
                       "no entries")
    res = verify_lines(lines, starts=starts)
    if not res.ok:
        raise _broken("the local", res, run_id)
    rows = _rows(lines)
    _refuse_secret_ids(rows, starts, run_id)
    res.torn_tail = torn  # verify_lines sees complete lines only, so it never sets one
    return lines, rows, res


def _task_info(state: State, task_id: str) -> tuple[str, int]:
    task = state.tasks.get(task_id)
    if task is None:
        return "scheduled", 0
    return task.status, task.attempts


def _signal_dir(workdir: Path) -> Path:
    directory = resume_dir(workdir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory


class _Signals:
    """The signal files of one resume attempt: written before its row, undone if the row
    is not recorded. File writes go through the ledger's `FileLayer` (tests inject
    faults there)."""

    def __init__(self, directory: Path, run_id: str, files: FileLayer) -> None:
        self.directory = directory
        self.run_id = run_id
        self.files = files
        self.written: list[Path] = []
        self.replaced: dict[Path, bytes] = {}  # what an earlier resume had left there

    def write(self, state: State, frontier: list[str], resume_seq: int,
              head_hash: str) -> None:
        """Write one signal per frontier task, each durable (its directory entry too);
        `SignalFailed` names the file that could not be written."""
        for task_id in frontier:
            status, attempts = _task_info(state, task_id)
            path = self.directory / signal_name(self.run_id, task_id)
            body = json.dumps({
                "run_id": self.run_id, "task_id": task_id, "status": status,
                "attempts": attempts, "resume_seq": resume_seq, "head_hash": head_hash,
            }, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            try:
                with contextlib.suppress(FileNotFoundError):
                    self.replaced.setdefault(path, path.read_bytes())
                # Durable one by one, the directory too: each is the signal of a
                # row that will be written only once they all are.
                atomic_write(path, body + b"\n", self.files)
            except OSError as exc:
                raise SignalFailed(path, exc) from None
            self.written.append(path)

    def undo(self) -> str:
        """Remove the signals this attempt wrote, restoring those it replaced; say what
        could not be undone (empty when all was)."""
        left: list[str] = []
        for path in reversed(self.written):
            try:
                old = self.replaced.get(path)
                if old is None:
                    path.unlink(missing_ok=True)
                else:
                    atomic_write(path, old)
            except OSError:
                # Better no signal than one naming a resume the chain does not hold.
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
                left.append(path.name)
        with contextlib.suppress(OSError):
            fsync_dir(str(self.directory))
        self.written.clear()
        return f" (could not restore {', '.join(left)}: removed)" if left else ""

    def prune(self) -> None:
        """Remove an earlier resume's signals for tasks no longer in the frontier: left,
        they would let a watcher redo finished work."""
        keep = {p.name for p in self.written}
        prefix = f"{_run_part(self.run_id)}__"
        for old in self.directory.iterdir():
            if old.name.startswith(prefix) and old.name.endswith(SIGNAL_SUFFIX) \
                    and old.name not in keep:
                old.unlink(missing_ok=True)
        fsync_dir(str(self.directory))


class SignalFailed(WorkLedgerError):
    """A resume signal could not be written; nothing was recorded (exit 2)."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"cannot write resume signal {secretless(path)}: "
                         f"{exc.strerror or secretless(exc)}")
        self.path = path


def _landed(directory: Path, entry_hash: str) -> bool:
    """Whether the last complete row of the ledger in `directory` is `entry_hash`."""
    try:
        lines = read_chain(directory).lines
    except (NoLedger, OSError):
        return False
    # A last line that is no row (bad JSON, nested past the decoder's depth) is not the
    # one this resume wrote.
    return bool(lines) and anchor_mod.entry_hash_of(lines[-1]) == entry_hash


def resume(workdir: str | os.PathLike[str], run_id: str, dry_run: bool = False, *,
           files: FileLayer | None = None, sync_timeout: float = SYNC_TIMEOUT
           ) -> ResumeResult:
    """Resume run `run_id` of the work tree `workdir` from its verified chain.

    Raises `NoLedger` (1), `VerificationFailed` (2), `Divergence` (3), or a
    `WorkLedgerError` (2) naming the file when the signals or the row cannot be written.
    `files` and `sync_timeout` are the ledger writer's (the signals are written through
    `files` too).
    """
    validate_run_id(run_id)
    wd = Path(workdir)
    lines, rows, res = _local(wd, run_id)
    # Opening the writer below cuts a torn tail; report the one this call found.
    torn = bool(res.torn_tail)
    relation = _check_anchor(wd, run_id, lines, res.head_hash, remember=not dry_run)
    state = replay(rows)
    frontier = list(state.frontier)
    base = ResumeResult(run_id=run_id, status="dry_run" if dry_run else "resumed",
                        dry_run=dry_run, state=state, entry_count=res.entry_count,
                        head_hash=res.head_hash, anchored=relation, frontier=frontier,
                        torn_tail=torn)
    if state.closed:
        base.status = "closed"
        return base
    if dry_run:
        return base

    # A signal directory that cannot be made must fail the resume before its row is
    # recorded, not leave a recorded resume whose frontier nobody was told about.
    layer = files or FileLayer()
    directory = _signal_dir(wd)
    with WorkLedger(wd, run_id, files=layer, sync_timeout=sync_timeout) as ledger:
        # The checks above ran without the writer's lock. Opening the ledger verified
        # the chain from genesis again; if its head is still the one checked above, that
        # chain is the one verified and replayed, and only the anchor (a ref can move at
        # any time) is compared again. Otherwise the chain moved: redo everything on it,
        # so the resume row extends exactly the chain that was verified and replayed.
        if ledger.head != (res.entry_count, res.head_hash):
            lines, rows, res = _local(wd, run_id)
            state = replay(rows)
        relation = _check_anchor(wd, run_id, lines, res.head_hash)
        if state.closed:
            # Closed by a writer since the first read: report the chain found closed.
            base.status = "closed"
            base.state = state
            base.entry_count, base.head_hash = res.entry_count, res.head_hash
            base.anchored = relation
            return base
        frontier = list(state.frontier)
        nonce = secrets.token_hex(16)
        payload = {"nonce": nonce, "host": socket.gethostname(), "frontier": frontier}
        # The row's seq and hash are known before it is written (we hold the lock, and
        # the hash covers only the scrubbed payload and the link), so the signals can
        # name it and be made durable first.
        seq, prev = ledger.head
        resume_seq = seq + 1
        resumed_head = entry_hash("run.resumed", None, clean_payload(payload)[0], prev)
        # Still under the writer's lock: a later resume of this run cannot interleave its
        # signals with these, so the files always match the newest run.resumed row.
        signals = _Signals(directory, run_id, layer)
        try:
            signals.write(state, frontier, resume_seq, resumed_head)
        except SignalFailed as exc:
            raise WorkLedgerError(
                f"{exc}; the resume was not recorded and the signals it wrote were "
                f"removed{signals.undo()}"
            ) from None
        try:
            row = ledger.record("run.resumed", None, payload)
        except WorkLedgerError as exc:
            # A row the writer could not confirm stays queued and may still land while
            # the ledger closes: close it here and look, so the signals go exactly when
            # the row is not in the chain.
            with contextlib.suppress(WorkLedgerError):
                ledger.close(sync_timeout)
            if not _landed(ledger.dir, resumed_head):
                raise WorkLedgerError(
                    f"{exc}; the resume was not recorded in {secretless(ledger.segment)} and the "
                    f"signals it wrote were removed{signals.undo()}"
                ) from None
            row = {"seq": resume_seq, "entry_hash": resumed_head}
        if (int(row["seq"]), str(row["entry_hash"])) != (resume_seq, resumed_head):
            raise WorkLedgerError(  # cannot happen while we hold the lock; never guess
                f"the run.resumed row was recorded as entry {row['seq']} "
                f"({row['entry_hash']}), not the entry {resume_seq} ({resumed_head}) its "
                f"signals name"
            )
        signals.prune()
    return ResumeResult(
        run_id=run_id, status="resumed", dry_run=False, state=state,
        entry_count=res.entry_count, head_hash=res.head_hash, anchored=relation,
        resume_seq=resume_seq, resumed_head=resumed_head, nonce=nonce, frontier=frontier,
        signals=[str(p) for p in signals.written], torn_tail=torn,
    )


def _relation_text(relation: anchor_mod.Relation) -> str:
    if isinstance(relation, tuple):
        return f"diverged at entry {relation[1]}"
    return relation


def _open_or_closed(lines: list[bytes]) -> tuple[str, str | None]:
    """("open" | "closed", ts of the last row) of verified lines."""
    rows = _rows(lines)
    state = replay(rows)
    last = rows[-1].get("ts") if rows else None
    return ("closed" if state.closed else "open"), (last if isinstance(last, str) else None)


def _survey_local(directory: Path) -> tuple[dict[str, Any], list[bytes] | None]:
    lines, torn, _, starts = read_chain(directory)
    res = verify_lines(lines, starts=starts)
    info: dict[str, Any] = {
        "local": True, "local_entry_count": res.entry_count, "local_head": res.head_hash,
        "ok": res.ok, "torn_tail": torn is not None,
    }
    if not res.ok:
        # A broken chain is listed, not fatal: the listing is how an operator finds it.
        info.update(state="broken", error=res.describe())
        return info, None
    info["state"], info["last_activity"] = _open_or_closed(lines)
    return info, lines


def survey(workdir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every work ledger of `workdir`, local or anchored, sorted by run id (read only).

    Each entry: run_id, local, anchored, entry_count and head_hash (the local chain's
    when there is one), state ("open", "closed" or "broken"), last_activity (the last
    row's ts), and agreement between the two ("identical", "local_ahead",
    "anchored_ahead", "diverged at entry N", or None when only one side exists). An
    anchor of the run fetched from a remote (``refs/harness/fetched/<remote>/<run-id>``)
    is a lineage resume weighs too: one that diverges from the local chain makes it
    "diverged at entry N", and each one that extends it (a fetch that fetched it but
    could not write it) is listed in fetched_ahead as {ref, entry_count, head_hash,
    ahead_by}, as it makes resume refuse; fetched_ahead is empty when there is none.
    """
    wd = Path(workdir)
    runs: dict[str, dict[str, Any]] = {}
    local_lines: dict[str, list[bytes] | None] = {}
    root = wd / ".harness" / "runtime" / "ledger"
    if root.is_dir():
        for child in sorted(root.iterdir()):
            try:
                validate_run_id(child.name)
                if not child.is_dir():
                    continue
                info, lines = _survey_local(child)
            except WorkLedgerError:
                continue  # not a run directory (a stray name, or no segment files)
            runs[child.name] = {"run_id": child.name, "anchored": False, **info}
            local_lines[child.name] = lines
    try:
        git: Git | None = Git.open(wd)
    except NoLedger:
        git = None  # a work tree outside git has local ledgers only
    anchored = anchor_mod.list_anchored(wd) if git is not None else []
    for item in anchored:
        entry = runs.setdefault(item.run_id, {"run_id": item.run_id, "local": False})
        entry.update(anchored=True, anchored_entry_count=item.entry_count,
                     anchored_head=item.head_hash, anchored_commit=item.commit)
        assert git is not None
        ref = anchor_mod.REF_PREFIX + item.run_id
        mine = local_lines.get(item.run_id)
        if mine is not None and item.error is None:
            try:
                prefix = _anchored_prefix(git, ref, item.commit, item.run_id, mine)
            except VerificationFailed:
                prefix = None  # the full read below names what is wrong with it
            if prefix is not None:
                entry["agreement"] = ("identical" if prefix.entry_count == len(mine)
                                      else "local_ahead")
                continue
        chain: anchor_mod.AnchoredChain | None = None
        try:
            if item.error is not None:
                raise VerificationFailed(item.error)
            chain = anchor_mod.read_anchor(git, ref, item.commit, item.run_id, remember=False)
        except VerificationFailed as exc:
            # Listed, not fatal: the listing is how an operator finds a bad anchor.
            entry["anchor_error"] = str(exc)
        if chain is None or chain.lines is None:
            entry["agreement"] = "anchor broken"
        elif mine is not None:
            entry["agreement"] = _relation_text(anchor_mod.compare_chains(mine, chain.lines))
        elif not entry["local"]:
            entry["state"], entry["last_activity"] = _open_or_closed(chain.lines)
    if git is not None:
        # An anchor fetched from a remote that diverges from the local chain is a second
        # lineage on this machine, whatever the side ref says: resume refuses (exit 3),
        # and so the listing says "diverged", not "identical".
        fetched = anchor_mod.all_fetched_refs(git)
        for run_id, mine in local_lines.items():
            if mine is None or run_id not in fetched:
                continue
            entry = runs[run_id]
            ahead: list[dict[str, Any]] = []
            diverged = False
            for ref, chain, relation in _fetched_lineages(
                    git, run_id, mine, entry.get("anchored_commit"), False, fetched[run_id]):
                if isinstance(relation, tuple):
                    if not diverged:
                        entry["agreement"] = _relation_text(relation)
                        diverged = True
                elif relation == "anchored_ahead":
                    ahead.append({"ref": secretless(ref), "entry_count": chain.entry_count,
                                  "head_hash": chain.head_hash,
                                  "ahead_by": chain.entry_count - len(mine)})
            entry["fetched_ahead"] = ahead
    out: list[dict[str, Any]] = []
    for run_id in sorted(runs):
        entry = runs[run_id]
        side = "local" if entry["local"] else "anchored"
        entry["entry_count"] = entry[f"{side}_entry_count"]
        entry["head_hash"] = entry[f"{side}_head"]
        for key in ("state", "last_activity", "agreement"):
            entry.setdefault(key, None)
        entry.setdefault("fetched_ahead", [])
        out.append(entry)
    return out
