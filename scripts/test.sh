#!/usr/bin/env bash
# Set-up and the full test suite: lint, then every test, including the ones against a real
# OpenSearch (fetched from Maven Central and started on 127.0.0.1 unless ITLR_OPENSEARCH_URL
# points at a cluster) and in a real headless Chromium. Extra arguments go to pytest.
set -euo pipefail
ITLR_EXTRAS=dev source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
ruff check plugin tests
ruff format --check plugin tests
(cd plugin && mypy itlr)  # the whole package, strict (pyproject.toml)
export ITLR_REQUIRE_OPENSEARCH="${ITLR_REQUIRE_OPENSEARCH:-1}"
# The pages' tests drive a real headless Chromium: Debian's packages, installed when missing
# (as root, or with sudo), the way the OpenSearch tests fetch their server.
if ! command -v chromedriver >/dev/null || ! { command -v chromium || command -v chromium-browser; } >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
export ITLR_REQUIRE_CHROMIUM="${ITLR_REQUIRE_CHROMIUM:-1}"
# The real embedding server (tests/support/infinity_fixture.py) is installed by the tests themselves.
export ITLR_REQUIRE_INFINITY="${ITLR_REQUIRE_INFINITY:-1}"
exec python -m pytest "$@"
