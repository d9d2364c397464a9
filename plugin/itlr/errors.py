"""Errors users see: one line, saying what is wrong and what to do about it."""

from __future__ import annotations


class ItlrError(Exception):
    """Base class: the CLI prints these as one line and exits with status 2."""


class QuerySyntaxError(ItlrError, ValueError):
    """A malformed logical query, with the 0-based position of the problem."""

    def __init__(self, message: str, position: int, text: str) -> None:
        self.message = message
        self.position = position
        self.text = text
        super().__init__(f"{message} (at position {position})")

    @property
    def caret(self) -> str:
        """The query with a caret under the offending character."""
        line = self.text.replace("\n", " ").replace("\t", " ")
        # A lone surrogate (bytes that were not UTF-8) cannot be printed: show U+FFFD instead.
        line = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in line)
        return f"{line}\n{' ' * self.position}^"

    def render(self) -> str:
        return f"syntax error at position {self.position}: {self.message}\n{self.caret}"


class ConfigurationError(ItlrError):
    """An option or setting that cannot work as given."""


class IndexStateError(ItlrError):
    """An index that is missing, incompatible, or unreadable."""


class EngineError(ItlrError):
    """The search engine is unreachable or refused a request."""


class EmbeddingError(ItlrError):
    """The embedding model cannot be loaded or produced unusable vectors."""


class RewriteError(ItlrError):
    """A natural-language question could not be turned into a logical query."""


def short_text(text: str, limit: int = 200) -> str:
    """An answer body fit for a one-line message: an HTML page is named, not printed."""
    one_line = " ".join(text.split())
    lowered = one_line[:500].lower()
    if "<html" in lowered or "<!doctype" in lowered:
        return "an HTML page, not a search engine's JSON (is `url` the cluster's address?)"
    if not one_line:
        return "an empty body"
    return one_line if len(one_line) <= limit else one_line[:limit] + "..."
