"""The control socket protocol (DESIGN.md §2): newline-delimited JSON over a Unix socket."""

PROTO = "1.0"
