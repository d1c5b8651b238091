"""The run ledger's hash chain (DESIGN.md §4).

``hash`` = sha256 of the canonical JSON of the line without ``hash``; ``prev`` = the
previous line's ``hash``, 64 zeros before the first line ever. Invariant: a line's
canonical bytes with its ``"hash":"…"`` member removed are exactly the bytes that
were hashed, because canonical JSON is a sorted concatenation of members — so a
verifier can hash a line as it lies on disk once it has proven the line canonical
(`canonical.proven`), and re-encodes any other. Bytes in another spelling that hash to
the digest prove nothing: the hash is of the canonical bytes, which differ.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from .canonical import canonical, encode_prepared, prepare, proof_decoder, proven

ZERO_HASH = "0" * 64
_DIGEST = re.compile(r"[0-9a-f]{64}")
_values = proof_decoder()


def link_to(digest: object) -> str:
    """The `prev` for a line after one whose `hash` field holds `digest`: the digest when
    it is one (64 lowercase hex digits), else the zero hash. A damaged hash links nothing
    either way, and carried on it would only spread (a 17 KB `prev` makes every later
    line too long to write; in CHAIN it stops every boot)."""
    return digest if type(digest) is str and _DIGEST.fullmatch(digest) else ZERO_HASH


def seal_line(obj: dict[str, Any], seq: int, prev: str,
              ready_for: Callable[[Any], Any] = prepare) -> tuple[bytes, str]:
    """Stamp seq and prev into `obj`, compute its hash; return (canonical line, hash).

    `ready_for` makes the object canonical encoding takes (`prepare`'s contract); a
    caller whose schema already vouches for the object passes a cheaper one.
    """
    obj.pop("hash", None)
    obj["seq"] = seq
    obj["prev"] = prev
    ready = ready_for(obj)  # one readying of the object serves both encodings
    digest = hashlib.sha256(encode_prepared(ready, obj)).hexdigest()
    obj["hash"] = ready["hash"] = digest
    return encode_prepared(ready, obj), digest


def hash_of_line_bytes(line: bytes, digest: str) -> bool:
    """Whether `line` (canonical bytes, no newline) hashes to `digest` as it lies. The
    answer is the chain's only for a line proven canonical (`canonical.proven`)."""
    i = line.find(b'"hash":"')
    if i >= 0 and line[i + 72 : i + 74] == b'",' \
            and line[i + 8 : i + 72].decode("ascii", "replace") == digest:
        # The common case (the verifier's hot loop): the first "hash" member is this
        # one and another member follows it.
        h = hashlib.sha256(line[:i])
        h.update(line[i + 74 :])
        return h.hexdigest() == digest
    if not digest.isascii():  # edited to text no hex digest holds; nor can it be looked for
        return False
    member = b'"hash":"' + digest.encode("ascii") + b'"'
    i = line.find(member)
    if i < 0:
        return False
    end = i + len(member)
    # The body around the member is hashed in two pieces: no joined copy of the line.
    if line[end : end + 1] == b",":
        h = hashlib.sha256(line[:i])
        h.update(line[end + 1 :])
    elif line[i - 1 : i] == b",":
        h = hashlib.sha256(line[: i - 1])
        h.update(line[end:])
    else:
        h = hashlib.sha256(line[:i])
        h.update(line[end:])
    return h.hexdigest() == digest


_MEMBER = b'"hash":"'


def hashes_as_they_lie(lines: list[bytes]) -> list[str]:
    """The chain hash of each of `lines`, hashed as it lies: the sha256 of its bytes but the
    74 (``"hash":"<64 hex>",``) from its first ``"hash":"``. Right only for a canonical line
    whose own hash member is that one and has another after it (seq and prev sort after
    "hash"); a caller proves the lines canonical first and compares each result with the
    line's `hash` (a hash other than 64 hex digits equals none).

    Were the first such member a nested look-alike instead, what is hashed would still hold
    the line's own member, so its digest: a result equal to that digest would be a sha256
    of bytes holding that very sha256, which no one can make. The batch form of the
    verifier's hot loop: one pass, no call per line."""
    sha = hashlib.sha256
    return [sha(line[:i] + line[i + 74 :]).hexdigest()
            for line in lines for i in (line.find(_MEMBER),)]


def hash_of_object(obj: dict[str, Any]) -> str:
    """The chain hash of a parsed line, re-encoded canonically (the slow path)."""
    body = {k: v for k, v in obj.items() if k != "hash"}
    return hashlib.sha256(canonical(body)).hexdigest()


def line_verifies(line: bytes, obj: dict[str, Any]) -> bool:
    """Whether a parsed line's ``hash`` is right: its bytes hashed as they lie once they
    are proven canonical, else its value re-encoded."""
    digest = obj.get("hash")
    if not isinstance(digest, str) or len(digest) != 64:
        return False
    if hash_of_line_bytes(line, digest) and proven(_values, [line]) is not None:
        return True
    try:
        return hash_of_object(obj) == digest
    except ValueError:
        return False
