"""`prepare_line` checks, copies and scrubs a line in one pass for speed. These properties
hold it to the plain two-pass composition of the schema's own parts (validate every field,
then scrub and cap every string): the same lines refused with the same message, and the
same output and counts for the rest, over random lines with wrong types, unknown fields,
secrets, long and non-ASCII text and nested values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ledger.errors import LineRejected
from harness.ledger.schema import (
    _ENUMS,
    _T,
    CHAIN,
    ENVELOPE,
    RECORD_FIELDS,
    Cuts,
    _cap,
    _settle_nested,
    _validate,
    prepare_line,
)
from harness.ledger.scrub import scrub_text, scrub_value
from harness.timefmt import canon, format_ns, parse_ns

NOW = parse_ns("2026-06-15T12:00:00Z")


def two_pass(line: dict[str, Any]) -> tuple[dict[str, Any], Cuts]:
    """The reference: validate everything, then build, then scrub and cap every string."""
    harness, run_id = line["harness"], line["run_id"]
    try:
        _validate(line)
    except LineRejected as exc:
        exc.harness, exc.run_id = harness, run_id
        raise
    at = line.get("at")
    at = format_ns(NOW) if at is None else canon(at)
    out: dict[str, Any] = {"v": 1, "type": line["type"], "at": at, "harness": harness,
                           "run_id": run_id}
    for k, v in line.items():
        if v is None or k in ENVELOPE or k in CHAIN or k == "log_pruned":
            continue
        out[k] = v
    cuts = Cuts()
    for k, v in out.items():
        if RECORD_FIELDS.get(k) == _T:
            out[k] = canon(v)
        elif type(v) is str:
            if k not in ("at", "type"):
                v, n = scrub_text(v)
                cuts.redactions += n
            out[k] = _cap(v, cuts)
        elif type(v) not in (int, bool, float):
            v, n = scrub_value(v)
            cuts.redactions += n
            out[k] = _cap(v, cuts)
    _settle_nested(out, cuts)
    return out, cuts


SECRETS = ["sk-ant-api03-" + "a" * 40, "Bearer abcdefghijklmnopqrstuvwxyz0123",
           "https://bob:hunter2hunter2@example.com/x", "ghp_" + "b" * 36, "token=s3cr3t-v4lue"]
text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="𝄞𝄞€é x", min_size=60, max_size=140),  # long and multi-byte: caps
    st.text(alphabet="𝄞", min_size=60, max_size=70),  # 4-byte characters across the cap
    st.sampled_from(SECRETS),
    st.builds(lambda a, s, b: f"{a} {s} {b}", st.text(max_size=10), st.sampled_from(SECRETS),
              st.text(max_size=10)),
)
stamp = st.one_of(st.just("2026-06-15T12:00:00.000000001Z"), st.just("2026-06-15T14:00:00+02:00"),
                  st.just("yesterday"), st.just("2026-02-30T00:00:00Z"))
scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(allow_nan=False,
                                                                               allow_infinity=False),
                   text, stamp)


def field_value(key: str) -> st.SearchStrategy[Any]:
    kind = RECORD_FIELDS[key]
    right: st.SearchStrategy[Any]
    if key in _ENUMS:
        right = st.sampled_from(_ENUMS[key] + ("bogus",))
    elif kind == "str":
        right = text
    elif kind == "int":
        right = st.integers(0, 10**6)
    elif kind == "bool":
        right = st.booleans()
    elif kind == "time":
        right = stamp
    elif kind == "number":
        right = st.one_of(st.integers(0, 100), st.floats(0, 10, allow_nan=False))
    elif kind == "tokens":
        right = st.dictionaries(st.sampled_from(["input", "output", "cache_read", "odd"]),
                                st.integers(0, 99), max_size=4)
    elif kind == "errors":
        right = st.dictionaries(text, st.integers(0, 9), max_size=20)
    elif kind == "models":
        right = st.lists(st.fixed_dictionaries({"model": text}, optional={
            "provider": text, "output_tokens": st.integers(0, 9)}), max_size=20)
    elif kind == "sessions":
        right = st.lists(st.fixed_dictionaries({"id": text}, optional={"adapter": text}),
                         max_size=20)
    else:  # mismatch
        right = st.fixed_dictionaries({"kind": text}, optional={"at": stamp, "served_model": text})
    return st.one_of(right, right, right, scalar)  # mostly right, sometimes any type


lines = st.builds(
    lambda typ, extra, fields: {"type": typ, "harness": "h", "run_id": 3, **extra, **fields},
    st.sampled_from(["opened", "closed", "updated", "decided"]),
    st.fixed_dictionaries({}, optional={"at": stamp, "seq": st.integers(), "hash": text,
                                        "prev": text, "bogus_field": text}),
    st.lists(st.sampled_from(sorted(RECORD_FIELDS)), max_size=8, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: field_value(k) for k in keys})),
)


def outcome(f: Any, line: dict[str, Any]) -> tuple[str, Any]:
    try:
        out, cuts = f(line)
    except LineRejected as exc:
        return "refused", (str(exc), exc.harness, exc.run_id)
    return "accepted", (out, cuts.redactions, cuts.truncations)


@settings(max_examples=600, deadline=None)
@given(lines)
def test_one_pass_prepare_agrees_with_the_two_pass_reference(line: dict[str, Any]) -> None:
    if "at" in line and canon(line["at"]) is None:
        with pytest.raises(LineRejected):
            prepare_line(line, NOW)
        return
    assert outcome(lambda x: prepare_line(x, NOW), line) == outcome(two_pass, line)


def test_the_reference_sees_what_the_properties_need() -> None:
    # The generator reaches both verdicts and both kinds of cut, or the property proves little.
    ok = {"type": "closed", "harness": "h", "run_id": 1, "reason": "x " + SECRETS[0],
          "model": "é" * 200, "outcome": "success"}
    kind, (out, redactions, truncations) = outcome(lambda x: prepare_line(x, NOW), ok)
    assert (kind, redactions, truncations) == ("accepted", 1, 1)
    assert len(out["model"].encode()) == 256 and "sk-ant" not in out["reason"]
    bad = {**ok, "outcome": "bogus"}
    assert outcome(lambda x: prepare_line(x, NOW), bad) == outcome(two_pass, bad)
    assert outcome(two_pass, bad)[0] == "refused"
