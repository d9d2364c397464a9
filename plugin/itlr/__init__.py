"""itlr: inference-time logical retrieval over dense vectors."""

from itlr.errors import (
    ConfigurationError,
    EmbeddingError,
    EngineError,
    IndexStateError,
    ItlrError,
    QuerySyntaxError,
    RewriteError,
)
from itlr.index import Index
from itlr.parser import parse
from itlr.query import And, Not, Or, Query, Term
from itlr.scoring import Operators, TruthMap

__version__ = "0.1.0"

__all__ = [
    "And",
    "ConfigurationError",
    "EmbeddingError",
    "EngineError",
    "Index",
    "IndexStateError",
    "ItlrError",
    "Not",
    "Operators",
    "Or",
    "Query",
    "QuerySyntaxError",
    "RewriteError",
    "Term",
    "TruthMap",
    "__version__",
    "parse",
]
