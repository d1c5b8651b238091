"""Canonical JSON and the run ledger's hash chain (DESIGN.md §2, §4).

`canonical(obj)` must be byte-for-byte Python's
``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)`` as UTF-8, and refuse (``ValueError``) what that form cannot carry.
`cap_utf8` cuts a string to a byte budget on a character boundary. The chain's
known answers are hard-coded so a change of encoding cannot pass unnoticed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.ledger.canonical import (
    canonical,
    cap_utf8,
    numbers_proven,
    proof_decoder,
    proven,
)
from harness.ledger.chain import (
    ZERO_HASH,
    hash_of_line_bytes,
    hash_of_object,
    hashes_as_they_lie,
    line_verifies,
    seal_line,
)
from ledgertools import ref_canonical

# -- strategies ----------------------------------------------------------------------

SPECIAL_CHARS = [
    "\x00", "\x01", "\x08", "\x09", "\x0a", "\x0c", "\x0d", "\x1f", "\x7f", "\x80", "\x9f",
    '"', "\\", "/", "\u2028", "\u2029", "\ufeff", "\ufffd", "\uffff", "\U00010000",
    "\U0001f600", "\U0010ffff", "é", "ß", "中",
]
# Any character that is valid in UTF-8 (no lone surrogates), weighted toward the ones
# JSON encoders tend to disagree on.
chars = st.one_of(st.sampled_from(SPECIAL_CHARS), st.characters(codec="utf-8"))
texts = st.text(alphabet=chars, max_size=20)

SPECIAL_FLOATS = [
    1e-05, 0.0001, 1e16, 1e15, 1e-7, 123456789012345678.0, -0.0, 0.0, 5e-324,
    2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3, -1.5, 1.0, 100.0,
]
floats = st.one_of(
    st.sampled_from(SPECIAL_FLOATS),
    st.floats(allow_nan=False, allow_infinity=False),  # includes subnormals
    st.floats(min_value=-1e-300, max_value=1e-300, allow_subnormal=True),
)
BIG_INTS = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40, -(10**40)]
ints = st.one_of(st.integers(), st.sampled_from(BIG_INTS), st.integers(-(2**200), 2**200))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(texts, children, max_size=5),
    ),
    max_leaves=25,
)


# -- canonical -----------------------------------------------------------------------


@settings(max_examples=1500, deadline=None)
@given(json_values)
@example({"\uffff": 1, "\U00010000": 2, "a": 3, "B": 4, "é": 5, "": 6})  # code-point order
@example(["\x00\x1f\x7f", "\u2028\u2029", "\U0001f600", '"\\/'])
@example([1e-05, 1e16, -0.0, 5e-324, 1e22, 1e-7, 2**64, -(2**63) - 1])
@example({"a": [2**70, 1.5, {"b": "\u2028"}], "c": 1e-05})  # big int beside a float
def test_canonical_is_stdlib_json(v: Any) -> None:
    assert canonical(v) == ref_canonical(v)


@given(st.lists(json_values, max_size=4))
def test_tuples_encode_as_lists(v: list[Any]) -> None:
    assert canonical(tuple(v)) == ref_canonical(v)


@pytest.mark.parametrize(
    "bad",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        [1, float("nan")],
        {"a": {"b": float("inf")}},
        {"x": 2**70, "y": float("nan")},  # the big-int fallback must not let NaN through
        "\ud800",
        "a\udfffb",
        {"\ud800": 1},
        ["ok", {"k": "\udc00"}],
        {"a": 2**70, "b": "\ud800"},  # big int first: the stdlib fallback sees the surrogate
        {1: 2},
        {True: 1},
        {None: 1},
        {(1, 2): 3},
        (1, {2}),
        {"s": {1, 2}},
        {"f": frozenset()},
        b"bytes",
        bytearray(b"x"),
        object(),
        1j,
    ],
    ids=repr,
)
def test_canonical_refuses_what_stdlib_form_cannot_carry(bad: Any) -> None:
    with pytest.raises(ValueError):
        canonical(bad)


def test_canonical_known_bytes() -> None:
    assert canonical({"b": [1, 2.5, None, True], "a": "é\n", "c": 1e-05}) == (
        b'{"a":"\xc3\xa9\\n","b":[1,2.5,null,true],"c":1e-05}'
    )
    assert canonical(1e16) == b"1e+16"
    assert canonical(-0.0) == b"-0.0"
    assert canonical("\x1f\u2028") == b'"\\u001f\xe2\x80\xa8"'
    assert canonical(2**64) == b"18446744073709551616"


# -- cap_utf8 ------------------------------------------------------------------------


@settings(max_examples=1500)
@given(st.text(alphabet=chars, max_size=80), st.integers(0, 330))
@example("é" * 3, 3)
@example("\U0001f600", 3)
@example("abc", 0)
@example("", 0)
@example("a" * 64, 256)
@example("\U0001f600" * 64, 256)
@example("\U0001f600" * 65, 256)
def test_cap_utf8_properties(s: str, limit: int) -> None:
    out, cut = cap_utf8(s, limit)
    b = out.encode("utf-8")  # valid UTF-8: raises on a lone surrogate
    assert b.decode("utf-8") == out
    assert len(b) <= limit
    assert s.startswith(out)
    assert cut == (out != s)
    if out != s:  # maximal: one more character would not fit
        assert len((out + s[len(out)]).encode("utf-8")) > limit
    if len(s.encode("utf-8")) <= limit:
        assert (out, cut) == (s, False)


@pytest.mark.parametrize(
    "s,limit,want",
    [
        ("héllo", 2, ("h", True)),
        ("héllo", 3, ("hé", True)),
        ("\U0001f600x", 3, ("", True)),
        ("\U0001f600x", 4, ("\U0001f600", True)),
        ("\U0001f600x", 5, ("\U0001f600x", False)),
        ("x" * 300, 256, ("x" * 256, True)),
        ("x" * 256, 256, ("x" * 256, False)),
    ],
)
def test_cap_utf8_examples(s: str, limit: int, want: tuple[str, bool]) -> None:
    assert cap_utf8(s, limit) == want


# -- the chain -----------------------------------------------------------------------

# A fixed line; the hash below was computed once, independently, as
# hashlib.sha256(json.dumps(LINE_WITHOUT_HASH, sort_keys=True, separators=(",", ":"),
# ensure_ascii=False, allow_nan=False).encode()).hexdigest(), and is hard-coded so that
# any drift in canonical JSON or the chain rule fails here.
KNOWN_BODY = {
    "v": 1,
    "type": "opened",
    "at": "2026-01-02T03:04:05.000000006Z",
    "harness": "demo",
    "run_id": 1,
    "trigger": "manual",
    "kind": "oneshot",
    "todo_id": "té\u2028\U0001f600",
    "cost_usd": 1e-05,
}
KNOWN_HASH = "726addba2683dce842e3f0da171cd9c069770865b6d312f66772d55c13ad3237"
KNOWN_HASHED_BYTES = (
    b'{"at":"2026-01-02T03:04:05.000000006Z","cost_usd":1e-05,"harness":"demo",'
    b'"kind":"oneshot","prev":"0000000000000000000000000000000000000000000000000000000000000000",'
    b'"run_id":1,"seq":1,"todo_id":"t\xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80","trigger":"manual",'
    b'"type":"opened","v":1}'
)


def sealed_known() -> tuple[bytes, str, dict[str, Any]]:
    obj = dict(KNOWN_BODY)
    line, digest = seal_line(obj, 1, ZERO_HASH)
    return line, digest, obj


def test_zero_hash() -> None:
    assert ZERO_HASH == "0" * 64


def test_seal_line_known_answer() -> None:
    line, digest, obj = sealed_known()
    assert digest == KNOWN_HASH
    # Independent re-derivation (the literal above must agree with the rule).
    assert hashlib.sha256(KNOWN_HASHED_BYTES).hexdigest() == KNOWN_HASH
    assert ref_canonical({**KNOWN_BODY, "seq": 1, "prev": ZERO_HASH}) == KNOWN_HASHED_BYTES
    # The sealed line is the canonical form of the object with its hash.
    assert line == KNOWN_HASHED_BYTES.replace(
        b'"harness":"demo",', b'"harness":"demo","hash":"' + KNOWN_HASH.encode() + b'",'
    )
    assert line == ref_canonical(obj)
    assert obj["seq"] == 1 and obj["prev"] == ZERO_HASH and obj["hash"] == KNOWN_HASH
    assert b"\n" not in line


def test_seal_line_replaces_a_stale_hash_and_links() -> None:
    _line, h1, _obj = sealed_known()
    obj = dict(KNOWN_BODY, type="closed", outcome="success", hash="f" * 64, seq=99, prev="x")
    line2, h2 = seal_line(obj, 2, h1)
    body = {k: v for k, v in obj.items() if k != "hash"}
    assert body["seq"] == 2 and body["prev"] == KNOWN_HASH
    assert h2 == hashlib.sha256(ref_canonical(body)).hexdigest()
    assert h2 != "f" * 64
    assert json.loads(line2)["hash"] == h2
    assert hash_of_object(json.loads(line2)) == h2


def test_hash_of_line_bytes_accepts_the_canonical_line() -> None:
    line, digest, _ = sealed_known()
    assert hash_of_line_bytes(line, digest)
    assert not hash_of_line_bytes(line, "0" * 64)
    assert not hash_of_line_bytes(line, digest[:-1] + ("0" if digest[-1] != "0" else "1"))


def test_hash_of_line_bytes_rejects_every_single_byte_change() -> None:
    line, digest, _ = sealed_known()
    for i in range(len(line)):
        for b in range(256):
            if b == line[i]:
                continue
            changed = line[:i] + bytes([b]) + line[i + 1 :]
            assert not hash_of_line_bytes(changed, digest), (i, b)


@pytest.mark.parametrize(
    "body",
    [
        {"zz": 1},  # "hash" sorts first: the member is followed by a comma
        {"a": 1, "zz": [2]},  # between two members
        {"a": 1, "b": {"c": 1}},  # last: preceded by a comma
        {},  # the only member
    ],
    ids=["first", "middle", "last", "only"],
)
def test_hash_of_line_bytes_member_positions(body: dict[str, Any]) -> None:
    """The hash member may sit first, between members, last, or alone in the object."""
    digest = hashlib.sha256(ref_canonical(body)).hexdigest()
    line = ref_canonical({**body, "hash": digest})
    assert hash_of_line_bytes(line, digest)
    assert line_verifies(line, json.loads(line))


def test_line_verifies_canonical_and_non_canonical() -> None:
    line, digest, _ = sealed_known()
    assert line_verifies(line, json.loads(line))
    # Same content, keys re-ordered, spaces, ASCII escapes: not canonical, still equal.
    obj = json.loads(line)
    reordered = dict(reversed(list(obj.items())))
    loose = json.dumps(reordered, indent=1, ensure_ascii=True).encode()
    assert loose != line
    assert not hash_of_line_bytes(loose, digest)  # the fast path misses …
    assert line_verifies(loose, json.loads(loose))  # … and the re-encoding catches it


def test_line_verifies_rejects_edits_and_missing_hash() -> None:
    line, digest, _ = sealed_known()
    obj = json.loads(line)
    edited = dict(obj, trigger="schedule")
    assert not line_verifies(ref_canonical(edited), edited)
    no_hash = {k: v for k, v in obj.items() if k != "hash"}
    assert not line_verifies(ref_canonical(no_hash), no_hash)
    short = dict(obj, hash=digest[:63])
    assert not line_verifies(ref_canonical(short), short)
    not_str = dict(obj, hash=12)
    assert not line_verifies(ref_canonical(not_str), not_str)
    # A value canonical JSON refuses is "does not verify", not an exception.
    bad = dict(obj, cost_usd=float("nan"))
    assert not line_verifies(json.dumps(bad).encode(), bad)


line_bodies = st.dictionaries(
    texts.filter(lambda k: k not in ("hash", "seq", "prev")), json_values, max_size=6
)


@settings(max_examples=300, deadline=None)
@given(line_bodies, st.integers(1, 2**62), st.sampled_from([ZERO_HASH, KNOWN_HASH]))
def test_sealed_lines_verify(body: dict[str, Any], seq: int, prev: str) -> None:
    obj = dict(body)
    line, digest = seal_line(obj, seq, prev)
    want = hashlib.sha256(ref_canonical({**body, "seq": seq, "prev": prev})).hexdigest()
    assert digest == want
    assert line == ref_canonical(obj)
    assert hash_of_line_bytes(line, digest)
    parsed = json.loads(line)
    assert line_verifies(line, parsed)
    assert hash_of_object(parsed) == digest


# -- the chain's slow path: a nested "hash" key ahead of the member ---------------------

@pytest.mark.parametrize("body", [
    {"a": {"hash": "x"}, "z": 1},  # the member is followed by a comma
    {"a": {"hash": "x"}},  # the member is last
    {"a": [{"hash": "0" * 64}], "b": 2},  # a nested look-alike of a digest's length
], ids=["then-comma", "last", "digest-length"])
def test_a_nested_hash_key_before_the_member_still_verifies(body: dict[str, Any]) -> None:
    digest = hashlib.sha256(ref_canonical(body)).hexdigest()
    line = ref_canonical({**body, "hash": digest})
    assert line.find(b'"hash":"') < line.find(b'"hash":"' + digest.encode())
    assert hash_of_line_bytes(line, digest) is True
    assert line_verifies(line, json.loads(line)) is True
    edited = line.replace(b'"z":1', b'"z":2').replace(b'"b":2', b'"b":3')
    if edited != line:
        assert hash_of_line_bytes(edited, digest) is False


@pytest.mark.parametrize("digest", ["a" * 63, "a" * 65, 5, None])
def test_a_malformed_digest_never_verifies(digest: Any) -> None:
    obj = {"a": 1, "hash": digest}
    assert line_verifies(ref_canonical(obj), obj) is False


def test_a_line_without_the_member_does_not_verify() -> None:
    body = {"a": 1}
    digest = hashlib.sha256(ref_canonical(body)).hexdigest()
    assert hash_of_line_bytes(ref_canonical(body), digest) is False


# -- proving a text canonical (what both verifiers ask before hashing bytes as they lie) --

_any = proof_decoder()


@settings(max_examples=1500, deadline=None)
@given(json_values, st.booleans(), st.booleans(), st.sampled_from([(",", ":"), (", ", ": ")]))
@example({"b": 1, "a": 2}, False, False, (",", ":"))  # members out of order
@example({"a": "é"}, True, True, (",", ":"))  # an escape canonical JSON does not make
@example({"a": [1.5]}, True, False, (", ", ": "))  # a space
def test_proven_is_exactly_canonical(v: Any, sort_keys: bool, ascii_only: bool,
                                     separators: tuple[str, str]) -> None:
    """A spelling of a value is proven canonical if and only if it is the canonical one."""
    text = json.dumps(v, sort_keys=sort_keys, ensure_ascii=ascii_only,
                      separators=separators).encode()
    got = proven(_any, [b"1", text, b"2"])
    assert (got is not None) == (text == ref_canonical(v))
    if got is not None:
        assert got[0] == 1 and got[2] == 2 and canonical(v) == text


@pytest.mark.parametrize("text", [
    b"1.0e0", b"0.00001", b"1E5", b"1e16", b"0.10", b"1e999", b"-0", b"[-0]",
    b'"\\u00e9"', b'"\\/"', b'"\\u001F"', b'"\\u000a"', b'"\\ud83d\\ude00"',
    b'{"a":1,"a":1}', b'{"b":1,"a":1}', b'{"a":{"d":1,"c":2}}', b"[1 ]", b" 1", b"1\t",
    b'{"a":1}\r', b"NaN", b"Infinity",
])
def test_proven_refuses_every_other_spelling(text: bytes) -> None:
    assert proven(_any, [text]) is None
    assert proven(_any, [b'{"x":1}', text, b"[]"]) is None


def test_proven_lines_texts_up_one_to_one() -> None:
    """As many values as texts, and each text the encoding of one of them: a text holding
    two values (a newline between them) or a value spread over two texts is not proven."""
    assert proven(_any, [b"1", b"[2]"]) == [1, [2]]
    assert proven(_any, [b"1\n2"]) is None
    assert proven(_any, [b"1\n2", b""]) is None
    assert proven(_any, [b"[1,", b"2]"]) is None
    assert proven(_any, [b"[1,", b"2]", b"3\n4"]) is None


@pytest.mark.parametrize("text", [b"0", b"-5", b"1e-05", b"0.1", b"1e+16", b"-0.0", b"5e-324",
                                  b"123456789012345678901234567890", b"1.7976931348623157e+308"])
def test_numbers_proven_takes_canonical_numbers(text: bytes) -> None:
    assert ref_canonical(json.loads(text)) == text
    assert numbers_proven([text]) is True
    assert numbers_proven([b"1", text, b"2.5"]) is True


@pytest.mark.parametrize("text", [b"-0", b"1.0e0", b"0.00001", b"1E5", b"1e16", b"0.10",
                                  b"1e999", b"-0e0", b'"1"', b"true", b"null", b"[1]",
                                  b"1\n2", b" 1"])
def test_numbers_proven_refuses_every_other_spelling(text: bytes) -> None:
    assert numbers_proven([text]) is False
    assert numbers_proven([b"1", text, b"2.5"]) is False


@settings(max_examples=500, deadline=None)
@given(st.one_of(floats, ints), st.sampled_from(["{!r}", "{:e}", "{:.17g}", "{:g}", "{:.1f}"]))
def test_numbers_proven_is_exactly_canonical(x: float | int, spelling: str) -> None:
    text = spelling.format(x).encode()
    try:
        canon = ref_canonical(json.loads(text))
    except ValueError:  # not JSON ("inf" from a format) or not canonical JSON
        assert numbers_proven([text]) is False
        return
    assert numbers_proven([text]) is (text == canon)


def test_line_verifies_only_hashes_canonical_bytes_as_they_lie() -> None:
    """A line in another spelling hashed over its own bytes verifies as they lie, but its
    canonical bytes, which the chain hashes, do not: it does not verify."""
    body = {"a": 1, "b": "é"}
    for spelled in (b'{"b":"\\u00e9","a":1}', b'{"a": 1,"b":"\xc3\xa9"}'):
        assert json.loads(spelled) == body
        digest = hashlib.sha256(spelled).hexdigest()
        line = spelled[:-1] + b',"hash":"' + digest.encode() + b'"}'
        assert hash_of_line_bytes(line, digest) is True  # the bytes as they lie …
        assert line_verifies(line, json.loads(line)) is False  # … are not what is hashed
        digest = hashlib.sha256(ref_canonical(body)).hexdigest()
        line = spelled[:-1] + b',"hash":"' + digest.encode() + b'"}'
        assert line_verifies(line, json.loads(line)) is True  # hashed canonically: intact


def test_hashes_as_they_lie_is_the_chain_hash_of_canonical_lines() -> None:
    lines, want = [], []
    for i in range(5):
        line, digest = seal_line({"a": i, "cost_usd": 0.5 * i, "z": [i]}, i + 1, ZERO_HASH)
        lines.append(line)
        want.append(digest)
    assert hashes_as_they_lie(lines) == want
    assert hashes_as_they_lie([lines[0].replace(b'"a":0', b'"a":9')]) != want[:1]


def test_cap_utf8_cuts_away_a_lone_surrogate_in_the_tail() -> None:
    """A lone surrogate past the cut goes with the tail: the cut does not raise on it."""
    assert cap_utf8("x" * 300 + "\ud800", 256) == ("x" * 256, True)
