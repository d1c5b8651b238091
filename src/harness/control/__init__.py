"""The control socket protocol (DESIGN.md §2): newline-delimited JSON over a Unix socket."""

PROTO = "1.0"

# Error codes whose messages are scrubbed where they are made, value by value: config
# problems (``FILE:LINE: KEY: problem``). Scrubbed again whole, as other error messages
# are on both ends, a key named like a credential would take the problem's first word
# for its value ("webhook.w.secret: [REDACTED] not be empty").
SCRUBBED_AT_SOURCE = frozenset({"bad_config"})
