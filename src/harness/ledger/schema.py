"""The run ledger's line schema (SPEC-0022 REQ-1, REQ-2, REQ-4, REQ-5, REQ-13, REQ-17).

`prepare_line` is the only way a line enters the run ledger. It accepts the
envelope, the REQ-4 record fields, ``imported`` and the chain fields, and nothing
else (an unknown field or a wrong type is a caller's bug: `LineRejected`). It then
scrubs every string of secrets and cuts strings to 256 bytes on a UTF-8 boundary
and ``models``/``sessions``/``errors`` to 16 entries, counting every cut; `fit_line`
then cuts a line whose fields together pass the 16 KiB line limit.
Invariant: what it returns is a plain JSON object that canonical JSON can encode.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import GenericAlias
from typing import Any

import msgspec

from ..timefmt import canon, format_ns, now_ns, parse_ns
from .canonical import canonical, cap_utf8
from .errors import LineRejected
from .scrub import might_hold_secret, scrub_text, scrub_value

SCHEMA_VERSION = 1
MAX_STR = 256
MAX_LIST = 16

LINE_TYPES = ("opened", "updated", "closed", "decided")
CLOSING = ("closed", "decided")  # the line types that end a record
OUTCOMES = (
    "running",
    "success",
    "failed",
    "timed_out",
    "skipped",
    "replaced",
    "missed",
    "cancelled",
    "interrupted",
    "budget_exceeded",
    "quota_parked",
    "model_mismatch",
    "model_unattested",
    "stalled",
)
TRIGGERS = (
    "schedule",
    "manual",
    "catch_up",
    "channel",
    "webhook",
    "autostart",
    "restart",
    "release",
    "lease",
)
KINDS = ("oneshot", "resident")
COST_SOURCES = ("recorded", "priced", "unknown")
# REQ-5's verdict for consecutive failures and harness_scheduled_runs_total.
FAILURE_OUTCOMES = frozenset(
    {"failed", "timed_out", "budget_exceeded", "model_mismatch", "model_unattested"}
)

ENVELOPE = ("v", "seq", "type", "at", "harness", "run_id")
CHAIN = ("prev", "hash")

_S, _I, _B, _T, _N = "str", "int", "bool", "time", "number"
# REQ-4 record fields (plus `imported`, REQ-13) and their JSON types.
RECORD_FIELDS: dict[str, str] = {
    "kind": _S,
    "trigger": _S,
    "source": _S,
    "event_id": _S,
    "todo_id": _S,
    "attempt": _I,
    "started_at": _T,
    "ended_at": _T,
    "duration_ms": _I,
    "exit_code": _I,
    "outcome": _S,
    "reason": _S,
    "model": _S,
    "models": "models",
    "tokens": "tokens",
    "cost_usd": _N,
    "cost_source": _S,
    "model_calls": _I,
    "errors": "errors",
    "usage_complete": _B,
    "sessions": "sessions",
    "trace_url": _S,
    "log": _S,
    "log_pruned": _B,
    "override": _B,
    "mismatch": "mismatch",
    "window": _T,
    "first_window": _T,
    "windows": _I,
    "coalesced": _I,
    "missing_path": _S,
    "imported": _B,
}
_NESTED: dict[str, dict[str, str]] = {
    "models": {"model": _S, "provider": _S, "output_tokens": _I},
    "sessions": {"id": _S, "adapter": _S, "trace_id": _S},
    "tokens": {"input": _I, "output": _I, "cache_read": _I, "cache_write": _I},
    "mismatch": {"kind": _S, "served_model": _S, "served_provider": _S, "at": _T},
}
_ENUMS = {"kind": KINDS, "cost_source": COST_SOURCES, "outcome": OUTCOMES}
# The free text `fit_line` may cut: not the harness (the record's identity), its times,
# its listed words or its trigger.
_CUTTABLE = frozenset(k for k, t in RECORD_FIELDS.items()
                      if t == _S and k not in _ENUMS and k != "trigger")


@dataclass
class Cuts:
    """What `prepare_line` changed: secrets redacted and values cut to their caps."""

    redactions: int = 0
    truncations: int = 0


def _text(x: str) -> bool:
    """Whether `x` can be written as UTF-8 (a lone surrogate cannot)."""
    if x.isascii():
        return True
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Integers fit 64 bits, signed: what the ledger's readers (and the counters, the Go
# daemon before) hold; past 4,300 digits even Python's str() refuses one.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def _int64(x: object) -> bool:
    return type(x) is int and _INT_MIN <= x <= _INT_MAX


# Strings must be encodable and numbers finite: canonical JSON refuses the rest, and that
# refusal surfaced from the writer as a bare ValueError/UnicodeEncodeError, not LineRejected.
# A time must have a UTC spelling (years 1-9999), the one the line is written with.
_VALID = {
    _S: lambda x: type(x) is str and _text(x),
    _I: _int64,
    _B: lambda x: type(x) is bool,
    _T: lambda x: canon(x) is not None,
    _N: lambda x: _int64(x) or (type(x) is float and math.isfinite(x)),
}
_WANT = {_S: "a string (valid UTF-8)", _I: "an integer (64-bit)", _B: "a boolean",
         _T: "an RFC 3339 time", _N: "a finite number"}


def _shown(v: object) -> str:
    """A refused value as an error quotes it: its first 80 characters, scrubbed whole
    before the cut (a token cut short is one the scrubber no longer knows)."""
    if type(v) is int and v.bit_length() > 10_000:  # past str()'s 4,300 digits
        return f"an integer of {v.bit_length()} bits"
    return scrub_text(repr(v))[0][:80]


def _check(kind: str, key: str, v: Any) -> None:
    if not _VALID[kind](v):
        raise LineRejected(f"field {key!r} must be {_WANT[kind]}, got {_shown(v)}")


def _check_obj(key: str, v: Any, spec: dict[str, str]) -> None:
    if type(v) is not dict:
        raise LineRejected(f"field {key!r} must be an object, got {_shown(v)}")
    for k, x in v.items():
        if k not in spec:
            raise LineRejected(f"field {key}.{k} is not part of the run ledger schema")
        _check(spec[k], f"{key}.{k}", x)


def _validate(obj: dict[str, Any]) -> None:
    for k, v in obj.items():
        if v is None:
            continue
        t = RECORD_FIELDS.get(k)
        if t is None:
            if k in ENVELOPE or k in CHAIN:
                continue
            raise LineRejected(f"field {k!r} is not part of the run ledger schema")
        if t in (_S, _I, _B, _T, _N):
            _check(t, k, v)
        elif t in ("models", "sessions"):
            if type(v) is not list:
                raise LineRejected(f"field {k!r} must be a list, got {_shown(v)}")
            for item in v:
                _check_obj(k, item, _NESTED[t])
        elif t == "errors":
            if type(v) is not dict or any(
                type(c) is not str or not _text(c) or not _int64(n) for c, n in v.items()
            ):
                raise LineRejected(f"field 'errors' must map class names to counts, got "
                                   f"{_shown(v)}")
        else:
            _check_obj(k, v, _NESTED[t])
        allowed = _ENUMS.get(k)
        if allowed is not None and v not in allowed:
            raise LineRejected(
                f"field {k!r} has unknown value {_shown(v)} (valid: {', '.join(allowed)})"
            )
    typ = obj.get("type")
    if typ in CLOSING and obj.get("outcome") == "running":
        # A record that reads running is one in flight (REQ-5): reconciliation would
        # never close it, and --outcome running would list it.
        raise LineRejected(f"a {typ} line ends its run: its outcome cannot be 'running'")


def writable(fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The record fields of `fields` that `prepare_line` accepts, and the names of those
    it would refuse. Values read back from damaged or edited files may be any JSON; a line
    re-written from them keeps what can be written rather than failing whole."""
    kept: dict[str, Any] = {}
    dropped = []
    for k, v in fields.items():
        try:
            _validate({k: v})
        except LineRejected:
            dropped.append(k)
        else:
            kept[k] = v
    return kept, dropped


