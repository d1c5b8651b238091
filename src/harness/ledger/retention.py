"""Retention (SPEC-0022 REQ-12): which day files go, and the order that keeps every record.

Invariants: today's file is never deleted; a file is deleted only after every
run still open whose opened line it holds has a fresh opened line, synced, in
today's file (`carry_forward`), and after ``CHAIN`` records the (seq, hash) of its
highest line, so the chain's new start is checkable; CHAIN is replaced atomically
(tmp, fsync, rename) and created 0600. The file goes under `quiet`, which holds the
writer and says whether a line reached the file since the carry looked: a line stamped
just before midnight may still be committed to yesterday's file while it is pruned,
and is then carried too, never deleted unseen. A failure stops the prune and keeps
every file not yet deleted; the next prune tries again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..timefmt import day_start_ns, utc_day
from .chain import link_to
from .dayfiles import CHAIN_FILE, highest_line, list_day_files
from .files import atomic_write, fsync_dir
from .verify import read_chain_file

log = logging.getLogger("harness.ledger")
DAY_NS = 86_400 * 1_000_000_000
# Carries of one file at most while lines keep reaching it; then the next prune retries.
CARRIES = 3


@dataclass
class PruneResult:
    deleted: list[str] = field(default_factory=list)
    carried_forward: int = 0
    error: str | None = None


def plan(days: list[tuple[str, str, int]], now_ns: int, retention_ns: int,
         max_bytes: int) -> list[str]:
    """The days to delete, oldest first, from (day, path, size) sorted by day."""
    today = utc_day(now_ns)
    doomed: list[str] = []
    total = sum(size for _, _, size in days)
    for day, _path, size in days:
        if day >= today:
            break
        if day_start_ns(day) + DAY_NS + retention_ns < now_ns:
            doomed.append(day)
            total -= size
    for day, _path, size in days:
        if total <= max_bytes or day >= today:
            break
        if day not in doomed:
            doomed.append(day)
            total -= size
    return doomed


def _sized(directory: str) -> list[tuple[str, str, int]]:
    """(day, path, size) of every day file, oldest first."""
    out = []
    for day, path in list_day_files(directory).days:
        try:
            out.append((day, path, os.path.getsize(path)))
        except FileNotFoundError:
            continue
    return out


def _delete(directory: str, path: str, anchor: tuple[int, str] | None
            ) -> tuple[int, str] | None:
    """Delete one day file, its highest line first recorded in CHAIN; the new anchor."""
    # The next kept line links to the doomed file's highest seq.
    last = highest_line(path)
    # A line numbered below 1 was never issued (a hand-made file): it anchors nothing.
    if last is not None and last[0] >= 1 and (anchor is None or last[0] > anchor[0]):
        # A damaged hash anchors nothing: the next line's link fails verify, which
        # names it, as it named the damage before.
        anchor = (last[0], link_to(last[1]))
        write_chain_file(directory, *anchor)
    os.unlink(path)
    return anchor


def write_chain_file(directory: str, seq: int, digest: str) -> None:
    """Replace ledger/CHAIN with the pruned tail's last (seq, hash), atomically."""
    atomic_write(os.path.join(directory, CHAIN_FILE),
                 json.dumps({"hash": digest, "seq": seq}).encode() + b"\n")


def prune(
    directory: str,
    now_ns: int,
    retention_ns: int,
    max_bytes: int,
    carry_forward: Callable[[str], int],
    quiet: Callable[[str], contextlib.AbstractContextManager[bool]],
) -> PruneResult:
    """Delete what REQ-12 says must go. `carry_forward(day)` re-opens, in today's file, every
    open run whose opened line is in that day's file, and returns how many it wrote.
    `quiet(day)` holds every write while the file goes, and yields whether nothing was
    committed to the day's file since `carry_forward` looked (else it carries again)."""
    res = PruneResult()
    try:
        # Deleting a file under a CHAIN that cannot be read would leave the kept lines
        # anchored to nothing anyone can check: nothing goes until it is mended.
        anchor = read_chain_file(directory)
    except ValueError as exc:
        res.error = f"{exc}; nothing is pruned until it is mended"
        log.error("ledger: %s", res.error)
        return res
    # Carried-forward lines make today's file grow after the plan sized it: plan again
    # until nothing more is due, so the total ends under max_bytes all the same.
    while res.error is None:
        try:
            sized = _sized(directory)
        except OSError as exc:  # the directory became unreadable (LedgerDirError)
            res.error = f"listing {directory} failed: {exc}; retrying at the next prune"
            log.error("ledger: %s", res.error)
            break
        paths = {d: p for d, p, _ in sized}
        doomed = plan(sized, now_ns, retention_ns, max_bytes)
        if not doomed:
            break
        for day in doomed:
            path = paths[day]
            try:
                for _ in range(CARRIES):
                    res.carried_forward += carry_forward(day)
                    with quiet(day) as still:
                        if still:
                            anchor = _delete(directory, path, anchor)
                            break
                else:
                    raise RuntimeError(f"lines kept reaching it while {CARRIES} carries ran")
            except Exception as exc:  # keep this file and every later one; retry next prune
                res.error = f"pruning {path} failed: {exc}; retrying at the next prune"
                log.error("ledger: %s", res.error)
                break
            res.deleted.append(day)
    if res.deleted:
        try:
            fsync_dir(directory)
        except OSError as exc:  # the deletes happened; only their durability is in doubt
            log.warning("ledger: syncing %s after pruning failed: %s", directory, exc)
    return res
