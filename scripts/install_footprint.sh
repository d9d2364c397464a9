#!/usr/bin/env bash
# What an install of itlr costs: for each extras spec, a fresh venv from the wheel of this
# checkout (dependencies from the package index, pip's cache as it is), its install time and
# size on disk, then the cold start of `itlr search` on the demo index (a new process, model
# load included; the ONNX graph already built). Usage:
#   bash scripts/install_footprint.sh [OUT_DIR] [SPEC...]     (default: /tmp, "" serve all)
# Prints a markdown table; the venvs stay in OUT_DIR/itlr-footprint-*/ for a look.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-/tmp}"
shift || true
SPECS=("$@")
[ ${#SPECS[@]} -gt 0 ] || SPECS=("" "serve" "all")
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d "$OUT/itlr-footprint-XXXXXX")"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/wheel" "$ROOT"
WHEEL="$(ls "$WORK"/wheel/itlr-*.whl)"
QUERY='"vitamin D benefits" AND NOT "bone health"'
echo "| install | venv MB | install s | cold \`itlr search\` s (onnx) | cold \`itlr search\` s (torch) |"
echo "|---|---:|---:|---:|---:|"
for spec in "${SPECS[@]}"; do
    venv="$WORK/venv-${spec:-core}"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    start=$(date +%s.%N)
    "$venv/bin/python" -m pip install --quiet "$WHEEL${spec:+[$spec]}"
    took=$(echo "$(date +%s.%N) - $start" | bc)
    size=$(du -sm "$venv" | cut -f1)
    home="$venv/home"
    ITLR_HOME="$home" "$venv/bin/itlr" demo >/dev/null  # builds the demo index and the graph
    cold() {
        local start
        start=$(date +%s.%N)
        ITLR_HOME="$home" "$venv/bin/itlr" search "$QUERY" --index demo "$@" >/dev/null
        echo "$(date +%s.%N) - $start" | bc
    }
    onnx=$(cold)
    torch="-"
    if "$venv/bin/python" -c 'import torch' 2>/dev/null; then torch=$(cold --encoder torch); fi
    printf '| %s | %s | %.0f | %.2f | %s |\n' "${spec:-core}" "$size" "$took" "$onnx" "$torch"
done