def _cap(v: Any, cuts: Cuts) -> Any:
    if type(v) is str:
        if len(v) <= MAX_STR // 4:  # cannot exceed the cap even at 4 bytes a character
            return v
        s, cut = cap_utf8(v, MAX_STR)
        cuts.truncations += cut
        return s
    if type(v) is dict:
        return {_cap(k, cuts): _cap(x, cuts) for k, x in v.items()}
    if type(v) is list:
        return [_cap(x, cuts) for x in v]
    return v


_SCALARS = (_S, _I, _B, _T, _N)
# The only fields whose values may be floats: top-level numbers (nested values are ints).
NUMBER_FIELDS = tuple(k for k, t in RECORD_FIELDS.items() if t == _N)


def ready_to_encode(out: dict[str, Any]) -> dict[str, Any]:
    """A line `prepare_line` returned (plus its chain fields), as canonical encoding takes
    it: what `canonical.prepare` does, without walking the line. The schema already
    checked every key and value, so only a float needs its stdlib spelling; this runs on
    every append, where the walk cost more than the two encodings it serves."""
    for k in NUMBER_FIELDS:
        v = out.get(k)
        if type(v) is float:
            out = {**out, k: msgspec.Raw(float.__repr__(v).encode("ascii"))}
    return out


# What msgspec decodes each kind of value into for `sealed_line_type`: types it encodes
# back in their canonical spelling, but a number, whose float msgspec spells otherwise.
_PROOF_TYPES: dict[str, Any] = {_S: str, _T: str, _I: int, _B: bool, _N: msgspec.Raw}


