"""`python -m itlr.cli.proxy ARGS` runs `itlr serve --proxy ARGS`: one way to start the proxy,
with one set of flags and rules (itlr.cli.serve_proxy). Nothing in the `itlr.cli` package imports
this module, so running it is not a second copy of one the package already loaded."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from itlr.__main__ import main as itlr

    sys.argv = ["itlr", "serve", "--proxy", *(sys.argv[1:] if argv is None else argv)]
    itlr()


if __name__ == "__main__":
    main()
