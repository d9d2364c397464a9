"""The `itlr` command line: `app` is the console entry point."""

from itlr.cli import (  # noqa: F401  (importing a module registers its commands)
    backfill,
    bench,
    cluster,
    core,
    evaluation,
    lifecycle,
    perf,
    proxy_bench,
    rewrite,
    serve,
    translate,
)
from itlr.cli.app import app

__all__ = ["app"]
