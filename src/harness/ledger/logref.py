"""Which file a run record's ``log`` field names (SPEC-0022 REQ-4 ``log`` and
``log_pruned``, REQ-7's crash note, REQ-12; DESIGN.md §2's paths).

The ledger stores every free-text string scrubbed of secrets and cut to 256 bytes
(REQ-4), ``log`` too. Under a deep state directory, or for a long harness name, the log's
path is longer than that, and the record holds its first 256 bytes: a path that names
no file, or another one. So nothing opens or stats the field itself; everything that
follows a record's log (``log_pruned``, the crash notes, the boot's compression of a
crashed run's log, ``trigger --wait``) asks `log_file`.

Invariant: `log_file` answers the record's log file, or None when it cannot tell; never
a value the ledger changed. A stored value the ledger cannot have changed (shorter than
any cut leaves, and no redaction in it) is the path as written. Any other is taken only
when it is exactly what the ledger makes of the log's DESIGN §2 path (from the record's
harness, run id and kind, under the state directory that holds the ledger), and then
that path is the answer: the layout, not a guess, restores what the cut removed.
"""

from __future__ import annotations

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


def as_written(stored: str) -> bool:
    """Whether `stored` is a value the ledger kept unchanged, whatever it was given. One
    holding ``\\x`` may spell bytes `paths.as_text` escaped: the layout decides it."""
    size = len(stored) if stored.isascii() else len(stored.encode("utf-8", "surrogatepass"))
    return size <= _NEVER_CUT and REDACTED not in stored and "\\x" not in stored


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


def log_file(record: Mapping[str, Any], state: str | None) -> str | None:
    """The file `record`'s log is (its plain path: a closed one-shot's may be
    ``<path>.zst``), or None when it has no log or its stored path was changed and is not
    the DESIGN §2 path under `state`, the state dir holding its ledger (None: unknown).

    `record` is a folded record as `to_json` gives it, or its fields with ``harness``
    and ``run_id``.
    """
    stored = record.get("log")
    if type(stored) is not str or not stored:
        return None
    if as_written(stored):
        return stored
    harness, run_id = record.get("harness"), record.get("run_id")
    if state is None or type(harness) is not str or type(run_id) is not int:
        return None
    for path in layout_paths(harness, run_id, record.get("kind"), state):
        if stored_text(paths.as_text(path)) == stored:
            return path
    return None


__all__ = ["as_written", "layout_paths", "log_file"]
