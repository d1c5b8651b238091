"""The work-ledger row contract (DESIGN.md §2 "Work-ledger rows").

This module owns what a row is and how its hash is computed; the writer (`store`), the
verifier (`verify`) and anchoring all take the contract from here.

A row is one canonical JSON object per line with ``seq`` (1, 2, …), ``ts`` (RFC 3339
UTC), ``kind``, ``task_id`` (str, or None for ``run.*`` kinds), ``payload`` (object),
``prev_hash``, ``entry_hash``, ``schema_version`` (1) and ``redactions`` (only when > 0).

Invariants:

* ``entry_hash = sha256(canonical({"kind", "payload", "prev_hash", "task_id"}))`` in
  lowercase hex; the first row's ``prev_hash`` is `GENESIS`. ``seq``, ``ts``,
  ``redactions`` and ``schema_version`` are metadata outside the hash.
* Every payload string has passed the secret scrubber before the hash is computed, and
  nothing else rewrites the payload: the hash depends only on the row's content, never
  on the host (no ``$HOME`` folding, no path normalisation).
* Anything this module refuses raises `RowRejected` naming the field and the value
  (scrubbed, `quoted`; a value that holds a secret is not quoted at all); nothing is
  ever written for a refused row.
* A row the writer did not write (by hand, by another tool) can verify and still hold
  what the writer never records: a payload string the scrubber would rewrite, or a kind
  or task id it would refuse. `secret_field` and `SecretScan` find such a row by the
  writer's own tests (`scrub_value`, `holds_secret`) and name the field by its path,
  never by what it holds; `SecretScan` judges only the rows where the sound gate
  `json_secret_hint` finds a place to look, and misses no row those tests would flag.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec

from harness.ledger.canonical import canonical
from harness.ledger.scrub import json_secret_hint, scrub_text, scrub_value
from harness.timefmt import format_ns

from . import WorkLedgerError, quoted, secretless

__all__ = [
    "GENESIS",
    "KINDS",
    "RUN_KINDS",
    "SCHEMA_VERSION",
    "TASK_KINDS",
    "TOO_DEEP",
    "RowRejected",
    "RowText",
    "SecretScan",
    "check_deps",
    "check_kind",
    "check_task_id",
    "clean_payload",
    "deps_problem",
    "encode_row",
    "entry_hash",
    "hash_doc",
    "holds_secret",
    "id_problem",
    "ledger_dir",
    "make_row",
    "secret_field",
    "validate_run_id",
]

GENESIS: Final = "0" * 64
SCHEMA_VERSION: Final = 1

RUN_KINDS: Final = ("run.open", "run.resumed", "run.closed")
TASK_KINDS: Final = (
    "task.scheduled",
    "task.started",
    "task.completed",
    "task.failed",
    "task.abandoned",
)
KINDS: Final = frozenset(RUN_KINDS + TASK_KINDS)

_KIND_RX: Final = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_MAX_TASK_ID: Final = 128
_MAX_RUN_ID: Final = 128
# C0, DEL and C1 controls: a task id ends up in file names and terminal output.
_CONTROL_RX: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# git check-ref-format's forbidden characters, plus "/" because a run id is a single
# ref component and a single directory name.
_RUN_ID_BAD_CHARS: Final = re.compile(r"[\x00-\x20\x7f~^:?*\[\\/]")


class RowRejected(WorkLedgerError):
    """A row (or run id) that breaks the contract; nothing was written (exit 2)."""

    exit_code = 2


def holds_secret(text: str) -> bool:
    """Whether the secret scrubber would rewrite `text`: the one test of an id (kind, task
    id, run id) that the writer refuses, and that resume refuses to act on in a chain it
    did not write."""
    return scrub_text(text)[1] > 0


def check_kind(kind: object) -> str:
    """Return `kind` if it may be written; refuse typos inside the reserved families."""
    if not isinstance(kind, str) or _KIND_RX.fullmatch(kind) is None:
        raise RowRejected(
            f"kind {quoted(kind)} is not a valid kind (a lowercase letter, then up to 63 of "
            "[a-z0-9_.-])"
        )
    if holds_secret(kind):
        raise RowRejected("kind looks like it holds a secret; refusing to record it")
    family = kind.split(".", 1)[0]
    if family in ("run", "task") and kind not in KINDS:
        # A typo inside a reserved family would silently fall out of replay as an
        # unknown kind; other families are extensions that replay carries through.
        valid = ", ".join(RUN_KINDS + TASK_KINDS)
        raise RowRejected(f"kind {quoted(kind)} is not a known {family}.* kind; "
                          f"valid kinds: {valid}")
    return kind


def check_task_id(kind: str, task_id: object) -> str | None:
    """Return `task_id` if it fits `kind`: required for ``task.*``, None for ``run.*``."""
    if kind.startswith("run."):
        if task_id is not None:
            raise RowRejected(f"kind {quoted(kind)} is run-level: task_id must be None, "
                              f"got {quoted(task_id)}")
        return None
    if task_id is None:
        if kind.startswith("task."):
            raise RowRejected(f"kind {quoted(kind)} needs a task_id")
        return None
    problem = id_problem(task_id, "task_id")
    if problem is not None:
        raise RowRejected(problem)
    assert isinstance(task_id, str)
    if holds_secret(task_id):
        # Ids are hashed and shipped as they are; one that holds a secret is refused
        # rather than rewritten, since a rewritten id would no longer name the task.
        raise RowRejected("task_id looks like it holds a secret; refusing to record it")
    return task_id


def _json_kind(value: object) -> str:
    """A JSON value as a message names it: a scalar as written, a container by its type
    (its contents may be large, nested past any walk, or hold a secret)."""
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return quoted(value, cut=True)
    return "an object" if isinstance(value, dict) else "a list"


def id_problem(value: object, what: str) -> str | None:
    """Why `value` cannot be a task id, naming it `what` (``task_id``, ``deps[2]``); None
    when it can. The shape only: whether it holds a secret is the caller's test."""
    if not isinstance(value, str) or not value:
        return f"{what} must be a non-empty string, got {_json_kind(value)}"
    if len(value) > _MAX_TASK_ID:
        return (f"{what} {quoted(secretless(value)[:32])}… is {len(value)} characters "
                f"(at most {_MAX_TASK_ID})")
    if _CONTROL_RX.search(value) or '"' in value:
        return f"{what} {quoted(value)} contains a control character or '\"'"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} {quoted(value)} is not valid UTF-8 text"
    return None


