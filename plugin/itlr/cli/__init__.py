"""The `itlr` command line: `app` is the console entry point."""

from itlr.cli import cluster, core  # noqa: F401  (registers commands)
from itlr.cli.app import app

__all__ = ["app"]