def _proof_struct(name: str, fields: dict[str, Any], required: tuple[str, ...] = ()) -> Any:
    return msgspec.defstruct(
        name,
        [(k, t) if k in required else (k, t | msgspec.UnsetType, msgspec.UNSET)
         for k, t in sorted(fields.items())],
        kw_only=True, forbid_unknown_fields=True, omit_defaults=True, gc=False)


def sealed_line_type() -> Any:
    """A msgspec type for the lines the writer seals (the envelope, `prepare_line`'s record
    fields, the chain fields), and no other, that verify's canonical proof decodes them
    into: members in sorted order, each of a type msgspec encodes in its canonical spelling,
    but a number, kept as its raw text (`NUMBER_FIELDS`) for the caller to prove; seq, prev
    and hash are required. (`canonical.proven` is the proof.)"""
    nested = {k: _proof_struct(f"_Sealed_{k}", {f: _PROOF_TYPES[t] for f, t in spec.items()})
              for k, spec in _NESTED.items()}
    kinds = {"models": GenericAlias(list, nested["models"]),
             "sessions": GenericAlias(list, nested["sessions"]),
             "tokens": nested["tokens"], "mismatch": nested["mismatch"],
             "errors": dict[str, int], **_PROOF_TYPES}
    fields = {k: kinds[t] for k, t in RECORD_FIELDS.items()}
    fields.update(v=int, seq=int, type=str, at=str, harness=str, run_id=int, prev=str, hash=str)
    return _proof_struct("_SealedLine", fields, required=("seq", "prev", "hash"))


def stored_text(s: str) -> str:
    """What a free-text field given `s` holds once written: `s` scrubbed of secrets, then
    cut to MAX_STR bytes on a character boundary, as `prepare_line` treats every such
    field. Readers compare with it to tell a value the ledger changed (logref.py)."""
    return cap_utf8(scrub_text(s)[0], MAX_STR)[0]


@functools.lru_cache(maxsize=4096)
def name_kept(name: str) -> bool:
    """Whether the ledger keeps the harness name `name` as it is: not a secret to the
    scrubber and within the string cap. Names repeat on every line: asked once each."""
    return len(name.encode("utf-8")) <= MAX_STR and scrub_text(name)[1] == 0


