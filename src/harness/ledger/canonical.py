"""Canonical JSON, the byte form both chains hash (DESIGN.md §2).

Invariant: `canonical(obj)` is byte-for-byte
``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
allow_nan=False).encode("utf-8")``. msgspec produces those bytes for everything but
floats, whose shortest form it spells differently (``0.00001`` for ``1e-05``), so
floats are handed to it pre-rendered with ``float.__repr__`` — the function the
standard library uses — as raw JSON. Values the standard form cannot carry
(NaN, ±Infinity, lone surrogates, non-string keys) are refused with `ValueError`. A value
nested past the interpreter's recursion limit raises `RecursionError`, as the stdlib does,
but sooner (about 500 lists deep, where the stdlib's C encoder goes on): every caller that
encodes what it did not build takes it as unreadable; the writer's schema never nests that
deep. Decoding is the mirror: `decode_untrusted` turns JSON nested past the decoder's
depth into the `msgspec.DecodeError` any other bad JSON gives, so a reader of another
process's (or another machine's) bytes has one error to catch, and no RecursionError
reaches its caller.

Proving is the reverse question, asked by both chains' verifiers before they hash a line's
bytes as they lie: is a text already the canonical bytes of the value it holds? `proven`
answers it for a batch of texts by decoding them (`proof_decoder`) and re-encoding; its
invariant is that it returns values only for texts each of which is exactly the canonical
JSON of its value, `msgspec.Raw` members the decoder's type declares aside.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final

import msgspec

_encoder = msgspec.json.Encoder(order="sorted")
_plain: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
# Whatever stops a text from being proven canonical (bad JSON, a value off the decoder's
# type, a marked float the encoder refuses, an integer past 64 bits) only fails the proof.
PROOF_ERRORS: Final = (msgspec.MsgspecError, ValueError, TypeError, OverflowError,
                       RecursionError)


def _stdlib(obj: Any) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def prepare(obj: Any) -> Any:
    """Return obj with every float replaced by its stdlib spelling; check keys and floats.

    One walk of the object: `encode_prepared` may then run on it many times.
    """
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float:
        if math.isnan(obj) or math.isinf(obj):
            raise ValueError(f"canonical JSON refuses the non-finite number {obj!r}")
        return msgspec.Raw(float.__repr__(obj).encode("ascii"))
    if t is dict:
        out = {}
        for k, v in obj.items():
            if type(k) is not str:
                raise ValueError(f"canonical JSON needs string keys, got {k!r}")
            out[k] = prepare(v)
        return out
    if t is list or t is tuple:
        return [prepare(v) for v in obj]
    raise ValueError(f"canonical JSON cannot encode a {t.__name__}")


def encode_prepared(prepared: Any, original: Any) -> bytes:
    """Canonical bytes of a value `prepare` returned (`original` is the value before it)."""
    try:
        return _encoder.encode(prepared)
    except OverflowError:
        # An integer wider than 64 bits: the stdlib spells any integer exactly.
        return _stdlib(original)
    except UnicodeEncodeError as exc:
        raise ValueError(f"canonical JSON refuses a string that is not valid UTF-8: {exc}") from exc
    except msgspec.EncodeError as exc:
        raise ValueError(f"canonical JSON cannot encode this value: {exc}") from exc


def canonical(obj: Any) -> bytes:
    """The canonical bytes of a JSON-compatible value (no trailing newline)."""
    return encode_prepared(prepare(obj), obj)


def decode_untrusted(raw: bytes, decoder: msgspec.json.Decoder[Any] = _plain) -> Any:
    """`raw` decoded by `decoder`. A value nested past the decoder's depth (msgspec raises
    RecursionError for it, not DecodeError) is as undecodable as any other bad JSON: it
    raises `msgspec.DecodeError` (a ValueError), so every caller treats it alike."""
    try:
        return decoder.decode(raw)
    except RecursionError:
        raise msgspec.DecodeError("JSON nested too deeply") from None


def cap_utf8(s: str, limit: int) -> tuple[str, bool]:
    """Cut `s` to at most `limit` UTF-8 bytes on a character boundary; say whether it was cut."""
    if len(s) * 4 <= limit:
        return s, False
    b = s.encode("utf-8", "surrogatepass")
    if len(b) <= limit:
        return s, False
    # The source was a valid string, so only the cut tail can be an incomplete character;
    # "ignore" drops exactly that.
    return b[:limit].decode("utf-8", "ignore"), True


class _NotCanonical:
    """Stands in for a float spelled other than canonically: the encoder refuses it, so
    what holds it is never proven canonical."""

    __slots__ = ()


_MARK: Final = _NotCanonical()


def canonical_float(text: str) -> msgspec.Raw | _NotCanonical:
    """The float hook of `proof_decoder`. msgspec spells floats unlike the standard
    library, so a float must not be re-encoded by it: a literal that already is the
    canonical spelling of its value (`float.__repr__`) is kept as raw bytes and re-emitted
    verbatim; any other spelling ("1.0e0", "0.00001", "1E5", "1e999") is marked."""
    value = float(text)
    if value - value == 0.0 and float.__repr__(value) == text:
        return msgspec.Raw(text.encode("ascii"))
    return _MARK


def proof_decoder(type_: Any = Any) -> msgspec.json.Decoder[Any]:
    """A decoder of `type_` for `proven`: untyped floats go through `canonical_float`.
    (A member typed `float` would be re-spelled by msgspec: declare it `msgspec.Raw`, and
    prove those texts with an untyped `proof_decoder`.)"""
    return msgspec.json.Decoder(type_, float_hook=canonical_float)


def proven(decoder: msgspec.json.Decoder[Any], texts: Sequence[bytes | msgspec.Raw]
           ) -> list[Any] | None:
    """The values `decoder` reads from `texts` when each text is byte for byte the canonical
    JSON of its value; otherwise None. A `msgspec.Raw` member of the decoder's type is
    re-emitted as it lies, so it is not proven here: its caller proves it.

    One decode and one encode for the batch. The texts are joined one per line, decoded as
    a stream of values and re-encoded one per line. Equal bytes and as many values as texts
    prove each text equal to its value's encoding: canonical JSON holds no newline (the
    encoder escapes it in strings and writes no whitespace), so the re-encoding holds
    exactly one newline per value, and the joined texts, as many newlines as texts only if
    no text holds one; the texts then line up one to one with the encodings."""
    data = b"\n".join([*texts, b""])  # one copy, newline-terminated
    try:
        values = decoder.decode_lines(data)
        if len(values) == len(texts) and _encoder.encode_lines(values) == data:
            return values
    except PROOF_ERRORS:
        pass
    return None


_number: Final = msgspec.json.Decoder(int | float)


def numbers_proven(texts: Sequence[bytes | msgspec.Raw]) -> bool:
    """Whether each of `texts` is a JSON number spelled canonically: an integer as `int`
    spells it (so no -0), a float as `float.__repr__` does (what both encoders write). For
    numbers alone, quicker than `proven`, which calls `canonical_float` per float. The same
    count of values and equal bytes line the texts up with the spellings, as in `proven`."""
    data = b"\n".join([*texts, b""])  # one copy, newline-terminated
    try:
        values = _number.decode_lines(data)
    except PROOF_ERRORS:
        return False
    return len(values) == len(texts) and "\n".join(map(repr, values)).encode() + b"\n" == data
