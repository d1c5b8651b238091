"""The boot's pass over the window's day files: every line folded into the index.

The daemon reads a week of lines at boot (a million on a busy ledger) before it serves.
Folded one at a time (`Index.apply`: the whole line decoded and checked, then a
`Record.apply` that looks at each of its keys and values in Python) they took five times
their decode. Here each line is decoded to its envelope and
record fields alone, checked by msgspec, a run's lines are merged as they come
(`fold.Merge`: a `dict.update` per line) and the record is frozen once, at its closing
line. Invariant: the index ends exactly as `Index.apply` of every readable line, in file
order, leaves it: the same records, in the same order, each the same fold, the same
`max_ids`; the same lines are skipped and counted (`reader.decode_line`'s). A run with a
line below the seq of the one before (a clock stepped back, an edited file) or a line
after its closing one is folded as `Index.apply` folds it, from that line on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Required, TypedDict

import msgspec

from .dayfiles import UNREADABLE, iter_chunks
from .fold import Merge
from .index import INTERNED, Index
from .reader import SHORT_LINE, Head, decode_line, refused_whole
from .schema import RECORD_FIELDS
from .writer import MAX_LINE

_CLOSING = frozenset({"closed", "decided"})
_ENVELOPE = ("seq", "type", "at", "harness", "run_id")
# What a line's decode keeps: the envelope (with `Head`'s types: a line `Head` refuses,
# `decode_line` refuses) and the record fields, none of them null. msgspec checks the
# types and drops every other key (the chain, fields no reader knows) in C, where a look
# at each line's keys and values in Python cost most of the decode again. A line this
# refuses (a null, a number out of range, a key given twice) is for `decode_line` to read.
_HEAD = {f.name: f.type for f in msgspec.structs.fields(Head)}
_LINE_TYPES: dict[str, Any] = {
    **{k: Required[_HEAD[k]] for k in _ENVELOPE},
    **{k: str if k in _HEAD else str | int | float | bool | list | dict for k in RECORD_FIELDS}}
_Line: Any = TypedDict("_Line", _LINE_TYPES, total=False)  # type: ignore[misc]
_decode: Callable[[bytes], dict[str, Any]] = msgspec.json.Decoder(_Line).decode  # type: ignore[assignment]
_KEPT = frozenset((*_ENVELOPE, *RECORD_FIELDS))


@dataclass
class Loaded:
    """What the pass read: lines skipped (as every reader skips them), and the highest
    seq of a readable line with the file holding it (0 and "" for none)."""

    skipped: int = 0
    top_seq: int = 0
    top_path: str = ""


def load_files(index: Index, paths: Iterable[str]) -> Loaded:
    """Fold every readable line of `paths`, in order, into `index` (no line is `live`)."""
    out = Loaded()
    # A run not yet closed is merged in `pending`, and holds its place in `records`
    # (where `Index.apply` puts a record, at its first line) with its `Merge`; every
    # one is made a record before this returns, whatever happens.
    records: dict[tuple[str, int], Any] = index.records
    pending: dict[tuple[str, int], Merge] = {}
    try:
        for path in paths:
            top = _load_file(index, records, pending, path, out)
            if top > out.top_seq:
                out.top_seq, out.top_path = top, path
    finally:
        for key, m in pending.items():
            r = m.record(sys.intern(key[0]), key[1])
            _intern(r.fields)  # as the values of its lines were, one by one
            records[key] = r
    return out


def _load_file(index: Index, records: dict[tuple[str, int], Any],
               pending: dict[tuple[str, int], Merge], path: str, out: Loaded) -> int:
    """One file's lines into `records` (and `pending`); the highest seq read."""
    top = 0
    skipped = 0
    max_ids = index.max_ids
    decode = _decode
    for _first, lines, _torn in iter_chunks(path, gone_ok=True):
        for raw in lines:
            n = len(raw)
            if n + 1 > MAX_LINE:
                skipped += 1  # as decode_line
                continue
            try:
                line = decode(raw)
            except UNREADABLE:
                whole = _read_whole(raw)
                if whole is None:
                    skipped += 1
                    continue
                line = whole
            else:
                # What the decode skipped unread may be no UTF-8, nest too deep or hold a
                # huge integer (`reader.head_of` asks the same): never in a short line of
                # ASCII.
                if (n > SHORT_LINE or not raw.isascii()) and refused_whole(raw):
                    skipped += 1
                    continue
            pop = line.pop
            seq = pop("seq")
            typ = pop("type")
            at = pop("at")
            harness = pop("harness")
            rid = pop("run_id")
            if seq > top:
                top = seq
            key = (harness, rid)
            m = pending.get(key)
            if m is not None:
                if seq >= m.last_seq:
                    m.add(line, seq, typ, at)
                    if typ in _CLOSING:
                        del pending[key]
                        records[key] = m.frozen(sys.intern(harness), rid)
                    continue
                # Out of seq order: from here on, as `Index.apply` folds it.
                del pending[key]
                r = m.record(sys.intern(harness), rid)
                _intern(r.fields)
                index.store(key, r)
            elif key not in records:
                # Interned, in the key too: a few names for every record the index holds.
                harness = sys.intern(harness)
                key = (harness, rid)
                if rid > max_ids.get(harness, 0):
                    max_ids[harness] = rid
                m = Merge(line, seq, typ, at)
                if typ in _CLOSING:
                    records[key] = m.frozen(harness, rid)
                else:
                    records[key] = pending[key] = m
                continue
            # A line of a record already folded (after its closing line, or out of seq
            # order): thawed and folded as `Index.apply` does.
            line.update(seq=seq, type=typ, at=at, harness=harness, run_id=rid)
            index.apply(line)
    out.skipped += skipped
    return top


def _read_whole(raw: bytes) -> dict[str, Any] | None:
    """A line `_decode` refused, as `decode_line` reads it (None: every reader skips it),
    with what `_decode` keeps: the envelope and the record fields that are not null (a
    null changes nothing in a fold)."""
    got = decode_line(raw)
    if got is None:
        return None
    return {k: v for k, v in got.items() if v is not None and k in _KEPT}


def _intern(fields: dict[str, Any]) -> None:
    """The index's interning of a record's common words (`Index.apply` interns each
    line's the same way)."""
    for k in INTERNED:
        v = fields.get(k)
        if v is not None and type(v) is str:
            fields[k] = sys.intern(v)

