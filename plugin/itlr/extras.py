"""Optional parts of itlr and the pip extra that brings each.

`pip install itlr` is the core: parse, translate, search, ingest, back-fill, the embedded engine,
OpenSearch and Elasticsearch, the bundled model run by onnxruntime. Everything else comes with an
extra, and code that needs one asks here first (`require`) or turns its import error into
MissingExtra (`missing_extra`), so that a user without it reads one line naming the extra to
install (exit status 2 on the command line) instead of an ImportError traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from itlr.errors import ConfigurationError

# What each extra is for, in the words the error uses, and the top-level modules it installs.
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "serve": (
        "the HTTP service and the query-bar proxy",
        ("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "httpx"),
    ),
    "llm": ("the LLM rewriter and the OpenAI-compatible encoder", ("openai",)),
    "eval": ("evaluation, benchmarks and plots", ("ir_measures", "matplotlib")),
    "torch": (
        "the torch encoder and sentence-transformers models",
        ("torch", "sentence_transformers", "transformers"),
    ),
}


class MissingExtra(ConfigurationError):
    """An optional part of itlr was used without the extra that installs it."""

    def __init__(self, extra: str, module: str) -> None:
        self.extra = extra
        self.module = module
        purpose = EXTRAS[extra][0]
        super().__init__(
            f"{purpose} need the '{extra}' extra (module {module!r} is not installed): "
            f"pip install 'itlr[{extra}]'"
        )


def missing_extra(extra: str, error: ImportError) -> MissingExtra:
    """The MissingExtra for an ImportError met while importing `extra`'s modules."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}")
    name = (error.name or "").split(".")[0] or EXTRAS[extra][1][0]
    return MissingExtra(extra, name)


def require(extra: str, *modules: str) -> list[ModuleType]:
    """Import `modules` (those `extra` installs), or raise MissingExtra naming the first absent."""
    if extra not in EXTRAS or not modules:
        raise ValueError(f"require needs a known extra and its modules, got {extra!r} {modules}")
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError as absent:
            raise MissingExtra(extra, name.split(".")[0]) from absent
    return loaded


def extra_of(module: str) -> str | None:
    """The extra that installs the top-level module `module`, if any."""
    top = module.split(".")[0]
    return next((extra for extra, (_, names) in EXTRAS.items() if top in names), None)
