"""Per-run logs (DESIGN.md §2, SPEC-0008 "Per-Run Logs", SPEC-0022 REQ-12): where they live,
how they are created, compressed once their run has closed, and bounded by ``keep_runs``.

A one-shot's log is ``<jobs_dir>/<harness>/<run_id>.log``; once its run closes it becomes
``<run_id>.log.zst``. Invariants: a log is created 0600 inside a 0700 directory (the mode is
given at creation, never chmod'ed after); a ``.zst`` is only ever visible whole (written to a
temporary file, synced, renamed), and the plain log is deleted only after that rename is
durable, so at every instant at least one complete copy exists; pruning deletes only the
logs of the oldest run ids beyond ``keep_runs`` and never a run id the caller protects (a
run still writing its log). The temporary file of a compression a kill cut short is
removed at the next boot (`clear_compress_leftovers`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Collection

import zstandard

from .. import paths
from ..controls import one_line
from ..ledger.files import atomic_replace, clear_leftovers, fsync_dir, make_private_dir

log = logging.getLogger("harness.supervisor")

ZST = ".zst"
_LOG_NAME = re.compile(r"(\d+)\.log(?:\.zst)?\Z")
_CHUNK = 1 << 20


def default_jobs_dir() -> str:
    return paths.jobs_dir()


def harness_dir(jobs_dir: str, harness: str) -> str:
    return os.path.join(jobs_dir, harness)


def run_log_path(jobs_dir: str, harness: str, run_id: int) -> str:
    return paths.run_log_path(jobs_dir, harness, run_id)


def create_run_log(path: str) -> int:
    """Create a fresh per-run log (0600, its directory 0700) and return an append fd.

    O_EXCL: run ids are never reused, so an existing file means a bug or a stale file we
    must not append a new run's output to.
    """
    make_private_dir(os.path.dirname(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
    return os.open(path, flags, 0o600)


def append_note(path: str, text: str) -> bool:
    """Append one line of ours to an existing plain log; False when it cannot.

    No O_CREAT: a log that is gone (compressed or pruned) is not recreated for a note.
    The note is one line with its controls spelled out: it quotes config values (an
    argv[0], a workdir), and `harness logs` and `trigger --wait` print the log as it is,
    so an escape sequence in one would act on the terminal and a newline forge a
    `harness:` line. (The child's own output is not ours to change.)
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, f"harness: {one_line(text)}\n".encode())
    except OSError as exc:
        log.warning("cannot write a note to %s: %s", path, exc)
        return False
    finally:
        os.close(fd)
    return True


def compress_log(path: str) -> bool:
    """Replace a closed run's log with ``<path>.zst``; True when the plain log is gone.

    Never raises: a log that cannot be compressed stays plain, which readers accept.
    """
    if not os.path.exists(path):
        return False
    d = os.path.dirname(path) or "."

    def fill(fd: int) -> None:
        with open(path, "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
            cctx = zstandard.ZstdCompressor(level=3)
            with cctx.stream_writer(dst, closefd=False) as w:
                while chunk := src.read(_CHUNK):
                    w.write(chunk)
            dst.flush()

    try:
        atomic_replace(path + ZST, fill)  # durable before the only other copy goes
        os.unlink(path)
        fsync_dir(d)
    except OSError as exc:
        log.warning("cannot compress %s: %s", path, exc)
        return False
    return True


def clear_compress_leftovers(jobs_dir: str) -> list[str]:
    """Remove the half-written ``.zst`` files that a daemon killed while compressing a log
    left in any harness's directory; return their paths. Only for the one daemon, before
    a run can end (each end compresses a log)."""
    try:
        names = sorted(os.listdir(jobs_dir))
    except FileNotFoundError:
        return []
    gone = []
    for name in names:
        d = os.path.join(jobs_dir, name)
        if os.path.isdir(d) and not os.path.islink(d):
            gone += [os.path.join(d, n) for n in clear_leftovers(d, r"\d+\.log\.zst")]
    return gone


def log_ids(jobs_dir: str, harness: str) -> dict[int, list[str]]:
    """Run id → the log files (plain and/or .zst) it has for `harness`."""
    d = harness_dir(jobs_dir, harness)
    try:
        names = os.listdir(d)
    except OSError:
        return {}
    out: dict[int, list[str]] = {}
    for name in names:
        m = _LOG_NAME.match(name)
        if m:
            out.setdefault(int(m.group(1)), []).append(os.path.join(d, name))
    return out


def prune_logs(jobs_dir: str, harness: str, keep_runs: int,
               protect: Collection[int] = ()) -> list[int]:
    """Delete the logs of all but the newest `keep_runs` run ids; return the ids pruned.

    Run ids grow with time, so the lowest ids are the oldest runs. Protected ids (runs
    still writing) are never deleted, but they do count toward `keep_runs`.
    """
    if keep_runs < 1:
        raise ValueError(f"keep_runs must be at least 1, got {keep_runs}")
    ids = log_ids(jobs_dir, harness)
    pruned: list[int] = []
    for rid in sorted(ids, reverse=True)[keep_runs:]:
        if rid in protect:
            continue
        ok = True
        for p in ids[rid]:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError as exc:
                ok = False
                log.warning("cannot prune %s: %s", p, exc)
        if ok:
            pruned.append(rid)
    if pruned:
        with contextlib.suppress(OSError):
            fsync_dir(harness_dir(jobs_dir, harness))
    return sorted(pruned)


def finish_log(jobs_dir: str, harness: str, run_id: int, keep_runs: int,
               protect: Collection[int] = ()) -> list[int]:
    """After a run closed: compress its log, then apply keep_runs; the ids pruned."""
    compress_log(run_log_path(jobs_dir, harness, run_id))
    return prune_logs(jobs_dir, harness, keep_runs, protect)