def deps_problem(deps: object) -> str | None:
    """Why `deps`, the value of a ``task.scheduled`` payload's ``deps`` key, is not a list
    of task ids as a reader takes them (DESIGN.md §2: a task id is a string; a chain
    written by hand may hold one our writer would refuse, and it still names a task);
    None when it is. Replay never schedules a task whose deps it cannot read, and says
    why with this text; the writer refuses such a row, and more (`check_deps`)."""
    if not isinstance(deps, list):
        return f"deps must be a list of task ids, got {_json_kind(deps)}"
    for i, dep in enumerate(deps):
        if type(dep) is not str:
            return f"deps[{i}] must be a task id (a string), got {_json_kind(dep)}"
    return None


def check_deps(kind: str, task_id: str | None, payload: dict[str, Any],
               clean: dict[str, Any]) -> None:
    """Refuse a ``task.scheduled`` payload whose ``deps`` is not a list of task ids this
    writer would record (`id_problem`; a payload without ``deps`` names none), names
    one that holds a secret, as a task id is refused, or names the task itself (it
    could never be ready: a scheduler's bug, told to it rather than left for resume to
    find). `clean` is `payload` as `clean_payload` returned it (the JSON form, in which
    a tuple is a list); the secret test looks at what the caller gave."""
    if kind != "task.scheduled" or "deps" not in clean:
        return
    deps = clean["deps"]
    problem = deps_problem(deps)
    for i, dep in enumerate(deps if problem is None else ()):
        problem = id_problem(dep, f"deps[{i}]")
        if problem is not None:
            break
    if problem is None and task_id in deps:
        problem = (f"deps[{deps.index(task_id)}] names the task itself, which could "
                   "never be ready")
    if problem is not None:
        raise RowRejected(f"task.scheduled payload: {problem}")
    for i, dep in enumerate(payload.get("deps", ())):
        if holds_secret(dep):
            raise RowRejected(f"task.scheduled payload: deps[{i}] looks like it holds a "
                              "secret; refusing to record it")


