"""The ledger engine shared by the run ledger and the work ledger (DESIGN.md §4).

One concern a module: `canonical` (the hashed byte form), `scrub` (secrets out
before hashing), `chain` (prev/hash), `files` (the injectable file layer),
`writer` (the single writer thread), `faillog` (how its failures are logged),
`schema` (run-ledger lines), `dayfiles` (the files on disk), `fold` (lines →
records), `query` (filters and paging), `index` (recent records in memory), `reader`
(the offline scan), `feed` (subscribers), `retention` (pruning), `verify` (the chain
check) and `runledger` (the run journal that puts them together).
"""

from .errors import LedgerClosed, LedgerCorrupt, LedgerError, LedgerUnavailable, LineRejected
from .query import Query, QueryError
from .runledger import LedgerStats, RunLedger

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
