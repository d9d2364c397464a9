"""Files the wheel carries: data, index mappings and Painless sources."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# In a wheel, mappings/ and scripts/painless/ are copied into itlr/_resources; in a source
# checkout they sit at the project root.
_BUNDLED = PACKAGE / "_resources"
_CHECKOUT = PACKAGE.parents[1]


def data_file(*parts: str) -> Path:
    return PACKAGE.joinpath("data", *parts)


def _resource(bundled: str, checkout: str, name: str) -> Path:
    for base in (_BUNDLED / bundled, _CHECKOUT / checkout):
        candidate = base / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{name} is missing from this itlr installation ({bundled}/)")


def mapping_file(engine: str) -> Path:
    return _resource("mappings", "mappings", f"{engine}.json")


def painless_file(name: str) -> Path:
    return _resource("painless", "scripts/painless", name)
