"""`python -m harness.cli`: the same entry point as the `harness` script."""

from .main import main

main()
