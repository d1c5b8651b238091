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
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder(order="sorted")
_plain: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


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
