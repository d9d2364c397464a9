#!/usr/bin/env bash
# Vendors Swagger UI (the page `itlr serve` shows at /docs) from the npm package swagger-ui-dist
# into plugin/itlr/service/static/swagger-ui/, with its licence and notice: the wheel carries the
# files and the service serves them itself, so /docs loads nothing from a CDN and works offline.
# Run by hand to move to another version (set both lines below); nothing runs it at build time.
set -euo pipefail
VERSION=5.35.0
# npm's dist.integrity of that version (`npm view swagger-ui-dist@VERSION dist.integrity`).
INTEGRITY=sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ==
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="$ROOT/plugin/itlr/service/static/swagger-ui"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT

(cd "$SCRATCH" && npm pack --silent "swagger-ui-dist@$VERSION" >/dev/null)
TARBALL="$SCRATCH/swagger-ui-dist-$VERSION.tgz"
GOT="sha512-$(openssl dgst -sha512 -binary "$TARBALL" | base64 -w0)"
if [ "$GOT" != "$INTEGRITY" ]; then
    echo "error: swagger-ui-dist $VERSION is $GOT, expected $INTEGRITY" >&2
    exit 1
fi
tar -xzf "$TARBALL" -C "$SCRATCH"
rm -rf "$TARGET"
mkdir -p "$TARGET"
for name in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css \
    favicon-32x32.png LICENSE NOTICE; do
    cp "$SCRATCH/package/$name" "$TARGET/$name"
done
echo "swagger-ui-dist $VERSION $INTEGRITY" > "$TARGET/VERSION"
echo "vendored swagger-ui-dist $VERSION into $TARGET"
