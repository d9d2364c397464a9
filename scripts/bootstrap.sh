#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs itlr with its dev and onnx extras. Idempotent: a second
# run only checks that everything is there. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ITLR_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: itlr needs Python >= 3.11 (found $("$PYTHON" --version 2>&1)); set PYTHON=..." >&2
    exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.itlr-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev,onnx]"
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