def _refuse(line: dict[str, Any], harness: str, run_id: int) -> LineRejected:
    """The precise error for a line the one-pass check below refused."""
    try:
        _validate(line)
    except LineRejected as exc:
        exc.harness, exc.run_id = harness, run_id
        return exc
    raise AssertionError("prepare_line refused a line that _validate accepts")


def prepare_line(line: dict[str, Any], now: int | None = None) -> tuple[dict[str, Any], Cuts]:
    """Validate, scrub and cap a run-ledger line; return the line to seal and what changed.

    The envelope's ``v`` is set to 1 and ``at`` defaults to now; ``seq`` and the chain
    fields are the writer's. ``log_pruned`` is never written: readers compute it.

    This is on every append's path, so it checks, copies and collects the strings to
    scrub in one pass; whatever that pass refuses, `_validate` explains.
    """
    if type(line) is not dict:
        raise LineRejected(f"a ledger line must be an object, got {type(line).__name__}")
    typ = line.get("type")
    if typ not in LINE_TYPES:
        raise LineRejected(f"unknown line type {_shown(typ)} (valid: {', '.join(LINE_TYPES)})")
    harness = line.get("harness")
    run_id = line.get("run_id")
    if type(harness) is not str or not harness or not _text(harness):
        raise LineRejected(f"harness must be a non-empty string, got {_shown(harness)}")
    if not name_kept(harness):
        # The name is the record's identity: redacted or cut, two harnesses would fold
        # into one record and a lookup by name would find neither. (Not shown: it may be
        # a secret.)
        raise LineRejected(f"harness name is over {MAX_STR} bytes or reads as a secret, so "
                           "the ledger could not keep it as it is: rename the harness")
    if type(run_id) is not int or run_id <= 0:
        raise LineRejected(f"run_id must be an integer ≥ 1, got {_shown(run_id)}",
                           harness=harness)
    if run_id > _INT_MAX:  # as every other integer of a line
        raise LineRejected(f"run_id must fit 64 bits (at most {_INT_MAX}), got "
                           f"{_shown(run_id)}", harness=harness)
    out: dict[str, Any] = {"v": SCHEMA_VERSION, "type": typ, "at": None, "harness": harness,
                           "run_id": run_id}
    texts: list[str] = []  # free-text fields: scrubbed and capped below
    nested = []
    for k, v in line.items():
        if v is None:
            continue
        t = RECORD_FIELDS.get(k)
        if t is _S:
            if type(v) is not str or not (v.isascii() or _text(v)):
                raise _refuse(line, harness, run_id)
            allowed = _ENUMS.get(k)
            if allowed is None:
                texts.append(k)
            elif v not in allowed:  # a listed word holds no secret and fits the cap
                raise _refuse(line, harness, run_id)
        elif t is _T:
            v = canon(v)
            if v is None:
                raise _refuse(line, harness, run_id)
        elif t is _I:
            if not _int64(v):
                raise _refuse(line, harness, run_id)
        elif t is None:
            if k not in ENVELOPE and k not in CHAIN:
                raise _refuse(line, harness, run_id)
            continue
        elif t not in _SCALARS:
            nested.append(k)
        elif not _VALID[t](v):
            raise _refuse(line, harness, run_id)
        if k != "log_pruned":
            out[k] = v
    if nested:
        try:
            _validate({k: line[k] for k in nested})  # the nested shapes: one explanation path
        except LineRejected as exc:
            exc.harness, exc.run_id = harness, run_id
            raise
    at = line.get("at")
    if at is None:
        at = format_ns(now if now is not None else now_ns())
    else:
        try:
            at = canon(at) or format_ns(parse_ns(at))  # the file is the UTC day of `at`
        except ValueError:
            raise LineRejected(f"at must be an RFC 3339 time, got {_shown(at)}", harness=harness,
                               run_id=run_id) from None
    out["at"] = at
    if typ in CLOSING and out.get("outcome") == "running":
        raise _refuse(line, harness, run_id)
    cuts = Cuts()
    # One scan of all the free text decides whether any of it needs the scrubber. Joined
    # by a newline: a fragment that must open a word (curl's `-u`) opens one at the start
    # of a field too, as it does in the field alone; a hit across two fields only costs
    # a scrub that finds nothing.
    if texts and might_hold_secret("\n".join([out[k] for k in texts])):
        for k in texts:
            out[k], n = scrub_text(out[k])
            cuts.redactions += n
    for k in texts:
        v = out[k]
        if len(v) > MAX_STR // 4:  # shorter cannot exceed the cap even at 4 bytes a character
            out[k], cut = cap_utf8(v, MAX_STR)
            cuts.truncations += cut
    if nested:
        _settle_nested(out, nested, cuts)
    return out, cuts


