"""Which file a run record's ``log`` field names (SPEC-0022 REQ-4 ``log`` and
``log_pruned``, REQ-7's crash note, REQ-12; DESIGN.md §2's paths).

The ledger stores every free-text string scrubbed of secrets and cut to 256 bytes
(REQ-4), ``log`` too. Under a deep state directory, or for a long harness name, the log's
path is longer than that, and the record holds its first 256 bytes: a path that names
no file, or another one. So nothing opens or stats the field itself; everything that
follows a record's log (``log_pruned``, the crash notes, the boot's compression of a
crashed run's log, ``trigger --wait``) asks `log_file`.

A state directory moves whole (to another disk, another machine: its history goes with
it), and the records keep the absolute paths they were written with. Every log harness
writes is at its DESIGN §2 place under the state dir of the daemon that wrote it (config
cannot put one elsewhere), and that is the state dir holding the ledger. So a stored path
that is the layout of the record's own run under some state dir (``<dir>/jobs/<harness>/
<run_id>.log``, ``<dir>/logs/<harness>.log``) names the log at that place under the
state dir holding the ledger now, even when the old path still exists: that old file is
another state dir's (the original of a copy), which this ledger's keep_runs no longer
prunes, `harness logs` does not show, and a daemon of this state dir must never write to.

Invariant: `log_file` answers the record's log file, or None when it cannot tell; never
a value the ledger changed. A value the ledger cannot have changed (shorter than any cut
leaves, no redaction or escape in it) under the state directory that holds the ledger is
the path as written. A stored value that is exactly what the ledger makes of the log's
DESIGN §2 path under that state dir (from the record's harness, run id and kind), or an
uncut one elsewhere ending in that path's place below a state dir, is that path: the
layout, not a guess, restores what a cut removed or a move changed. Any other value the
ledger cannot have changed is the path as written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .. import paths
from .schema import MAX_STR, stored_text
from .scrub import REDACTED

# A cut keeps at least MAX_STR - 3 bytes (cap_utf8 drops at most the 3 bytes of a partial
# character after the cut), so a value no longer than this was never cut. `fit_line`'s
# halving never reaches `log`: it cuts free text only once a line's lists are empty, and
# the capped strings left cannot fill 16 KiB.
_NEVER_CUT = MAX_STR - 4


def _uncut(stored: str) -> bool:
    """Whether `stored` holds every byte of what it was given: no cut, no redaction (it
    may still spell some as ``\\xNN``)."""
    size = len(stored) if stored.isascii() else len(stored.encode("utf-8", "surrogatepass"))
    return size <= _NEVER_CUT and REDACTED not in stored


def as_written(stored: str) -> bool:
    """Whether `stored` is a value the ledger kept unchanged, whatever it was given. One
    holding ``\\x`` may spell bytes `paths.as_text` escaped: the layout decides it."""
    return _uncut(stored) and "\\x" not in stored


def layout_paths(harness: str, run_id: int, kind: Any, state: str) -> tuple[str, ...]:
    """Where DESIGN.md §2 puts the log of `harness`'s run `run_id` under `state`: the
    per-run log of a one-shot, the durable log of a resident, both when the kind is
    not known."""
    oneshot = paths.run_log_path(paths.jobs_dir(state), harness, run_id)
    resident = paths.resident_log_path(harness, state)
    if kind == "oneshot":
        return (oneshot,)
    if kind == "resident":
        return (resident,)
    return oneshot, resident


def log_file(record: Mapping[str, Any], state: str | None, *, live: bool = False
             ) -> str | None:
    """The file `record`'s log is (its plain path: a closed one-shot's may be
    ``<path>.zst``), or None when it has no log or its stored path was changed and is not
    the DESIGN §2 path under `state`, the state dir holding its ledger (None: unknown). A
    stored path that is the record's DESIGN §2 place under another state dir (one `state`
    was moved or copied from) is that place under `state`.

    `record` is a folded record as `to_json` gives it, or its fields with ``harness``
    and ``run_id``. `live`: it is a run the serving daemon started, asked about by a
    process whose state dir may not be the daemon's (`trigger --wait`): then nothing
    moved, and a path the ledger kept as written is the daemon's own, wherever it is.
    """
    stored = record.get("log")
    if type(stored) is not str or not stored:
        return None
    written = as_written(stored)
    harness, run_id = record.get("harness"), record.get("run_id")
    if state is None or type(harness) is not str or type(run_id) is not int:
        return stored if written else None
    if written and (live or stored.startswith(state if state.endswith(os.sep)
                                              else state + os.sep)):
        return stored  # nearly every record: written under this state dir, kept as written
    kind = record.get("kind")
    if _uncut(stored):
        # Written under the state dir this one was moved or copied from: the field ends
        # in the place. (Each place relative to a state dir, as `layout_paths` spells it:
        # "" joins to none.)
        for place in layout_paths(harness, run_id, kind, ""):
            if stored.endswith(os.sep + paths.as_text(place)):
                return os.path.join(state, place)
    else:
        # Cut: only this state dir's path can be told from what the ledger made of it.
        for path in layout_paths(harness, run_id, kind, state):
            if stored_text(paths.as_text(path)) == stored:
                return path
    return stored if written else None


__all__ = ["as_written", "layout_paths", "log_file"]
