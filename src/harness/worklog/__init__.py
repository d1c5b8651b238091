"""The portable work ledger (shared/specs/durable-work-ledger.txt, DESIGN.md §1, §2, §4).

A goal's task graph as a hash-chained JSONL ledger in
``<workdir>/.harness/runtime/ledger/<run-id>/000000.jsonl`` (later segments 000001.jsonl, …,
read in name order), anchored into ``refs/harness/work-ledger/<run-id>``, fetched on
another machine and resumed there. Built on the run ledger's engine
(`harness.ledger`: canonical JSON, the secret scrubber, the single writer thread and
its file layer), not beside it.

Modules and the contracts between them:

* `rows` — the row contract of DESIGN.md §2: ``seq`` (1, 2, …), ``ts`` (RFC 3339
  UTC), ``kind``, ``task_id`` (str, or None for ``run.*``), ``payload`` (object),
  ``prev_hash``, ``entry_hash``, ``schema_version`` (1), ``redactions`` (only when > 0).
  ``entry_hash = sha256(canonical({"kind","payload","prev_hash","task_id"}))``; genesis
  ``prev_hash`` is 64 zeros. `validate_run_id`, `check_kind`, `entry_hash`, `GENESIS`,
  `ledger_dir(workdir, run_id)`; `SecretScan`: the first row of a chain the writer did
  not write that holds what it never records (a secret), and the field's path, found as
  `verify` walks the chain (its ``observe``).
* `verify` — `verify_lines(lines, observe=None) -> WorkVerify` over complete lines
  (bytes, no "\\n") in order (`observe` is shown each run of rows proven canonical),
  `read_chain(dir) -> LedgerRead(lines, torn, torn_size, starts)` and `verify_dir(dir)`.
  A torn trailing fragment is excluded exactly as writer recovery excludes it.
  `canonical_lines(lines, result.unproven)` gives the verified rows' canonical lines,
  re-encoding only those not already canonical.
* `store` — `WorkLedger(workdir, run_id)`: `record(kind, task_id, payload) -> row`,
  synced, under a cross-process lock; recovery on open.
* `replay` — `replay(rows) -> State`: the projected task graph and the resume frontier.
* `git` / `anchor` — the side ref: anchor, fetch, gc, listing; divergence detection.
* `resume` — resume: verify, replay, append ``run.resumed``, write frontier signals.

Errors are `WorkLedgerError` with an ``exit_code`` (1 no ledger, 2 verification failed,
3 divergence) that the CLI uses; no caller decides by matching message text.

Invariant: no error carries a secret, and none is scrubbed as a whole. Each value a
message inserts that can carry one (what a ledger, an anchor or a lock file holds, git's
output, a path, a remote or flag the user gave) is scrubbed where the message is built:
`quoted` (its repr) or `secretless` (as written); an OS error goes in as `os_problem`
(the OS's own words as they are, the file it names scrubbed). The message's own wording
never passes the scrubber, which would read "passwd: No such file" as a password.
"""

from __future__ import annotations

import os

from harness.config.durations import shown as quoted
from harness.ledger.scrub import scrub_text

__all__ = [
    "EXIT_BROKEN",
    "EXIT_DIVERGED",
    "EXIT_NO_LEDGER",
    "EXIT_OK",
    "Divergence",
    "NoLedger",
    "VerificationFailed",
    "WorkLedgerError",
    "os_problem",
    "quoted",
    "secretless",
]


def secretless(text: object) -> str:
    """`text` (a path, git's words, a remote or flag the user gave, a decoder's message
    about a value) as a message inserts it: as written, with every secret scrubbed."""
    return scrub_text(str(text))[0]


def os_problem(exc: OSError) -> str:
    """An OS error as a message states it: the OS's words (strerror) as they are, then the
    file(s) it names, scrubbed (a directory may be named after a token)."""
    if exc.strerror is None:
        return secretless(exc)  # no errno: its text is whatever the raiser put there
    names = [secretless(os.fsdecode(n) if isinstance(n, bytes) else n)
             for n in (exc.filename, exc.filename2) if n is not None]
    return f"{exc.strerror} ({' -> '.join(names)})" if names else exc.strerror


class WorkLedgerError(Exception):
    """A work-ledger failure with the exit code the `harness ledger` group reports."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        # Taken as built: its values were scrubbed one by one (`quoted`, `secretless`,
        # `os_problem`), its wording and the OS's are not for the scrubber to rewrite.
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NoLedger(WorkLedgerError):
    """Nothing to work on: no local ledger, no anchored ref (exit 1)."""

    exit_code = 1


class VerificationFailed(WorkLedgerError):
    """A chain that does not verify, or a row that breaks the contract (exit 2)."""

    exit_code = 2


class Divergence(WorkLedgerError):
    """Two chains extend the same parent entry (exit 3). Nothing is merged."""

    exit_code = 3


EXIT_OK, EXIT_NO_LEDGER, EXIT_BROKEN, EXIT_DIVERGED = 0, 1, 2, 3
