"""The `harness` command line: one module per command group, sharing `render` for output."""