def _settle_nested(out: dict[str, Any], nested: list[str], cuts: Cuts) -> None:
    """Lists and maps cut to MAX_LIST entries first (a string in an entry that goes is no
    cut of its own), then every string scrubbed and capped; canonical `mismatch.at`."""
    for k in ("models", "sessions"):
        if k in out and len(out[k]) > MAX_LIST:
            out[k] = out[k][:MAX_LIST]
            cuts.truncations += 1
    for k in nested:
        if k == "errors":
            out[k] = _error_counts(out[k], cuts)
        else:
            v, n = scrub_value(out[k])
            cuts.redactions += n
            out[k] = _cap(v, cuts)
    if "mismatch" in out and "at" in out["mismatch"]:
        out["mismatch"] = {**out["mismatch"], "at": canon(out["mismatch"]["at"])}


def _error_counts(errors: dict[str, int], cuts: Cuts) -> dict[str, int]:
    """Error counts by class (REQ-4), scrubbed and capped: classes that come out as the
    same text add up, rather than one count replacing the other. Past MAX_LIST classes
    the most frequent are kept (the classes that explain the run), ties by name."""
    out: dict[str, int] = {}
    for cls, n in errors.items():
        c, r = scrub_text(cls)
        cuts.redactions += r
        c = _cap(c, cuts)
        total = out.get(c, 0) + n
        if not _int64(total):  # classes merged by the scrub or the cap: held to 64 bits
            total = _INT_MAX if total > 0 else _INT_MIN
            cuts.truncations += 1
        out[c] = total
    if len(out) > MAX_LIST:
        top = sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_LIST]
        out = dict(sorted(top))
        cuts.truncations += 1
    return out


# What sealing adds to a prepared line (seq, prev, hash and the newline), with room over.
_SEAL_BYTES = 200


def fit_line(out: dict[str, Any], cuts: Cuts, max_line: int) -> dict[str, Any]:
    """`out` cut until its sealed line fits `max_line` bytes: each field within its REQ-4
    cap can still add up past REQ-1's 16 KiB (16 models and 16 sessions of 256-byte
    strings), and a closed line refused for its size would leave its run open for good.
    The least telling values go first: the last session, the last model, the rarest error
    class, then the longest string, halved. Each step counts as a cut."""
    out = dict(out)
    while len(canonical(out)) + _SEAL_BYTES > max_line:
        if out.get("sessions"):
            out["sessions"] = out["sessions"][:-1]
        elif out.get("models"):
            out["models"] = out["models"][:-1]
        elif out.get("errors"):
            rarest = min(out["errors"].items(), key=lambda kv: (kv[1], kv[0]))[0]
            out["errors"] = {c: n for c, n in out["errors"].items() if c != rarest}
        else:
            longest = max((k for k in out if k in _CUTTABLE),
                          key=lambda k: len(out[k].encode()), default=None)
            if longest is None or len(out[longest].encode()) < 16:
                raise AssertionError("a line of short fields cannot exceed the line limit")
            out[longest] = cap_utf8(out[longest], len(out[longest].encode()) // 2)[0]
        cuts.truncations += 1
    return out
