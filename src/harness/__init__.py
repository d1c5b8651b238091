"""harness: supervise AI coding agents and commands, and keep a durable history of every run."""

__version__ = "0.1.0"
