"""Control ops served from the run ledger and the run logs (SPEC-0022 REQ-15): `runs`,
`logs` and `pending`.

Owns turning a `runs` request into a `Query` and its answer, a `logs` request into
`logview.view_log`'s, and a `pending` request into the ledger's word on one run's lines
not yet durable. Invariants: every field is checked before the ledger or a log is
read, and a bad one is answered with ``bad_request`` naming the field (and, for outcomes
and triggers, listing the valid values); the ledger and the logs are only ever read on a
worker thread, so a disk scan never stalls the daemon's event loop; the `runs` answer is
always ``{"runs": [records newest first], "oldest_seq": seq or null}``, the `logs` answer
``{"name", "run_id", "path", "text", "cut_bytes", "shared"}`` with at most
``logview.SOCKET_CAP`` bytes of log in it, or ``not_found``/``pruned``; the `pending`
answer (``name``, ``run_id``) is ``{"stuck": reason or null}``: the reason, scrubbed, when
a line of that run waits in the writer's queue behind a failing (or hung) write or sync,
so a client waiting for the record can say why it does not come; null otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..config.model import Config
from ..ledger.query import MAX_LIMIT, Query, QueryError
from ..ledger.runledger import RunLedger
from ..ledger.scrub import scrub_text
from ..supervisor import logview
from ..supervisor.runner import resident_log_path
from ..timefmt import parse_ns
from .server import Handler, OpError

DEFAULT_LIMIT = 50
LEGACY_LIMIT = 20  # SPEC-0008's `runs NAME` default
_ENVELOPE = frozenset({"id", "op"})
_QUERY_FIELDS = frozenset({"names", "since", "until", "outcomes", "triggers", "limit",
                           "before_seq"})
_LEGACY_FIELDS = frozenset({"name", "limit"})


def _bad(message: str) -> OpError:
    return OpError("bad_request", message)


def _int(req: dict[str, Any], key: str) -> int | None:
    v = req.get(key)
    if v is None:
        return None
    # bool is an int in Python but never a count or a seq on the wire.
    if not isinstance(v, int) or isinstance(v, bool):
        raise _bad(f"{key} must be an integer, got {v!r}")
    return v


def _limit(req: dict[str, Any], default: int) -> int:
    v = _int(req, "limit")
    if v is None:
        return default
    if not 1 <= v <= MAX_LIMIT:
        raise _bad(f"limit must be between 1 and {MAX_LIMIT}, got {v}")
    return v


def _strings(req: dict[str, Any], key: str) -> tuple[str, ...]:
    v = req.get(key)
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise _bad(f"{key} must be a list of non-empty strings, got {v!r}"[:300])
    return tuple(dict.fromkeys(v))


def _time(req: dict[str, Any], key: str) -> int | None:
    v = req.get(key)
    if v is None:
        return None
    try:
        return parse_ns(v)
    except ValueError as exc:
        raise _bad(f"{key}: {exc}"[:300]) from None


def require_name(req: dict[str, Any]) -> str:
    """The request's `name`, a non-empty string; bad_request otherwise."""
    v = req.get("name")
    if not isinstance(v, str) or not v:
        raise _bad(f"name must be a non-empty string, got {v!r}"[:300])
    return v


def _only(req: dict[str, Any], allowed: frozenset[str]) -> set[str]:
    """The request's fields past the envelope; `bad_request` naming the first one outside
    `allowed`. Unknown fields are refused, not ignored: a filter this daemon does not know
    would otherwise be dropped silently and the caller would take the answer as filtered."""
    fields = set(req) - _ENVELOPE
    unknown = sorted(fields - allowed)
    if unknown:
        raise _bad(f"unknown field {unknown[0]!r} (valid: {', '.join(sorted(allowed))})"[:300])
    return fields


def _check_fields(req: dict[str, Any]) -> None:
    fields = _only(req, _QUERY_FIELDS | _LEGACY_FIELDS)
    if "name" in fields and not fields <= _LEGACY_FIELDS:
        extra = ", ".join(sorted(fields - _LEGACY_FIELDS))
        raise _bad(f"name is the single-harness form and takes only limit; got {extra} too"
                   " (use names with filters)")


