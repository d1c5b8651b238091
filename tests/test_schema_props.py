"""`prepare_line` checks, copies and scrubs a line in one pass for speed. These properties
hold it to the plain two-pass composition of the schema's own parts (validate every field,
then scrub and cap every string): the same lines refused with the same message, and the
same output and counts for the rest, over random lines with wrong types, unknown fields,
secrets, long and non-ASCII text and nested values."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ledger.chain import seal_line
from harness.ledger.errors import LineRejected
from harness.ledger.logref import as_written, log_file
from harness.ledger.schema import (
    _ENUMS,
    _T,
    CHAIN,
    COST_SOURCES,
    ENVELOPE,
    FAILURE_OUTCOMES,
    KINDS,
    LINE_TYPES,
    OUTCOMES,
    RECORD_FIELDS,
    TRIGGERS,
    Cuts,
    _cap,
    _settle_nested,
    _validate,
    fit_line,
    prepare_line,
    ready_to_encode,
    stored_text,
)
from harness.ledger.scrub import scrub_text
from harness.paths import as_text
from harness.timefmt import canon, format_ns, now_ns, parse_ns

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
    nested = []
    for k, v in out.items():
        if RECORD_FIELDS.get(k) == _T:
            out[k] = canon(v)
        elif type(v) is str:
            if k not in ("at", "type"):
                v, n = scrub_text(v)
                cuts.redactions += n
            out[k] = _cap(v, cuts)
        elif type(v) not in (int, bool, float):
            nested.append(k)  # cut to 16 entries, then scrubbed and capped
    _settle_nested(out, nested, cuts)
    return out, cuts


SECRETS = ["sk-ant-api03-" + "a" * 40, "Bearer abcdefghijklmnopqrstuvwxyz0123",
           "https://bob:hunter2hunter2@example.com/x", "ghp_" + "b" * 36, "token=s3cr3t-v4lue",
           # Forms whose trigger must open a word: a field may open with them.
           "-u alice:hunter2hunter2", "--user alice:hunter2hunter2",
           "--password hunter2hunter2"]
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


# Paths as a deep state dir or a long name makes them: past the cap, multi-byte, with a
# secret in a directory's name, or exactly at the edges of what a cut leaves.
log_paths = st.one_of(
    text,
    st.builds(lambda a, b: f"/{a}/harness/jobs/{b}/7.log", st.text(max_size=300),
              st.text(max_size=60)),
    st.builds(lambda a, s, b: f"/{a}/{s}/harness/logs/{b}.log", st.text(max_size=200),
              st.sampled_from(SECRETS), st.text(max_size=20)),
    st.integers(248, 260).map(lambda n: "/" + "p" * (n - 1)),
    st.integers(248, 260).map(lambda n: "/" + "p" * (n - 3) + "é"),
)


@settings(max_examples=600, deadline=None)
@given(log_paths)
def test_stored_text_is_what_a_free_text_field_holds_and_as_written_never_lies(
        path: str) -> None:
    """logref.py finds a cut log by comparing `stored_text` of its DESIGN §2 path with
    the field, and takes a field as the path itself when `as_written` says the ledger
    cannot have changed it: both must match what `prepare_line` really writes."""
    out, _cuts = prepare_line({"type": "opened", "harness": "h", "run_id": 7, "log": path},
                              NOW)
    assert out["log"] == stored_text(path)
    if as_written(out["log"]):
        assert out["log"] == path


def test_as_written_draws_the_line_where_a_cut_can_end() -> None:
    # A cut keeps 253 to 256 bytes: up to 252 a value was never cut, from 253 it may be.
    assert [as_written("/" + "p" * (n - 1)) for n in (252, 253, 256)] == [True, False, False]
    assert as_written("/x/password=[REDACTED]") is False
    assert stored_text("/s/password=hunter2hunter2/harness/jobs/j/1.log") == (
        "/s/password=[REDACTED]")
    assert stored_text("/" + "p" * 300) == "/" + "p" * 255
    # A byte a path holds that is not UTF-8 is spelled \xNN: such a field may be a
    # spelling, never the path as written, and the layout decides which file it names.
    latin = os.fsdecode(b"/st\xe9t\xff/harness/jobs/j/1.log")
    assert as_text(latin) == "/st\\xe9t\\xff/harness/jobs/j/1.log"
    assert as_text("/état/1.log") == "/état/1.log"
    assert as_written(as_text(latin)) is False
    state = os.fsdecode(b"/st\xe9t\xff/harness")
    rec = {"harness": "j", "run_id": 1, "kind": "oneshot", "log": as_text(latin)}
    assert log_file(rec, state) == latin
    # Under another state dir (this one moved to a UTF-8 name), the layout's place there.
    assert log_file(rec, "/elsewhere/harness") == "/elsewhere/harness/jobs/j/1.log"


def test_a_log_written_under_another_state_dir_is_its_place_under_this_one() -> None:
    """Every log is at its DESIGN §2 place under the state dir that wrote it; a state dir
    moved or copied keeps the old absolute paths in its records, and the log is the one
    at that place under the state dir holding the ledger now, whether or not the old
    path still names a file. A field that is no layout place of its own run stays the
    path written; a cut one written elsewhere cannot be told of."""
    here = "/new/home/harness"
    cases = [
        ("oneshot", "/old/harness/jobs/j/7.log", "/new/home/harness/jobs/j/7.log"),
        (None, "/old/harness/jobs/j/7.log", "/new/home/harness/jobs/j/7.log"),
        ("resident", "/old/harness/logs/j.log", "/new/home/harness/logs/j.log"),
        (None, "/old/harness/logs/j.log", "/new/home/harness/logs/j.log"),
        ("oneshot", here + "/jobs/j/7.log", here + "/jobs/j/7.log"),
        # Not its own run's place: another run, another harness, another kind's place.
        ("oneshot", "/old/harness/jobs/j/8.log", "/old/harness/jobs/j/8.log"),
        ("oneshot", "/old/harness/jobs/k/7.log", "/old/harness/jobs/k/7.log"),
        ("oneshot", "/old/harness/jobs/xj/7.log", "/old/harness/jobs/xj/7.log"),
        ("oneshot", "/old/harness/logs/j.log", "/old/harness/logs/j.log"),
        ("resident", "/old/harness/jobs/j/7.log", "/old/harness/jobs/j/7.log"),
        ("oneshot", "/somewhere/j-7.log", "/somewhere/j-7.log"),
        # Cut under another state dir: its end, the place, is gone.
        ("oneshot", stored_text("/" + "o" * 250 + "/harness/jobs/j/7.log"), None),
    ]
    for kind, stored, want in cases:
        rec = {"harness": "j", "run_id": 7, "kind": kind, "log": stored}
        assert log_file(rec, here) == want, (kind, stored)
        # No state dir known: nothing to find it under, the field as written or nothing.
        assert log_file(rec, None) == (stored if as_written(stored) else None)
        # A run the daemon started now, asked about from whatever state dir: nothing
        # moved, and a path kept as written is its own.
        assert log_file(rec, here, live=True) == (stored if as_written(stored) else want)


@settings(max_examples=400, deadline=None)
@given(lines)
def test_sealing_a_prepared_line_unwalked_gives_the_standard_bytes(line: dict[str, Any]) -> None:
    # The run ledger seals without `canonical.prepare`'s walk (`ready_to_encode`): for
    # every line the schema accepts, the bytes and hash must be the standard library's.
    try:
        out, _ = prepare_line(line, NOW)
    except LineRejected:
        return
    data, digest = seal_line(dict(out), 7, "ab" * 32, ready_to_encode)
    want = {**out, "seq": 7, "prev": "ab" * 32}
    assert digest == hashlib.sha256(stdlib_bytes(want)).hexdigest()
    assert data == stdlib_bytes({**want, "hash": digest})


def test_an_unwalked_seal_spells_floats_as_the_standard_library_does() -> None:
    out, _ = prepare_line({"type": "closed", "harness": "h", "run_id": 1, "cost_usd": 1e-05},
                          NOW)
    data, _ = seal_line(out, 1, "0" * 64, ready_to_encode)
    assert b'"cost_usd":1e-05,' in data  # msgspec alone would write 0.00001


def stdlib_bytes(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


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


# -- exact values, independent of the schema's own helpers ---------------------------------
# The property above reuses `_cap`, `_settle_nested` and `_validate`, so it cannot see a
# change to them; these pin REQ-1/REQ-4/REQ-5 directly.

REQ5_OUTCOMES = {"running", "success", "failed", "timed_out", "skipped", "replaced", "missed",
                 "cancelled", "interrupted", "budget_exceeded", "quota_parked",
                 "model_mismatch", "model_unattested", "stalled"}


def prep(**fields: Any) -> tuple[dict[str, Any], Cuts]:
    return prepare_line({"type": "closed", "harness": "h", "run_id": 1, **fields}, NOW)


def test_vocabularies_are_the_specs() -> None:
    assert set(OUTCOMES) == REQ5_OUTCOMES and len(OUTCOMES) == len(REQ5_OUTCOMES)
    assert set(FAILURE_OUTCOMES) == {"failed", "timed_out", "budget_exceeded", "model_mismatch",
                                "model_unattested"}
    assert set(TRIGGERS) == {"schedule", "manual", "catch_up", "channel", "webhook",
                             "autostart", "restart", "release", "lease"}
    assert set(LINE_TYPES) == {"opened", "updated", "closed", "decided"}
    assert set(KINDS) == {"oneshot", "resident"}
    assert set(COST_SOURCES) == {"recorded", "priced", "unknown"}


@pytest.mark.parametrize("value", sorted(REQ5_OUTCOMES))
def test_every_req5_outcome_is_accepted(value: str) -> None:
    typ = "opened" if value == "running" else "closed"
    out, cuts = prepare_line({"type": typ, "harness": "h", "run_id": 1, "outcome": value}, NOW)
    assert out["outcome"] == value and (cuts.redactions, cuts.truncations) == (0, 0)


@pytest.mark.parametrize("typ", ["closed", "decided"])
def test_a_line_that_ends_a_run_cannot_say_it_is_running(typ: str) -> None:
    """Such a record would read in flight for ever: no reconciliation closes it."""
    with pytest.raises(LineRejected) as info:
        prepare_line({"type": typ, "harness": "h", "run_id": 4, "outcome": "running"}, NOW)
    assert str(info.value) == (f"a {typ} line ends its run: its outcome cannot be 'running'"
                               " (harness=h run_id=4)")
    for ok in ("opened", "updated"):
        out, _ = prepare_line({"type": ok, "harness": "h", "run_id": 4, "outcome": "running"},
                              NOW)
        assert out["outcome"] == "running"


@pytest.mark.parametrize("typ", ["opened", "updated", "closed", "decided"])
def test_every_line_type_is_accepted_and_the_envelope_is_exact(typ: str) -> None:
    out, cuts = prepare_line({"type": typ, "harness": "h", "run_id": 9, "seq": 4,
                              "prev": "p", "hash": "x", "v": 7}, NOW)
    assert out == {"v": 1, "type": typ, "at": "2026-06-15T12:00:00.000000000Z",
                   "harness": "h", "run_id": 9}
    assert (cuts.redactions, cuts.truncations) == (0, 0)


T = "2026-06-15T12:00:00.000000000Z"
# Each REQ-4 field (and `imported`) with a value of its type and one of a wrong type.
FIELD_CASES: list[tuple[str, Any, Any]] = [
    ("kind", "resident", 1), ("trigger", "lease", 1), ("source", "src", 1),
    ("event_id", "e1", 1), ("todo_id", "t1", 1), ("attempt", 2, "2"),
    ("started_at", T, "noon"), ("ended_at", T, 5), ("duration_ms", 0, 1.5),
    ("exit_code", -1, "1"), ("outcome", "failed", 1), ("reason", "spawn", 1),
    ("model", "m", 1), ("models", [{"model": "m", "provider": "p", "output_tokens": 3}], {}),
    ("tokens", {"input": 1, "output": 2, "cache_read": 3, "cache_write": 4}, [1]),
    ("cost_usd", 0.25, "0.25"), ("cost_source", "priced", 1), ("model_calls", 3, True),
    ("errors", {"rate_limit": 2}, {"rate_limit": "2"}), ("usage_complete", False, 0),
    ("sessions", [{"id": "s", "adapter": "codex", "trace_id": "tr"}], "s"),
    ("trace_url", "https://t/x", 1), ("log", "/l/1.log", 1), ("override", True, "yes"),
    ("mismatch", {"kind": "model", "served_model": "a", "served_provider": "b", "at": T},
     "model"),
    ("window", T, 1), ("first_window", T, 1), ("windows", 3, 3.0), ("coalesced", 1, "1"),
    ("missing_path", "meta.todo", 1), ("imported", True, 1),
]


def test_field_cases_cover_the_schema() -> None:
    assert {k for k, _, _ in FIELD_CASES} | {"log_pruned"} == set(RECORD_FIELDS)


@pytest.mark.parametrize("key,good,bad", FIELD_CASES, ids=[c[0] for c in FIELD_CASES])
def test_each_field_takes_its_type_and_refuses_another(key: str, good: Any, bad: Any) -> None:
    out, cuts = prep(**{key: good})
    assert out[key] == good and type(out[key]) is type(good)
    assert (cuts.redactions, cuts.truncations) == (0, 0)
    with pytest.raises(LineRejected) as info:
        prep(**{key: bad})
    assert (info.value.harness, info.value.run_id) == ("h", 1)
    assert repr(key) in str(info.value) or f"{key}." in str(info.value)


def test_log_pruned_is_accepted_but_never_written() -> None:
    out, _ = prep(log_pruned=True, log="/x.log")
    assert out == {"v": 1, "type": "closed", "at": T, "harness": "h", "run_id": 1,
                   "log": "/x.log"}


@pytest.mark.parametrize("n,want", [(255, 255), (256, 256), (257, 256), (1000, 256)])
def test_top_level_strings_cap_at_exactly_256_bytes(n: int, want: int) -> None:
    out, cuts = prep(reason="r" * n)
    assert out["reason"] == "r" * want
    assert cuts.truncations == (1 if n > 256 else 0)


def test_the_cap_cuts_on_a_character_boundary() -> None:
    out, cuts = prep(todo_id="a" + "é" * 200)  # 401 bytes: 255 is the last whole character
    assert out["todo_id"] == "a" + "é" * 127
    assert cuts.truncations == 1


def test_nested_strings_are_capped_and_counted() -> None:
    long = "x" * 300
    out, cuts = prep(
        models=[{"model": long, "provider": "p"}],
        sessions=[{"id": long, "adapter": long}],
        errors={long: 1},
        mismatch={"kind": "model", "served_model": long},
    )
    cut = "x" * 256
    assert out["models"] == [{"model": cut, "provider": "p"}]
    assert out["sessions"] == [{"id": cut, "adapter": cut}]
    assert out["errors"] == {cut: 1}
    assert out["mismatch"] == {"kind": "model", "served_model": cut}
    assert (cuts.redactions, cuts.truncations) == (0, 5)


@pytest.mark.parametrize("n", [15, 16, 17, 40])
def test_models_sessions_and_errors_cap_at_16_entries(n: int) -> None:
    models = [{"model": f"m{i}"} for i in range(n)]
    sessions = [{"id": f"s{i}"} for i in range(n)]
    errors = {f"c{i:02d}": i for i in range(n)}
    out, cuts = prep(models=models, sessions=sessions, errors=errors)
    keep = min(n, 16)
    assert out["models"] == models[:keep]
    assert out["sessions"] == sessions[:keep]
    # The 16 most frequent classes (here the last 16), in name order.
    assert out["errors"] == {f"c{i:02d}": i for i in range(n - keep, n)}
    assert cuts.truncations == (3 if n > 16 else 0)


def test_errors_keep_the_16_most_frequent_classes_in_name_order() -> None:
    """The classes that explain the run; a tie goes to the name that sorts first."""
    errors = {f"c{i:02d}": 1 if i % 2 else 5 for i in reversed(range(40))}
    out, _ = prep(errors=errors)
    assert out["errors"] == {f"c{i:02d}": 5 for i in range(0, 32, 2)}
    assert list(out["errors"]) == sorted(out["errors"])


def test_secrets_in_nested_values_are_redacted_and_counted() -> None:
    key = "sk-ant-api03-" + "a" * 40
    out, cuts = prep(
        models=[{"model": "m", "provider": f"p {key}"}],
        sessions=[{"id": "s", "trace_id": f"token={key}"}],
        errors={f"auth {key}": 1},
        mismatch={"kind": "model", "served_model": key},
        reason=f"why {key}",
    )
    assert out["models"] == [{"model": "m", "provider": "p [REDACTED]"}]
    assert out["sessions"] == [{"id": "s", "trace_id": "token=[REDACTED]"}]
    assert out["errors"] == {"auth [REDACTED]": 1}
    assert out["mismatch"] == {"kind": "model", "served_model": "[REDACTED]"}
    assert out["reason"] == "why [REDACTED]"
    assert (cuts.redactions, cuts.truncations) == (5, 0)


def test_a_secret_is_redacted_before_the_cap_cuts() -> None:
    key = "sk-ant-api03-" + "a" * 40
    out, cuts = prep(reason="r" * 240 + " " + key)
    assert out["reason"] == "r" * 240 + " [REDACTED]"
    assert (cuts.redactions, cuts.truncations) == (1, 0)


NAME_REFUSED = ("harness name is over 256 bytes or reads as a secret, so the ledger could not "
                "keep it as it is: rename the harness")


@pytest.mark.parametrize("name", ["h" * 257, "é" * 129, "sk-nightly2025build0123",
                                  "h sk-ant-api03-" + "a" * 40])
def test_a_harness_name_is_kept_as_it_is_or_refused(name: str) -> None:
    """The name is the record's identity: redacted or cut, two harnesses would fold into
    one record, and a lookup by the name would find neither. The refusal never quotes
    it (it may be a secret)."""
    with pytest.raises(LineRejected) as info:
        prepare_line({"type": "opened", "harness": name, "run_id": 1}, NOW)
    assert str(info.value).startswith(NAME_REFUSED)
    assert name not in str(info.value) and "a" * 40 not in str(info.value)
    for kept in ("h" * 256, "é" * 128, "nightly-2025.build_0123"):
        out, cuts = prepare_line({"type": "opened", "harness": kept, "run_id": 1}, NOW)
        assert out["harness"] == kept and (cuts.redactions, cuts.truncations) == (0, 0)


def test_run_id_is_held_to_64_bits_like_every_integer() -> None:
    out, _ = prepare_line({"type": "opened", "harness": "h", "run_id": 2**63 - 1}, NOW)
    assert out["run_id"] == 2**63 - 1
    for big in (2**63, 10**5000):
        with pytest.raises(LineRejected, match=r"^run_id must fit 64 bits \(at most "
                                               r"9223372036854775807\), got "):
            prepare_line({"type": "opened", "harness": "h", "run_id": big}, NOW)


def test_error_counts_merged_by_the_scrub_are_held_to_64_bits() -> None:
    """Two classes that scrub to the same text add up; past 64 bits the count stays at
    the most a reader holds, and that is a cut."""
    k1, k2 = "sk-ant-api03-" + "a" * 40, "sk-ant-api03-" + "b" * 40
    out, cuts = prep(errors={k1: 2**63 - 1, k2: 2**63 - 1, "x": 1})
    assert out["errors"] == {"[REDACTED]": 2**63 - 1, "x": 1}
    assert (cuts.redactions, cuts.truncations) == (2, 1)
    out, cuts = prep(errors={k1: -(2**63), k2: -1})
    assert out["errors"] == {"[REDACTED]": -(2**63)}
    assert cuts.truncations == 1


def test_times_are_stored_canonical() -> None:
    berlin = "2026-06-15T14:00:00+02:00"
    out, _ = prep(started_at=berlin, window=berlin, at=berlin,
                  mismatch={"kind": "provider", "at": berlin})
    assert out["started_at"] == out["window"] == out["at"] == T
    assert out["mismatch"] == {"kind": "provider", "at": T}
    out, _ = prep(mismatch={"kind": "provider", "served_provider": "p"})
    assert out["mismatch"] == {"kind": "provider", "served_provider": "p"}


def test_at_defaults_to_now_and_a_bad_at_is_refused() -> None:
    assert prep()[0]["at"] == T
    with pytest.raises(LineRejected, match="at must be an RFC 3339 time"):
        prep(at="2026-02-30T00:00:00Z")


@pytest.mark.parametrize("line,message", [
    ({"type": "opened", "harness": "", "run_id": 1}, "harness must be a non-empty string"),
    ({"type": "opened", "harness": "\ud800", "run_id": 1}, "harness must be a non-empty"),
    ({"type": "opened", "harness": 5, "run_id": 1}, "harness must be a non-empty"),
    ({"type": "opened", "harness": "h", "run_id": 0}, "run_id must be an integer ≥ 1"),
    ({"type": "opened", "harness": "h", "run_id": True}, "run_id must be an integer ≥ 1"),
    ({"type": "opened", "harness": "h", "run_id": "1"}, "run_id must be an integer ≥ 1"),
    ({"type": "open", "harness": "h", "run_id": 1}, "unknown line type 'open'"),
    ({"harness": "h", "run_id": 1}, "unknown line type None"),
])
def test_the_envelope_is_checked(line: dict[str, Any], message: str) -> None:
    with pytest.raises(LineRejected, match=message):
        prepare_line(line, NOW)


def test_run_id_one_is_the_smallest_accepted() -> None:
    assert prepare_line({"type": "opened", "harness": "h", "run_id": 1}, NOW)[0]["run_id"] == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "1"])
def test_cost_usd_must_be_a_finite_number(bad: Any) -> None:
    with pytest.raises(LineRejected, match="field 'cost_usd' must be a finite number"):
        prep(cost_usd=bad)


@pytest.mark.parametrize("key", ["reason", "todo_id", "model"])
def test_a_lone_surrogate_string_is_refused(key: str) -> None:
    with pytest.raises(LineRejected, match=f"field {key!r} must be a string"):
        prep(**{key: "a\udc80b" + "é"})


def test_a_non_utf8_error_class_is_refused() -> None:
    with pytest.raises(LineRejected, match="field 'errors' must map class names to counts"):
        prep(errors={"\ud800": 1})


@pytest.mark.parametrize("key,value,message", [
    ("tokens", {"input": 1, "odd": 2}, "field tokens.odd is not part of the run ledger schema"),
    ("models", [{"model": "m", "cost": 1}], "field models.cost is not part"),
    ("sessions", [{"id": "s", "pid": 1}], "field sessions.pid is not part"),
    ("mismatch", {"kind": "model", "extra": "x"}, "field mismatch.extra is not part"),
    ("tokens", {"input": "1"}, "field 'tokens.input' must be an integer"),
    ("models", [{"model": 1}], "field 'models.model' must be a string"),
    ("models", [{"output_tokens": 1.0}], "field 'models.output_tokens' must be an integer"),
    ("sessions", [{"trace_id": None}], "field 'sessions.trace_id' must be a string"),
    ("mismatch", {"at": "noon"}, "field 'mismatch.at' must be an RFC 3339 time"),
    ("models", ["m"], "field 'models' must be an object"),
    ("models", {"model": "m"}, "field 'models' must be a list"),
    ("errors", {"c": True}, "field 'errors' must map class names to counts"),
    ("errors", [1], "field 'errors' must map class names to counts"),
    ("errors", {1: 2}, "field 'errors' must map class names to counts"),
    ("bogus", 1, "field 'bogus' is not part of the run ledger schema"),
])
def test_nested_shapes_are_checked(key: str, value: Any, message: str) -> None:
    with pytest.raises(LineRejected, match=message) as info:
        prep(**{key: value})
    assert (info.value.harness, info.value.run_id) == ("h", 1)


def test_a_line_must_be_an_object() -> None:
    with pytest.raises(LineRejected, match="a ledger line must be an object, got list"):
        prepare_line([("type", "opened")], NOW)  # type: ignore[arg-type]


def test_without_now_at_is_the_current_time() -> None:
    before = now_ns()
    out, _ = prepare_line({"type": "opened", "harness": "h", "run_id": 1})
    after = now_ns()
    assert before <= parse_ns(out["at"]) <= after
    assert out["at"] == format_ns(parse_ns(out["at"]))


@pytest.mark.parametrize("key,value", [("kind", "daemon"), ("cost_source", "guessed"),
                                       ("outcome", "succeeded")])
def test_enumerated_fields_refuse_other_words(key: str, value: str) -> None:
    with pytest.raises(LineRejected, match=f"field {key!r} has unknown value {value!r}"):
        prep(**{key: value})


@pytest.mark.parametrize("value", [0, 3, 10**6, 0.0, 2.5])
def test_cost_usd_takes_integers_and_floats(value: float) -> None:
    out, _ = prep(cost_usd=value)
    assert out["cost_usd"] == value and type(out["cost_usd"]) is type(value)


@pytest.mark.parametrize("key,value,want", [
    ("attempt", "2", r"must be an integer \(64-bit\), got '2'"),
    ("override", 1, "must be a boolean, got 1"),
    ("window", "noon", "must be an RFC 3339 time, got 'noon'"),
    ("cost_usd", "1", "must be a finite number, got '1'"),
    ("source", 1, r"must be a string \(valid UTF-8\), got 1"),
])
def test_a_refusal_names_the_type_wanted(key: str, value: Any, want: str) -> None:
    with pytest.raises(LineRejected, match=f"field {key!r} {want}"):
        prep(**{key: value})


@pytest.mark.parametrize("n", [64, 65, 70, 85, 86])
def test_four_byte_characters_are_capped_from_the_65th(n: int) -> None:
    clef = "\U0001d11e"  # 4 bytes in UTF-8
    out, cuts = prep(reason=clef * n, models=[{"model": clef * n}])
    keep = clef * min(n, 64)
    assert out["reason"] == keep
    assert out["models"] == [{"model": keep}]
    assert cuts.truncations == (2 if n > 64 else 0)


# -- fit_line: a line within every cap but past the line limit -----------------------------
# Sizes are measured with plain json (canonical JSON of these values is the same bytes), so
# each limit below is the exact size of the expected result: one byte less cuts once more.

SEAL = 200  # what sealing adds to a prepared line, per schema._SEAL_BYTES


def line_size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()) + SEAL


def base(**fields: Any) -> dict[str, Any]:
    return {"v": 1, "type": "closed", "at": T, "harness": "h", "run_id": 1, **fields}


def test_fit_line_leaves_a_line_that_fits_alone_and_never_edits_its_argument() -> None:
    out = base(sessions=[{"id": "s"}], reason="r" * 100)
    cuts = Cuts(redactions=2, truncations=3)
    fitted = fit_line(out, cuts, line_size(out))  # exactly at the limit: it fits
    assert fitted == out and fitted is not out
    assert (cuts.redactions, cuts.truncations) == (2, 3)
    fitted = fit_line(out, cuts, line_size(out) - 1)
    assert fitted == base(sessions=[], reason="r" * 100) and cuts.truncations == 4
    assert out == base(sessions=[{"id": "s"}], reason="r" * 100)  # the argument is intact


def test_fit_line_cuts_the_last_sessions_then_the_last_models_then_the_rarest_errors() -> None:
    sessions = [{"id": f"s{i}"} for i in range(3)]
    models = [{"model": f"m{i}"} for i in range(3)]
    errors = {"b": 1, "a": 1, "c": 5, "d": 2}
    out = base(sessions=sessions, models=models, errors=errors, reason="r" * 200)
    steps = [
        base(sessions=sessions[:2], models=models, errors=errors, reason="r" * 200),
        base(sessions=sessions[:1], models=models, errors=errors, reason="r" * 200),
        base(sessions=[], models=models, errors=errors, reason="r" * 200),
        base(sessions=[], models=models[:2], errors=errors, reason="r" * 200),
        base(sessions=[], models=models[:1], errors=errors, reason="r" * 200),
        base(sessions=[], models=[], errors=errors, reason="r" * 200),
        # The rarest class goes first; of two as rare, the one that sorts first.
        base(sessions=[], models=[], errors={"b": 1, "c": 5, "d": 2}, reason="r" * 200),
        base(sessions=[], models=[], errors={"c": 5, "d": 2}, reason="r" * 200),
        base(sessions=[], models=[], errors={"c": 5}, reason="r" * 200),
        base(sessions=[], models=[], errors={}, reason="r" * 200),
        base(sessions=[], models=[], errors={}, reason="r" * 100),
    ]
    for n, want in enumerate(steps, 1):
        cuts = Cuts()
        assert fit_line(out, cuts, line_size(want)) == want, n
        assert (cuts.redactions, cuts.truncations) == (0, n)


def test_fit_line_halves_the_longest_free_text_and_nothing_else() -> None:
    # The harness, the times, the listed words and the trigger are never cut, however long.
    keep = {"harness": "h" * 256, "trigger": "t" * 256, "outcome": "success",
            "started_at": T, "model": "m" * 60}
    out = base(**keep, reason="r" * 200, log="l" * 120)
    steps = [
        base(**keep, reason="r" * 100, log="l" * 120),
        base(**keep, reason="r" * 100, log="l" * 60),
        base(**keep, reason="r" * 50, log="l" * 60),
        # model, log and reason tie at their longest: the first in the line's order goes.
        base(**keep | {"model": "m" * 30}, reason="r" * 50, log="l" * 60),
    ]
    for n, want in enumerate(steps, 1):
        cuts = Cuts()
        assert fit_line(out, cuts, line_size(want)) == want, n
        assert cuts.truncations == n


def test_fit_line_halves_bytes_on_a_character_boundary() -> None:
    out = base(reason="é" * 50)  # 100 bytes: half is 50 bytes, 25 characters
    want = base(reason="é" * 25)
    cuts = Cuts()
    assert fit_line(out, cuts, line_size(want)) == want and cuts.truncations == 1
    out = base(reason="a" + "é" * 50)  # 101 bytes: 50 bytes end mid-character, so 49
    want = base(reason="a" + "é" * 24)
    assert fit_line(out, Cuts(), line_size(want)) == want


def test_fit_line_halves_a_string_of_16_bytes_but_not_one_of_15() -> None:
    out = base(reason="r" * 16)
    want = base(reason="r" * 8)
    cuts = Cuts()
    assert fit_line(out, cuts, line_size(want)) == want and cuts.truncations == 1
    short = base(reason="r" * 15)
    with pytest.raises(AssertionError, match="a line of short fields cannot exceed"):
        fit_line(short, Cuts(), line_size(short) - 1)


def test_fit_line_refuses_a_line_with_no_free_text_to_cut() -> None:
    out = base(harness="h" * 256, trigger="t" * 256)
    with pytest.raises(AssertionError, match="a line of short fields cannot exceed"):
        fit_line(out, Cuts(), line_size(out) - 1)


def test_fit_line_of_a_prepared_line_cuts_every_session_before_any_model() -> None:
    long = "x" * 256
    sessions = [{"id": f"{i:x}" + long[1:]} for i in range(16)]
    models = [{"model": f"{i:x}" + long[1:]} for i in range(16)]
    errors = {f"{i:x}" + long[1:]: i + 1 for i in range(16)}
    out, cuts = prep(sessions=sessions, models=models, errors=errors)
    assert (cuts.redactions, cuts.truncations) == (0, 0)
    want = {**out, "sessions": [], "models": models[:3]}  # the errors go only after them
    fitted = fit_line(out, cuts, line_size(want))
    assert fitted == want and cuts.truncations == 16 + 13


# -- error classes: counted per class after the scrub and the cap --------------------------


def test_error_classes_that_scrub_to_one_text_add_their_counts() -> None:
    out, cuts = prep(errors={"auth token=abc1": 2, "auth token=xyz2": 3, "other": 1})
    assert out["errors"] == {"auth token=[REDACTED]": 5, "other": 1}
    assert (cuts.redactions, cuts.truncations) == (2, 0)


def test_error_classes_that_cap_to_one_text_add_their_counts() -> None:
    stem = "e" * 256
    out, cuts = prep(errors={stem + "1": 4, stem + "2": 5, "x": 7})
    assert out["errors"] == {stem: 9, "x": 7}
    assert (cuts.redactions, cuts.truncations) == (0, 2)


def test_seventeen_error_classes_that_merge_to_sixteen_are_not_cut() -> None:
    errors = {f"auth token=v{i}": 1 for i in range(2)} | {f"k{i:02d}": i for i in range(15)}
    out, cuts = prep(errors=errors)
    assert out["errors"] == {"auth token=[REDACTED]": 2} | {f"k{i:02d}": i for i in range(15)}
    assert (cuts.redactions, cuts.truncations) == (2, 0)


@pytest.mark.parametrize("value", ["-u alice:hunter2hunter2", "--user alice:hunter2hunter2"])
@pytest.mark.parametrize("key", ["reason", "log", "trace_url", "todo_id"])
def test_a_curl_user_password_opening_a_field_is_redacted(key: str, value: str) -> None:
    """REQ-17. The one scan of a line's joined free text missed a `-u user:password` that
    opened a field other than the first: its trigger must open a word, and the joint
    before the field was no space. The field alone was always redacted."""
    want, n = scrub_text(value)
    assert (want, n) == (value.split(" ")[0] + " alice:[REDACTED]", 1)
    out, cuts = prepare_line({"type": "closed", "harness": "h", "run_id": 1, key: value}, NOW)
    assert (out[key], cuts.redactions) == (want, 1)


# A time that parses but has no UTC spelling within years 1-9999, or an integer too large
# for the ledger's readers (and past 4,300 digits for Python's own str()): a LineRejected
# naming the field, not an AssertionError or ValueError from deeper in.
@pytest.mark.parametrize("key,value,message", [
    ("started_at", "0001-01-01T00:00:00+01:00", "field 'started_at' must be an RFC 3339 time"),
    ("ended_at", "9999-12-31T23:59:59-01:00", "field 'ended_at' must be an RFC 3339 time"),
    ("mismatch", {"kind": "model", "at": "0001-01-01T00:00:00+01:00"},
     "field 'mismatch.at' must be an RFC 3339 time"),
    ("duration_ms", 2**63, "field 'duration_ms' must be an integer"),
    ("exit_code", -(2**63) - 1, "field 'exit_code' must be an integer"),
    ("cost_usd", 2**63, "field 'cost_usd' must be a finite number"),
    ("tokens", {"input": 10**4400}, "field 'tokens.input' must be an integer"),
    ("errors", {"E": 2**64}, "field 'errors' must map class names to counts"),
])
def test_values_past_what_the_ledger_holds_are_refused(key: str, value: Any,
                                                       message: str) -> None:
    with pytest.raises(LineRejected, match=message) as info:
        prep(**{key: value})
    assert len(str(info.value)) < 300  # the value is shown cut, never whole


@pytest.mark.parametrize("key", ["duration_ms", "exit_code", "attempt"])
def test_the_widest_integers_are_accepted(key: str) -> None:
    for v in (2**63 - 1, -(2**63)):
        assert prep(**{key: v})[0][key] == v


def test_a_refused_value_is_scrubbed_before_it_is_cut() -> None:
    """The message shows a refused value's first 80 characters: cut first, a token's
    head would be too short for the scrubber to know it, and reach the log."""
    token = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    with pytest.raises(LineRejected) as info:
        prep(attempt="x" * 55 + " " + token)
    assert "A1b2" not in str(info.value)
    assert "[REDACTED]" in str(info.value)
