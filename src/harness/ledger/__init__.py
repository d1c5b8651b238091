"""The ledger engine shared by the run ledger and the work ledger (DESIGN.md §4).

One concern a module: `canonical` (the hashed byte form), `scrub` (secrets out
before hashing), `chain` (prev/hash), `files` (the injectable file layer),
`writer` (the single writer thread), `faillog` (how its failures are logged),
`schema` (run-ledger lines), `dayfiles` (the files on disk), `fold` (lines →
records), `query` (filters and paging), `index` (recent records in memory), `reader`
(the offline scan), `feed` (subscribers), `retention` (pruning), `verify` (the chain
check) and `runledger` (the run journal that puts them together). Every warning
the engine logs ("harness.ledger") is scrubbed of secrets first, once, by that logger's
`scrub.ScrubLog`: a handler's ScrubLog (the daemon's) passes it as it is.
"""

import logging

from .errors import LedgerClosed, LedgerCorrupt, LedgerError, LedgerUnavailable, LineRejected
from .query import Query, QueryError
from .runledger import LedgerStats, RunLedger
from .scrub import ScrubLog

# Whatever prints the engine's warnings (the daemon's handler, or the CLI's last resort),
# no secret a path or an error holds reaches it.
logging.getLogger("harness.ledger").addFilter(ScrubLog())

__all__ = [
    "LedgerClosed",
    "LedgerCorrupt",
    "LedgerError",
    "LedgerStats",
    "LedgerUnavailable",
    "LineRejected",
    "Query",
    "QueryError",
    "RunLedger",
]
