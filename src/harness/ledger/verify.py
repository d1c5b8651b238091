"""Verifying the run ledger's hash chain across its day files (DESIGN.md §4).

Invariants: read-only and streaming (memory does not grow with the ledger); the
chain is followed in seq order from ``CHAIN`` (the pruned tail) or from genesis;
torn fragments (an unterminated tail, or an unparseable line a crash left inside
a file) are reported, not failures; an edited, removed, duplicated or reordered
complete line, or one without ``prev``/``hash``, is a break, named by seq and
file:line. Lines on disk are hashed as they lie and re-encoded only when that
does not match (a line that is not canonical).
"""

from __future__ import annotations

import gc
import heapq
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec

from .chain import ZERO_HASH, hash_of_line_bytes, hash_of_object
from .dayfiles import CHAIN_FILE, iter_chunks, list_day_files


class _Link(msgspec.Struct):
    seq: int
    prev: str | None = None
    hash: str | None = None


_link = msgspec.json.Decoder(_Link)
_any = msgspec.json.Decoder()


@dataclass
class Break:
    seq: int | None
    file: str
    line: int
    reason: str


@dataclass
class VerifyResult:
    ok: bool
    exists: bool
    lines: int = 0
    torn: int = 0
    torn_at: list[str] = field(default_factory=list)  # file:line of each fragment
    files: int = 0
    head_seq: int | None = None
    head_hash: str | None = None
    start_seq: int | None = None  # first seq checked
    anchor: str = "genesis"  # or "CHAIN seq N"
    error: Break | None = None
    strays: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "ok": self.ok,
            "lines": self.lines,
            "entry_count": self.lines,
            "files": self.files,
            "torn": self.torn,
            "torn_tail": self.torn > 0,
            "torn_at": self.torn_at,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "anchor": self.anchor,
            "strays": self.strays,
        }
        if self.error is not None:
            out.update(seq=self.error.seq, file=self.error.file, line=self.error.line,
                       reason=self.error.reason)
        return out


def read_chain_file(directory: str) -> tuple[int, str] | None:
    """The pruned tail's last (seq, hash), or None when nothing was pruned."""
    path = os.path.join(directory, CHAIN_FILE)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable chain anchor: {exc}") from None
    seq, digest = (data.get("seq"), data.get("hash")) if isinstance(data, dict) else (None, None)
    if type(seq) is not int or not isinstance(digest, str) or len(digest) != 64:
        raise ValueError(f"{path}: chain anchor must be {{\"seq\": N, \"hash\": HEX64}}")
    return seq, digest


# (seq, file index, line number, raw bytes, decoded link or None for a fragment)
_Item = tuple[int, int, int, bytes, "_Link"]


def _file_items(fi: int, path: str, res: VerifyResult, name: str) -> Iterator[_Item]:
    for first, lines, torn in iter_chunks(path):
        if torn:
            res.torn += 1
            res.torn_at.append(f"{name}:{first}")
            continue
        n = first - 1
        for raw in lines:
            n += 1
            try:
                link = _link.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                # An unparseable line: a fragment a crash left before later appends.
                if raw:
                    res.torn += 1
                    res.torn_at.append(f"{name}:{n}")
                continue
            yield link.seq, fi, n, raw, link


def verify_run_ledger(directory: str) -> VerifyResult:
    """Check the chain from CHAIN (or genesis) to the head."""
    listing = list_day_files(directory)
    exists = os.path.isdir(directory)
    res = VerifyResult(ok=False, exists=exists, strays=listing.strays)
    if not exists:
        return res
    res.files = len(listing.days)
    anchor = read_chain_file(directory)
    prev_seq, prev_hash = anchor if anchor else (0, ZERO_HASH)
    if anchor:
        res.anchor = f"CHAIN seq {anchor[0]}"
    names = [os.path.basename(p) for _, p in listing.days]
    streams = [_file_items(i, p, res, names[i]) for i, (_, p) in enumerate(listing.days)]
    # Day files are seq-ordered inside; merging by seq also orders lines a clock jump
    # put in an earlier-named file.
    items = heapq.merge(*streams, key=lambda it: it[0]) if len(streams) > 1 else (
        streams[0] if streams else iter(()))
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for seq, fi, n, raw, link in items:
            if anchor and seq <= anchor[0]:
                continue  # pruned-to-be lines a crash left behind CHAIN: not checked
            where = (names[fi], n)
            if link.prev is None or link.hash is None:
                res.error = Break(seq, *where, "line has no prev/hash chain fields")
                break
            if seq <= prev_seq:
                res.error = Break(seq, *where, f"seq {seq} does not follow seq {prev_seq}"
                                  " (duplicated or reordered line)")
                break
            if link.prev != prev_hash:
                res.error = Break(seq, *where, "prev does not match the hash of the line before"
                                  f" (seq {prev_seq}): a line was removed, inserted or edited")
                break
            if not hash_of_line_bytes(raw, link.hash):
                obj = _any.decode(raw)
                try:
                    good = hash_of_object(obj) == link.hash
                except ValueError:
                    good = False
                if not good:
                    res.error = Break(seq, *where, "hash does not match the line's content"
                                      " (the line was edited)")
                    break
            if res.start_seq is None:
                res.start_seq = seq
            res.lines += 1
            prev_seq, prev_hash = seq, link.hash
    finally:
        if gc_was:
            gc.enable()
    res.ok = res.error is None
    res.head_seq = prev_seq if prev_seq else None
    res.head_hash = prev_hash if prev_seq else None
    return res
