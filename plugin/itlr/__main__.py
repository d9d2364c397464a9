"""`itlr` and `python -m itlr`: the command line, whose commands load only here, so that a
setting they read when they load (a limit, the encoder's slots) that is not a number is one
line and exit status 2, like any other bad input, instead of a traceback."""

from __future__ import annotations

import sys

from itlr.errors import ConfigurationError


def main() -> None:
    try:
        from itlr.cli import app
    except ConfigurationError as bad:
        sys.stderr.write(f"error: {bad}\n")
        raise SystemExit(2) from None
    app(prog_name="itlr")


if __name__ == "__main__":
    main()
