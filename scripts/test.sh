#!/usr/bin/env bash
# Set-up and the full test suite: lint, then every test, including the ones against a real
# OpenSearch (fetched from Maven Central and started on 127.0.0.1 unless ITLR_OPENSEARCH_URL
# points at a cluster). Extra arguments go to pytest.
set -euo pipefail
ITLR_EXTRAS=dev source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
ruff check plugin tests
ruff format --check plugin tests
(cd plugin && mypy itlr)  # the whole package, strict (pyproject.toml)
export ITLR_REQUIRE_OPENSEARCH="${ITLR_REQUIRE_OPENSEARCH:-1}"
# The real embedding server (tests/support/infinity_fixture.py) is installed by the tests themselves.
export ITLR_REQUIRE_INFINITY="${ITLR_REQUIRE_INFINITY:-1}"
exec python -m pytest "$@"
