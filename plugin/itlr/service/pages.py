"""The pages `itlr serve` shows a browser: the search workbench at `/` and the API's Swagger UI
at `/docs`, both from files the wheel carries (itlr/service/static/), so nothing loads from a
CDN and both work offline.

The workbench is plain HTML, CSS and JavaScript that calls the JSON API like any client. Its
three files hold no data and are the same for everyone, so they are served without the client
token (`is_public`): the page then asks for the token and sends it with every API call, which
stays behind it. A Content-Security-Policy lets the pages load and call nothing but this
origin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from itlr.extras import missing_extra

try:
    from fastapi import FastAPI
    from fastapi.responses import FileResponse
except ImportError as absent:
    raise missing_extra("serve", absent) from None

STATIC = Path(__file__).with_name("static")
WORKBENCH = STATIC / "workbench"
SWAGGER_UI = STATIC / "swagger-ui"

# URL path -> file: a fixed list, so no request names a file of its own choosing.
WORKBENCH_FILES = {
    "/": WORKBENCH / "index.html",
    "/workbench/workbench.js": WORKBENCH / "workbench.js",
    "/workbench/workbench.css": WORKBENCH / "workbench.css",
}
DOCS_FILES = {
    "/docs": STATIC / "docs.html",
    "/docs/swagger-init.js": STATIC / "swagger-init.js",
    "/docs/swagger-ui-bundle.js": SWAGGER_UI / "swagger-ui-bundle.js",
    "/docs/swagger-ui.css": SWAGGER_UI / "swagger-ui.css",
    "/docs/favicon-32x32.png": SWAGGER_UI / "favicon-32x32.png",
    "/docs/LICENSE": SWAGGER_UI / "LICENSE",
    "/docs/NOTICE": SWAGGER_UI / "NOTICE",
}
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}
# Same origin only; Swagger UI sets inline styles, the workbench none.
_POLICY = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "style-src 'self'{styles}; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
WORKBENCH_POLICY = _POLICY.format(styles="")
DOCS_POLICY = _POLICY.format(styles=" 'unsafe-inline'")


def is_public(method: str, path: str) -> bool:
    """Whether a request may go without the client token: reading the workbench's own files."""
    return method in ("GET", "HEAD") and path in WORKBENCH_FILES


def add_pages(app: FastAPI) -> None:
    """Route the workbench and /docs to their files (create the app with docs_url=None)."""
    for path, file in WORKBENCH_FILES.items():
        _route(app, path, file, WORKBENCH_POLICY)
    for path, file in DOCS_FILES.items():
        _route(app, path, file, DOCS_POLICY)


def _route(app: FastAPI, path: str, file: Path, policy: str) -> None:
    headers = {
        "content-security-policy": policy,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        # Revalidated on every load (ETag): an upgraded itlr never shows yesterday's page.
        "cache-control": "no-cache",
    }
    media_type = _MEDIA_TYPES.get(file.suffix, "text/plain; charset=utf-8")

    def page() -> Any:
        return FileResponse(file, media_type=media_type, headers=headers)

    app.add_api_route(path, page, methods=["GET", "HEAD"], include_in_schema=False)
