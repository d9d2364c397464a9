#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs itlr (editable) with the extras in ITLR_EXTRAS:
# empty for the core install (demo.sh), "dev" for everything the tests need (test.sh).
# Idempotent: a second run only checks that everything is there; an install with more extras
# (dev holds them all) also serves a call that asks for fewer. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ITLR_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${ITLR_EXTRAS:-}"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: itlr needs Python >= 3.11 (found $("$PYTHON" --version 2>&1)); set PYTHON=..." >&2
    exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
fresh() { [ -f "$1" ] && [ ! "$ROOT/pyproject.toml" -nt "$1" ] && [ ! "$ROOT/hatch_build.py" -nt "$1" ]; }
STAMP="$VENV/.itlr-installed${EXTRAS:+-$EXTRAS}"
if ! fresh "$STAMP" && ! fresh "$VENV/.itlr-installed-dev"; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
