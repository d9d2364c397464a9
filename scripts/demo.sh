#!/usr/bin/env bash
# Set-up and the main job on the embedded engine: no server, no network beyond installing.
# The demo needs only the core install (no torch); a venv test.sh made (dev) serves it too.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec itlr demo "$@"