def parse_runs_request(req: dict[str, Any]) -> Query:
    """The query a `runs` request asks for; OpError("bad_request", …) when it cannot."""
    _check_fields(req)
    if "name" in req:
        # SPEC-0008: that harness's newest records, with no time bound.
        return Query(names=(require_name(req),), limit=_limit(req, LEGACY_LIMIT))
    names = _strings(req, "names")
    outcomes = frozenset(_strings(req, "outcomes"))
    triggers = frozenset(_strings(req, "triggers"))
    since_ns = _time(req, "since")
    until_ns = _time(req, "until")
    limit = _limit(req, DEFAULT_LIMIT)
    before_seq = _int(req, "before_seq")
    if before_seq is not None and before_seq < 1:
        raise _bad(f"before_seq must be a positive seq, got {before_seq}")
    # Query owns the valid outcome and trigger sets; asking it one field at a time lets
    # the error name the field as well as list the valid values.
    try:
        Query(outcomes=outcomes)
    except QueryError as exc:
        raise _bad(f"outcomes: {exc}") from None
    try:
        Query(triggers=triggers)
    except QueryError as exc:
        raise _bad(f"triggers: {exc}") from None
    return Query(names=names, since_ns=since_ns, until_ns=until_ns, outcomes=outcomes,
                 triggers=triggers, limit=limit, before_seq=before_seq)


def runs_op(ledger: RunLedger) -> Handler:
    """The handler of the `runs` op, answering from `ledger`."""

    async def runs(req: dict[str, Any]) -> dict[str, Any]:
        q = parse_runs_request(req)
        # The ledger may fall back to scanning day files: keep that off the event loop.
        records, oldest = await asyncio.to_thread(ledger.query, q)
        return {"runs": records, "oldest_seq": oldest}

    return runs


_LOGS_FIELDS = frozenset({"name", "run", "lines"})


def _positive(req: dict[str, Any], key: str) -> int | None:
    v = _int(req, key)
    if v is not None and v < 1:
        raise _bad(f"{key} must be a positive integer, got {v}")
    return v


def _record_lookup(ledger: RunLedger) -> logview.Lookup:
    """(harness, run_id) → its record: from memory, else from the day files.

    The in-memory index drops old closed records, and a pruned log is usually an old
    run's, so a miss there is not yet an unknown run.
    """

    def lookup(name: str, run_id: int) -> dict[str, Any] | None:
        rec = ledger.get(name, run_id)
        if rec is not None:
            return rec
        records, _ = ledger.query(Query(names=(name,)))
        return next((r for r in records if r.get("run_id") == run_id), None)

    return lookup


def logs_op(config: Callable[[], Config], ledger: RunLedger, jobs_dir: str) -> Handler:
    """The handler of the `logs` op; `config` gives the config in force (it changes on
    reload), which says each harness's kind and keep_runs."""
    lookup = _record_lookup(ledger)

    async def logs(req: dict[str, Any]) -> dict[str, Any]:
        _only(req, _LOGS_FIELDS)
        name = require_name(req)
        run = _positive(req, "run")
        lines = _positive(req, "lines")
        cfg = config().harness.get(name)
        if cfg is None:
            raise OpError("not_found", f"no harness named {name!r}"[:300])
        try:
            view = await asyncio.to_thread(
                logview.view_log, name, cfg.kind, run=run, lines=lines, jobs_dir=jobs_dir,
                resident_log=resident_log_path(name), keep_runs=cfg.keep_runs,
                lookup=lookup, max_bytes=logview.SOCKET_CAP)
        except logview.LogError as exc:
            raise OpError(exc.code, exc.message) from None
        except OSError as exc:
            raise OpError("unavailable", f"cannot read {name}'s log: {exc}"[:300]) from None
        return view.to_json()

    return logs


_PENDING_FIELDS = frozenset({"name", "run_id"})


def pending_op(ledger: RunLedger) -> Handler:
    """The handler of the `pending` op, answering from `ledger`'s writer."""

    async def pending(req: dict[str, Any]) -> dict[str, Any]:
        _only(req, _PENDING_FIELDS)
        name = require_name(req)
        run_id = _positive(req, "run_id")
        if run_id is None:
            raise _bad("run_id is required")
        # No disk is read: a look at the writer's queue under its state lock, which is
        # never held across I/O, so it is answered on the loop.
        why = ledger.stuck(name, run_id)
        # A ledger error is scrubbed where it is made; scrubbed again here, as the
        # server scrubs every error message, since this one travels as data.
        return {"stuck": scrub_text(why)[0] if why is not None else None}

    return pending