_plain = msgspec.json.Decoder()
_NAME_RX: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_PATH: Final = 200  # characters of a field path a message shows


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _NAME_RX.fullmatch(key) else f"{path}[{quoted(key, cut=True)}]"


def _secret_at(value: object, path: str) -> str | None:
    """The path of the first string (or key) in `value` that the scrubber would rewrite,
    walking as `scrub_value` walks; None when there is none."""
    if isinstance(value, str):
        return path if holds_secret(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if holds_secret(key):
                return f"a key of {path}"
            found = _secret_at(item, _child(path, key))
            if found is not None:
                return found
            if scrub_value({key: item})[1]:
                return _child(path, key)  # clean alone, a secret under a credential's name
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _secret_at(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def secret_field(kind: str, task_id: str | None, payload: object) -> str | None:
    """Where a row holds what the writer never records: ``"kind"`` or ``"task_id"`` (an
    id it refuses as a secret), or the path of a payload value or key the scrubber
    would rewrite (``payload.env.API_KEY``, ``payload.argv[2]``, ``a key of payload``),
    itself scrubbed and cut. None when the writer would have recorded the row as it is.
    """
    if holds_secret(kind):
        return "kind"
    if task_id is not None and holds_secret(task_id):
        return "task_id"
    if not scrub_value(payload)[1]:
        return None
    # The scrubber decided; the walk only names the place (should a later rule find
    # what the walk cannot place, the whole payload is named).
    path = secretless(_secret_at(payload, "payload") or "payload")
    return path if len(path) <= _MAX_PATH else path[: _MAX_PATH - 1] + "…"


class RowText(Protocol):
    """The fields of a verified row that can hold text the writer scrubs or refuses (the
    rest are numbers, hashes and a timestamp, which verification has checked), the
    payload as its canonical JSON bytes."""

    @property
    def kind(self) -> str: ...
    @property
    def task_id(self) -> str | None: ...
    @property
    def payload(self) -> msgspec.Raw: ...


class _Fields(msgspec.Struct):
    """`RowText`, decoded from a canonical line."""

    kind: str
    task_id: str | None
    payload: msgspec.Raw


_fields: Final = msgspec.json.Decoder(list[_Fields])
_enc: Final = msgspec.json.Encoder()
_BATCH: Final = 1024  # rows judged apart from the walk, decoded and searched at once


# What `SecretScan` names in place of a field when a payload is nested deeper than the
# stdlib's reader and the scrubber can walk (both recurse; the verifier does not): only
# a chain written by hand holds one (the writer's own scrubbing fails on it), and it
# cannot be shown to hold no secret.
TOO_DEEP: Final = "a payload nested too deeply to search"


def _judge(row: RowText) -> str | None:
    try:
        # The payload is canonical JSON; the stdlib reads any integer exactly.
        return secret_field(row.kind, row.task_id, json.loads(bytes(row.payload)))
    except RecursionError:
        return TOO_DEEP


def _payloads(batch: Sequence[RowText]) -> bytes:
    return b"[" + b",".join([r.payload for r in batch]) + b"]"


def _first_secret(batch: Sequence[RowText], payloads: bytes) -> tuple[int, str] | None:
    """The first row of `batch` that holds what the writer never records, as (its
    position in `batch`, `secret_field`); None when none does. `payloads` is
    `_payloads(batch)`. Only rows in which `json_secret_hint` finds a place are judged:
    it finds one in every row `secret_field` would name, so the rest are clean."""
    # Each distinct kind and task id once, in a JSON array: `holds_secret` is
    # `scrub_value` of a string.
    ids = {r.kind for r in batch} | {r.task_id for r in batch if r.task_id is not None}
    bad = (set() if json_secret_hint(_enc.encode(list(ids))) < 0
           else {s for s in ids if holds_secret(s)})
    hinted = {i for i, r in enumerate(batch) if r.kind in bad or r.task_id in bad}
    at = json_secret_hint(payloads)
    if at >= 0:
        # Where each row's payload starts in `payloads` (and, last, where they end).
        starts = list(accumulate((len(r.payload) + 1 for r in batch), initial=1))
        while at >= 0:
            row = bisect_right(starts, at) - 1
            hinted.add(row)
            # The row is judged whole: the search goes on from the next one.
            at = json_secret_hint(payloads, starts[row + 1])
    for i in sorted(hinted):
        where = _judge(batch[i])
        if where is not None:
            return i, where
    return None


class SecretScan:
    """The first row of a chain that holds what the writer never records, found while
    the chain is verified: `verify` shows it every run of rows it proves canonical, as
    it decoded them (its ``observe``), and `first` searches the rows it could not prove.

    A clean run costs one `json_secret_hint` over the payloads' own bytes, joined as
    the walk joined them (a proven line's payload is its canonical JSON), and one over
    the distinct kinds and task ids: not a decoding or a `scrub_value` per row.
    """

    def __init__(self) -> None:
        self.found: tuple[int, str] | None = None

    def __call__(self, first: int, batch: Sequence[RowText], payloads: bytes) -> None:
        """Observe `batch`, the verified rows `first`, `first` + 1, … in canonical form,
        and `payloads`, the JSON array of their payloads' bytes. Runs come in chain
        order, so once a row is found the rest need no look."""
        if self.found is None:
            found = _first_secret(batch, payloads)
            if found is not None:
                self.found = first + found[0], found[1]

    def first(self, lines: Sequence[bytes], unproven: Sequence[int]) -> tuple[int, str] | None:
        """The first row that holds a secret, as (its index, `secret_field` or
        `TOO_DEEP`), of those observed and of the rows `unproven` names
        (`WorkVerify.unproven`, in order), which were not: those are searched in their
        lines in `lines`, which must be canonical (`verify.canonical_lines`). None when
        no row holds one."""
        todo = [i for i in unproven if self.found is None or i < self.found[0]]
        for at in range(0, len(todo), _BATCH):
            some = todo[at : at + _BATCH]
            batch = _fields.decode(b"[" + b",".join([lines[i] for i in some]) + b"]")
            found = _first_secret(batch, _payloads(batch))
            if found is not None:
                return some[found[0]], found[1]
        return self.found


def clean_payload(payload: object) -> tuple[dict[str, Any], bytes, int]:
    """Scrub `payload` and return (its JSON form, its canonical bytes, secrets replaced).

    The JSON form is the payload exactly as a reader will decode it from the line
    (tuples become lists), so the row a writer returns equals the row read back.
    """
    if type(payload) is not dict:
        raise RowRejected(f"payload must be a JSON object (dict), got {type(payload).__name__}")
    try:
        scrubbed, count = scrub_value(payload)
        data = canonical(scrubbed)
    except ValueError as exc:
        raise RowRejected(f"payload is not canonical JSON: {secretless(exc)}") from None
    except RecursionError:
        raise RowRejected("payload is nested too deeply to encode") from None
    # Parsing is value-exact (only float *spelling* differs between encoders), so the
    # decoded form equals what any reader gets from the line.
    obj: dict[str, Any] = _plain.decode(data)
    return obj, data, count


def hash_doc(kind: str, task_id: str | None, payload: Any, prev_hash: str) -> bytes:
    """The canonical bytes the entry hash is computed over."""
    return canonical(
        {"kind": kind, "payload": payload, "prev_hash": prev_hash, "task_id": task_id}
    )


def entry_hash(kind: str, task_id: str | None, payload: Any, prev_hash: str) -> str:
    """``sha256(canonical({"kind", "payload", "prev_hash", "task_id"}))`` in lowercase hex."""
    return hashlib.sha256(hash_doc(kind, task_id, payload, prev_hash)).hexdigest()


def _json_str(s: str | None) -> bytes:
    return canonical(s)


def make_row(
    *,
    seq: int,
    ts_ns: int,
    kind: str,
    task_id: str | None,
    payload: dict[str, Any],
    payload_bytes: bytes,
    prev_hash: str,
    redactions: int,
) -> tuple[dict[str, Any], bytes]:
    """Build a checked row and its canonical line (no newline) from cleaned parts.

    `payload_bytes` must be ``canonical(payload)`` (what `clean_payload` returned): the
    hashed document and the line are assembled from it rather than re-encoded.
    """
    k = _json_str(kind)
    t = _json_str(task_id)
    doc = b'{"kind":' + k + b',"payload":' + payload_bytes + b',"prev_hash":"' + (
        prev_hash.encode("ascii") + b'","task_id":' + t + b"}"
    )
    digest = hashlib.sha256(doc).hexdigest()
    row: dict[str, Any] = {
        "seq": seq,
        "ts": format_ns(ts_ns),
        "kind": kind,
        "task_id": task_id,
        "payload": payload,
        "prev_hash": prev_hash,
        "entry_hash": digest,
        "schema_version": SCHEMA_VERSION,
    }
    if redactions > 0:
        row["redactions"] = redactions
    red = b'"redactions":%d,' % redactions if redactions > 0 else b""
    line = (
        b'{"entry_hash":"' + digest.encode("ascii") + b'","kind":' + k + b',"payload":'
        + payload_bytes + b',"prev_hash":"' + prev_hash.encode("ascii") + b'",' + red
        + b'"schema_version":%d,"seq":%d,"task_id":' % (SCHEMA_VERSION, seq) + t
        + b',"ts":"' + row["ts"].encode("ascii") + b'"}'
    )
    return row, line


def encode_row(row: dict[str, Any]) -> bytes:
    """A row's canonical line (no newline): sorted keys, compact, UTF-8."""
    return canonical(row)


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is usable as one git ref component and one directory name,
    and holds nothing the secret scrubber would rewrite."""
    if not isinstance(run_id, str) or not run_id:
        raise RowRejected(f"run id must be a non-empty string, got {quoted(run_id)}")
    if holds_secret(run_id):
        # A run id is published as it is (the ref name, LEDGER.json, anchor commit
        # messages, signal and directory names): one that holds a secret is refused, as a
        # task id is, rather than rewritten (it would name another run), and not echoed.
        raise RowRejected("run id looks like it holds a secret (the secret scrubber would "
                          "rewrite it); refusing to use it")
    why = None
    if len(run_id) > _MAX_RUN_ID:
        why = f"is longer than {_MAX_RUN_ID} characters"
    elif _RUN_ID_BAD_CHARS.search(run_id):
        why = "contains a control character, a space, or one of / ~ ^ : ? * [ \\"
    elif ".." in run_id:
        why = "contains '..'"
    elif run_id.startswith("."):
        why = "starts with '.'"
    elif run_id.endswith("."):
        why = "ends with '.'"
    elif run_id.endswith(".lock"):
        why = "ends with '.lock'"
    elif run_id == "@":
        why = "is '@'"
    elif "@{" in run_id:
        why = "contains '@{'"
    else:
        try:
            run_id.encode("utf-8")
        except UnicodeEncodeError:
            why = "is not valid UTF-8 text"
    if why:
        raise RowRejected(f"run id {quoted(run_id)} {why}")
    return run_id


def ledger_dir(workdir: str | Path, run_id: str) -> Path:
    """``<workdir>/.harness/runtime/ledger/<run_id>``, checked to stay inside that root."""
    validate_run_id(run_id)
    root = (Path(workdir) / ".harness" / "runtime" / "ledger").resolve()
    path = root / run_id
    # A validated id cannot escape, but a symlinked run directory could: refuse it
    # rather than write a ledger somewhere the anchor and resume code will not look.
    if path.resolve() != path:
        raise RowRejected(f"run id {quoted(run_id)} resolves outside {secretless(root)} "
                          "(a symlink?)")
    return path
