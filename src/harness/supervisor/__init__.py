"""The daemon's supervision: what `harness daemon` does between boot and shutdown.

These are its first modules, the run-history side of boot (SPEC-0022 REQ-7, REQ-13):
`state` owns state.json and the per-harness run-id allocator, `history` imports the
legacy state.json run lists into the ledger once and closes the records a stopped
daemon left open. Invariant of the package: the run ledger is the only run history;
state.json carries allocator counters (and daemon settings), never a run record the
daemon made (a legacy list stays only until its import succeeds).
"""
