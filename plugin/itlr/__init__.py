"""itlr: inference-time logical retrieval over dense vectors."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from itlr.errors import (
    ConfigurationError,
    EmbeddingError,
    EngineError,
    IndexStateError,
    ItlrError,
    QuerySyntaxError,
    RewriteError,
)

if TYPE_CHECKING:
    from itlr.index import Index
    from itlr.query import And, Not, Or, Query, Term, parse
    from itlr.results import Hit, SearchResult
    from itlr.scoring import Operators, TruthMap

__version__ = "0.1.0"

# Imported on first use: the modules behind them read settings from the environment when they
# load, and a bad one must reach the command line's one-line error, not break `import itlr`.
_LAZY = {
    "Index": "itlr.index",
    "Hit": "itlr.results",
    "SearchResult": "itlr.results",
    "parse": "itlr.query",
    "And": "itlr.query",
    "Not": "itlr.query",
    "Or": "itlr.query",
    "Query": "itlr.query",
    "Term": "itlr.query",
    "Operators": "itlr.scoring",
    "TruthMap": "itlr.scoring",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'itlr' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "And",
    "ConfigurationError",
    "EmbeddingError",
    "EngineError",
    "Hit",
    "Index",
    "IndexStateError",
    "ItlrError",
    "Not",
    "Operators",
    "Or",
    "Query",
    "QuerySyntaxError",
    "RewriteError",
    "SearchResult",
    "Term",
    "TruthMap",
    "__version__",
    "parse",
]
