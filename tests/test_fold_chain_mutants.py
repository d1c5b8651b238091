"""Tests from mutation-testing `ledger/fold.py` and `ledger/chain.py`.

The one test gap found: `line_verifies` must answer exactly False (not None) when a
line's object cannot be re-encoded (canonical JSON refuses NaN), and exactly True or
False on its other paths. The others pin two defects the pass found: a frozen record
thawed for a late line dated every field at its last line, and a non-ASCII `hash`
crashed the check of a line's hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ledger.chain import (
    ZERO_HASH,
    hash_of_line_bytes,
    line_verifies,
)
from harness.ledger.fold import Frozen, Record
from harness.timefmt import parse_ns
from ledgertools import (
    EDITED,
    Clock,
    OpenLedger,
    chain_hash,
    ref_canonical,
    seal,
    verify_json,
    write_day_file,
)

HARNESS = "mut"
RUN_ID = 4


def _line(seq: int, typ: str, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "type": typ, "at": f"2026-01-01T00:00:{seq:02d}Z",
            "harness": HARNESS, "run_id": RUN_ID, **fields}


def _fold(lines: list[dict[str, Any]], record: Record | None = None) -> Record:
    r = record if record is not None else Record(HARNESS, RUN_ID)
    for line in lines:
        r.apply(dict(line))
    return r


# -- fold: defects ----------------------------------------------------------------------------


def test_a_thawed_record_folds_a_late_line_like_the_live_record() -> None:
    """SPEC-0022 REQ-2: lines applied out of seq order fold as if in order. Seq 1 set the
    model, seq 3 closed the run; seq 2 (a newer model) arrives last. The live record takes
    seq 2's model; the same record frozen after seq 3 and thawed for seq 2 must too."""
    first = [_line(1, "opened", model="a"), _line(3, "closed", outcome="success")]
    late = _line(2, "updated", model="b")
    live = _fold([*first, late])
    assert live.fields == {"model": "b", "outcome": "success"}
    thawed = Frozen(_fold(first)).thaw()
    thawed.apply(dict(late))
    assert thawed.fields == {"model": "b", "outcome": "success"}


def test_a_ledger_booted_across_a_clock_step_back_folds_in_seq_order(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """The clock stepped back between seq 2 and seq 3: seq 1 and 3 lie in 2026-06-14's
    file, seq 2 in 2026-06-15's. The boot reads the files in day order, so seq 3 closes
    (freezes) the record before seq 2 arrives; `get` must still give seq 2's model."""
    d = tmp_path / "ledger"
    base = {"v": 1, "harness": HARNESS, "run_id": RUN_ID}
    l1, h1 = seal({**base, "type": "opened", "at": "2026-06-14T08:00:00.000000000Z",
                   "kind": "oneshot", "trigger": "schedule", "model": "a",
                   "started_at": "2026-06-14T08:00:00.000000000Z"}, 1, ZERO_HASH)
    l2, h2 = seal({**base, "type": "updated", "at": "2026-06-15T08:00:00.000000000Z",
                   "model": "b"}, 2, h1)
    l3, _h3 = seal({**base, "type": "closed", "at": "2026-06-14T09:00:00.000000000Z",
                    "outcome": "success"}, 3, h2)
    write_day_file(d / "2026-06-14.jsonl", [l1, l3])
    write_day_file(d / "2026-06-15.jsonl", [l2])
    assert verify_json(d)["ok"] is True
    led = open_ledger(d, clock=Clock(parse_ns("2026-06-15T12:00:00Z")))
    assert led.get(HARNESS, RUN_ID) == {
        "harness": HARNESS, "run_id": RUN_ID, "seq": 1, "kind": "oneshot", "model": "b",
        "started_at": "2026-06-14T08:00:00.000000000Z", "trigger": "schedule",
        "outcome": "success"}


# -- chain: defects ---------------------------------------------------------------------------


NON_ASCII = "\u00e9" * 64  # 64 characters, as line_verifies and verify's check require


def test_a_non_ascii_digest_matches_no_line() -> None:
    line = ('{"a":1,"hash":"' + NON_ASCII + '","z":2}').encode()
    try:
        got = hash_of_line_bytes(line, NON_ASCII)
        verified = line_verifies(line, {"a": 1, "hash": NON_ASCII, "z": 2})
    except UnicodeEncodeError as exc:
        raise AssertionError(f"raised {exc!r}") from exc
    assert (got, verified) == (False, False)


def test_verify_reports_a_non_ascii_hash_as_an_edit(tmp_path: Path) -> None:
    base = {"v": 1, "harness": HARNESS, "type": "decided", "outcome": "skipped",
            "reason": "overlap", "trigger": "schedule", "kind": "oneshot"}
    l1, h1 = seal({**base, "run_id": 1, "at": "2026-06-15T08:00:01Z"}, 1, ZERO_HASH)
    l2, h2 = seal({**base, "run_id": 2, "at": "2026-06-15T08:00:02Z"}, 2, h1)
    bad = l2.replace(f'"hash":"{h2}"'.encode(), f'"hash":"{NON_ASCII}"'.encode())
    assert bad != l2
    write_day_file(tmp_path / "2026-06-15.jsonl", [l1, bad])
    try:
        out = verify_json(tmp_path)
    except UnicodeEncodeError as exc:
        raise AssertionError(f"raised {exc!r}") from exc
    assert (out["ok"], out["seq"], out["reason"]) == (False, 2, EDITED)


# -- chain: line_verifies answers exactly True or False -------------------------------------


def _sealed(body: dict[str, Any]) -> tuple[bytes, str]:
    """(canonical line with its hash member, the hash) for a body without `hash`."""
    digest = chain_hash(body)
    return ref_canonical({**body, "hash": digest}), digest


def test_line_verifies_is_a_bool_on_every_path() -> None:
    line, digest = _sealed({"harness": "h", "seq": 1})
    obj = {"harness": "h", "seq": 1, "hash": digest}
    assert line_verifies(line, obj) is True  # the bytes as they lie
    loose = b'{"seq": 1, "harness": "h", "hash": "' + digest.encode() + b'"}'
    assert line_verifies(loose, obj) is True  # re-encoded
    assert line_verifies(line, {**obj, "hash": None}) is False
    assert line_verifies(line, {**obj, "hash": digest[:63]}) is False
    assert line_verifies(line, {**obj, "hash": digest + "0"}) is False
    assert line_verifies(loose, {**obj, "seq": 2}) is False  # re-encoded, and wrong
    nan = {**obj, "cost_usd": float("nan")}  # canonical JSON refuses it: ValueError
    assert line_verifies(b'{"cost_usd":NaN}', nan) is False

